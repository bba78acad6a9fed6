"""The semantic cache end to end: a real gateway process with the bundled embedder, the
official SDK as client, emulated upstreams; plus the admin operations on a real runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web

from hybrid_gateway.api.app import create_app
from hybrid_gateway.config import parse_config
from tests.e2e.conftest import e2e_config
from tests.e2e.stack import Gateway, gateway, write_config

QUESTION = "信用卡怎么激活"
PARAPHRASE = "信用卡如何激活？"


def semantic_config(emulators: tuple[str, str], folder: Path) -> dict[str, Any]:
    config = e2e_config(*emulators, folder / "requests.sqlite3")
    config["cache"]["semantic"] = {
        "enabled": True, "path": str(folder / "semantic.sqlite3"), "threshold": 0.98,
    }  # fmt: skip
    return config


@pytest.fixture(scope="module")
def semantic_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("semantic")


@pytest.fixture(scope="module")
def semantic_stack(emulators: tuple[str, str], semantic_dir: Path) -> Iterator[Gateway]:
    path = write_config(semantic_dir / "gateway.yaml", semantic_config(emulators, semantic_dir))
    with gateway(path, "gateway-semantic") as running:
        yield running


def ask(base_url: str, question: str, **kw: Any) -> tuple[dict[str, str], str]:
    with openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=30) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(
            model="light", messages=[{"role": "user", "content": question}], max_tokens=16, **kw
        )
        return dict(raw.headers), raw.parse().choices[0].message.content or ""


def test_paraphrase_is_a_semantic_hit_with_its_similarity(semantic_stack: Gateway) -> None:
    first_headers, first_answer = ask(semantic_stack.base_url, QUESTION)
    assert first_headers["x-gateway-cache"] == "miss"
    headers, answer = ask(semantic_stack.base_url, PARAPHRASE)
    assert headers["x-gateway-cache"] == "semantic"
    assert answer == first_answer
    assert 0.98 <= float(headers["x-gateway-cache-similarity"]) <= 1.0
    assert headers["x-gateway-cache-checks"].startswith("threshold,numbers,dates,negation")
    assert headers["x-gateway-cache-entry"].isdigit()
    assert float(headers["x-gateway-cost-usd"]) == 0
    # a number trap close in wording is not served the stored answer
    ask(semantic_stack.base_url, "信用卡额度5000怎么提升")
    trap, _ = ask(semantic_stack.base_url, "信用卡额度50000怎么提升")
    assert trap["x-gateway-cache"] == "miss"
    assert "!" in trap["x-gateway-cache-checks"]  # why not: the check the candidate failed


def test_other_params_do_not_share_an_entry(semantic_stack: Gateway) -> None:
    ask(semantic_stack.base_url, "怎么修改登录密码", temperature=0.2)
    headers, _ = ask(semantic_stack.base_url, "如何修改登录密码", temperature=0.7)
    assert headers["x-gateway-cache"] == "miss"
    again, _ = ask(semantic_stack.base_url, "如何修改登录密码？", temperature=0.2)
    assert again["x-gateway-cache"] == "semantic"


def test_streamed_paraphrase_hit(semantic_stack: Gateway) -> None:
    ask(semantic_stack.base_url, "退款多久到账")
    with (
        openai.OpenAI(base_url=semantic_stack.base_url, api_key="x", max_retries=0) as sdk,
        sdk.chat.completions.with_streaming_response.create(
            model="light", messages=[{"role": "user", "content": "退款多长时间到账"}],
            max_tokens=16, stream=True,
        ) as response,
    ):  # fmt: skip
        assert response.headers["x-gateway-cache"] == "semantic"
        text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
    assert text


def test_the_cache_survives_a_restart(emulators: tuple[str, str], tmp_path: Path) -> None:
    path = write_config(tmp_path / "gateway.yaml", semantic_config(emulators, tmp_path))
    with gateway(path, "gateway-semantic-1") as first:
        _, answer = ask(first.base_url, "网银转账限额是多少")
    with gateway(path, "gateway-semantic-2") as second:
        headers, again = ask(second.base_url, "网银转账限额是多少？")
    assert headers["x-gateway-cache"] == "semantic" and again == answer


@pytest.fixture
async def admin_app(
    emulators: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    monkeypatch.setenv("HYBRID_GATEWAY_ADMIN_KEY", "adm-key")
    config = parse_config(semantic_config(emulators, tmp_path))
    app = create_app(config, config_path=tmp_path / "gateway.yaml")  # admin routes mounted
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_admin_find_correct_and_invalidate(admin_app: str) -> None:
    admin = {"Authorization": "Bearer adm-key"}
    chat = {"model": "light", "max_tokens": 16,
            "messages": [{"role": "user", "content": "开户需要带什么证件"}]}  # fmt: skip
    async with aiohttp.ClientSession(admin_app) as http:
        async with http.post("/v1/chat/completions", json=chat) as resp:
            assert resp.headers["x-gateway-cache"] == "miss"
        async with http.get("/admin/cache/semantic") as resp:
            assert resp.status in (401, 403)  # no admin key, no access
        async with http.post("/admin/cache/semantic/search", headers=admin,
                             json={"request": chat}) as resp:  # fmt: skip
            found = await resp.json()
        entry_id = found["data"][0]["id"]
        assert found["data"][0]["question"] == "开户需要带什么证件"
        async with http.put(f"/admin/cache/semantic/entries/{entry_id}", headers=admin,
                            json={"content": "身份证原件。"}) as resp:  # fmt: skip
            assert (await resp.json())["answer"] == "身份证原件。"
        paraphrase = {**chat, "messages": [{"role": "user", "content": "开户要带哪些证件"}]}
        async with http.post("/v1/chat/completions", json=paraphrase) as resp:
            body = await resp.json()
            assert resp.headers["x-gateway-cache"] == "semantic"
            assert resp.headers["x-gateway-cache-entry"] == str(entry_id)
        assert body["choices"][0]["message"]["content"] == "身份证原件。"
        async with http.delete(f"/admin/cache/semantic/entries/{entry_id}", headers=admin) as resp:
            assert (await resp.json())["deleted"] is True
        async with http.post("/v1/chat/completions", json=paraphrase) as resp:
            assert resp.headers["x-gateway-cache"] == "miss"
        async with http.delete("/admin/cache/semantic/tenants/default", headers=admin) as resp:
            assert (await resp.json())["deleted"] == 1  # the paraphrase's own fresh entry
        async with http.get("/admin/cache/semantic", headers=admin) as resp:
            assert (await resp.json())["entries"] == 0
        async with http.get("/admin/cache/semantic/entries/999", headers=admin) as resp:
            assert resp.status == 404
