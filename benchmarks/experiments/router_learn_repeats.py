"""Issue 23's router goal over repeated `bench learn --part router` runs: the gain in APGR on
the unseen part of each run's candidates (prior-weighted refit, ``router train --from-log``)
and of a second design, the shipped score plus a neighbour residual from the audits.

    python benchmarks/experiments/router_learn_repeats.py RUN_FOLDER [RUN_FOLDER ...] \
        [--unseen 400] [--k 10] [--beta 1.0] [--hard-workload W] [--embed-cache E]
        [--refit L2:HOLDOUT[:FOLDS] ...]

A run folder is ``<out>/<name>`` of a `bench learn --part router` run (its ``hard.jsonl``,
``router/requests.sqlite3`` with the audits, ``embeddings.sqlite3``); its ``<name>.json`` beside
the folder has the candidates' APGR.  The neighbour design, per unseen question: the k nearest
audited questions (e5 cosine) vote with their verdicts (heavy right and light wrong +1, the
reverse -1, else 0), weighted by cosine; the score is the shipped model's logit plus ``beta``
times that vote, both standardised over the unseen part.  k and beta are fixed up front, not
chosen on the unseen part.  Prints one line per run and checkpoint, then the mean and spread
of each design's gain per checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from hybrid_gateway.accounting.report import sqlite_source
from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.learning.labels import read_labels
from hybrid_gateway.learning.router_fit import outcome_rows
from hybrid_gateway.routing.build import default_model_path
from hybrid_gateway.routing.classifier import load_model
from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows
from hybrid_gateway.routing.evaluation import router_quality
from hybrid_gateway.routing.training import TrainingSet, scores_of
from hybrid_gateway.tools.learncurve.router_curve import outcome_rows_of
from hybrid_gateway.tools.learncurve.scoring import split_unseen
from hybrid_gateway.tools.workload.schema import read_workload


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _unseen(folder: Path, args: argparse.Namespace) -> tuple[TrainingSet, Path]:
    """The run's unseen part with its vectors, and the embeddings cache it came from."""
    cache = args.embed_cache or folder / "embeddings.sqlite3"
    _, unseen = split_unseen(read_workload(args.hard_workload or folder / "hard.jsonl"),
                             args.unseen)  # fmt: skip
    return embed_rows(outcome_rows_of(unseen), bundled_embedder(), cache), cache


def one_run(
    folder: Path, args: argparse.Namespace, k: int, beta: float
) -> list[dict[str, float]]:
    test, cache = _unseen(folder, args)
    embedder = bundled_embedder()
    with sqlite_source(folder / "router" / "requests.sqlite3") as source:
        audits = outcome_rows(read_labels(source, 0.0, 1e12))
    train = embed_rows(audits, embedder, cache)
    shipped = np.asarray(scores_of(load_model(default_model_path(), namespace_of(embedder)),
                                   test), dtype=np.float64)  # fmt: skip
    base = router_quality(shipped, test.weak, test.strong).apgr
    report = json.loads((folder.parent / f"{folder.name}.json").read_text())
    fitted = {s["labels"]: s["apgr"] for s in report["router"]["scores"] if s["labels"]}
    sims = _unit(test.vectors.astype(np.float64)) @ _unit(train.vectors.astype(np.float64)).T
    votes = train.strong - train.weak
    shipped_z = _logit(shipped) / _logit(shipped).std()
    out = []
    for labels in sorted(fitted):
        n = min(labels, len(audits))
        near = np.argsort(-sims[:, :n], axis=1)[:, :k]
        weight = np.take_along_axis(sims[:, :n], near, 1)
        vote = (votes[:n][near] * weight).sum(1) / weight.sum(1)
        spread = vote.std() or 1.0
        score = shipped_z + beta * (vote - vote.mean()) / spread
        out.append({"labels": labels, "shipped": base, "refit": fitted[labels] - base,
                    "neighbours": router_quality(score, test.weak, test.strong).apgr - base})
    return out


def refit_gain(
    folder: Path, args: argparse.Namespace, l2: str, holdout: str, folds: str = "0"
) -> float:
    """``router train --from-log`` on every audit of the run (the oldest ``1 - holdout``
    fitted, or ``folds`` cross-fitted; prior l2 ``l2``): its candidate's APGR gain on the
    unseen part."""
    from hybrid_gateway.cli import main as cli

    test, cache = _unseen(folder, args)
    namespace = namespace_of(bundled_embedder())
    with tempfile.TemporaryDirectory() as tmp:
        candidate = Path(tmp) / "candidate.npz"
        argv = ["router", "train", "--from-log", "--config", str(folder / "router/gateway.yaml"),
                "--out", str(Path(tmp) / "accepted.npz"), "--candidate-out", str(candidate),
                "--holdout", holdout, "--prior-l2", l2, "--embed-cache", str(cache),
                "--folds", folds]  # fmt: skip
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli(argv)
        apgr = [router_quality(np.asarray(scores_of(load_model(path, namespace), test),
                                          dtype=np.float64), test.weak, test.strong).apgr
                for path in (candidate, default_model_path())]  # fmt: skip
    return apgr[0] - apgr[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--unseen", type=int, default=400)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--hard-workload", type=Path, help="the runs' --hard-workload, if given")
    parser.add_argument("--embed-cache", type=Path, help="the runs' --embed-cache, if given")
    parser.add_argument("--refit", nargs="*", default=[], metavar="L2:HOLDOUT[:FOLDS]",
                        help="instead, refit each run on all its audits with these prior l2, "
                        "holdout shares and folds (e.g. 30:0.3 30:0.05 30:0.3:5)")  # fmt: skip
    args = parser.parse_args()
    for spec in args.refit:
        l2, holdout, *folds = spec.split(":")
        gains = [refit_gain(folder, args, l2, holdout, *folds) for folder in args.runs]
        how = f"{folds[0]} folds" if folds and int(folds[0]) >= 2 else f"holdout {holdout}"
        print(f"refit on all audits, prior l2 {l2}, {how}: "
              + " ".join(f"{g:+.4f}" for g in gains)
              + f"; mean {statistics.mean(gains):+.4f}, sd {statistics.stdev(gains):.4f}")
    if args.refit:
        return 0
    by_point: dict[int, list[dict[str, float]]] = {}  # checkpoint index -> each run's point
    for folder in args.runs:
        for index, point in enumerate(one_run(folder, args, args.k, args.beta)):
            print(f"{folder.name}: {point['labels']} labels: refit {point['refit']:+.4f}, "
                  f"neighbours {point['neighbours']:+.4f} (shipped {point['shipped']:.4f})")
            by_point.setdefault(index, []).append(point)
    for key in sorted(by_point):
        points = by_point[key]
        for design in ("refit", "neighbours"):
            gains = [p[design] for p in points]
            sd = statistics.stdev(gains) if len(gains) > 1 else 0.0
            labels = [int(p["labels"]) for p in points]
            print(f"checkpoint ~{min(labels)}-{max(labels)} labels, {design}: mean gain "
                  f"{statistics.mean(gains):+.4f}, sd {sd:.4f}, min {min(gains):+.4f}, "
                  f"max {max(gains):+.4f} over {len(gains)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
