"""Routing through the real gateway and the official SDK: each decision named in its header."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import e2e_config
from tests.e2e.stack import Gateway, gateway, write_config

RULES: list[dict[str, Any]] = [
    {"name": "vip-heavy", "when": {"tenants": ["vip"]}, "lane": "heavy"},
    {"name": "code-heavy", "when": {"has_code_block": True}, "lane": "heavy"},
    {"name": "pdf-heavy", "when": {"document_types": ["pdf"]}, "lane": "heavy"},
    {"name": "how-to-light", "when": {"keywords_any": ["怎么调用", "how do i install"]},
     "lane": "light"},
    {"name": "short-light", "when": {"max_chars": 60, "max_user_turns": 1}, "lane": "light"},
]  # fmt: skip


@pytest.fixture(scope="module")
def routed(
    emulators: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("routed")
    config = e2e_config(*emulators, folder / "requests.sqlite3")
    config["routing"] = {"default_lane": "heavy", "rules": RULES}
    with gateway(write_config(folder / "gateway.yaml", config), "routed-gateway") as running:
        yield running


@pytest.fixture(scope="module")
def client(routed: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=routed.base_url, api_key="x", max_retries=0, timeout=30) as sdk:
        yield sdk


def route_of(client: openai.OpenAI, content: Any, **extra: Any) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model=extra.pop("model", "auto"),
        messages=[{"role": "user", "content": content}],
        max_tokens=8,
        **extra,
    )
    return raw.headers["x-gateway-route"]


def tag() -> str:
    return uuid.uuid4().hex[:8]


def test_rules_fire_in_order_and_are_named(client: openai.OpenAI) -> None:
    # matches how-to-light and short-light: the first one listed decides
    assert route_of(client, f"How do I install it? {tag()}") == (
        "lane=light; channel=light-emu; rule=how-to-light"
    )
    # matches code-heavy and how-to-light: code-heavy comes first
    code = f"```\nclient.call()\n```\n这个接口怎么调用 {tag()}"
    assert route_of(client, code).endswith("rule=code-heavy")
    assert route_of(client, f"What is RAG? {tag()}").endswith("rule=short-light")
    long = "Explain the consistency model of this database under partitions " + tag() * 4
    assert route_of(client, long) == "lane=heavy; channel=heavy-emu; rule=default"
    assert route_of(client, f"hi {tag()}", model="light").endswith("rule=model:light")


def test_document_type_from_metadata_and_file_parts(client: openai.OpenAI) -> None:
    assert route_of(client, f"Summarise {tag()}", metadata={"document_type": "pdf"}).endswith(
        "rule=pdf-heavy"
    )
    parts = [{"type": "text", "text": f"Summarise {tag()}"},
             {"type": "file", "file": {"filename": "q3.pdf", "file_data": "data:,x"}}]  # fmt: skip
    assert route_of(client, parts).endswith("rule=pdf-heavy")


@pytest.fixture(scope="module")
def classified(
    emulators: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    """Rules first; what they leave goes to the packaged classifier (bundled embedder)."""
    folder = tmp_path_factory.mktemp("classified")
    config = e2e_config(*emulators, folder / "requests.sqlite3")
    config["routing"] = {
        "default_lane": "heavy",
        "rules": [
            {"name": "how-to-light", "when": {"keywords_any": ["how do i install"]},
             "lane": "light"},
            {"name": "code-to-classifier", "when": {"has_code_block": True},
             "action": "classifier"},
            {"name": "short-light", "when": {"max_chars": 30}, "lane": "light"},
        ],
        "classifier": {"model": "default", "threshold": 0.5},
    }  # fmt: skip
    with (
        gateway(write_config(folder / "gateway.yaml", config), "classified-gateway") as running,
        openai.OpenAI(base_url=running.base_url, api_key="x", max_retries=0, timeout=60) as sdk,
    ):
        yield sdk


def test_classifier_decision_names_score_and_threshold(classified: openai.OpenAI) -> None:
    header = route_of(
        classified, f"Prove that there are infinitely many primes of the form 4k+3. {tag()}"
    )
    parts = dict(part.split("=", 1) for part in header.split("; "))
    assert parts["rule"] == "classifier" and parts["threshold"] == "0.500"
    score = float(parts["score"])
    assert 0 <= score <= 1
    assert parts["lane"] == ("heavy" if score >= 0.5 else "light")
    # a rule that passes on: the classifier decides, the later short-light rule is skipped
    code = route_of(classified, f"```\nx = 1\n```\nwhy? {tag()}")
    assert "rule=classifier; score=" in code
    assert route_of(classified, f"How do I install it? {tag()}").endswith("rule=how-to-light")
    assert route_of(classified, f"hi {tag()}").endswith("rule=short-light")
