"""``hybrid-gateway emulate``: serve the emulator until SIGINT or SIGTERM.

Once listening it prints exactly one line, ``emulator listening on http://HOST:PORT``, to stdout
(``--port 0`` binds a free port, and the line gives the real one).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import web

from hybrid_gateway.serving import ListenError, run_with_best_loop, serve_until_signalled

from .quality import TIERS, QualityAnswers
from .server import create_emulator_app
from .settings import PROFILES, EmulatorSettings, profile
from .text import PseudoAnswers

# --flag -> EngineSettings field, for the engine overrides
_ENGINE_FLAGS = {
    "max_num_seqs": int,
    "prefill_tps": float,
    "decode_step_ms": float,
    "per_seq_step_ms": float,
    "per_kilotoken_step_ms": float,
    "kv_budget_tokens": int,
    "prefix_cache_tokens": int,
    "prefix_block_tokens": int,
}
_FAULT_FLAGS = {
    "error_rate": float,
    "error_status": int,
    "stall_rate": float,
    "stall_s": float,
    "reset_rate": float,
    "seed": int,
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", choices=sorted(PROFILES), default="light")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001, help="0 picks a free port")
    parser.add_argument("--model", help="served model name (default: the profile's name)")
    parser.add_argument(
        "--zero-delay", action="store_true", help="answer at once, bypassing the engine"
    )
    parser.add_argument(
        "--strict-model", action="store_true", help="404 for other model names, as vLLM does"
    )
    parser.add_argument("--min-output-tokens", type=int)
    parser.add_argument("--max-output-tokens", type=int)
    parser.add_argument(
        "--tool-call-rate",
        type=float,
        help="share of requests with tools and tool_choice auto that get a tool call (0..1)",
    )
    quality = parser.add_argument_group("quality model (see docs/emulator.md)")
    quality.add_argument(
        "--workload", type=Path, help="answer its questions right or wrong by their labels"
    )
    quality.add_argument(
        "--tier", choices=TIERS, help="whose labels to follow (default: the profile's name)"
    )
    engine = parser.add_argument_group("engine (defaults from the profile)")
    for name, kind in _ENGINE_FLAGS.items():
        engine.add_argument(_flag(name), type=kind)
    faults = parser.add_argument_group("random faults (off by default)")
    for name, kind in _FAULT_FLAGS.items():
        faults.add_argument(_flag(name), type=kind)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def settings_from_args(args: argparse.Namespace) -> EmulatorSettings:
    """The profile with every flag that was given applied on top."""
    base = profile(args.profile)
    engine = replace(base.engine, **_given(args, _ENGINE_FLAGS))
    faults = replace(base.faults, **_given(args, _FAULT_FLAGS))  # the profile's, flags on top
    outputs = _given(
        args, {"min_output_tokens": int, "max_output_tokens": int, "tool_call_rate": float}
    )
    return replace(
        base,
        model=args.model or base.model,
        engine=engine,
        faults=faults,
        zero_delay=args.zero_delay,
        strict_model=args.strict_model,
        **outputs,
    )


def _given(args: argparse.Namespace, names: dict[str, type]) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def quality_from_args(
    args: argparse.Namespace, settings: EmulatorSettings
) -> QualityAnswers | None:
    """The quality model when ``--workload`` is given; ``ValueError`` on bad flags or file."""
    workload: Path | None = getattr(args, "workload", None)
    if workload is None:
        return None
    if settings.zero_delay:
        raise ValueError("--workload needs the engine: it cannot be used with --zero-delay")
    # default: the tier the profile plays (article-heavy and h200-heavy play heavy)
    tier = getattr(args, "tier", None) or args.profile.rpartition("-")[2]
    if tier not in TIERS:
        raise ValueError(f"--tier is needed with profile {args.profile!r}")
    fallback = PseudoAnswers(settings.min_output_tokens, settings.max_output_tokens)
    return QualityAnswers.from_file(workload, tier, fallback)


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
        answers = quality_from_args(args, settings)
    except ValueError as exc:
        print(f"hybrid-gateway emulate: {exc}", file=sys.stderr)
        return 2
    app = create_emulator_app(settings, answers=answers)
    # handler_cancellation: a client that hangs up frees its batch slot, as in vLLM
    runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
    try:
        run_with_best_loop(serve_until_signalled(runner, args.host, args.port, "emulator"))
    except ListenError as exc:  # e.g. the port is in use: one line, not a traceback
        print(f"hybrid-gateway emulate: {exc}", file=sys.stderr)
        return 2
    return 0
