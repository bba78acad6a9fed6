"""`bench learn`'s plots: labels bought vs APGR (router), vs hit rate and false-hit bound (cache).

Matplotlib's object API on an Agg canvas (as ``tools/bench/plots.py``): no pyplot.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["draw"]


def draw(report: Mapping[str, Any], out: Path, name: str) -> list[Path]:
    paths = []
    if report.get("router"):
        paths.append(_router(report["router"], out / f"{name}-router.png"))
    if report.get("cache"):
        paths.append(_cache(report["cache"], out / f"{name}-cache.png"))
    return paths


def _router(router: Mapping[str, Any], path: Path) -> Path:
    from matplotlib.figure import Figure

    scores = router["scores"]
    shipped = next(s for s in scores if s["model"] == "shipped")
    learned = [s for s in scores if s["model"] != "shipped"]
    fig = Figure(figsize=(11, 4.5))
    left, right = fig.subplots(1, 2)
    xs = [s["labels"] for s in learned]
    left.plot(xs, [s["apgr"] for s in learned], marker="o", label="learned (router train "
              "--from-log)")  # fmt: skip
    left.axhline(shipped["apgr"], color="0.5", linestyle="--", label="shipped model")
    left.axhline(shipped["apgr"] + 0.10, color="C3", linestyle=":", label="goal: shipped + 0.10")
    left.axhline(0.5, color="0.8", linestyle="-", label="random router")
    left.set_xlabel("router labels bought (audits with a verdict)")
    left.set_ylabel(f"APGR on the unseen part ({shipped['n']} items)")
    left.set_title("Router: labels bought vs APGR")
    shares = [p["audit_share_of_heavy_only"] or 0.0 for p in router["checkpoints"]]
    right.plot([p["labels"] for p in router["checkpoints"]], [100 * s for s in shares],
               marker="o", label="audit spend")  # fmt: skip
    right.axhline(5.0, color="C3", linestyle=":", label="goal: <= 5 %")
    right.set_xlabel("router labels bought")
    right.set_ylabel("audit spend, % of heavy-only cost")
    right.set_title("Router: what the labels cost")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def _cache(cache: Mapping[str, Any], path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(14, 4.5))
    hits, false, threshold = fig.subplots(1, 3)
    limit = 100 * (1 - cache["settings"]["target_precision"])
    for i, (name, run) in enumerate(cache["runs"].items()):
        series = run["series"]
        colour = f"C{i}"
        xs = [p["labels"] + p.get("near_miss_labels", 0) for p in series]
        hits.plot(xs, [100 * p["hit_rate"] for p in series], marker=".", color=colour,
                  label=f"{name}: cumulative")  # fmt: skip
        hits.plot(xs, [100 * p["chunk_hit_rate"] for p in series], ":", color=colour,
                  label=f"{name}: per chunk")  # fmt: skip
        false.plot(xs, [100 * (p["false_hit_rate"] or 0.0) for p in series], marker=".",
                   color=colour, label=f"{name}: realised")  # fmt: skip
        false.plot(xs, [100 * (p["bound"] if p["bound"] is not None else 1.0) for p in series],
                   "--", color=colour, label=f"{name}: gateway's 95 % bound")  # fmt: skip
        threshold.plot([p["requests"] for p in series],
                       [p["threshold"] or cache["bundled_threshold"] for p in series],
                       marker=".", color=colour, label=name)  # fmt: skip
    false.axhline(limit, color="C3", linestyle=":", label="target (1 - precision)")
    false.set_ylim(0, 60)
    hits.set_ylabel("semantic hits, % of requests")
    false.set_ylabel("false hits, % of hits")
    threshold.set_ylabel("semantic threshold")
    for ax, title in ((hits, "Cache: labels bought vs hit rate"),
                      (false, "Cache: labels bought vs false-hit rate")):  # fmt: skip
        ax.set_xlabel("cache labels bought (hit and near-miss audits with a verdict)")
        ax.set_title(title)
    threshold.set_xlabel("requests sent")
    threshold.set_title("Cache: the threshold over the run")
    for ax in (hits, false, threshold):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path
