"""`hybrid-gateway cache report`: the false-hit bound per scope from the audits table."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from hybrid_gateway.cache.semantic.pairs import Pair, load_pairs
from hybrid_gateway.cli import main
from hybrid_gateway.learning.store import AuditRow, SqliteVerdictStore
from hybrid_gateway.observability.request_log import SqliteRequestLog


def cache_row(n: int, scope: str, verdict: str | None, similarity: float = 0.96) -> AuditRow:
    return AuditRow(f"req_{scope}_{n}", time.time() - 60, "acme", "cache", "marks", None,
                    verdict, None, None, "light", similarity, scope, 0.001, None)  # fmt: skip


async def test_bounds_per_scope(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "requests.sqlite3"
    SqliteRequestLog(path).close()  # a request log file, as the gateway leaves it
    store = SqliteVerdictStore(path)
    for n in range(100):
        await store.save(cache_row(n, "tenant:acme", "a_worse" if n < 2 else "equivalent"))
    for n in range(10):
        await store.save(cache_row(n, "scope:shared", "equivalent", 0.99))
    await store.save(cache_row(0, "tenant:x", None))  # failed: no verdict, not a trial
    await store.aclose()
    assert main(["cache", "report", "--log", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    scopes = {s["scope"]: s for s in report["scopes"]}
    assert set(scopes) == {"tenant:acme", "scope:shared"}
    acme = scopes["tenant:acme"]
    assert (acme["audits"], acme["false_hits"]) == (100, 2)
    assert acme["false_hit_bound"] == pytest.approx(0.0700, abs=1e-3)
    assert scopes["scope:shared"]["false_hit_bound"] == pytest.approx(0.2775, abs=1e-3)
    assert main(["cache", "report", "--log", str(path)]) == 0
    text = capsys.readouterr().out
    assert "tenant:acme" in text and "0.0700" in text


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "report", "--log", str(tmp_path / "none.sqlite3")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no request log" in err
    assert main(["cache", "report"]) == 2
    assert "give --config" in capsys.readouterr().err


def test_a_log_without_audits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "requests.sqlite3"
    SqliteRequestLog(path).close()
    assert main(["cache", "report", "--log", str(path)]) == 0
    assert "no audits" in capsys.readouterr().out


async def test_audited_hits_become_a_pair_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "requests.sqlite3"
    SqliteRequestLog(path).close()
    store = SqliteVerdictStore(path)
    rows = [replace(cache_row(0, "tenant:a", "equivalent"), prompt="how do I reset it",
                    cached_prompt="how can I reset it"),
            replace(cache_row(1, "tenant:a", "a_worse"), prompt="open on sunday?",
                    cached_prompt="open on saturday?"),
            replace(cache_row(2, "tenant:a", "a_worse"), prompt=None, cached_prompt="x"),
            replace(cache_row(3, "tenant:a", None), prompt="a", cached_prompt="b")]  # fmt: skip
    for row in rows:
        await store.save(row)
    await store.aclose()
    out = tmp_path / "pairs" / "audited.jsonl"
    args = ["cache", "pairs", "--from-log", "--log", str(path), "--out", str(out)]
    assert main(args) == 0
    assert "2 audited pairs" in capsys.readouterr().out
    assert load_pairs(out) == [Pair("how do I reset it", "how can I reset it", True),
                               Pair("open on sunday?", "open on saturday?", False)]  # fmt: skip
    empty = tmp_path / "empty.sqlite3"
    SqliteRequestLog(empty).close()
    assert main(["cache", "pairs", "--from-log", "--log", str(empty), "--out", str(out)]) == 2
    assert "prompts" in capsys.readouterr().err


async def test_near_misses_by_similarity_band(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under the threshold: per 0.01 band, how often the refused entry was judged worse; near
    misses are not served hits, so no scope's false-hit bound counts them."""
    path = tmp_path / "requests.sqlite3"
    SqliteRequestLog(path).close()
    store = SqliteVerdictStore(path)
    judged = [(0.985, "equivalent"), (0.981, "a_worse"), (0.98, "equivalent"),
              (0.975, "a_worse"), (0.979, None)]  # fmt: skip
    for n, (similarity, verdict) in enumerate(judged):
        await store.save(replace(cache_row(n, "tenant:acme", verdict, similarity),
                                 request_id=f"near_{n}", kind="near_miss"))  # fmt: skip
    await store.aclose()
    assert main(["cache", "report", "--log", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scopes"] == []
    bands = [(b["similarity_from"], b["audits"], b["false_hits"])
             for b in report["near_miss_bands"]]  # fmt: skip
    assert bands == [(0.98, 3, 1), (0.97, 1, 1)]
    assert main(["cache", "report", "--log", str(path)]) == 0
    text = capsys.readouterr().out
    assert "near misses (what a lower threshold would add)" in text and "[0.98, 0.99)" in text
