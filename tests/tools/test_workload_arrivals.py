"""Arrival processes: closed loop, Poisson, and real trace timestamps and output lengths."""

from __future__ import annotations

import csv
import itertools
import random
from datetime import datetime
from pathlib import Path

import orjson
import pytest

from hybrid_gateway.tools.workload.arrivals import (
    ArrivalSpec,
    parse_arrivals,
    poisson_arrivals,
    trace_arrivals,
)
from hybrid_gateway.tools.workload.builder import BuildOptions, build
from hybrid_gateway.tools.workload.sources import TraceRow

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def test_parse_arrivals() -> None:
    assert parse_arrivals("closed") == ArrivalSpec("closed")
    assert parse_arrivals("poisson:2.5") == ArrivalSpec("poisson", rate=2.5)
    assert parse_arrivals("trace:mooncake") == ArrivalSpec("trace", trace="mooncake")
    assert str(parse_arrivals("poisson:2.5")) == "poisson:2.5"
    for bad in ("poisson:0", "poisson:x", "trace:nope", "open", "closed:1"):
        with pytest.raises(ValueError, match="closed"):
            parse_arrivals(bad)


def test_closed_loop_is_all_zero() -> None:
    items = build(BuildOptions(size=50), DATA)
    assert {item.arrival_ms for item in items} == {0.0}


def test_poisson_mean_gap() -> None:
    arrivals = poisson_arrivals(10.0, 2001, random.Random(1))
    gaps = [b.offset_ms - a.offset_ms for a, b in itertools.pairwise(arrivals)]
    assert arrivals[0].offset_ms == 0.0 and min(gaps) >= 0
    assert sum(gaps) / len(gaps) == pytest.approx(100.0, rel=0.1)


def test_poisson_build() -> None:
    items = build(BuildOptions(size=1000, arrivals=parse_arrivals("poisson:20")), DATA)
    assert items[-1].arrival_ms / 999 == pytest.approx(50.0, rel=0.1)


def test_azure_trace_offsets_and_tokens_come_from_the_file() -> None:
    with (DATA / "traces" / "azure_llm_2023_conv.csv").open(newline="") as source:
        rows = [row for _, row in zip(range(300), csv.DictReader(source), strict=False)]
    stamps = [datetime.fromisoformat(row["TIMESTAMP"]) for row in rows]
    items = build(BuildOptions(size=300, arrivals=parse_arrivals("trace:azure_conv")), DATA)
    offsets = [item.arrival_ms for item in items]
    assert offsets == sorted(offsets) and offsets[0] == 0.0
    for item, stamp, row in zip(items, stamps, rows, strict=True):
        assert item.arrival_ms == pytest.approx(
            (stamp - stamps[0]).total_seconds() * 1000, abs=0.01
        )
        expected = min(max(int(row["GeneratedTokens"]), 8), item.max_tokens)
        assert item.expected_output_tokens == expected


def test_mooncake_trace_offsets_come_from_the_file() -> None:
    with (DATA / "traces" / "mooncake_conversation.jsonl").open("rb") as source:
        rows = [orjson.loads(line) for _, line in zip(range(200), source, strict=False)]
    items = build(BuildOptions(size=200, arrivals=parse_arrivals("trace:mooncake")), DATA)
    assert [item.arrival_ms for item in items] == [
        float(row["timestamp"] - rows[0]["timestamp"]) for row in rows
    ]


def test_a_short_trace_is_replayed_after_its_end() -> None:
    rows = [TraceRow(0.0, 1, 10), TraceRow(100.0, 1, 20), TraceRow(300.0, 1, 30)]
    arrivals = trace_arrivals(rows, 5)
    assert [a.offset_ms for a in arrivals] == [0.0, 100.0, 300.0, 450.0, 550.0]
    assert [a.output_tokens for a in arrivals] == [10, 20, 30, 10, 20]
