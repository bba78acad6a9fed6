"""The precision / recall / hit-rate vs threshold curve of ``cache eval``, as CSV and PNG.

matplotlib is imported inside ``write_png`` only (the ``bench``/``demo`` extras have it): the
gateway itself never needs it; ``can_plot`` tells ``cache eval`` up front whether it is there.
Where a threshold accepts no pair, the precision is undefined: an empty CSV cell, a gap in
the plot.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from hybrid_gateway.cache.semantic.calibrate import CurvePoint


def can_plot() -> bool:
    """Whether matplotlib can be imported (``write_png`` needs it)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _precision(point: CurvePoint) -> float:
    return point.precision if point.hits else math.nan


def write_csv(path: Path, curves: Mapping[str, Sequence[CurvePoint]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["rule", "threshold", "precision", "recall", "hit_rate", "hits"])
        for rule, points in curves.items():
            for p in points:
                precision = f"{p.precision:.6f}" if p.hits else ""
                writer.writerow([rule, f"{p.threshold:.6f}", precision,
                                 f"{p.recall:.6f}", f"{p.hit_rate:.6f}", p.hits])  # fmt: skip


def write_png(
    path: Path,
    curves: Mapping[str, Sequence[CurvePoint]],
    thresholds: Mapping[str, float],
    target: float,
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {"plain": "--", "decision": "-"}
    for rule, points in curves.items():
        xs = [p.threshold for p in points]
        style = styles.get(rule, "-")
        ax.plot(
            xs, [_precision(p) for p in points], style, color="tab:blue", label=f"{rule} precision"
        )
        ax.plot(xs, [p.recall for p in points], style, color="tab:orange", label=f"{rule} recall")
        ax.plot(
            xs, [p.hit_rate for p in points], style, color="tab:green", label=f"{rule} hit rate"
        )
        chosen = thresholds.get(rule, math.inf)
        if math.isfinite(chosen):
            ax.axvline(chosen, linestyle=style, color="grey", linewidth=0.8)
    ax.axhline(target, color="red", linewidth=0.8, label=f"target precision {target:g}")
    ax.set_xlabel("threshold (cosine)")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
