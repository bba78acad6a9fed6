"""The OpenAPI 3.1 description of every endpoint, served at ``GET /openapi.json``.

One section per group of endpoints, each a module with ``section() -> Section`` (its paths and
the component schemas they use; shared parts such as the error object and the ``x-gateway-*``
headers come from ``parts.py``).  Adding an endpoint: describe it in a section, list a new
section in ``SECTIONS``.  ``tests/hardening/test_openapi.py`` fails while a registered route has
no description here, or a description has no route, and the schemathesis run fuzzes the live
gateway against it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from hybrid_gateway import __version__
from hybrid_gateway.api.openapi import (
    admin,
    admin_cache,
    chat,
    observe,
    operations,
    reload,
    results,
)
from hybrid_gateway.api.openapi.parts import COMPONENT_HEADERS, COMPONENT_SCHEMAS, Section

__all__ = ["SECTIONS", "build_spec", "openapi_json"]

SECTIONS: tuple[Callable[[], Section], ...] = (
    chat.section,
    operations.section,
    observe.section,
    admin.section,
    admin_cache.section,
    results.section,
    reload.section,
)


def build_spec() -> dict[str, Any]:
    """The whole document, assembled from ``SECTIONS``; a path in two sections is a bug.

    A fresh copy each call: sections share constant schema dicts, and a caller (a test, a
    spec tool) may change what it gets.
    """
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = dict(COMPONENT_SCHEMAS)
    for make in SECTIONS:
        part = make()
        for path, operations_ in part.paths.items():
            methods = paths.setdefault(path, {})
            clash = set(methods) & set(operations_)
            if clash:
                raise ValueError(f"{path}: {sorted(clash)} described twice")
            methods.update(operations_)
        schemas.update(part.schemas)
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "hybrid-gateway",
            "version": __version__,
            "description": "OpenAI-compatible gateway: each chat request is answered from the "
            "exact cache, a light or a heavy model; every answer says which and why in its "
            "`x-gateway-*` headers. Every error is OpenAI-shaped with the request id.",
        },
        "paths": paths,
        "components": {"schemas": schemas, "headers": dict(COMPONENT_HEADERS)},
    }
    return copy.deepcopy(document)


async def openapi_json(request: web.Request) -> web.Response:
    # Built per request (about a millisecond): nothing is kept at module level.
    return web.Response(body=orjson.dumps(build_spec()), content_type="application/json")
