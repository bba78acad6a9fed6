"""The built-in ``/dashboard`` page: its figures (``snapshot.py``) and its static files."""

from hybrid_gateway.dashboard.snapshot import (
    BreakerView,
    LaneView,
    RuleView,
    Snapshot,
    histogram_quantile,
    take_snapshot,
)

__all__ = [
    "BreakerView",
    "LaneView",
    "RuleView",
    "Snapshot",
    "histogram_quantile",
    "take_snapshot",
]
