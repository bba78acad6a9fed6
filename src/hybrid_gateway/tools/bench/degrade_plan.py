"""What `bench degrade` runs: a synthetic workload, the gateway configs, the figures per stage.

Three scenarios, each on fresh processes (emulators + gateway on 127.0.0.1):

- ``errors``: the heavy lane's primary answers 20 % of requests with HTTP 503 (the emulator's
  seeded random faults); a second heavy emulator is its backup (``retry_on_backup``).  Closed
  loop at ``--errors-concurrency`` (50).  Target: success >= 99.5 %.  At 20 % errors the
  primary's breaker opens and the backup answers nearly everything, so ``errors-no-breaker``
  runs the same with breakers off: every request then meets the failing primary first, and only
  failover saves it.
- ``isolation``: light-lane p95 with the heavy lane idle, then with heavy arrivals at 2x the
  heavy lane's measured capacity (open loop).  Both lanes have their own queue.  Target: the
  ratio of the two p95s <= 1.2.
- ``overload``: both lanes at 2x their measured capacity (open loop), then half capacity to see
  the gateway recover by itself.  Admitted requests should keep their latency; the rest are
  refused with 429/503 and ``Retry-After``; the gateway's RSS is sampled throughout.

The workload is synthetic on purpose: every question is unique (no cache hit can flatter a
figure) and every answer is capped at ``MAX_TOKENS``, so a stage's capacity is stable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.stats import percentile
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem, write_workload

__all__ = [
    "ITEMS",
    "MAX_TOKENS",
    "gateway_config",
    "stage_figures",
    "write_synthetic_workload",
]

MAX_TOKENS = 48
ITEMS = 20_000
# Lane queues: each lane's capacity is its slots (no more than its emulator's batch, so the
# upstream never queues), plus a short bounded queue (a quarter of that) in the gateway.  Sized
# so that 2x the capacity of both lanes stays within what a 2-core machine can generate.
LIGHT_SLOTS, HEAVY_SLOTS = 24, 16
CHANNEL_SLOTS = 64
QUEUE_TIMEOUT_S = {"light": 1.0, "heavy": 3.0}


def write_synthetic_workload(path: Path, *, rate_per_s: float, seed: int) -> Path:
    """Unique questions, half streamed, arriving evenly at ``rate_per_s`` (open loop)."""
    labels = Labels(True, True, "simple", "synthetic", "synthetic", "g0", "en", "assumed")
    salt = f"s{seed}"
    items = (
        WorkloadItem(
            id=f"d{i}",
            arrival_ms=i * 1000.0 / rate_per_s,
            tenant="default",
            messages=({"role": "user", "content": f"degradation probe {salt} {i}"},),
            max_tokens=MAX_TOKENS,
            expected_output_tokens=MAX_TOKENS,
            stream=i % 2 == 0,
            labels=labels,
        )
        for i in range(ITEMS)
    )
    write_workload(path, items, {"kind": "synthetic-degrade", "rate_per_s": rate_per_s})
    return path


def _channel(url: str, model: str, slots: int) -> dict[str, Any]:
    return {"base_url": url, "model": model, "max_concurrency": slots, "timeout_s": 60,
            "queue_timeout_s": 10}  # fmt: skip


def _queue(lane: str, slots: int) -> dict[str, Any]:
    return {"max_concurrency": slots, "max_waiting": slots // 4, "timeout_s": QUEUE_TIMEOUT_S[lane]}


def gateway_config(scenario: str, upstreams: Mapping[str, str], log: Path) -> dict[str, Any]:
    """The gateway config of ``scenario``; ``upstreams``: emulator role -> base URL (.../v1)."""
    channels = {
        "light": _channel(upstreams["light"], "light", CHANNEL_SLOTS),
        "heavy": _channel(upstreams["heavy"], "heavy", CHANNEL_SLOTS),
    }
    lanes: dict[str, Any] = {
        "light": {"channel": "light", "queue": _queue("light", LIGHT_SLOTS)},
        "heavy": {"channel": "heavy", "queue": _queue("heavy", HEAVY_SLOTS)},
    }
    resilience: dict[str, Any] = {}
    if scenario.startswith("errors"):
        channels["heavy-backup"] = _channel(upstreams["heavy-backup"], "heavy", CHANNEL_SLOTS)
        lanes["heavy"] = {"channel": "heavy", "backup": "heavy-backup", "retry_on_backup": True}
    if scenario == "errors-no-breaker":
        resilience["breaker"] = {"enabled": False}
    return {
        "server": {"host": "127.0.0.1", "port": 0,
                   "request_log": {"path": str(log), "enabled": True}},
        "channels": channels,
        "lanes": lanes,
        "models": [{"id": "light", "lane": "light"}, {"id": "heavy", "lane": "heavy"}],
        "routing": {"default_lane": "heavy"},
        "cache": {"exact": {"enabled": False}},
        "resilience": resilience,
    }  # fmt: skip


def stage_figures(results: Sequence[RequestResult], duration_s: float) -> dict[str, Any]:
    """Success, refusals and latency of one stage (latency of admitted = 2xx answers only)."""
    ok = [r for r in results if 200 <= r.status < 300 and r.error_code is None]
    refused = [r for r in results if r.status in (429, 503)]
    latencies = [r.latency_ms for r in ok]
    ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    codes: dict[str, int] = {}
    for r in results:
        if r not in ok:
            key = f"{r.status}:{r.error_code}"
            codes[key] = codes.get(key, 0) + 1
    fallbacks: dict[str, int] = {}
    for r in ok:
        if r.fallback is not None:
            fallbacks[r.fallback] = fallbacks.get(r.fallback, 0) + 1
    total = len(results)
    return {
        "requests": total,
        "succeeded": len(ok),
        "success_rate": len(ok) / total if total else None,
        "refused_429_503": len(refused),
        "other_errors": total - len(ok) - len(refused),
        "errors_by_code": dict(sorted(codes.items())),
        "fallbacks": fallbacks,
        "admitted_per_s": len(ok) / duration_s if duration_s > 0 else None,
        "latency_ms": _percentiles(latencies),
        "ttft_ms": _percentiles(ttfts),
    }


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    return {f"p{q}": _round(percentile(values, q)) for q in (50, 95, 99)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
