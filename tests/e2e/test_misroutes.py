"""The misroute loop end to end: wrong rules, thumbs-down, review, apply, reload, fewer misroutes.

A real gateway (emulated upstreams) runs a rule that is too broad: "how do i" / "怎么" go to
the light lane, which also catches maths problems asked as "How do I solve this problem? ..."
and "这道题怎么做：...".  The official SDK replays a small labelled workload (customer-service
FAQs from banking77 and AFQMC: simple; MATH level-5 and CMATH grade-6 problems: complex),
the test rates the complex answers that came from the light lane down (it knows the truth),
``hybrid-gateway misroutes`` reviews the log, ``--apply 1`` writes its top proposal, the
gateway reloads it over ``POST /admin/reload``, and a second, unseen half of the workload is
replayed: the misroute rate must fall.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
import pytest

from hybrid_gateway.cli import main
from tests.e2e.conftest import e2e_config
from tests.e2e.stack import Gateway, gateway, write_config

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
ADMIN_KEY = "e2e-misroutes-admin-key"
PER_KIND = 8  # per pass: 8 of each simple/complex x en/zh, plus 4 + 4 without the keyword
WRONG_RULE = {"name": "how-to-light", "when": {"keywords_any": ["how do i", "怎么"]},
              "lane": "light"}  # fmt: skip

Item = tuple[str, bool]  # (question, truly complex)


def _jsonl(name: str) -> list[dict[str, Any]]:
    with (DATA / name).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def workload() -> tuple[list[Item], list[Item]]:
    """Two disjoint passes of the same mix, from ../shared/data."""
    with (DATA / "cache" / "banking77_train.csv").open(encoding="utf-8") as f:
        banking = list(csv.DictReader(f))
    how_to: dict[str, str] = {}
    for row in banking:  # one question per intent: no two near-identical FAQs
        if row["text"].lower().startswith("how do i"):
            how_to.setdefault(row["category"], row["text"])
    can_i = list(dict.fromkeys(r["text"] for r in banking if r["text"].startswith("Can I")))
    afqmc = [r["sentence1"] for r in _jsonl("cache/afqmc_dev.jsonl")]
    zh_faq = [q for q in dict.fromkeys(afqmc) if "怎么" in q and len(q) <= 20]
    prefix = "Return your final response within \\boxed{}. "
    maths = [r["problem"].removeprefix(prefix) for r in _jsonl("queries/math500_levels.jsonl")
             if r["level"] == 5 and len(r["problem"]) < 260]  # fmt: skip
    cmath = [r["question"] for r in _jsonl("queries/cmath_zh_grades.jsonl") if r["grade"] == 6]
    passes: list[list[Item]] = []
    for p in range(2):
        part = slice(p * PER_KIND, (p + 1) * PER_KIND)
        half = slice(p * PER_KIND // 2, (p + 1) * PER_KIND // 2)
        items = [(q, False) for q in list(how_to.values())[part] + zh_faq[part] + can_i[half]]
        items += [(f"How do I solve this problem? {q}", True) for q in maths[part]]
        items += [(f"这道题怎么做：{q}", True) for q in cmath[part]]
        items += [(q, True) for q in maths[50:][half]]  # no keyword: the default (heavy) lane
        passes.append(items)
    return passes[0], passes[1]


@pytest.fixture
def running(
    emulators: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Gateway]:
    monkeypatch.setenv("HYBRID_GATEWAY_ADMIN_KEY", ADMIN_KEY)
    config = e2e_config(*emulators, tmp_path / "requests.sqlite3")
    config["server"]["request_log"]["prompts"] = "full"
    config["cache"] = {"exact": {"enabled": False}}  # every request reaches the router
    config["routing"] = {"default_lane": "heavy", "rules": [WRONG_RULE]}
    with gateway(write_config(tmp_path / "gateway.yaml", config), "misroutes-gateway") as gw:
        yield gw


def replay(gw: Gateway, items: list[Item]) -> list[tuple[str, str, bool]]:
    """(request id, lane, truly complex) per item, asked through the official SDK."""
    with openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=30) as sdk:

        def ask(item: Item) -> tuple[str, str, bool]:
            raw = sdk.chat.completions.with_raw_response.create(
                model="auto", messages=[{"role": "user", "content": item[0]}], max_tokens=4
            )
            raw.parse()
            route = dict(p.split("=", 1) for p in raw.headers["x-gateway-route"].split("; "))
            return raw.headers["x-request-id"], route["lane"], item[1]

        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(ask, items))


def misroute_rate(answers: list[tuple[str, str, bool]]) -> float:
    wrong = sum(1 for _, lane, hard in answers if (lane == "light") == hard)
    return wrong / len(answers)


def post(gw: Gateway, path: str, body: dict[str, Any], key: str = "x") -> dict[str, Any]:
    request = urllib.request.Request(
        gw.url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        result: dict[str, Any] = json.loads(answer.read())
        return result


def wait_for_rows(log: Path, count: int) -> None:
    deadline = time.monotonic() + 15
    while True:
        with sqlite3.connect(log) as db:
            if db.execute("SELECT count(*) FROM requests").fetchone()[0] >= count:
                return
        assert time.monotonic() < deadline, "the request log did not receive the requests"
        time.sleep(0.05)


def test_the_review_loop_lowers_the_misroute_rate(
    running: Gateway, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = workload()
    start = datetime.now(UTC).isoformat()
    before = replay(running, first)
    for request_id, lane, hard in before:
        if hard and lane == "light":
            post(running, "/v1/feedback", {"request_id": request_id, "rating": "down",
                                            "reason": "wrong"})  # fmt: skip
    flagged = sum(1 for _, lane, hard in before if hard and lane == "light")
    wait_for_rows(tmp_path / "requests.sqlite3", len(first))
    window = ["--since", start, "--until", datetime.now(UTC).isoformat()]
    out = tmp_path / "report"
    args = ["misroutes", "--config", str(running.config_path), *window, "--out", str(out)]

    assert main([*args, "--json"]) == 0
    printed = capsys.readouterr().out.splitlines()[0]
    (out / "review.json").write_text(printed, encoding="utf-8")  # kept with the report
    review = json.loads(printed)
    top = review["proposals"][0]
    assert top["effect"]["flagged_fixed"] == flagged == 2 * PER_KIND
    assert top["effect"]["collateral"] == 0
    assert main([*args, "--apply", "1"]) == 0
    reloaded = post(running, "/admin/reload", {}, key=ADMIN_KEY)
    assert reloaded["status"] == "reloaded" and reloaded["changed"] == ["routing"]

    after = replay(running, second)
    rate_before, rate_after = misroute_rate(before), misroute_rate(after)
    report = (out / "misroutes.md").read_text(encoding="utf-8")
    assert "flagged fixed" in report and top["title"] in report
    (out / "acceptance.md").write_text(
        f"misroute rate before {rate_before:.1%} ({len(before)} requests), after applying "
        f"proposal 1 ({top['title']}) and reloading {rate_after:.1%} ({len(after)} unseen "
        "requests of the same mix)\n",
        encoding="utf-8",
    )
    print((out / "acceptance.md").read_text(encoding="utf-8"))
    assert rate_after < rate_before / 2, (rate_before, rate_after)
    # The keywords were mined from the first half; nearly all of the unseen complex ones
    # carry them too (a maths problem without them stays a miss: keywords are not magic).
    missed = sum(1 for _, lane, hard in after if hard and lane == "light")
    assert missed <= PER_KIND // 4, missed
