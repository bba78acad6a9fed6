"""The optional reranker hook: a second opinion on a candidate hit, for those who have one.

A cross-encoder reads both questions together and is far better at "same question?" than two
independent embeddings, at the cost of a model call per candidate hit (never per miss: it runs
only after the threshold and the guards said yes).  Two implementations:

    CrossEncoderReranker  a sentence-transformers CrossEncoder from a local folder
                          (optional extra ``[st]``; run in a thread, off the event loop)
    HttpReranker          a ``POST {url}`` rerank service (TEI / Jina / Cohere shape:
                          ``{"query", "texts"|"documents"}`` -> ``[{"index", "score"}]`` or
                          ``{"results": [{"index", "relevance_score"}]}``)

A candidate is a hit only if the reranker's score is >= ``min_score``.  A reranker that fails
(down, timeout) is treated as "no": the request goes upstream, it never gets a doubtful answer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Protocol

import aiohttp


class Reranker(Protocol):
    async def score(self, question: str, candidate: str) -> float:
        """How likely the two are the same question (higher = more)."""
        ...

    async def aclose(self) -> None: ...


class CrossEncoderReranker:
    def __init__(self, path: str | Path) -> None:
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:  # pragma: no cover - depends on the optional extra
            raise ImportError(
                "cache.semantic.reranker kind cross-encoder needs the optional extra: "
                "pip install 'hybrid-gateway[st]'"
            ) from exc
        self._model: Any = CrossEncoder(str(path), local_files_only=True)

    async def score(self, question: str, candidate: str) -> float:
        scores = await asyncio.to_thread(self._model.predict, [(question, candidate)])
        return float(scores[0])

    async def aclose(self) -> None:
        return None


class HttpReranker:
    def __init__(self, url: str, *, timeout_s: float = 2.0, model: str | None = None) -> None:
        self._url = url
        self._model = model
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def score(self, question: str, candidate: str) -> float:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        payload: dict[str, Any] = {
            "query": question,
            "texts": [candidate],
            "documents": [candidate],
        }
        if self._model is not None:
            payload["model"] = self._model
        async with self._session.post(self._url, json=payload) as resp:
            resp.raise_for_status()
            body = await resp.json()
        return _first_score(body)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _first_score(body: Any) -> float:
    items = body.get("results") if isinstance(body, dict) else body
    if not isinstance(items, list) or not items or not isinstance(items[0], dict):
        raise ValueError("not a rerank response")
    item = items[0]
    value = item.get("score", item.get("relevance_score"))
    if not isinstance(value, int | float):
        raise ValueError("not a rerank response")
    return float(value)
