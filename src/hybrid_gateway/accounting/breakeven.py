"""Self-host vs commercial API: monthly cost curves and their break-even (requests/day).

    month            = 30 days = 720 hours
    c_api            = (tokens_in x price_in + tokens_out x price_out) / 1e6   USD per request
    A(r)             = 30 x r x c_api                                           all commercial API
    v                = (1 - cache_hit_rate) x heavy_share x c_api               USD per request, B
    light rps(r)     = r x (1 - cache_hit_rate) x (1 - heavy_share) x peak_factor / 86,400
    n(r)             = max(gpus, ceil(light rps / gpu_capacity_rps))            GPUs (a step)
    per GPU / month  = gpu_hourly x 720  (or purchase / amortize_months) + power_kw x 720 x kWh
    F(n)             = n x per GPU / month + ops_usd_month                      fixed, USD/month
    B(r)             = F(n(r)) + 30 x r x v                                     self-host + API
    break-even       = the smallest r with B(r) <= A(r):
                       on each step (n fixed) r* = F(n) / (30 x (c_api - v)), exact;
                       "never" when c_api <= v or no step crosses within max_requests_day.

Cache hits cost nothing in B (the gateway answers them); the heavy share of the remaining
requests is paid at API prices; the light share runs on the self-hosted GPUs. Pure functions
and frozen dataclasses; the only I/O is reading a bench JSON. Errors are ``PlanError``.
See docs/capacity.md ("Break-even").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from hybrid_gateway.accounting.vram import PlanError

__all__ = [
    "DAYS_PER_MONTH",
    "HOURS_PER_MONTH",
    "ApiPrices",
    "BenchShares",
    "Breakeven",
    "SelfHost",
    "Traffic",
    "breakeven",
    "cost_api",
    "cost_selfhost",
    "gpus_needed",
    "shares_from_bench",
]

DAYS_PER_MONTH: Final = 30
HOURS_PER_MONTH: Final = 24 * DAYS_PER_MONTH
SECONDS_PER_DAY: Final = 86_400
MAX_STEPS: Final = 1_000_000


@dataclass(frozen=True)
class ApiPrices:
    """Commercial API prices, USD per 1M tokens."""

    price_in: float
    price_out: float


@dataclass(frozen=True)
class Traffic:
    """Tokens per request and the routed shares (fractions 0..1)."""

    tokens_in: float
    tokens_out: float
    heavy_share: float
    cache_hit_rate: float = 0.0
    peak_factor: float = 1.0


@dataclass(frozen=True)
class SelfHost:
    """Fixed costs of the self-hosted light lane. Give ``gpu_hourly_usd`` or a purchase price."""

    gpus: int = 1
    gpu_hourly_usd: float | None = None
    gpu_purchase_usd: float | None = None
    amortize_months: float = 36.0
    power_kw: float = 0.0
    kwh_usd: float = 0.0
    ops_usd_month: float = 0.0
    gpu_capacity_rps: float | None = None

    def gpu_month_usd(self) -> float:
        """Rent or amortisation plus power, per GPU per month."""
        if self.gpu_hourly_usd is not None:
            hardware = self.gpu_hourly_usd * HOURS_PER_MONTH
        else:
            assert self.gpu_purchase_usd is not None
            hardware = self.gpu_purchase_usd / self.amortize_months
        return hardware + self.power_kw * HOURS_PER_MONTH * self.kwh_usd

    def fixed_month_usd(self, gpus: int) -> float:
        return gpus * self.gpu_month_usd() + self.ops_usd_month


@dataclass(frozen=True)
class Breakeven:
    """The break-even result: ``requests_per_day`` is None when B never drops to A."""

    cost_per_request_api: float
    variable_per_request_selfhost: float
    fixed_month_usd: float
    requests_per_day: float | None
    gpus_at_breakeven: int | None
    max_requests_day: float


@dataclass(frozen=True)
class BenchShares:
    """Shares measured by a bench run, with where they came from."""

    heavy_share: float
    cache_hit_rate: float
    strategy: str
    stage: str
    cache_field: str
    light_requests: int
    heavy_requests: int


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0 or math.isnan(value):
        raise PlanError(f"{name} must be between 0 and 1, got {value:g}")


def _check_nonneg(name: str, value: float) -> None:
    if not value >= 0.0 or math.isinf(value):
        raise PlanError(f"{name} must be a finite number >= 0, got {value:g}")


def validate(prices: ApiPrices, traffic: Traffic, host: SelfHost) -> None:
    """Raise ``PlanError`` on inputs the formulas cannot use."""
    for name, value in (
        ("api price in", prices.price_in),
        ("api price out", prices.price_out),
        ("tokens in", traffic.tokens_in),
        ("tokens out", traffic.tokens_out),
        ("power kW", host.power_kw),
        ("kWh price", host.kwh_usd),
        ("ops cost", host.ops_usd_month),
    ):
        _check_nonneg(name, value)
    _check_fraction("heavy share", traffic.heavy_share)
    _check_fraction("cache hit rate", traffic.cache_hit_rate)
    if not traffic.peak_factor >= 1.0:
        raise PlanError(f"peak factor must be >= 1, got {traffic.peak_factor:g}")
    if host.gpus < 1:
        raise PlanError(f"gpus must be >= 1, got {host.gpus}")
    if (host.gpu_hourly_usd is None) == (host.gpu_purchase_usd is None):
        raise PlanError("give exactly one of a GPU hourly price or a GPU purchase price")
    _check_nonneg("GPU price", host.gpu_hourly_usd or host.gpu_purchase_usd or 0.0)
    if not host.amortize_months > 0:
        raise PlanError(f"amortize months must be > 0, got {host.amortize_months:g}")
    if host.gpu_capacity_rps is not None and not host.gpu_capacity_rps > 0:
        raise PlanError(f"GPU capacity must be > 0 requests/s, got {host.gpu_capacity_rps:g}")


def cost_per_request(prices: ApiPrices, traffic: Traffic) -> float:
    return (traffic.tokens_in * prices.price_in + traffic.tokens_out * prices.price_out) / 1e6


def variable_per_request(prices: ApiPrices, traffic: Traffic) -> float:
    miss = 1.0 - traffic.cache_hit_rate
    return miss * traffic.heavy_share * cost_per_request(prices, traffic)


def _light_fraction(traffic: Traffic) -> float:
    return (1.0 - traffic.cache_hit_rate) * (1.0 - traffic.heavy_share) * traffic.peak_factor


def _step_width(traffic: Traffic, host: SelfHost) -> float:
    """Requests/day that one GPU serves; infinite without a capacity or a light share."""
    light = _light_fraction(traffic)
    if host.gpu_capacity_rps is None or light == 0.0:
        return math.inf
    return host.gpu_capacity_rps * SECONDS_PER_DAY / light


def gpus_needed(requests_day: float, traffic: Traffic, host: SelfHost) -> int:
    width = _step_width(traffic, host)
    if math.isinf(width):
        return host.gpus
    return max(host.gpus, math.ceil(requests_day / width - 1e-12))


def cost_api(requests_day: float, prices: ApiPrices, traffic: Traffic) -> float:
    """A: monthly cost of sending everything to the commercial API."""
    return DAYS_PER_MONTH * requests_day * cost_per_request(prices, traffic)


def cost_selfhost(
    requests_day: float, prices: ApiPrices, traffic: Traffic, host: SelfHost
) -> float:
    """B: monthly fixed cost of the GPUs needed + the heavy share at API prices."""
    fixed = host.fixed_month_usd(gpus_needed(requests_day, traffic, host))
    return fixed + DAYS_PER_MONTH * requests_day * variable_per_request(prices, traffic)


def _crossing(
    prices: ApiPrices, traffic: Traffic, host: SelfHost, max_rpd: float
) -> tuple[float, int] | None:
    """Scan the GPU steps; on each, B - A is linear and the crossing is exact."""
    delta = DAYS_PER_MONTH * (
        cost_per_request(prices, traffic) - variable_per_request(prices, traffic)
    )
    width = _step_width(traffic, host)
    n, lo = host.gpus, 0.0
    for _ in range(MAX_STEPS):
        hi = math.inf if math.isinf(width) else n * width
        fixed = host.fixed_month_usd(n)
        if delta > 0:
            candidate = max(lo, fixed / delta)
        else:  # B - A does not fall with r: equal at most where F is 0 and the slopes match
            candidate = lo if fixed <= 0 and delta == 0 else math.inf
        if candidate <= min(hi, max_rpd):
            return candidate, n
        if hi >= max_rpd:
            return None
        n, lo = n + 1, hi
    raise PlanError(f"more than {MAX_STEPS} GPU steps below max requests/day; raise the capacity")


def breakeven(
    prices: ApiPrices, traffic: Traffic, host: SelfHost, max_requests_day: float = 1e6
) -> Breakeven:
    """The smallest requests/day in [0, max_requests_day] where B <= A, or None ("never")."""
    validate(prices, traffic, host)
    if not max_requests_day > 0 or math.isinf(max_requests_day):
        raise PlanError(f"max requests/day must be a finite number > 0, got {max_requests_day:g}")
    found = _crossing(prices, traffic, host, max_requests_day)
    return Breakeven(
        cost_per_request_api=cost_per_request(prices, traffic),
        variable_per_request_selfhost=variable_per_request(prices, traffic),
        fixed_month_usd=host.fixed_month_usd(host.gpus),
        requests_per_day=found[0] if found else None,
        gpus_at_breakeven=found[1] if found else None,
        max_requests_day=max_requests_day,
    )


def sample_points(result: Breakeven, rows: int = 10) -> list[float]:
    """Evenly spaced requests/day from 0 to the maximum, plus the crossing point."""
    points = [result.max_requests_day * i / rows for i in range(rows + 1)]
    if result.requests_per_day is not None:
        points.append(result.requests_per_day)
    return sorted(set(points))


def _pick_row(results: list[Any]) -> dict[str, Any]:
    for strategy in ("hybrid-cache", "hybrid"):
        rows = [r for r in results if isinstance(r, dict) and r.get("strategy") == strategy]
        if rows:
            return max(rows, key=lambda r: r.get("concurrency") or 0)
    raise PlanError("bench JSON has no hybrid-cache or hybrid result")


def _lane_requests(row: dict[str, Any], lane: str) -> int:
    lanes = row.get("lanes")
    if not isinstance(lanes, dict):
        raise PlanError(f"bench result {row.get('strategy')}/{row.get('stage')} has no lanes")
    entry = lanes.get(lane) or {}
    value = entry.get("requests", 0) if isinstance(entry, dict) else 0
    if not isinstance(value, int) or value < 0:
        raise PlanError(f"bench lane {lane!r}: requests must be a count, got {value!r}")
    return value


def shares_from_bench(path: Path) -> BenchShares:
    """Heavy share and cache-hit rate from a bench run's hybrid-cache (else hybrid) strategy
    at its highest stage. The cache rate is ``first_send_cache_hit_rate`` when present (it
    leaves out verbatim re-sends), else ``cache_hit_rate``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlanError(f"cannot read bench JSON {path}: {exc}") from exc
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise PlanError(f"{path}: not a bench run JSON (no results list)")
    row = _pick_row(results)
    light, heavy = _lane_requests(row, "light"), _lane_requests(row, "heavy")
    if light + heavy == 0:
        raise PlanError(f"{path}: {row.get('strategy')} sent no request to light or heavy")
    field = "first_send_cache_hit_rate"
    if row.get(field) is None:
        field = "cache_hit_rate"
    cache = row.get(field)
    cache = 0.0 if cache is None else cache
    if not isinstance(cache, int | float):
        raise PlanError(f"{path}: {field} must be a number, got {cache!r}")
    return BenchShares(
        heavy_share=heavy / (light + heavy),
        cache_hit_rate=float(cache),
        strategy=str(row.get("strategy")),
        stage=str(row.get("stage")),
        cache_field=field,
        light_requests=light,
        heavy_requests=heavy,
    )
