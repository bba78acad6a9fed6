"""`hybrid-gateway plan ...`: capacity planning.

plan vram   weights + KV cache + headroom for a model on a GPU, the concurrency that fits,
            and the vLLM / SGLang flags it implies (docs/capacity.md)
plan breakeven
            monthly cost of all commercial API vs self-hosted light model + API for the
            heavy share, per requests/day, and where they cross (docs/capacity.md)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from hybrid_gateway.accounting import breakeven_cli
from hybrid_gateway.accounting.vram import (
    GIB,
    KV_DTYPE_BYTES,
    PRESETS,
    WEIGHT_BITS,
    Headroom,
    ModelArch,
    PlanError,
    VramPlan,
    WeightFormat,
    Workload,
    load_config_json,
    plan_vram,
    preset,
)

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="plan_command", metavar="PLAN", required=True)
    vram = sub.add_parser(
        "vram",
        help="GPU memory for a model: weights, KV cache, max concurrency, serving flags",
        description="total = weights + KV per request x concurrency + headroom "
        "(headroom = --overhead-gib + --overhead-fraction x weights)",
    )
    model = vram.add_mutually_exclusive_group(required=True)
    model.add_argument("--preset", help=f"built-in architecture: {', '.join(PRESETS)}")
    model.add_argument("--config", type=Path, help="a Hugging Face style config.json")
    vram.add_argument("--params", type=float, help="parameter count (overrides the estimate)")
    vram.add_argument("--weights", default="fp16", help=f"{', '.join(WEIGHT_BITS)} (fp16)")
    vram.add_argument("--group-size", type=int, default=128, help="int4 group size (128)")
    vram.add_argument("--int4-method", default="awq", help="awq or gptq (awq)")
    vram.add_argument("--kv-dtype", default="fp16", help=f"{', '.join(KV_DTYPE_BYTES)} (fp16)")
    vram.add_argument("--context", type=int, default=4096, help="tokens per request (4096)")
    vram.add_argument("--concurrency", type=int, default=16, help="concurrent requests (16)")
    vram.add_argument("--gpu-gib", type=float, default=80.0, help="GPU memory in GiB (80)")
    vram.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="(0.9)")
    vram.add_argument("--overhead-gib", type=float, default=1.0, help="fixed runtime GiB (1.0)")
    vram.add_argument(
        "--overhead-fraction", type=float, default=0.10, help="activations, x weights (0.10)"
    )
    vram.add_argument("--json", action="store_true", help="print JSON instead of a table")
    breakeven_cli.configure(sub)


def run(args: argparse.Namespace) -> int:
    try:
        if args.plan_command == "breakeven":
            return breakeven_cli.run(args)
        plan = _plan_from_args(args)
    except PlanError as exc:
        print(f"hybrid-gateway plan {args.plan_command}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(plan_to_dict(plan), indent=2) if args.json else render_table(plan))
    return 0


def _plan_from_args(args: argparse.Namespace) -> VramPlan:
    params = int(args.params) if args.params is not None else None
    arch: ModelArch
    if args.config is not None:
        arch = load_config_json(args.config, params=params)
    else:
        arch = preset(args.preset)
        if params is not None:
            arch = replace(arch, param_count=params)
    return plan_vram(
        arch,
        WeightFormat(args.weights.lower(), args.group_size, args.int4_method.lower()),
        Workload(args.context, args.concurrency, args.kv_dtype.lower()),
        (args.gpu_gib, args.gpu_memory_utilization),
        Headroom(args.overhead_gib, args.overhead_fraction),
    )


def plan_to_dict(plan: VramPlan) -> dict[str, Any]:
    return {
        "model": plan.model,
        "params": plan.params,
        "params_estimated": plan.params_estimated,
        "weights": plan.weights.precision,
        "group_size": plan.weights.group_size if plan.weights.precision == "int4" else None,
        "kv_dtype": plan.workload.kv_dtype,
        "context_len": plan.workload.context_len,
        "concurrency": plan.workload.concurrency,
        "gpu_gib": plan.gpu_gib,
        "gpu_memory_utilization": plan.gpu_memory_utilization,
        "bytes": {
            "weights": plan.weight_bytes,
            "kv_per_token": plan.kv_bytes_per_token,
            "kv_per_request": plan.kv_bytes_per_request,
            "kv_total": plan.kv_bytes_total,
            "headroom": plan.headroom_bytes,
            "total": plan.total_bytes,
            "budget": plan.budget_bytes,
        },
        "fits": plan.fits,
        "max_concurrency": plan.max_concurrency,
        "flags": {e.engine: dict(e.flags) for e in plan.engines},
        "notes": list(plan.notes),
    }


def _size(n: int) -> str:
    return f"{n / GIB:9.2f} GiB  ({n / 1e9:7.2f} GB)"


def render_table(plan: VramPlan) -> str:
    w, load = plan.weights, plan.workload
    precision = f"{w.precision} (group {w.group_size})" if w.precision == "int4" else w.precision
    kind = "estimated" if plan.params_estimated else "given"
    rows = [
        ("model", f"{plan.model}  ({plan.params / 1e9:.2f}B params, {kind})"),
        ("weights", f"{precision}, {w.bytes_per_param():.4g} bytes/param"),
        (
            "workload",
            f"{load.context_len} tokens x {load.concurrency} concurrent, KV {load.kv_dtype}",
        ),
        ("weight memory", _size(plan.weight_bytes)),
        (
            "KV per token",
            f"{plan.kv_bytes_per_token:,} bytes ({plan.kv_bytes_per_token / 2**20:.4g} MiB)",
        ),
        ("KV per request", _size(plan.kv_bytes_per_request)),
        (f"KV x {load.concurrency}", _size(plan.kv_bytes_total)),
        ("headroom", _size(plan.headroom_bytes)),
        ("total", _size(plan.total_bytes)),
        (
            "GPU budget",
            f"{_size(plan.budget_bytes)}  = {plan.gpu_gib:g} GiB x {plan.gpu_memory_utilization:g}",
        ),
        ("fits", "yes" if plan.fits else "NO"),
        ("max concurrency", f"{plan.max_concurrency} at {load.context_len} tokens"),
    ]
    lines = [f"{label:<16} {value}" for label, value in rows]
    lines += [f"{e.engine:<16} {e.command_line()}" for e in plan.engines]
    lines += [f"note             {note}" for note in plan.notes]
    return "\n".join(lines)
