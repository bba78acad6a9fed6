"""`bench learn`'s cache runs: the gateway config each run serves with."""

from __future__ import annotations

from pathlib import Path

from hybrid_gateway.config import parse_config
from hybrid_gateway.tools.learncurve.cache_curve import CacheSettings, cache_config

UPSTREAMS = {"light": "http://127.0.0.1:1/v1", "heavy": "http://127.0.0.1:2/v1"}


def test_the_cache_runs_wait_for_e5_instead_of_bypassing(tmp_path: Path) -> None:
    """The curve measures the rule: a load bypass (`embedder_slow`) would skip the cache for
    requests the rule would have served, so e5's confirmation has no time limit here."""
    settings = CacheSettings(tmp_path, tmp_path / "w.jsonl", 1.0, 0.95)
    for learn in (False, True):
        config = parse_config(cache_config(tmp_path, UPSTREAMS, settings, learn), "test")
        cascade = config.cache.semantic.cascade
        assert cascade is not None
        assert cascade.confirm_timeout_ms is None
        assert config.cache.semantic.threshold == settings.threshold
        assert (config.learning.cache_threshold is not None
                and config.learning.cache_threshold.enabled) is learn  # fmt: skip
