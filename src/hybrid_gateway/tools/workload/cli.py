"""``hybrid-gateway workload build``: write a replayable workload built from the real data.

``hybrid-gateway workload export`` writes a workload's labels as calibration files for
``router calibrate`` and ``cache calibrate`` (``export.py``).

The data is read from ``--data`` (default ``../shared/data`` from the current directory, then
``<repo root>/../shared/data``).  A missing data directory or file exits with code 2 and names
the path.  See docs/workload.md for the options and how the labels are made.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from .arrivals import ArrivalSpec, parse_arrivals
from .builder import (
    COMPLEX_SOURCES,
    KINDS,
    ZH_SIMPLE,
    BuildError,
    BuildOptions,
    build_noting_drift,
)
from .export import configure_export
from .export import run as run_export
from .schema import WorkloadItem, question, read_workload, write_workload
from .sources import DataMissingError

DATA_RELATIVE = Path("..") / "shared" / "data"


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build_parser = actions.add_parser("build", help="build a workload JSONL (+ .meta.json)")
    defaults = BuildOptions()
    add = build_parser.add_argument
    add("--out", type=Path, required=True, help="the JSONL file to write")
    add("--kind", choices=KINDS, default=defaults.kind, help="hard: measured outcomes only")
    add("--size", type=int, default=defaults.size)
    add("--complex-share", type=float, default=defaults.complex_share)
    add("--repeat-rate", type=float, default=defaults.repeat_rate)
    add("--trap-rate", type=float, default=defaults.trap_rate)
    add("--zh-share", type=float, default=defaults.zh_share)
    add("--zh-sources", nargs="+", default=list(defaults.zh_simple), metavar="SOURCE",
        help="the Chinese FAQ pair sources to draw from, evenly (default: "
        f"{' '.join(ZH_SIMPLE)}, weighted as in docs/workload.md)")  # fmt: skip
    add("--near-duplicate-cut", type=float, default=defaults.near_duplicate_cut, metavar="DICE",
        help="skip a question whose word-bigram Dice with an earlier one the data does not "
        "relate it to reaches DICE, so the quality marks judge only pairs the data labels "
        "(docs/workload.md; 0, the default: off)")  # fmt: skip
    add("--stream-share", type=float, default=defaults.stream_share)
    add("--tenants", type=int, default=defaults.tenants, help="tenant names t0, t1, ...")
    add(
        "--arrivals",
        type=_arrivals,
        default=defaults.arrivals,
        help="closed | poisson:RATE | trace:azure_conv | trace:mooncake (default: closed)",
    )
    add("--seed", type=int, default=defaults.seed)
    add("--data", type=Path, help="the shared data directory (default: ../shared/data)")
    add(
        "--exclude",
        type=Path,
        nargs="*",
        default=[],
        help="workloads whose questions to leave out (e.g. the ones a threshold was calibrated "
        "on): the build keeps fewer than --size items",
    )
    configure_export(
        actions.add_parser("export", help="a workload's labels as router/cache calibration files")
    )


def run(args: argparse.Namespace) -> int:
    if args.action == "export":
        return run_export(args)
    options = BuildOptions(
        size=args.size,
        kind=args.kind,
        complex_share=args.complex_share,
        repeat_rate=args.repeat_rate,
        trap_rate=args.trap_rate,
        zh_share=args.zh_share,
        zh_simple=tuple(args.zh_sources),
        near_duplicate_cut=args.near_duplicate_cut,
        stream_share=args.stream_share,
        tenants=args.tenants,
        arrivals=args.arrivals,
        seed=args.seed,
    )
    started = time.perf_counter()
    try:
        data = resolve_data(args.data)
        items, exhausted = build_noting_drift(options, data)
        excluded = {question(i) for path in args.exclude for i in read_workload(path)}
    except (DataMissingError, BuildError) as error:
        print(f"workload build: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"workload build: --exclude: {error.filename}: {error.strerror}", file=sys.stderr)
        return 2
    built = len(items)
    items = [item for item in items if question(item) not in excluded]
    summary = summarize(items)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {**options.as_meta(), "summary": summary}
    if exhausted:
        meta["exhausted"] = exhausted
    if args.exclude:
        paths = [str(path) for path in args.exclude]
        meta["excluded"] = {"workloads": paths, "items": built - len(items)}
    write_workload(args.out, items, meta)
    elapsed = time.perf_counter() - started
    left_out = f" ({built - len(items)} left out: asked in --exclude)" if args.exclude else ""
    print(f"wrote {len(items)} items to {args.out}{left_out} in {elapsed:.2f} s")
    if exhausted:
        ran_out = ", ".join(f"{name} at item w{at:06d}" for name, at in exhausted.items())
        print(
            f"workload build: note: the mix drifts: ran out of {ran_out}; after each, its "
            "draws go to the pool's other sources (docs/workload.md)",
            file=sys.stderr,
        )
    print(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    return 0


def resolve_data(given: Path | None) -> Path:
    """``given``, else the first of the default places that exists; DataMissingError names them."""
    if given is not None:
        candidates = [given]
    else:
        repo_root = Path(__file__).resolve().parents[4]
        candidates = [Path.cwd() / DATA_RELATIVE, repo_root / DATA_RELATIVE]
    for path in candidates:
        if path.is_dir():
            return path
    tried = " or ".join(str(path) for path in candidates)
    raise DataMissingError(f"data directory not found: {tried} (pass --data DIR)")


def _arrivals(text: str) -> ArrivalSpec:
    try:
        return parse_arrivals(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def summarize(items: Sequence[WorkloadItem]) -> dict[str, Any]:
    """Counts a reader checks a build by; repeats and traps are recomputed from the items."""
    seen_texts: set[str] = set()
    seen_groups: set[str] = set()
    kinds: Counter[str] = Counter()
    for item in items:
        text, group = item.messages[-1]["content"], item.labels.group
        if item.labels.trap_of is not None and group not in seen_groups:
            kinds["trap"] += 1
        elif text in seen_texts:
            kinds["verbatim_repeat"] += 1
        elif group in seen_groups:
            kinds["paraphrase_repeat"] += 1
        else:
            kinds["fresh"] += 1
        seen_texts.add(text)
        seen_groups.add(group)
    labels = [item.labels for item in items]
    return {
        "by_kind": dict(sorted(kinds.items())),
        "by_source": dict(sorted(Counter(lab.source for lab in labels).items())),
        "by_complexity": dict(sorted(Counter(lab.complexity for lab in labels).items())),
        "by_lang": dict(sorted(Counter(lab.lang for lab in labels).items())),
        "by_outcome": dict(sorted(Counter(lab.outcome for lab in labels).items())),
        "light_heavy_ok": dict(
            sorted(Counter(f"{lab.light_ok}/{lab.heavy_ok}" for lab in labels).items())
        ),
        "complex_pool": sum(lab.source in COMPLEX_SOURCES for lab in labels),
        "stream": sum(item.stream for item in items),
    }
