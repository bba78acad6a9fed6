"""Operator endpoints: liveness, Prometheus metrics, and this description itself."""

from __future__ import annotations

from hybrid_gateway.api.openapi.parts import Section, json_response, ref

__all__ = ["section", "store_health"]


def store_health(backends: list[str], description: str, *counts: str) -> dict[str, object]:
    """A store's part of ``/healthz``: backend, up, errors, last error and ``counts``."""
    properties: dict[str, object] = {
        "backend": {"type": "string", "enum": backends},
        "up": {"type": "boolean"},
        "errors": {"type": "integer"},
        "last_error": {"type": ["string", "null"]},
    }
    properties |= {name: {"type": "integer"} for name in counts}
    return {
        "type": "object", "description": description, "required": ["backend", "up"],
        "properties": properties,
    }  # fmt: skip


def section() -> Section:
    return Section(
        paths={
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "summary": "Liveness, version and channels",
                    "tags": ["operations"],
                    "responses": {"200": json_response("The gateway is up.", ref("Health"))},
                }
            },
            "/readyz": {
                "get": {
                    "operationId": "readyz",
                    "summary": "Readiness for load balancers: 200 while serving",
                    "tags": ["operations"],
                    "responses": {
                        "200": json_response("Serving.", ref("Readiness")),
                        "503": json_response(
                            "Starting, or draining after SIGTERM: send traffic elsewhere "
                            "(`code` `starting` or `draining`).",
                            ref("Error"),
                            ["x-request-id", "Retry-After"],
                        ),
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus text format (`hybrid_gateway_*`)",
                    "tags": ["operations"],
                    "responses": {
                        "200": {
                            "description": "The metrics, names in observability/names.py.",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This OpenAPI 3.1 description of every endpoint",
                    "tags": ["operations"],
                    "responses": {"200": json_response("The description.", {"type": "object"})},
                }
            },
        },
        schemas={
            "Health": {
                "type": "object",
                "required": [
                    "status",
                    "version",
                    "uptime_s",
                    "channels",
                    "store",
                    "records",
                    "problems",
                ],
                "properties": {
                    "status": {
                        "type": "string",
                        "enum": ["ok", "degraded"],
                        "description": "`degraded`: serving, but a shared store (Redis, or "
                        "PostgreSQL for the records) is down (its outage policies apply; "
                        "docs/scale-out.md), or a channel is in trouble (`problems`).",
                    },
                    "version": {"type": "string"},
                    "uptime_s": {"type": "number"},
                    "channels": {"type": "array", "items": {"type": "string"}},
                    "store": store_health(
                        ["memory", "redis"],
                        "Rate limits, budgets, breakers, exact cache (`stores.backend`).",
                        "budget_debits_queued",
                    ),
                    "records": store_health(
                        ["none", "sqlite", "postgres"],
                        "Where the request log and feedback go "
                        "(`stores.records`); `none` when the request log is disabled.",
                        "journal_files_buffered",
                    ),
                    "problems": {
                        "type": "array",
                        "description": "Channels whose breaker is not closed "
                        "(`breaker_open`, `breaker_half_open`) or whose last "
                        "`server.health.failed_requests` requests all failed (`failing`).",
                        "items": {
                            "type": "object",
                            "required": ["channel", "problem"],
                            "properties": {
                                "channel": {"type": "string"},
                                "problem": {
                                    "type": "string",
                                    "enum": ["breaker_open", "breaker_half_open", "failing"],
                                },
                                "consecutive_failures": {"type": "integer"},
                            },
                        },
                    },
                    "semantic_store": store_health(
                        ["postgres"],
                        "With `stores.records: postgres` and the semantic cache "
                        "on: the store of its vectors (absent otherwise).",
                    ),
                },
            },
            "Readiness": {
                "type": "object",
                "required": ["status"],
                "properties": {"status": {"type": "string", "enum": ["ready"]}},
            },
        },
    )
