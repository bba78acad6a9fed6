"""`hybrid-gateway router eval`: how well a router ranks prompts, RouteLLM-style.

    router eval --outcomes FILE.csv [--model MODEL.npz] [--json]
    router eval --outcomes mmlu_dev.csv --cv 5 --json    # k-fold: train on 4/5, score the 5th

Prints (or, with ``--json``, writes one JSON object to stdout) ``apgr``, ``cpt50``, ``cpt80``
and ``n`` for the model, and the same under ``random`` (mean of 20 seeded random routers) and
``length`` (longer prompt = heavier) baselines.  CPT values are shares of strong calls (0-1).
Without ``--model`` the packaged default model is evaluated.  ``--cv K`` instead fits a fresh
model on K-1 folds and scores the held-out fold, with folds grouped by prompt text so no prompt
is ever trained and tested on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.routing.build import default_model_path
from hybrid_gateway.routing.classifier import RouterModelError, load_model
from hybrid_gateway.routing.cli import (
    add_data_arguments,
    add_fit_arguments,
    columns_of,
    fit_settings_of,
)
from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows, load_rows
from hybrid_gateway.routing.evaluation import (
    NoGapError,
    RouterQuality,
    random_quality,
    router_quality,
)
from hybrid_gateway.routing.outcomes import OutcomeDataError
from hybrid_gateway.routing.training import out_of_fold_scores, scores_of
from hybrid_gateway.tools.cliargs import int_at_least


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--outcomes", type=Path, required=True, help="a per-prompt outcome file")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--model", type=Path, help="model file (default: the packaged model)")
    how.add_argument(
        "--cv",
        type=int_at_least(2),
        help="k-fold cross-validation on this file "
        "(folds grouped by prompt) instead of a trained model",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    add_fit_arguments(parser)  # for --cv
    add_data_arguments(parser)


def run(args: argparse.Namespace) -> int:
    settings = fit_settings_of(args)  # refuses a bad combination before any work
    try:
        rows = load_rows([args.outcomes], columns_of(args))
    except OutcomeDataError as exc:
        print(f"router eval: {exc}", file=sys.stderr)
        return 2
    embedder = bundled_embedder()
    data = embed_rows(rows, embedder, args.embed_cache)
    if args.cv is not None:
        router = f"classifier, {args.cv}-fold cross-validation on this file"
        scores = out_of_fold_scores(data, namespace_of(embedder), args.cv, settings)
    else:
        path = args.model or default_model_path()
        try:
            model = load_model(path, namespace_of(embedder))
        except RouterModelError as exc:
            print(f"router eval: {exc}", file=sys.stderr)
            return 2
        router = str(path)
        scores = scores_of(model, data)
    weak, strong = data.weak, data.strong
    lengths = np.array([len(r.prompt) for r in rows], dtype=np.float64)
    try:
        quality = router_quality(scores, weak, strong)
        baselines = {
            "random": random_quality(weak, strong),
            "length": router_quality(lengths, weak, strong),
        }
    except NoGapError as exc:
        print(f"router eval: {args.outcomes}: {exc}", file=sys.stderr)
        return 2
    report = {
        **quality.as_json(),
        "file": str(args.outcomes),
        "router": router,
        "weak_mean": round(float(weak.mean()), 4),
        "strong_mean": round(float(strong.mean()), 4),
        **{name: q.as_json() for name, q in baselines.items()},
    }
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(_table(args.outcomes, quality, baselines))
    return 0


def _table(path: Path, model: RouterQuality, baselines: dict[str, RouterQuality]) -> str:
    lines = [f"{path} (n={model.n})", f"{'router':<10} {'APGR':>6} {'CPT50':>6} {'CPT80':>6}"]
    for name, q in {"model": model, **baselines}.items():
        lines.append(f"{name:<10} {q.apgr:6.3f} {q.cpt50:6.1%} {q.cpt80:6.1%}")
    return "\n".join(lines)
