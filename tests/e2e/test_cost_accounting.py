"""Cost per 1,000 requests: the bench's figure (from each answer's cost header) equals the sum of
per-request costs in the request log / n x 1000, and `report cost` and `plan breakeven
--from-log` read the same log."""

from __future__ import annotations

import asyncio
import csv
import json
import sqlite3
import subprocess
from pathlib import Path

import aiohttp
import pytest

from hybrid_gateway.accounting.report import cost_report
from hybrid_gateway.tools.bench.client import Client
from hybrid_gateway.tools.bench.results import RequestResult
from hybrid_gateway.tools.bench.stats import score, summarise
from hybrid_gateway.tools.processes import child_env, python_module_argv
from hybrid_gateway.tools.workload.schema import Labels, WorkloadItem
from tests.e2e.conftest import e2e_config
from tests.e2e.stack import gateway, long_question, write_config

LABELS = Labels(True, True, "simple", "test", "test", "g", "en", "assumed")


def item(n: int, text: str, stream: bool) -> WorkloadItem:
    messages = ({"role": "user", "content": text},)
    return WorkloadItem(f"i{n}", 0.0, "default", messages, 64, 32, stream, LABELS)


def batch() -> list[WorkloadItem]:
    """Light and heavy questions, streamed and not, with verbatim repeats (cache hits)."""
    texts = [f"how do i install package {i}?" for i in range(12)]  # light (keyword rule)
    texts += [long_question(f"Explain the trade-offs of design {i} in depth.", 20)
              for i in range(8)]  # heavy (no rule matches)  # fmt: skip
    items = [item(i, text, stream=i % 3 == 0) for i, text in enumerate(texts)]
    repeats = [item(100 + i, texts[i], stream=False) for i in (1, 2, 13, 14)]
    return items + repeats


async def run_batch(base_url: str, items: list[WorkloadItem]) -> list[RequestResult]:
    async with aiohttp.ClientSession() as session:
        client = Client(session, base_url, "auto", timeout_s=30)
        first = await asyncio.gather(*(client.send(i, 0.0) for i in items[:-4]))
        repeats = [await client.send(i, 0.0) for i in items[-4:]]  # after their originals
    return [*first, *repeats]


def test_bench_cost_per_1k_equals_the_request_log(
    emulators: tuple[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "requests.sqlite3"
    config_path = write_config(tmp_path / "gateway.yaml", e2e_config(*emulators, log))
    items = batch()
    with gateway(config_path, "gateway-cost") as running:
        results = asyncio.run(run_batch(running.base_url, items))
    # Stopped cleanly: the log holds every request.
    assert all(r.status == 200 and r.error_code is None for r in results)
    assert sum(1 for r in results if r.cache == "exact") == 4
    assert {r.lane for r in results} == {"light", "heavy"}
    bench = summarise(score(results, {}), None)
    assert bench.missing_cost == 0

    with sqlite3.connect(log) as db:
        costs = [float(c) for (c,) in db.execute("SELECT cost_usd FROM requests")]
    assert len(costs) == len(items)
    from_log = sum(costs) / len(costs) * 1000
    # Headers carry 8 decimals: at most 5e-9 off per request.
    assert bench.cost_per_1k_usd == pytest.approx(from_log, abs=5e-9 * 1000)
    assert bench.cost_usd == pytest.approx(sum(costs), abs=5e-9 * len(costs))
    assert from_log > 0

    report = cost_report(log, 0, 2e9, ["lane", "cache"])
    assert report.total.requests == len(items)
    assert report.total.cost_per_1k_usd == pytest.approx(from_log, rel=1e-12)
    hits = [row for row in report.rows if row.group[1] == "exact"]
    assert sum(r.cost_usd for r in hits) == 0
    assert sum(r.saved_usd for r in hits) > 0  # what the four hits would have cost

    out = tmp_path / "cost.csv"
    done = subprocess.run(
        python_module_argv("hybrid_gateway.cli", "report", "cost", "--config", str(config_path),
                           "--since", "1d", "--by", "tenant,lane", "--csv", str(out)),
        env=child_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "total" in done.stdout and "cost_per_1k_usd" in done.stdout
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["lane"] for r in rows} == {"light", "heavy"}
    assert sum(int(r["requests"]) for r in rows) == len(items)
    assert sum(float(r["cost_usd"]) for r in rows) == pytest.approx(sum(costs), rel=1e-12)

    upstream = [r for r in results if r.cache != "exact"]
    plan = subprocess.run(
        python_module_argv("hybrid_gateway.cli", "plan", "breakeven", "--from-log", str(log),
                           "--since", "1d", "--api-price-in", "2", "--api-price-out", "6",
                           "--gpu-hourly-usd", "2", "--json"),
        env=child_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    measured = json.loads(plan.stdout)["from_log"]
    assert measured["heavy_requests"] == sum(1 for r in upstream if r.lane == "heavy")
    assert measured["light_requests"] == sum(1 for r in upstream if r.lane == "light")
    assert measured["cache_hits"] == 4 and measured["requests"] == len(items)
