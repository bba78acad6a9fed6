"""The traffic of ``bench replicas``: conversations streamed through the gateway, and samplers.

Each conversation sends its turns one after the other (streamed, ``user`` = the conversation id),
each turn carrying the answers received so far.  A sampler reads every emulator's ``/stats``
(requests running + waiting = in flight) and the gateway's ``/healthz`` endpoint states every
``interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from hybrid_gateway.tools.workload.conversations import Conversation

__all__ = ["Sample", "Sampler", "TurnResult", "run_conversations"]

THINK_S = 0.3  # between an answer and the next question


@dataclass(slots=True)
class TurnResult:
    conversation: str
    turn: int
    sent_s: float  # since the run's start
    status: int = 0
    ttft_ms: float | None = None
    latency_ms: float = 0.0
    endpoint: str | None = None
    error: str | None = None
    text: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


async def _send(
    session: aiohttp.ClientSession, url: str, body: bytes, result: TurnResult, started: float
) -> None:
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        result.status = r.status
        route = r.headers.get("x-gateway-route", "")
        if "endpoint=" in route:
            result.endpoint = route.split("endpoint=")[1].split(";")[0]
        if r.status != 200:
            result.error = f"http_{r.status}"
            await r.read()
            return
        parts: list[str] = []
        done = False
        async for line in r.content:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                continue
            event = orjson.loads(payload)
            if "error" in event:
                result.error = "stream_error"
                continue
            for choice in event.get("choices") or ():
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    if result.ttft_ms is None:
                        result.ttft_ms = (time.perf_counter() - started) * 1000
                    parts.append(piece)
        result.text = "".join(parts)
        if not done and result.error is None:
            result.error = "incomplete_stream"


async def _converse(
    conversation: Conversation,
    session: aiohttp.ClientSession,
    url: str,
    t0: float,
    results: list[TurnResult],
) -> None:
    await asyncio.sleep(max(0.0, t0 + conversation.start_s - time.perf_counter()))
    answers: list[str] = []
    for turn in range(len(conversation.questions)):
        body = orjson.dumps({
            "model": "light", "stream": True, "max_tokens": conversation.max_tokens,
            "user": conversation.id, "messages": conversation.messages(turn, answers),
        })  # fmt: skip
        started = time.perf_counter()
        result = TurnResult(conversation.id, turn, started - t0)
        try:
            async with asyncio.timeout(60):
                await _send(session, url, body, result, started)
        except TimeoutError:
            result.error = "client_timeout"
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            result.error = f"client_{type(exc).__name__}"
        result.latency_ms = (time.perf_counter() - started) * 1000
        results.append(result)
        answers.append(result.text or "(no answer)")
        await asyncio.sleep(THINK_S)


async def run_conversations(
    base_url: str, conversations: Sequence[Conversation], t0: float
) -> list[TurnResult]:
    results: list[TurnResult] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        url = base_url.rstrip("/") + "/v1/chat/completions"
        await asyncio.gather(*(_converse(c, session, url, t0, results) for c in conversations))
    return results


@dataclass(slots=True)
class Sample:
    t_s: float
    in_flight: dict[str, int | None]  # per endpoint; None: its emulator did not answer
    states: dict[str, str]  # per endpoint, from the gateway's /healthz


@dataclass
class Sampler:
    """Polls the emulators and the gateway until stopped."""

    emulator_urls: Callable[[], dict[str, str]]  # endpoint name -> its current URL
    gateway_url: str
    t0: float
    interval_s: float = 0.1
    samples: list[Sample] = field(default_factory=list)
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)  # last /stats per URL

    async def run(self, stop: asyncio.Event) -> None:
        timeout = aiohttp.ClientTimeout(total=1.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not stop.is_set():
                await self._sample(session)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
            await self._sample(session)

    async def _sample(self, session: aiohttp.ClientSession) -> None:
        urls = self.emulator_urls()
        loads: dict[str, int | None] = {}
        for name, url in urls.items():
            stats = await _get_json(session, url + "/stats")
            if stats is None:
                loads[name] = None
                continue
            self.stats[url] = stats
            loads[name] = int(stats["running"]) + int(stats["waiting"])
        health = await _get_json(session, self.gateway_url + "/healthz")
        states = {}
        for entry in ((health or {}).get("endpoints") or {}).get("pool", []):
            states[str(entry["name"])] = str(entry["state"])
        self.samples.append(Sample(time.perf_counter() - self.t0, loads, states))


async def _get_json(session: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    try:
        async with session.get(url) as response:
            if response.status != 200:
                return None
            body = orjson.loads(await response.read())
            return body if isinstance(body, dict) else None
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None
