from __future__ import annotations

from pathlib import Path

from hybrid_gateway.tools.workload.schema import (
    Labels,
    WorkloadItem,
    answer_mark,
    parse_mark,
    question_key,
    read_meta,
    read_workload,
    request_body,
    write_workload,
)

ITEM = WorkloadItem(
    id="w1", arrival_ms=12.5, tenant="acme",
    messages=({"role": "user", "content": "How do I reset my PIN?"},),
    max_tokens=128, expected_output_tokens=60, stream=True,
    labels=Labels(light_ok=True, heavy_ok=True, complexity="simple", category="banking77/pin",
                  source="banking77", group="g1", lang="en", outcome="assumed"),
)  # fmt: skip


def test_round_trip_and_meta(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    assert write_workload(path, [ITEM, ITEM], {"seed": 7}) == 2
    assert read_workload(path) == [ITEM, ITEM]
    assert read_meta(path) == {"seed": 7, "items": 2}


def test_request_body_carries_no_labels() -> None:
    body = request_body(ITEM, "auto")
    text = str(body)
    assert "g1" not in text and "light_ok" not in text and "w1" not in text
    assert body == {
        "model": "auto", "messages": [{"role": "user", "content": "How do I reset my PIN?"}],
        "max_tokens": 128, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip


def test_marks_and_question_keys() -> None:
    assert parse_mark("x " + answer_mark("g-7", False) + " y") == ("g-7", False)
    assert parse_mark(answer_mark("g1", True)) == ("g1", True)
    assert parse_mark("no mark here") is None
    assert question_key(" How? ") == question_key("How?") != question_key("Why?")
