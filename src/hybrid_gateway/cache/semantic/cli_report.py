"""What `cache eval` shows: the table of rules, and the curve CSV + PNG of ``--curve-out``."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from hybrid_gateway.cache.semantic.calibrate import curve
from hybrid_gateway.cache.semantic.cross_encoder_eval import RerankerReport
from hybrid_gateway.cache.semantic.curves import can_plot, write_csv, write_png
from hybrid_gateway.cache.semantic.evaluate import EvalReport, ScoredPairs


def prepare_curves(folder: Path | None) -> bool:
    """Before any slow work: make the folder (``OSError`` if it cannot be), and say whether
    the PNG can be drawn (without matplotlib, a warning: the CSV is still written)."""
    if folder is None:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    if can_plot():
        return True
    print("warning: matplotlib is not installed (extra `bench`): --curve-out writes the CSV "
          "only", file=sys.stderr)  # fmt: skip
    return False


def write_curves(
    folder: Path, stem: str, test: ScoredPairs, report: EvalReport, *, png: bool
) -> None:
    curves = {
        "plain": curve(test.guarded(()), test.labels),
        "decision": curve(test.guarded(report.decision.guards), test.labels),
    }
    write_csv(folder / f"{stem}-curve.csv", curves)
    if not png:
        return
    thresholds = {"plain": report.plain.threshold, "decision": report.decision.threshold}
    write_png(folder / f"{stem}-curve.png", curves, thresholds, report.target_precision,
              f"{stem}: precision / recall / hit rate vs threshold (TEST half)")  # fmt: skip


def _figure(value: object, width: int) -> str:
    """A figure of the table; ``-`` where it is undefined (JSON null)."""
    if not isinstance(value, float | int) or not math.isfinite(value):
        return f"{'-':>{width}}"
    return f"{value:{width}.3f}"


def print_table(name: str, report: EvalReport, reranked: RerankerReport | None = None) -> None:
    rows: list[tuple[str, Any]] = [
        ("plain cosine", report.plain),
        ("full decision", report.decision),
    ]
    if report.verifier is not None:
        rows.append(("verifier", report.verifier))
    if reranked is not None:
        rows.append(("reranker", reranked.rule))
    print(f"{name}: target precision {report.target_precision:g}, n={report.decision.n} "
          f"(calibrated on {report.dev_n})")  # fmt: skip
    print(f"{'rule':15} {'threshold':>9} {'precision':>9} {'recall':>7} {'auc':>6} {'best':>6}")
    for label, rule in rows:
        shown = rule.as_json()
        t = "never" if shown["threshold"] is None else f"{rule.threshold:.4f}"
        print(f"{label:15} {t:>9} {_figure(shown['precision'], 9)} {rule.recall:7.3f} "
              f"{_figure(shown['auc'], 6)} {rule.best_recall:6.3f}")  # fmt: skip
    print(f"guards: {', '.join(report.decision.guards) or 'none'}")
