"""`hybrid-gateway plan breakeven`: self-host + API vs all commercial API, per requests/day."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from hybrid_gateway.accounting.breakeven import (
    DAYS_PER_MONTH,
    ApiPrices,
    BenchShares,
    Breakeven,
    SelfHost,
    Traffic,
    breakeven,
    cost_api,
    cost_selfhost,
    gpus_needed,
    sample_points,
    shares_from_bench,
)
from hybrid_gateway.accounting.report_log import describe_log, fill_from_log, log_dict
from hybrid_gateway.accounting.vram import PlanError

__all__ = ["Inputs", "configure", "inputs_from_args", "render", "to_dict", "write_png"]

Inputs = tuple[ApiPrices, Traffic, SelfHost, BenchShares | None]


def configure(sub: Any) -> None:
    p = sub.add_parser(
        "breakeven",
        help="monthly cost: all commercial API vs self-hosted light model + API for heavy",
        description="A = 30 x r x c_api;  B = F(GPUs needed) + 30 x r x (1-cache) x heavy x c_api; "
        "prints the smallest requests/day r where B <= A (docs/capacity.md, Break-even)",
    )
    p.add_argument("--api-price-in", type=float, required=True, help="USD per 1M input tokens")
    p.add_argument("--api-price-out", type=float, required=True, help="USD per 1M output tokens")
    p.add_argument("--tokens-in", type=float, help="input tokens per request (or --from-log)")
    p.add_argument("--tokens-out", type=float, help="output tokens per request (or --from-log)")
    p.add_argument("--heavy-share", type=float, help="share of requests sent to the API (0..1)")
    p.add_argument("--cache-hit-rate", type=float, help="share answered from cache (0)")
    p.add_argument("--from-bench", type=Path, help="bench run JSON: measured shares")
    p.add_argument(
        "--from-log", type=Path, help="request log (SQLite): measured shares and tokens/request"
    )
    p.add_argument("--since", default="30d", help="--from-log window: 7d, 24h, a date (30d)")
    p.add_argument("--heavy-lanes", default="heavy", help="--from-log: the API lanes (heavy)")
    gpu = p.add_mutually_exclusive_group(required=True)
    gpu.add_argument("--gpu-hourly-usd", type=float, help="GPU rent per hour")
    gpu.add_argument("--gpu-purchase-usd", type=float, help="GPU purchase price (amortised)")
    p.add_argument("--amortize-months", type=float, default=36.0, help="(36)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs at least (1)")
    p.add_argument("--power-kw", type=float, default=0.0, help="power per GPU in kW (0)")
    p.add_argument("--kwh-usd", type=float, default=0.0, help="power price per kWh (0)")
    p.add_argument("--ops-usd-month", type=float, default=0.0, help="operations staff (0)")
    p.add_argument("--gpu-capacity-rps", type=float, help="light requests/s per GPU (no limit)")
    p.add_argument("--peak-factor", type=float, default=1.0, help="peak / mean rate (1)")
    p.add_argument("--max-requests-day", type=float, default=1e6, help="range end (1e6)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--png", type=Path, help="draw both curves to this PNG")


def inputs_from_args(args: argparse.Namespace) -> Inputs:
    bench = shares_from_bench(args.from_bench) if args.from_bench is not None else None
    heavy = args.heavy_share if args.heavy_share is not None else None
    cache = args.cache_hit_rate
    if bench is not None:
        heavy = bench.heavy_share if heavy is None else heavy
        cache = bench.cache_hit_rate if cache is None else cache
    if heavy is None:
        raise PlanError("give --heavy-share or --from-bench")
    if args.tokens_in is None or args.tokens_out is None:
        raise PlanError("give --tokens-in and --tokens-out, or --from-log")
    traffic = Traffic(
        args.tokens_in, args.tokens_out, heavy, 0.0 if cache is None else cache, args.peak_factor
    )
    host = SelfHost(
        gpus=args.gpus,
        gpu_hourly_usd=args.gpu_hourly_usd,
        gpu_purchase_usd=args.gpu_purchase_usd,
        amortize_months=args.amortize_months,
        power_kw=args.power_kw,
        kwh_usd=args.kwh_usd,
        ops_usd_month=args.ops_usd_month,
        gpu_capacity_rps=args.gpu_capacity_rps,
    )
    return ApiPrices(args.api_price_in, args.api_price_out), traffic, host, bench


def run(args: argparse.Namespace) -> int:
    log = fill_from_log(args) if getattr(args, "from_log", None) is not None else None
    prices, traffic, host, bench = inputs_from_args(args)
    result = breakeven(prices, traffic, host, args.max_requests_day)
    if args.png is not None:
        write_png(args.png, prices, traffic, host, result)
    if args.json:
        out = to_dict(prices, traffic, host, result, bench)
        out["from_log"] = None if log is None else log_dict(log)
        print(json.dumps(out, indent=2))
    else:
        if log is not None:
            print(describe_log(log))
        print(render(prices, traffic, host, result, bench))
    return 0


def _rows(
    prices: ApiPrices, traffic: Traffic, host: SelfHost, result: Breakeven
) -> list[dict[str, float]]:
    return [
        {
            "requests_per_day": r,
            "cost_api_usd_month": round(cost_api(r, prices, traffic), 2),
            "cost_selfhost_usd_month": round(cost_selfhost(r, prices, traffic, host), 2),
            "gpus": gpus_needed(r, traffic, host),
        }
        for r in sample_points(result)
    ]


def to_dict(
    prices: ApiPrices,
    traffic: Traffic,
    host: SelfHost,
    result: Breakeven,
    bench: BenchShares | None,
) -> dict[str, Any]:
    r = result.requests_per_day
    return {
        "breakeven_requests_per_day": None if r is None else round(r, 2),
        "never": r is None,
        "gpus_at_breakeven": result.gpus_at_breakeven,
        "cost_per_request_api_usd": result.cost_per_request_api,
        "variable_per_request_selfhost_usd": result.variable_per_request_selfhost,
        "fixed_usd_month": round(result.fixed_month_usd, 2),
        "gpu_usd_month": round(host.gpu_month_usd(), 2),
        "heavy_share": traffic.heavy_share,
        "cache_hit_rate": traffic.cache_hit_rate,
        "max_requests_day": result.max_requests_day,
        "from_bench": None if bench is None else _bench_dict(bench),
        "table": _rows(prices, traffic, host, result),
    }


def _bench_dict(bench: BenchShares) -> dict[str, Any]:
    return {
        "strategy": bench.strategy,
        "stage": bench.stage,
        "cache_field": bench.cache_field,
        "light_requests": bench.light_requests,
        "heavy_requests": bench.heavy_requests,
    }


def render(
    prices: ApiPrices,
    traffic: Traffic,
    host: SelfHost,
    result: Breakeven,
    bench: BenchShares | None,
) -> str:
    lines = []
    if bench is not None:
        lines.append(
            f"from bench      {bench.strategy} at stage {bench.stage}: light {bench.light_requests}"
            f", heavy {bench.heavy_requests} requests; cache rate from {bench.cache_field}"
        )
    lines += [
        f"API per request ${result.cost_per_request_api:.6f}",
        f"self-host var.  ${result.variable_per_request_selfhost:.6f} per request "
        f"(heavy {traffic.heavy_share:.1%} of {1 - traffic.cache_hit_rate:.1%} cache misses)",
        f"fixed / month   ${result.fixed_month_usd:,.2f} at {host.gpus} GPU(s) "
        f"(${host.gpu_month_usd():,.2f} per GPU + ${host.ops_usd_month:,.2f} ops)",
    ]
    r = result.requests_per_day
    if r is None:
        lines.append(f"break-even      never up to {result.max_requests_day:,.0f} requests/day")
    else:
        lines.append(
            f"break-even      {r:,.1f} requests/day ({r * DAYS_PER_MONTH:,.0f}/month) "
            f"with {result.gpus_at_breakeven} GPU(s)"
        )
    lines.append(f"{'requests/day':>14} {'A: API $/mo':>14} {'B: self $/mo':>14} {'GPUs':>5}")
    for row in _rows(prices, traffic, host, result):
        lines.append(
            f"{row['requests_per_day']:>14,.0f} {row['cost_api_usd_month']:>14,.2f} "
            f"{row['cost_selfhost_usd_month']:>14,.2f} {row['gpus']:>5}"
        )
    return "\n".join(lines)


def write_png(
    path: Path, prices: ApiPrices, traffic: Traffic, host: SelfHost, result: Breakeven
) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    top = result.max_requests_day
    xs = sorted({top * i / 400 for i in range(401)} | set(sample_points(result)))
    fig = Figure(figsize=(8, 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(xs, [cost_api(x, prices, traffic) for x in xs], label="A: all commercial API")
    ax.step(
        xs,
        [cost_selfhost(x, prices, traffic, host) for x in xs],
        where="post",
        label="B: self-hosted light + API heavy",
    )
    r = result.requests_per_day
    if r is not None:
        ax.axvline(r, color="grey", linestyle="--")
        ax.plot([r], [cost_api(r, prices, traffic)], "ko")
        ax.annotate(f"break-even {r:,.0f}/day", (r, cost_api(r, prices, traffic)))
    ax.set_xlabel("requests per day")
    ax.set_ylabel("USD per month")
    ax.set_title("self-host vs API" + ("" if r is not None else " (never breaks even)"))
    ax.legend()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise PlanError(f"cannot write {path}: {exc}") from exc
