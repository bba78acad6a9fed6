"""`plan breakeven`: hand-computed crossing points, the GPU capacity step, --from-bench, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybrid_gateway.accounting.breakeven import (
    ApiPrices,
    SelfHost,
    Traffic,
    breakeven,
    cost_api,
    cost_selfhost,
    gpus_needed,
    shares_from_bench,
)
from hybrid_gateway.accounting.vram import PlanError
from hybrid_gateway.cli import main

# API: $2 per 1M input, $8 per 1M output; 1000 input + 500 output tokens per request:
#   c_api = (1000 x 2 + 500 x 8) / 1e6 = 0.002 + 0.004 = $0.006 per request
PRICES = ApiPrices(price_in=2.0, price_out=8.0)
# heavy share 20 %, no cache: v = 1.0 x 0.2 x 0.006 = $0.0012 per request
TRAFFIC = Traffic(tokens_in=1000, tokens_out=500, heavy_share=0.2)
# one GPU at $2/h: 2 x 720 h = $1,440/month; ops $1,000/month -> F = $2,440/month
HOST = SelfHost(gpus=1, gpu_hourly_usd=2.0, ops_usd_month=1000.0)
# break-even r* = F / (30 x (c_api - v)) = 2440 / (30 x 0.0048) = 2440 / 0.144 = 16,944.44/day
HAND_BREAKEVEN = 2440 / 0.144

BASE_ARGS = [
    "plan",
    "breakeven",
    "--api-price-in",
    "2",
    "--api-price-out",
    "8",
    "--tokens-in",
    "1000",
    "--tokens-out",
    "500",
    "--gpu-hourly-usd",
    "2",
    "--ops-usd-month",
    "1000",
]


def test_hand_computed_crossing() -> None:
    result = breakeven(PRICES, TRAFFIC, HOST)
    assert result.cost_per_request_api == pytest.approx(0.006)
    assert result.variable_per_request_selfhost == pytest.approx(0.0012)
    assert result.fixed_month_usd == pytest.approx(2440.0)
    assert result.requests_per_day is not None
    assert abs(result.requests_per_day - 16944.44) < 1.0
    assert result.requests_per_day == pytest.approx(HAND_BREAKEVEN)
    assert result.gpus_at_breakeven == 1
    r = result.requests_per_day
    # at the crossing both curves are 30 x 16,944.44 x 0.006 = $3,050/month
    assert cost_api(r, PRICES, TRAFFIC) == pytest.approx(3050.0)
    assert cost_selfhost(r, PRICES, TRAFFIC, HOST) == pytest.approx(3050.0)
    assert cost_selfhost(r - 1, PRICES, TRAFFIC, HOST) > cost_api(r - 1, PRICES, TRAFFIC)


def test_purchase_power_and_cache() -> None:
    # $36,000 over 36 months = $1,000/month; 0.5 kW x 720 h x $0.2 = $72/month; 2 GPUs:
    #   F = 2 x 1,072 + 500 ops = $2,644/month
    # cache 50 %, heavy 20 %: v = 0.5 x 0.2 x 0.006 = $0.0006; c_api - v = 0.0054
    #   r* = 2644 / (30 x 0.0054) = 2644 / 0.162 = 16,320.99/day
    host = SelfHost(
        gpus=2,
        gpu_purchase_usd=36000,
        amortize_months=36,
        power_kw=0.5,
        kwh_usd=0.2,
        ops_usd_month=500,
    )
    traffic = Traffic(1000, 500, heavy_share=0.2, cache_hit_rate=0.5)
    result = breakeven(PRICES, traffic, host)
    assert result.fixed_month_usd == pytest.approx(2644.0)
    assert result.requests_per_day == pytest.approx(2644 / 0.162)


def test_never_when_heavy_costs_as_much_as_api() -> None:
    # heavy share 100 %: v = c_api, B = A + F > A at every rate
    result = breakeven(PRICES, Traffic(1000, 500, heavy_share=1.0), HOST)
    assert result.requests_per_day is None
    assert result.gpus_at_breakeven is None


def test_never_within_range() -> None:
    result = breakeven(PRICES, TRAFFIC, HOST, max_requests_day=16000)
    assert result.requests_per_day is None


def test_capacity_step_raises_fixed_cost() -> None:
    # 0.1 light requests/s per GPU; light share 0.8 -> one GPU serves 0.1 x 86,400 / 0.8
    #   = 10,800 requests/day. Each GPU adds $1,440 -> 1440 / 0.144 = 10,000/day to r*:
    #   r*(n) = 16,944.44 + 10,000 (n - 1), valid when <= 10,800 n  ->  n >= 8.68 -> n = 9:
    #   F(9) = 9 x 1,440 + 1,000 = $13,960; r* = 13960 / 0.144 = 96,944.44 in (86,400, 97,200]
    host = SelfHost(gpus=1, gpu_hourly_usd=2.0, ops_usd_month=1000.0, gpu_capacity_rps=0.1)
    assert gpus_needed(10800, TRAFFIC, host) == 1
    assert gpus_needed(10801, TRAFFIC, host) == 2
    assert cost_selfhost(10801, PRICES, TRAFFIC, host) - cost_selfhost(
        10800, PRICES, TRAFFIC, host
    ) == pytest.approx(1440 + 30 * 0.0012, rel=1e-6)
    result = breakeven(PRICES, TRAFFIC, host)
    assert result.gpus_at_breakeven == 9
    assert result.requests_per_day == pytest.approx(13960 / 0.144)
    # 0.01 rps per GPU: each GPU serves 1,080/day but adds 10,000/day to r*: never
    slow = SelfHost(gpus=1, gpu_hourly_usd=2.0, ops_usd_month=1000.0, gpu_capacity_rps=0.01)
    assert breakeven(PRICES, TRAFFIC, slow, max_requests_day=200_000).requests_per_day is None


def _bench(tmp_path: Path) -> Path:
    def row(strategy: str, c: int, light: int, heavy: int) -> dict[str, object]:
        return {
            "strategy": strategy,
            "stage": f"c{c}",
            "concurrency": c,
            "cache_hit_rate": 0.3,
            "first_send_cache_hit_rate": 0.25,
            "cost_per_1k_usd": 1.0,
            "lanes": {"light": {"requests": light}, "heavy": {"requests": heavy}},
        }

    data = {
        "results": [
            row("heavy-only", 100, 0, 100),
            row("hybrid", 100, 50, 50),
            row("hybrid-cache", 20, 10, 10),
            row("hybrid-cache", 100, 75, 25),
        ]
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_from_bench(tmp_path: Path) -> None:
    shares = shares_from_bench(_bench(tmp_path))
    assert (shares.strategy, shares.stage) == ("hybrid-cache", "c100")
    assert shares.heavy_share == pytest.approx(0.25)  # 25 / (75 + 25)
    assert shares.cache_hit_rate == pytest.approx(0.25)
    assert shares.cache_field == "first_send_cache_hit_rate"


def test_from_bench_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE_ARGS, "--from-bench", str(_bench(tmp_path)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # heavy 0.25, cache 0.25: v = 0.75 x 0.25 x 0.006 = 0.001125; c_api - v = 0.004875
    #   r* = 2440 / (30 x 0.004875) = 2440 / 0.14625 = 16,683.76/day
    assert out["from_bench"]["stage"] == "c100"
    assert out["breakeven_requests_per_day"] == pytest.approx(2440 / 0.14625, abs=0.01)


def test_cli_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE_ARGS, "--heavy-share", "0.2"]) == 0
    text = capsys.readouterr().out
    assert "break-even      16,944.4 requests/day" in text
    assert "A: API $/mo" in text
    assert main([*BASE_ARGS, "--heavy-share", "0.2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["breakeven_requests_per_day"] == pytest.approx(16944.44, abs=0.01)
    assert out["never"] is False
    assert len(out["table"]) == 12
    assert main([*BASE_ARGS, "--heavy-share", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["never"] is True


def test_cli_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "be.png"
    argv = [*BASE_ARGS, "--heavy-share", "0.2", "--gpu-capacity-rps", "0.1", "--png", str(png)]
    assert main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "extra",
    [
        ["--heavy-share", "1.5"],
        ["--heavy-share", "0.2", "--cache-hit-rate", "-0.1"],
        ["--heavy-share", "0.2", "--gpus", "0"],
        ["--heavy-share", "0.2", "--gpu-capacity-rps", "0"],
        ["--heavy-share", "0.2", "--max-requests-day", "0"],
        [],  # neither --heavy-share nor --from-bench
        ["--from-bench", "/nonexistent/bench.json"],
    ],
)
def test_bad_input_exit_2(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE_ARGS, *extra]) == 2
    assert "hybrid-gateway plan breakeven:" in capsys.readouterr().err


def test_bad_bench(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"results": [{"strategy": "heavy-only"}]}), encoding="utf-8")
    with pytest.raises(PlanError, match="no hybrid"):
        shares_from_bench(path)
    with pytest.raises(PlanError, match="exactly one"):
        breakeven(PRICES, TRAFFIC, SelfHost())
