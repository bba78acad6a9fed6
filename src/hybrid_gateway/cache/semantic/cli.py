"""`hybrid-gateway cache eval | calibrate | train-verifier`: the hit decision on labelled pairs.

    cache eval --pairs TEST --calibrate-on DEV --target-precision 0.95 --json [--curve-out DIR]
    cache eval --pairs FILE --split-seed 7 ...   calibrate on one seeded half, test on the other
    cache eval ... --verifier MODEL.npz          the verifier rule with a model trained elsewhere
    cache calibrate --pairs DEV [DEV ...] --target-precision 0.95 --config gateway.yaml
    cache calibrate ... --verifier MODEL.npz     calibrate the verifier's threshold instead
    cache train-verifier --pairs FILE [FILE ...] --out MODEL.npz [--split-seed 7]
    cache train-reranker --pairs FILE [FILE ...] --out MODEL.npz [--split-seed 7]   (torch)
    cache eval | calibrate ... --reranker MODEL.npz [PART2.npz]   the cross-encoder's rule

Embeddings come from the config's ``embedding`` section (``--config``) or the bundled default,
and are kept in ``--embeddings-cache`` (by model version and text hash) so a rerun with another
target, seed or split does not embed again.  ``--sample N`` takes a seeded sample of each file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.cache.semantic import cli_reranker
from hybrid_gateway.cache.semantic.calibrate import curve
from hybrid_gateway.cache.semantic.cross_encoder import CrossEncoderError, load_cross_encoder
from hybrid_gateway.cache.semantic.cross_encoder_eval import RerankerReport, evaluate_reranker
from hybrid_gateway.cache.semantic.evaluate import (
    EvalReport,
    ScoredPairs,
    choose_guards,
    evaluate,
    evaluate_rule,
    evaluate_verifier,
)
from hybrid_gateway.cache.semantic.pairs import Pair, load_pairs, split_pairs
from hybrid_gateway.cache.semantic.verifier import VerifierError, load_verifier
from hybrid_gateway.cache.semantic.verifier_train import (
    DEFAULT_TRAINING,
    TrainSettings,
    train_verifier,
)
from hybrid_gateway.config import load_config
from hybrid_gateway.embedding.base import Matrix
from hybrid_gateway.embedding.batching import BatchingEmbedder
from hybrid_gateway.embedding.disk_cache import DiskEmbeddingCache
from hybrid_gateway.embedding.factory import SharedEmbedder, build_embedder
from hybrid_gateway.embedding.settings import EmbeddingConfig
from hybrid_gateway.errors import ConfigError

_DEFAULT_CACHE = Path(tempfile.gettempdir()) / "hybrid-gateway-embeddings.sqlite3"


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    ev = sub.add_parser("eval", help="calibrate on DEV pairs, measure on TEST pairs")
    ev.add_argument("--pairs", required=True, help="TEST pair file (.csv, .tsv, .jsonl)")
    where = ev.add_mutually_exclusive_group(required=True)
    where.add_argument("--calibrate-on", nargs="+", help="DEV pair file(s)")
    where.add_argument("--split-seed", type=int, help="split --pairs into DEV/TEST halves")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--curve-out", type=Path, help="folder for curve CSV + PNG")
    cal = sub.add_parser("calibrate", help="calibrate on pairs, write the decision to a config")
    cal.add_argument("--pairs", nargs="+", required=True, help="DEV pair file(s)")
    cal.add_argument("--config", type=Path, required=True, help="the gateway YAML to update")
    cal.add_argument(
        "--split-seed",
        type=int,
        help="calibrate only on the second half of each file's seeded split (the half "
        "`train-verifier --split-seed` with the same seed left unseen)",
    )
    tr = sub.add_parser("train-verifier", help="train the learned pair verifier on pairs")
    tr.add_argument("--pairs", nargs="+", required=True, help="training pair file(s)")
    tr.add_argument("--out", type=Path, required=True, help="the model file to write (.npz)")
    tr.add_argument(
        "--split-seed",
        type=int,
        help="train only on the first half of each file's seeded split (the other "
        "half stays unseen, for `cache eval --split-seed` with the same seed)",
    )
    tr.add_argument(
        "--hidden",
        type=int,
        default=DEFAULT_TRAINING.hidden,
        help="hidden units (0: logistic regression)",
    )
    tr.add_argument("--l2", type=float, nargs="+", default=DEFAULT_TRAINING.l2,
                    help="weight decay candidates (the inner split picks one)")  # fmt: skip
    for p in (ev, cal):
        p.add_argument("--verifier", type=Path, help="a trained verifier model (.npz)")
        p.add_argument("--reranker", type=Path, nargs="+",
                       help="a fine-tuned cross-encoder (`cache train-reranker`); more than one "
                            "(trained on other pairs): each pair is scored by the first that "
                            "did not see it, the gateway serves the first")  # fmt: skip
        p.add_argument("--cosine-weight", type=float, default=1.0,
                       help="with --reranker: the rule is score + W * cosine >= min_score (the "
                            "cosine orders the candidates the model scores alike; 0: the "
                            "score alone)")  # fmt: skip
    cli_reranker.configure(sub)
    for p in (ev, cal, tr):
        p.add_argument("--target-precision", type=float, default=0.95)
        p.add_argument(
            "--z",
            type=float,
            default=1.645,
            help="one-sided confidence of the precision bound (1.645 = 95%%)",
        )
        if p is tr:
            p.add_argument("--sample", type=int, nargs="+",
                           help="seeded sample of at most N pairs per file (one N for all "
                                "files, or one per file)")  # fmt: skip
        else:
            p.add_argument("--sample", type=int, help="seeded sample of at most N pairs per file")
        p.add_argument("--seed", type=int, default=7, help="seed of --sample")
        p.add_argument("--embeddings-cache", type=Path, default=_DEFAULT_CACHE)
        if p is not cal:
            p.add_argument("--config", type=Path, help="take the embedder from this config")


def run(args: argparse.Namespace) -> int:
    if args.action == "train-reranker":
        return cli_reranker.train(args)
    if not 0 < args.target_precision < 1:
        print("--target-precision must be between 0 and 1", file=sys.stderr)
        return 2
    if getattr(args, "cosine_weight", 0.0) < 0:  # eval and calibrate only
        print("--cosine-weight must be >= 0", file=sys.stderr)
        return 2
    try:
        embedding = load_config(args.config).embedding if args.config else EmbeddingConfig()
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    try:
        if args.action == "eval":
            return _eval(args, embedding)
        if args.action == "train-verifier":
            return _train(args, embedding)
        return _calibrate(args, embedding)
    except VerifierError as exc:
        print(f"verifier: {exc}", file=sys.stderr)
        return 2
    except CrossEncoderError as exc:
        print(f"reranker: {exc}", file=sys.stderr)
        return 2


def _load(files: Sequence[str], args: argparse.Namespace) -> list[Pair]:
    return [p for f in files for p in load_pairs(f, limit=args.sample, seed=args.seed)]


def _eval(args: argparse.Namespace, embedding: EmbeddingConfig) -> int:
    if args.split_seed is not None:
        dev_pairs, test_pairs = split_pairs(_load([args.pairs], args), seed=args.split_seed)
    else:
        dev_pairs, test_pairs = _load(args.calibrate_on, args), _load([args.pairs], args)
    dev, test, namespace = _score(dev_pairs + test_pairs, embedding, args.embeddings_cache,
                                  len(dev_pairs))  # fmt: skip
    model = load_verifier(args.verifier, namespace) if args.verifier else None
    rerankers = [load_cross_encoder(path) for path in args.reranker or ()]
    report = evaluate(dev, test, args.target_precision, args.z, verifier=True, model=model,
                      namespace=namespace)  # fmt: skip
    reranked = None
    if rerankers:
        reranked = evaluate_reranker(dev, test, rerankers, args.target_precision, args.z,
                                     args.cosine_weight)  # fmt: skip
    if args.curve_out is not None:
        _write_curves(args.curve_out, Path(args.pairs).stem, test, report)
    if args.json:
        out = report.as_json()
        if reranked is not None:
            out["reranker"] = reranked.as_json()
        print(json.dumps(out, ensure_ascii=False))
    else:
        _print_table(Path(args.pairs).name, report, reranked)
    return 0


def _train(args: argparse.Namespace, embedding: EmbeddingConfig) -> int:
    limits = args.sample or [None]
    if len(limits) not in (1, len(args.pairs)):
        print("--sample takes one N, or one per --pairs file", file=sys.stderr)
        return 2
    limits = limits * len(args.pairs) if len(limits) == 1 else limits
    pairs = [p for f, n in zip(args.pairs, limits, strict=True)
             for p in load_pairs(f, limit=n, seed=args.seed)]  # fmt: skip
    if args.split_seed is not None:
        pairs = split_pairs(pairs, seed=args.split_seed)[0]
    scored, _, namespace = _score(pairs, embedding, args.embeddings_cache, len(pairs))
    names = ", ".join(Path(p).name for p in args.pairs)
    half = "" if args.split_seed is None else f", first half of split seed {args.split_seed}"
    sample = "" if args.sample is None else f", sample {args.sample} seed {args.seed}"
    settings = TrainSettings(hidden=args.hidden, l2=tuple(args.l2))
    result = train_verifier(scored.features(), scored.labels, namespace=namespace,
                            settings=settings,
                            trained_on=f"{names} ({len(pairs)} pairs{sample}{half})")  # fmt: skip
    result.model.save(args.out)
    print(f"{args.out}: verifier for {namespace} trained on {len(pairs)} pairs "
          f"(hidden={args.hidden}, l2={result.l2:g}, epochs={result.epochs}, "
          f"holdout loss {result.holdout_loss:.4f})")  # fmt: skip
    return 0


def _calibrate(args: argparse.Namespace, embedding: EmbeddingConfig) -> int:
    pairs = _load(args.pairs, args)
    if args.split_seed is not None:
        pairs = split_pairs(pairs, seed=args.split_seed)[1]
    dev, _, namespace = _score(pairs, embedding, args.embeddings_cache, len(pairs))
    update: dict[str, object]
    if args.verifier is not None and args.reranker is not None:
        print("--verifier and --reranker: calibrate one at a time", file=sys.stderr)
        return 2
    if args.reranker is not None:
        models = [load_cross_encoder(path) for path in args.reranker]
        reranked = evaluate_reranker(dev, dev, models, args.target_precision, args.z,
                                     args.cosine_weight)  # fmt: skip
        rule = reranked.rule
        # the cosine floor only spares the model hopeless candidates; the reranker decides
        update = {"threshold": round(reranked.cosine_floor, 6), "guards": [],
                  "reranker": {"kind": "e5-cross-encoder",
                               "path": _relative(args.reranker[0], args.config),
                               "min_score": round(rule.threshold, 6),
                               "cosine_weight": args.cosine_weight}}  # fmt: skip
    elif args.verifier is not None:
        model = load_verifier(args.verifier, namespace)
        rule = evaluate_verifier(dev, dev, args.target_precision, args.z, model=model)
        # the verifier reads the cosine and the guard signals itself: no cosine floor, no vetoes
        update = {"threshold": -1.0, "guards": [], "verifier": _relative(args.verifier,
                  args.config), "verifier_threshold": round(rule.threshold, 6)}  # fmt: skip
    else:
        guards = choose_guards(dev, args.target_precision, args.z)
        rule = evaluate_rule(dev, dev, guards, args.target_precision, args.z)
        update = {"threshold": round(rule.threshold, 6), "guards": list(guards)}
    threshold = rule.threshold
    if math.isinf(threshold):
        print("no threshold reaches the target precision on these pairs", file=sys.stderr)
        return 1
    data = yaml.safe_load(args.config.read_text(encoding="utf-8"))
    semantic = data.setdefault("cache", {}).setdefault("semantic", {})
    half = "" if args.split_seed is None else f", second half of split seed {args.split_seed}"
    semantic.update({
        **update, "target_precision": args.target_precision,
        "calibrated_on": f"{', '.join(Path(p).name for p in args.pairs)} ({len(pairs)} pairs"
                         f"{half}, "
                         f"z={args.z:g}, {time.strftime('%Y-%m-%d')})",
    })  # fmt: skip
    if args.verifier is None:  # a cosine (or reranker) calibration replaces a verifier's
        semantic.pop("verifier", None)
        semantic.pop("verifier_threshold", None)
    guards = tuple(str(g) for g in semantic["guards"])
    backup = args.config.with_name(args.config.name + f".bak-{time.strftime('%Y%m%d%H%M%S')}")
    shutil.copy2(args.config, backup)
    args.config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    what = ("verifier_threshold" if args.verifier is not None
            else "reranker.min_score" if args.reranker is not None else "threshold")  # fmt: skip
    print(f"{args.config}: cache.semantic.{what}={threshold:.6f} guards={list(guards)} "
          f"(dev precision {rule.dev_precision:.3f}, recall {rule.dev_recall:.3f}); "
          f"previous file kept as {backup}")  # fmt: skip
    return 0


def _relative(model: Path, config: Path) -> str:
    """The model path as the config should name it (relative to the config's folder)."""
    return os.path.relpath(model.resolve(), config.resolve().parent)


def _score(
    pairs: list[Pair], embedding: EmbeddingConfig, cache_path: Path, dev_n: int
) -> tuple[ScoredPairs, ScoredPairs, str]:
    shared = build_embedder(embedding)
    namespace = shared.namespace
    try:
        disk = DiskEmbeddingCache(cache_path, shared.namespace)
        progress = _progress()
        a = disk.embed([p.a for p in pairs], _blocking(shared), progress)
        b = disk.embed([p.b for p in pairs], _blocking(shared), progress)
        disk.close()
    finally:
        asyncio.run(shared.aclose())
    return (
        ScoredPairs.of(pairs[:dev_n], a[:dev_n], b[:dev_n]),
        ScoredPairs.of(pairs[dev_n:], a[dev_n:], b[dev_n:]),
        namespace,
    )


def _blocking(shared: SharedEmbedder) -> Callable[[Sequence[str]], Matrix]:
    if isinstance(shared, BatchingEmbedder):
        return shared.embedder.embed
    return lambda texts: asyncio.run(shared.embed_many(texts))


def _progress() -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        if sys.stderr.isatty() or done == total or done % 1024 == 0:
            print(f"\rembedding {done}/{total}", end="\n" if done == total else "",
                  file=sys.stderr, flush=True)  # fmt: skip

    return report


def _write_curves(folder: Path, stem: str, test: ScoredPairs, report: EvalReport) -> None:
    from hybrid_gateway.cache.semantic.curves import write_csv, write_png

    folder.mkdir(parents=True, exist_ok=True)
    curves = {
        "plain": curve(test.guarded(()), test.labels),
        "decision": curve(test.guarded(report.decision.guards), test.labels),
    }
    write_csv(folder / f"{stem}-curve.csv", curves)
    thresholds = {"plain": report.plain.threshold, "decision": report.decision.threshold}
    write_png(folder / f"{stem}-curve.png", curves, thresholds, report.target_precision,
              f"{stem}: precision / recall / hit rate vs threshold (TEST half)")  # fmt: skip


def _print_table(name: str, report: EvalReport, reranked: RerankerReport | None = None) -> None:
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
        t = "never" if math.isinf(rule.threshold) else f"{rule.threshold:.4f}"
        print(f"{label:15} {t:>9} {rule.precision:9.3f} {rule.recall:7.3f} {rule.auc:6.3f} "
              f"{rule.best_recall:6.3f}")  # fmt: skip
    print(f"guards: {', '.join(report.decision.guards) or 'none'}")
