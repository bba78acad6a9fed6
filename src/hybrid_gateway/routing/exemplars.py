"""The exemplar router: representative simple and complex questions per tenant, nearest class.

The exemplar set is an ordinary YAML (or JSON) file that operators edit as misroutes come in:

    default:                      # tenants without their own set
      simple: ["这个接口怎么调用?", "How do I install the CLI?"]
      complex: ["这个接口的鉴权原理是什么?", "Compare the consistency models of ..."]
    acme:
      simple: [...]
      complex: [...]

A request's similarity to a class is the mean cosine of its ``k`` nearest exemplars in that
class; the nearer class wins only by at least ``margin``, otherwise the request is passed on (to
the classifier, or the default lane).  The exemplars are embedded once, on first use, with the
same embedder as the requests, so the two are always in one namespace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import yaml
from pydantic import Field, ValidationError

from hybrid_gateway.configbase import Strict
from hybrid_gateway.embedding.base import AsyncEmbedder, Matrix, Vector
from hybrid_gateway.errors import ConfigError

DEFAULT_SET = "default"


class ExemplarSet(Strict):
    simple: Annotated[tuple[str, ...], Field(min_length=1)]
    complex: Annotated[tuple[str, ...], Field(min_length=1)]


def load_exemplars(path: str | Path) -> dict[str, ExemplarSet]:
    """Read and validate an exemplar file; a bad one is a ``ConfigError`` naming the field."""
    source = str(path)
    try:
        data: Any = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(source, "<file>", f"a readable YAML/JSON exemplar file ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(
            source, "<root>", "a mapping of tenant -> {simple: [...], complex: [...]}"
        )
    sets: dict[str, ExemplarSet] = {}
    for tenant, value in data.items():
        try:
            sets[str(tenant)] = ExemplarSet.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join([str(tenant), *(str(p) for p in first["loc"])])
            raise ConfigError(source, where, first["msg"]) from None
    return sets


@dataclass(frozen=True, slots=True)
class ExemplarVerdict:
    set_name: str
    complex: bool
    margin: float  # similarity to complex minus similarity to simple


def _class_similarity(exemplars: Matrix, vector: Vector, k: int) -> float:
    sims = exemplars @ vector
    top = np.sort(sims)[-min(k, len(sims)) :]
    return float(top.mean())


class ExemplarClassifier:
    def __init__(
        self, sets: Mapping[str, ExemplarSet], embedder: AsyncEmbedder, *, margin: float, k: int
    ) -> None:
        self._sets = dict(sets)
        self._embedder = embedder
        self._margin = margin
        self._k = k
        self._vectors: dict[str, asyncio.Task[tuple[Matrix, Matrix]]] = {}

    def set_for(self, tenant: str) -> str | None:
        if tenant in self._sets:
            return tenant
        return DEFAULT_SET if DEFAULT_SET in self._sets else None

    async def _embed(self, texts: tuple[str, ...]) -> Matrix:
        vectors = await asyncio.gather(*(self._embedder.embed_one(t) for t in texts))
        return np.stack(vectors).astype(np.float32)

    async def _set_vectors(self, name: str) -> tuple[Matrix, Matrix]:
        async def build() -> tuple[Matrix, Matrix]:
            chosen = self._sets[name]
            return await self._embed(chosen.simple), await self._embed(chosen.complex)

        task = self._vectors.get(name)
        if task is None or (task.done() and task.exception() is not None):
            task = self._vectors[name] = asyncio.ensure_future(build())
        return await asyncio.shield(task)

    async def classify(self, tenant: str, vector: Vector) -> ExemplarVerdict | None:
        """The nearer class for ``tenant``'s set, or None (no set, or within the margin)."""
        name = self.set_for(tenant)
        if name is None:
            return None
        simple, complex_ = await self._set_vectors(name)
        diff = _class_similarity(complex_, vector, self._k) - _class_similarity(
            simple, vector, self._k
        )
        if abs(diff) < self._margin:
            return None
        return ExemplarVerdict(name, diff > 0, diff)
