"""`hybrid-gateway router train`: fit the classifier and save it with its embedder namespace.

router train --data FILE [--data FILE ...] --out MODEL.npz
router train --preset default            # the shipped model, from ../shared/data
router train --preset default --exclude routerbench_mbpp_train --out m.npz   # hold one out
router train --from-log --config gateway.yaml --out m.npz   # audited traffic (docs/learning.md)
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.learning.router_cli import add_from_log_arguments, train_from_log
from hybrid_gateway.routing.build import default_model_path
from hybrid_gateway.routing.cli import (
    add_data_arguments,
    add_fit_arguments,
    columns_of,
    fit_settings_of,
)
from hybrid_gateway.routing.dataset import (
    DEFAULT_DATA,
    PRESETS,
    bundled_embedder,
    embed_rows,
    load_rows,
    preset_files,
)
from hybrid_gateway.routing.outcomes import OutcomeDataError
from hybrid_gateway.routing.training import fit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data", type=Path, action="append", help="an outcome or label file (repeatable)"
    )
    source.add_argument(
        "--from-log",
        action="store_true",
        help="the audited traffic in --config's records store (learning/router_cli.py)",
    )
    source.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="a named mix of the files in --data-dir (default: every routing outcome file)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA,
        help="the shared data folder, for --preset (default: %(default)s)",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        help="leave this preset file out (its stem; repeatable)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="model file to write (default with --preset "
        "default: the packaged routing/models/default.npz)",
    )
    add_fit_arguments(parser)
    add_data_arguments(parser)
    add_from_log_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.from_log:
        return train_from_log(args)
    settings = fit_settings_of(args)  # refuses a bad combination before any work
    if args.preset is not None:
        files = [f for f in preset_files(args.preset, args.data_dir) if f.stem not in args.exclude]
        out = args.out or (default_model_path() if args.preset == "default" else None)
    else:
        files, out = list(args.data), args.out
    if out is None:
        print("router train: --out is required", file=sys.stderr)
        return 2
    try:
        rows = load_rows(files, columns_of(args))
    except OutcomeDataError as exc:
        print(f"router train: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print("router train: no rows with a prompt and both scores", file=sys.stderr)
        return 2
    embedder = bundled_embedder()
    data = embed_rows(rows, embedder, args.embed_cache)
    model = fit(data, namespace_of(embedder), settings)
    model = replace(model, info=dict(model.info, files=[f.name for f in files]))
    model.save(out)
    sources = Counter(r.source for r in rows)
    mix = ", ".join(f"{name} {count}" for name, count in sorted(sources.items()))
    print(f"wrote {out}: {len(rows)} rows ({mix}); embedder {model.namespace}")
    return 0
