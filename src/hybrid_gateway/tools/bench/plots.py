"""`bench run`'s plots: latency and cost per stage, and the article's table beside ours.

Matplotlib's object API on an Agg canvas: no pyplot, no global backend switch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["draw_article", "draw_plots"]

JsonDict = dict[str, Any]

# (panel title, our figure from a result row, the article's from a reference row)
_PANELS: tuple[tuple[str, Any, Any], ...] = (
    ("p50 (s)", lambda r: _s(r["latency_ms"]["p50"]), lambda ref: ref["p50_s"]),
    ("p95 (s)", lambda r: _s(r["latency_ms"]["p95"]), lambda ref: ref["p95_s"]),
    ("success (%)", lambda r: _pct(r["success_rate"]), lambda ref: 100 * ref["success_rate"]),
    (
        "relative cost (%)",
        lambda r: _pct(r["relative_cost"]),
        lambda ref: 100 * ref["relative_cost"],
    ),
)


def draw_plots(report: JsonDict, base: Path) -> list[Path]:
    """``<base>-latency.png`` (p50/p95/p99 per strategy), ``<base>-cost.png`` vs stage, and
    ``<base>-article.png`` (the article's three rows beside ours)."""
    from matplotlib.figure import Figure  # Agg canvas; no pyplot, no global backend switch

    by_strategy: dict[str, list[JsonDict]] = {}
    for r in report["results"]:
        by_strategy.setdefault(r["strategy"], []).append(r)
    latency, cost = (
        base.with_name(base.name + "-latency.png"),
        base.with_name(base.name + "-cost.png"),
    )
    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    for i, (name, rows) in enumerate(by_strategy.items()):
        colour = f"C{i % 10}"
        xs = [_x(r) for r in rows]
        for q, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
            ys = [r["latency_ms"][q] for r in rows]
            ax.plot(xs, ys, style, marker="o", color=colour, label=f"{name} {q}")
    _axes(ax, "latency (ms)", "Latency percentiles per strategy")
    fig.savefig(latency, dpi=100)
    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    for name, rows in by_strategy.items():
        ax.plot([_x(r) for r in rows], [r["cost_per_1k_usd"] for r in rows], marker="o", label=name)
    _axes(ax, "cost per 1,000 requests (USD)", "Cost per 1k requests per strategy")
    fig.savefig(cost, dpi=100)
    return [latency, cost, draw_article(report, base.with_name(base.name + "-article.png"))]


def _x(row: Mapping[str, Any]) -> str:
    return str(row["concurrency"]) if row["concurrency"] is not None else str(row["stage"])


def _axes(ax: Any, ylabel: str, title: str) -> None:
    ax.set_xlabel("concurrency (closed-loop clients)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")


def draw_article(report: JsonDict, path: Path) -> Path:
    """The article's three rows (REQUIREMENTS.md, load test) beside ours at the table stages."""
    from matplotlib.figure import Figure

    stages = report.get("table_stages") or [report["table_stage"]]
    ours = [r for stage in stages for r in report["results"] if r["stage"] == stage]
    refs = list(report["reference"])
    names = [f"article: {ref['strategy']}" for ref in refs]
    names += [f"{r['strategy']} @ {r['stage']}" for r in ours]
    strategies = list(dict.fromkeys(r["strategy"] for r in ours))  # one colour a strategy
    colours = ["0.6"] * len(refs) + [f"C{strategies.index(r['strategy']) % 10}" for r in ours]
    fig = Figure(figsize=(12, 7))
    axes = fig.subplots(2, 2).flatten()
    for ax, (title, mine, theirs) in zip(axes, _PANELS, strict=True):
        values = [theirs(ref) for ref in refs] + [mine(r) for r in ours]
        ys = list(range(len(names)))
        ax.barh(ys, [v if v is not None else 0.0 for v in values], color=colours)
        ax.set_yticks(ys, names, fontsize="x-small")
        ax.invert_yaxis()
        ax.set_title(title)
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle("The article's load test (100 concurrency, grey) beside this run")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value
