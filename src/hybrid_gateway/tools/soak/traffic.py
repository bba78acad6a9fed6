"""The soak's traffic: a fixed mix of what a gateway meets, sent by ``concurrency`` workers.

Each worker loops until told to stop, drawing one kind of request at a time by weight:

    plain-unique      non-streamed, a prompt never seen before (cache miss, then eviction)
    plain-repeat      non-streamed, one of a few prompts (cache hits)
    stream-full       streamed to the end; repeated prompts replay from the cache
    stream-hangup     streamed, the client hangs up after the first event (the gateway must
                      cancel the upstream request and free its slot)
    upstream-reset    streamed on the ``midstream`` lane: the upstream drops the connection
                      mid-answer (resets before the first byte come from the light emulator's
                      random faults, and are retried)
    upstream-dead     the ``dead`` lane: refused before any byte (502, then 503 while its
                      breaker is open)
    bad-request       a 400 or a 404

Outcomes are counted per kind (HTTP status, ``hangup``, ``stream-error`` for an SSE error
event, ``client-error:TYPE`` when the request itself failed).
"""

from __future__ import annotations

import asyncio
import collections
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

__all__ = ["MIX", "Traffic", "TrafficCounts"]

MIX: Mapping[str, int] = {
    "plain-unique": 25,
    "plain-repeat": 20,
    "stream-full": 20,
    "stream-hangup": 15,
    "upstream-reset": 8,
    "upstream-dead": 6,
    "bad-request": 6,
}
_REPEATED = [f"soak question {i}: how do I rotate the keys of service {i}?" for i in range(40)]
_MODELS = ("auto", "light", "heavy")
# Kinds sent to one model; "heavy" for hang-ups: its longer answers are still streaming then.
_LANE_OF = {"upstream-reset": "midstream", "upstream-dead": "dead", "stream-hangup": "heavy"}


@dataclass
class TrafficCounts:
    by_kind: dict[str, collections.Counter[str]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    in_flight: int = 0

    @property
    def total(self) -> int:
        return sum(sum(c.values()) for c in self.by_kind.values())

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {kind: dict(sorted(c.items())) for kind, c in sorted(self.by_kind.items())}


class Traffic:
    def __init__(self, session: aiohttp.ClientSession, base_url: str, seed: int) -> None:
        self._session = session
        self._url = base_url + "/v1/chat/completions"
        self._rng = random.Random(seed)
        self.counts = TrafficCounts()

    async def worker(self, stop: asyncio.Event) -> None:
        kinds, weights = list(MIX), list(MIX.values())
        while not stop.is_set():
            kind = self._rng.choices(kinds, weights)[0]
            self.counts.in_flight += 1
            try:
                outcome = await self._send(kind)
            except (aiohttp.ClientError, TimeoutError) as exc:
                outcome = f"client-error:{type(exc).__name__}"
            finally:
                self.counts.in_flight -= 1
            self.counts.by_kind[kind][outcome] += 1

    async def _send(self, kind: str) -> str:
        coin = self._rng.random() < 0.5
        if kind == "bad-request":
            body = self._body(False, repeat=False)
            if coin:
                body["model"] = "no-such-model"  # 404
            else:
                body["temperature"] = "hot"  # 400
            return await self._plain(body)
        stream = kind.startswith("stream") or kind == "upstream-reset"
        body = self._body(stream, repeat=kind == "plain-repeat" or (kind == "stream-full" and coin))
        body["model"] = _LANE_OF.get(kind, body["model"])
        if not stream:
            return await self._plain(body)
        return await self._stream(body, hang_up=kind == "stream-hangup")

    def _body(self, stream: bool, *, repeat: bool) -> dict[str, Any]:
        if repeat:
            prompt = self._rng.choice(_REPEATED)
        else:
            prompt = f"soak {uuid.UUID(int=self._rng.getrandbits(128)).hex}: explain the plan"
        return {"model": self._rng.choice(_MODELS), "stream": stream, "max_tokens": 64,
                "messages": [{"role": "user", "content": prompt}]}  # fmt: skip

    async def _plain(self, body: dict[str, Any]) -> str:
        async with self._session.post(self._url, json=body) as response:
            await response.read()
            return str(response.status)

    async def _stream(self, body: dict[str, Any], *, hang_up: bool) -> str:
        async with self._session.post(self._url, json=body) as response:
            if response.status != 200:
                await response.read()
                return str(response.status)
            if hang_up:
                await response.content.readline()
                response.close()  # drop the connection with the answer unfinished
                return "hangup"
            text = await response.read()
            return "stream-error" if b'data: {"error"' in text else "200"
