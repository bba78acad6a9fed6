"""The emulator's quality model: marks by tier and labels, lengths, and over real HTTP."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web

from hybrid_gateway.accounting.tokens import count_tokens, split_tokens
from hybrid_gateway.tools.emulator import LIGHT, EmulatorSettings, Prompt, create_emulator_app
from hybrid_gateway.tools.emulator.cli import configure, quality_from_args, settings_from_args
from hybrid_gateway.tools.emulator.quality import QualityAnswers, mark_tokens
from hybrid_gateway.tools.emulator.text import PseudoAnswers
from hybrid_gateway.tools.workload.schema import (
    Labels,
    WorkloadItem,
    answer_mark,
    parse_mark,
    write_workload,
)

FAST = replace(LIGHT, engine=replace(LIGHT.engine, decode_step_ms=1.0, prefill_tps=1_000_000.0))
FALLBACK = PseudoAnswers(8, 40)


def item(
    id: str, text: str, group: str, light_ok: bool, heavy_ok: bool = True, tokens: int = 30
) -> WorkloadItem:
    labels = Labels(light_ok=light_ok, heavy_ok=heavy_ok, complexity="simple",
                    category="test/cat", source="test", group=group, lang="en",
                    outcome="assumed")  # fmt: skip
    messages = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": text})
    return WorkloadItem(id=id, arrival_ms=0.0, tenant="t", messages=messages, max_tokens=64,
                        expected_output_tokens=tokens, stream=False, labels=labels)  # fmt: skip


ITEMS = [
    item("a", "How do I reset my PIN?", "g1", light_ok=True),
    item("b", "What is the way to reset my PIN code?", "g1", light_ok=False),  # a paraphrase
    item("c", "Prove that the square root of two is irrational.", "g2", light_ok=False),
    item("d", "Explain relativity in one line.", "g3", light_ok=False, heavy_ok=False, tokens=3),
]


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    path = tmp_path / "w.jsonl"
    write_workload(path, ITEMS, {"seed": 1})
    return path


def prompt(text: str) -> Prompt:
    return Prompt.from_contents([("system", "Be brief."), ("user", text)])


def test_tiers_follow_the_labels(workload: Path) -> None:
    light = QualityAnswers.from_file(workload, "light", FALLBACK)
    heavy = QualityAnswers.from_file(workload, "heavy", FALLBACK)
    for it in ITEMS:
        question = prompt(str(it.messages[-1]["content"]))
        for answers, ok in ((light, it.labels.light_ok), (heavy, it.labels.heavy_ok)):
            text = answers.answer(question, answers.tier)
            assert text.startswith(answer_mark(it.labels.group, ok))
            assert parse_mark(text) == (it.labels.group, ok)
            assert answers.answer(question, answers.tier) == text  # deterministic


def test_paraphrases_share_the_group_but_not_the_verdict(workload: Path) -> None:
    light = QualityAnswers.from_file(workload, "light", FALLBACK)
    first = light.answer(prompt("How do I reset my PIN?"), "light")
    second = light.answer(prompt("What is the way to reset my PIN code?"), "light")
    assert parse_mark(first) == ("g1", True)
    assert parse_mark(second) == ("g1", False)


def test_length_is_the_expected_output_tokens(workload: Path) -> None:
    heavy = QualityAnswers.from_file(workload, "heavy", FALLBACK)
    text = heavy.answer(prompt("How do I reset my PIN?"), "heavy")
    assert count_tokens(text) == 30 and text.endswith(".") and "[heavy]" in text
    short = heavy.answer(prompt("Explain relativity in one line."), "heavy")
    assert short == answer_mark("g3", False)  # shorter than a mark: the mark alone


def test_unknown_question_gets_an_unmarked_pseudo_answer(workload: Path) -> None:
    light = QualityAnswers.from_file(workload, "light", FALLBACK)
    question = prompt("Something nobody asked in the workload")
    text = light.answer(question, "light")
    assert parse_mark(text) is None
    assert text == FALLBACK.answer(question, "light")


def test_marks_survive_a_small_max_tokens(workload: Path) -> None:
    light = QualityAnswers.from_file(workload, "light", FALLBACK)
    assert light.min_max_tokens == mark_tokens("g1") == 5
    text = light.answer(prompt("How do I reset my PIN?"), "light")
    for cap in (5, 8):  # the server keeps the first max_tokens pieces
        assert parse_mark("".join(split_tokens(text)[:cap])) == ("g1", True)
    assert parse_mark("".join(split_tokens(text)[:4])) is None  # below the documented minimum


def test_bad_tier_and_bad_file(tmp_path: Path, workload: Path) -> None:
    with pytest.raises(ValueError, match="tier"):
        QualityAnswers.from_file(workload, "medium", FALLBACK)
    with pytest.raises(ValueError, match="cannot read"):
        QualityAnswers.from_file(tmp_path / "missing.jsonl", "light", FALLBACK)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    with pytest.raises(ValueError, match="not valid"):
        QualityAnswers.from_file(bad, "light", FALLBACK)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(list(argv))


def test_cli_flags(workload: Path) -> None:
    args = parse("--profile", "heavy", "--workload", str(workload))
    answers = quality_from_args(args, settings_from_args(args))
    assert answers is not None and answers.tier == "heavy" and len(answers) == 4
    args = parse("--profile", "heavy", "--workload", str(workload), "--tier", "light")
    answers = quality_from_args(args, settings_from_args(args))
    assert answers is not None and answers.tier == "light"
    args = parse()
    assert quality_from_args(args, settings_from_args(args)) is None
    args = parse("--workload", str(workload), "--zero-delay")
    with pytest.raises(ValueError, match="zero-delay"):
        quality_from_args(args, settings_from_args(args))


@asynccontextmanager
async def sdk(
    settings: EmulatorSettings, workload: Path, tier: str
) -> AsyncIterator[openai.AsyncOpenAI]:
    answers = QualityAnswers.from_file(workload, tier, FALLBACK)
    app = create_emulator_app(settings, answers=answers)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        base_url = f"http://{host}:{port}/v1"
        async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0,
                                      timeout=10) as client:  # fmt: skip
            yield client
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("tier", ["light", "heavy"])
async def test_over_http_with_the_sdk(workload: Path, tier: str) -> None:
    async with sdk(FAST, workload, tier) as client:
        for it in ITEMS:
            ok = it.labels.light_ok if tier == "light" else it.labels.heavy_ok
            messages: list[Any] = [dict(m) for m in it.messages]
            plain = await client.chat.completions.create(
                model=tier,
                messages=messages,
                max_tokens=it.max_tokens,
            )
            text = plain.choices[0].message.content or ""
            assert parse_mark(text) == (it.labels.group, ok)
            assert plain.usage is not None
            natural = max(it.expected_output_tokens, mark_tokens(it.labels.group))
            assert plain.usage.completion_tokens == min(natural, it.max_tokens)
            stream = await client.chat.completions.create(
                model=tier,
                messages=messages,
                stream=True,
                max_tokens=8,
            )
            chunks = [c.choices[0].delta.content async for c in stream if c.choices]
            parts = [part for part in chunks if part]
            assert parse_mark("".join(parts)) == (it.labels.group, ok)
            assert len(parts) == min(natural, 8)  # one piece a chunk, capped by max_tokens
        unknown = await client.chat.completions.create(
            model=tier, messages=[{"role": "user", "content": "Not in the workload"}]
        )
        assert parse_mark(unknown.choices[0].message.content or "") is None
