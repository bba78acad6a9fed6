"""`hybrid-gateway cache eval | calibrate | train-verifier`: the hit decision on labelled pairs.

    cache eval --pairs TEST --calibrate-on DEV --target-precision 0.95 --json [--curve-out DIR]
    cache eval --pairs FILE --split-seed 7 ...   calibrate on one seeded half, test on the other
    cache eval ... --verifier MODEL.npz          the verifier rule with a model trained elsewhere
    cache calibrate --pairs DEV [DEV ...] --target-precision 0.95 --config gateway.yaml
    cache calibrate ... --verifier MODEL.npz     calibrate the verifier's threshold instead
    cache train-verifier --pairs FILE [FILE ...] --out MODEL.npz [--split-seed 7]
    cache train-reranker --pairs FILE [FILE ...] --out MODEL.npz [--split-seed 7]   (torch)
    cache eval | calibrate ... --reranker MODEL.npz [PART2.npz]   the cross-encoder's rule
    cache report --config gateway.yaml [--since 7d] [--json]   false-hit bounds from the audits
    cache pairs --from-log --config gateway.yaml --out audited.jsonl   audited hits as pairs
    cache calibrate | train-verifier | train-reranker --from-log [LOG_OR_CONFIG] ...
        the audited hits as the labelled pairs, no file to make (docs/learning.md)

Embeddings come from the config's ``embedding`` section (``--config``) or the bundled default,
and are kept in ``--embeddings-cache`` (by model version and text hash) so a rerun with another
target, seed or split does not embed again.  ``--sample N`` takes a seeded sample of each file.
TEST pairs that DEV also has are left out of TEST (``overlap_dropped``), and a given verifier's
or reranker's own training pairs out of its rule (``excluded``).  Bad input (a pair file, an
argument, a config that cannot be written) is one line on stderr and exit code 2, found before
the embedding wherever it can be.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hybrid_gateway.cache.semantic import cli_reranker
from hybrid_gateway.cache.semantic.cli_config import Rule, check_writable, relative, write_decision
from hybrid_gateway.cache.semantic.cli_report import prepare_curves, print_table, write_curves
from hybrid_gateway.cache.semantic.cross_encoder import (
    CrossEncoderError,
    load_cross_encoder,
    pair_digest,
)
from hybrid_gateway.cache.semantic.cross_encoder_eval import evaluate_reranker
from hybrid_gateway.cache.semantic.evaluate import (
    RuleReport,
    ScoredPairs,
    choose_guards,
    evaluate,
    evaluate_rule,
    unseen,
    verifier_rule,
)
from hybrid_gateway.cache.semantic.pairs import (
    Pair,
    PairFormatError,
    drop_overlap,
    load_pairs,
    split_pairs,
)
from hybrid_gateway.cache.semantic.verifier import PairVerifier, VerifierError, load_verifier
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
from hybrid_gateway.learning import cache_report_cli
from hybrid_gateway.learning.from_log import add_pair_source, use_audited_pairs

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
    add_pair_source(cal, "DEV pair file(s)")  # or --from-log: the cache audits as pairs
    cal.add_argument("--config", type=Path, required=True, help="the gateway YAML to update")
    cal.add_argument(
        "--split-seed",
        type=int,
        help="calibrate only on the second half of each file's seeded split (the half "
        "`train-verifier --split-seed` with the same seed left unseen)",
    )
    tr = sub.add_parser("train-verifier", help="train the learned pair verifier on pairs")
    add_pair_source(tr, "training pair file(s)")  # or --from-log
    tr.add_argument("--out", type=Path, required=True, help="the model file to write (.npz)")
    tr.add_argument(
        "--split-seed",
        type=int,
        help="train only on the first half of each file's seeded split; `cache calibrate "
        "--split-seed` with the same seed calibrates on the other half.  The model file keeps "
        "digests of its training pairs: `cache eval / calibrate --verifier` leave them out "
        "of DEV and TEST (so evaluate it with another --split-seed, or on other files)",
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
        p.add_argument("--verifier", type=Path,
                       help="a trained verifier model (.npz); its own training pairs are left "
                            "out of DEV and TEST")  # fmt: skip
        p.add_argument("--reranker", type=Path, nargs="+",
                       help="a fine-tuned cross-encoder (`cache train-reranker`); more than one "
                            "(trained on other pairs): each pair is scored by the first that "
                            "did not see it, the gateway serves the first")  # fmt: skip
        p.add_argument("--cosine-weight", type=float, default=1.0,
                       help="with --reranker: the rule is score + W * cosine >= min_score (the "
                            "cosine orders the candidates the model scores alike; 0: the "
                            "score alone)")  # fmt: skip
    cli_reranker.configure(sub)
    cache_report_cli.configure(sub)  # `cache report`: the false-hit bound from the audits
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
    # every failure below is one line naming the file (and line or field) and exit code 2
    try:
        problem = use_audited_pairs(args)  # --from-log: the audited hits are the pairs
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
        if args.action == "train-reranker":
            return cli_reranker.train(args)
        if args.action in cache_report_cli.ACTIONS:  # report, pairs: from the audits
            return cache_report_cli.run(args)
        problem = _usage_error(args)
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
        embedding = load_config(args.config).embedding if args.config else EmbeddingConfig()
        return _ACTIONS[args.action](args, embedding)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
    except VerifierError as exc:
        print(f"verifier: {exc}", file=sys.stderr)
    except CrossEncoderError as exc:
        print(f"reranker: {exc}", file=sys.stderr)
    except PairFormatError as exc:
        print(f"pairs: {exc}", file=sys.stderr)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
    return 2


def _usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the numeric arguments, if anything (checked before any work)."""
    samples = args.sample if isinstance(args.sample, list) else [args.sample]
    weight = getattr(args, "cosine_weight", 0.0)  # eval and calibrate only
    checks = [
        (0 < args.target_precision < 1, "--target-precision must be between 0 and 1"),
        (math.isfinite(args.z) and args.z >= 0, "--z must be a finite number >= 0"),
        (math.isfinite(weight) and weight >= 0, "--cosine-weight must be >= 0"),
        (all(n is None or n >= 1 for n in samples), "--sample must be >= 1"),
    ]
    if args.action == "train-verifier":
        checks += [
            (len(samples) in (1, len(args.pairs)), "--sample takes one N, or one per --pairs file"),
            (args.hidden >= 0, "--hidden must be >= 0"),
            (all(math.isfinite(v) and v >= 0 for v in args.l2), "--l2 must be >= 0"),
        ]
    return next((message for ok, message in checks if not ok), None)


def _load(files: Sequence[str], args: argparse.Namespace) -> list[Pair]:
    return [p for f in files for p in load_pairs(f, limit=args.sample, seed=args.seed)]


def _eval(args: argparse.Namespace, embedding: EmbeddingConfig) -> int:
    png = prepare_curves(args.curve_out)  # before the embedding: fail (or warn) early
    if args.split_seed is not None:
        dev_pairs, test_pairs = split_pairs(_load([args.pairs], args), seed=args.split_seed)
        dev_from = f"the first half of {args.pairs} (split seed {args.split_seed})"
    else:
        dev_pairs, test_pairs = _load(args.calibrate_on, args), _load([args.pairs], args)
        dev_from = ", ".join(args.calibrate_on)
    test_pairs, overlap = drop_overlap(dev_pairs, test_pairs)
    if overlap:
        print(f"note: {overlap} TEST pairs are also DEV pairs (the same two texts): left out "
              "of TEST", file=sys.stderr)  # fmt: skip
    if not dev_pairs or not test_pairs:
        print(f"no DEV pairs in {dev_from}" if not dev_pairs
              else f"no TEST pairs left in {args.pairs}: every one is also in DEV" if overlap
              else f"no TEST pairs in {args.pairs}", file=sys.stderr)  # fmt: skip
        return 2
    dev, test, namespace = _score(dev_pairs + test_pairs, embedding, args.embeddings_cache,
                                  len(dev_pairs))  # fmt: skip
    model = _verifier(args.verifier, namespace) if args.verifier else None
    rerankers = [load_cross_encoder(path) for path in args.reranker or ()]
    report = evaluate(dev, test, args.target_precision, args.z, verifier=True, model=model,
                      namespace=namespace, split_seed=args.split_seed)  # fmt: skip
    reranked = None
    if rerankers:
        reranked = evaluate_reranker(dev, test, rerankers, args.target_precision, args.z,
                                     args.cosine_weight)  # fmt: skip
    if args.json:  # printed before the curves are drawn: it is never lost to them
        out = report.as_json() | {"overlap_dropped": overlap}
        if reranked is not None:
            out["reranker"] = reranked.as_json()
        print(json.dumps(out, ensure_ascii=False, allow_nan=False), flush=True)
    else:
        print_table(Path(args.pairs).name, report, reranked)
    if args.curve_out is not None:
        write_curves(args.curve_out, Path(args.pairs).stem, test, report, png=png)
    return 0


def _verifier(path: Path, namespace: str) -> PairVerifier:
    model = load_verifier(path, namespace)
    if model.trained_pairs is None:
        print(f"warning: {path} does not record its training pairs (an older file): they "
              "cannot be left out of DEV and TEST; retrain it to be sure",
              file=sys.stderr)  # fmt: skip
    return model


def _train(args: argparse.Namespace, embedding: EmbeddingConfig) -> int:
    limits = args.sample or [None]
    limits = limits * len(args.pairs) if len(limits) == 1 else limits
    pairs = [p for f, n in zip(args.pairs, limits, strict=True)
             for p in load_pairs(f, limit=n, seed=args.seed)]  # fmt: skip
    if args.split_seed is not None:
        pairs = split_pairs(pairs, seed=args.split_seed)[0]
    if not pairs:
        print(f"no training pairs in {', '.join(args.pairs)}", file=sys.stderr)
        return 2
    scored, _, namespace = _score(pairs, embedding, args.embeddings_cache, len(pairs))
    names = ", ".join(Path(p).name for p in args.pairs)
    half = "" if args.split_seed is None else f", first half of split seed {args.split_seed}"
    sample = "" if args.sample is None else f", sample {args.sample} seed {args.seed}"
    settings = TrainSettings(hidden=args.hidden, l2=tuple(args.l2))
    # the digests of the training pairs go into the file: eval and calibrate leave them out
    digests = frozenset(pair_digest(p.a, p.b) for p in pairs)
    result = train_verifier(scored.features(), scored.labels, namespace=namespace,
                            settings=settings, trained_pairs=digests,
                            trained_on=f"{names} ({len(pairs)} pairs{sample}{half})")  # fmt: skip
    result.model.save(args.out)
    print(f"{args.out}: verifier for {namespace} trained on {len(pairs)} pairs "
          f"(hidden={args.hidden}, l2={result.l2:g}, epochs={result.epochs}, "
          f"holdout loss {result.holdout_loss:.4f})")  # fmt: skip
    return 0


def _calibrate(args: argparse.Namespace, embedding: EmbeddingConfig) -> int:
    if args.verifier is not None and args.reranker is not None:
        print("--verifier and --reranker: calibrate one at a time", file=sys.stderr)
        return 2
    check_writable(args.config)  # before the slow part, not after it
    pairs = _load(args.pairs, args)
    if args.split_seed is not None:
        pairs = split_pairs(pairs, seed=args.split_seed)[1]
    if not pairs:
        half = "" if args.split_seed is None else f" (second half of split {args.split_seed})"
        print(f"no pairs to calibrate on in {', '.join(args.pairs)}{half}", file=sys.stderr)
        return 2
    dev, _, namespace = _score(pairs, embedding, args.embeddings_cache, len(pairs))
    rule, kind, update = _calibrated(args, dev, namespace)
    if not rule.target_met:
        print("no threshold reaches the target precision on these pairs", file=sys.stderr)
        return 1
    half = "" if args.split_seed is None else f", second half of split seed {args.split_seed}"
    backup = write_decision(args.config, kind, {
        **update, "target_precision": args.target_precision,
        "calibrated_on": f"{', '.join(Path(p).name for p in args.pairs)} ({rule.n} pairs"
                         f"{half}, z={args.z:g}, {time.strftime('%Y-%m-%d')})",
    })  # fmt: skip
    what = {"plain": "threshold", "verifier": "verifier_threshold",
            "reranker": "reranker.min_score"}[kind]  # fmt: skip
    print(f"{args.config}: cache.semantic.{what}={rule.threshold:.6f} "
          f"guards={list(rule.guards)} (dev precision {rule.dev_precision:.3f}, "
          f"recall {rule.dev_recall:.3f}); previous file kept as {backup}")  # fmt: skip
    return 0


def _calibrated(
    args: argparse.Namespace, dev: ScoredPairs, namespace: str
) -> tuple[RuleReport, Rule, dict[str, object]]:
    """The calibrated rule, its kind and the ``cache.semantic`` keys that configure it."""
    if args.reranker is not None:
        models = [load_cross_encoder(path) for path in args.reranker]
        reranked = evaluate_reranker(dev, dev, models, args.target_precision, args.z,
                                     args.cosine_weight)  # fmt: skip
        # the cosine floor only spares the model hopeless candidates; the reranker decides
        return reranked.rule, "reranker", {
            "threshold": round(reranked.cosine_floor, 6), "guards": [],
            "reranker": {"kind": "e5-cross-encoder",
                         "path": relative(args.reranker[0], args.config),
                         "min_score": round(reranked.rule.threshold, 6),
                         "cosine_weight": args.cosine_weight}}  # fmt: skip
    if args.verifier is not None:
        model = _verifier(args.verifier, namespace)
        kept = unseen(dev, model)
        left_out = len(dev.pairs) - len(kept.pairs)
        if left_out:
            print(f"verifier: {left_out} of the {len(dev.pairs)} pairs are its training pairs: "
                  "left out of the calibration", file=sys.stderr)  # fmt: skip
        rule = verifier_rule(model, kept, kept, args.target_precision, args.z)
        # the verifier reads the cosine and the guard signals itself: no cosine floor, no vetoes
        return rule, "verifier", {
            "threshold": -1.0, "guards": [], "verifier": relative(args.verifier, args.config),
            "verifier_threshold": round(rule.threshold, 6)}  # fmt: skip
    guards = choose_guards(dev, args.target_precision, args.z)
    rule = evaluate_rule(dev, dev, guards, args.target_precision, args.z)
    return rule, "plain", {"threshold": round(rule.threshold, 6), "guards": list(guards)}


_ACTIONS: dict[str, Callable[[argparse.Namespace, EmbeddingConfig], int]] = {
    "eval": _eval,
    "train-verifier": _train,
    "calibrate": _calibrate,
}


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
