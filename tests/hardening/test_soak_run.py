"""A CI-sized `bench soak`: real emulators and gateway, every kind of traffic, the settled look.

Twenty seconds cannot tell a slow leak from warm-up, so this checks what must hold after any
run, however short: every traffic kind got its expected outcomes, no upstream request is left
running after the hang-ups, every upstream socket is back in a pool, the gateway's task count
is back where it started, and the report is complete.  The leak verdict itself is tested on
constructed series (test_soak_analysis.py) and measured in the long runs (docs/hardening.md).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from hybrid_gateway.cli import main
from hybrid_gateway.tools.soak.analysis import SERIES
from hybrid_gateway.tools.soak.traffic import MIX


def test_short_soak_leaves_nothing_behind(tmp_path: Path) -> None:
    argv = ["bench", "soak", "--duration", "20s", "--warmup", "5s", "--interval", "1",
            "--concurrency", "8", "--out", str(tmp_path), "--no-plots"]  # fmt: skip
    code = main(argv)
    assert code in (0, 1)  # 1 = a series looked like growing; judged by the long runs
    [report_path] = tmp_path.glob("soak-*.json")
    report = orjson.loads(report_path.read_bytes())
    assert report_path.with_suffix(".md").is_file()

    by_kind = report["requests"]["by_kind"]
    assert set(by_kind) == set(MIX)
    assert set(by_kind["plain-repeat"]) == {"200"}
    assert set(by_kind["stream-hangup"]) == {"hangup"}
    assert set(by_kind["upstream-reset"]) <= {"stream-error", "502", "503"}
    assert set(by_kind["upstream-dead"]) <= {"502", "503"}
    assert set(by_kind["bad-request"]) <= {"400", "404"}
    assert not any(k.startswith("client-error") for o in by_kind.values() for k in o)

    settled = report["settled"]
    assert settled["upstream_in_flight"] == 0, "a hang-up left its upstream request running"
    assert settled["leaked_connections"] == 0, settled
    assert settled["tasks"] <= settled["tasks_before"] + 10, settled
    assert set(report["trends"]) == set(SERIES)
    assert len(report["samples"]) >= 10
