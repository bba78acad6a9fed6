"""Operator endpoints: liveness, Prometheus metrics, and this description itself."""

from __future__ import annotations

from hybrid_gateway.api.openapi.parts import Section, json_response, ref

__all__ = ["section"]


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
                "required": ["status", "version", "uptime_s", "channels", "store"],
                "properties": {
                    "status": {
                        "type": "string",
                        "enum": ["ok", "degraded"],
                        "description": "`degraded`: serving, but the shared store is down "
                        "(its outage policies apply; docs/scale-out.md).",
                    },
                    "version": {"type": "string"},
                    "uptime_s": {"type": "number"},
                    "channels": {"type": "array", "items": {"type": "string"}},
                    "store": {
                        "type": "object",
                        "required": ["backend", "up"],
                        "properties": {
                            "backend": {"type": "string", "enum": ["memory", "redis"]},
                            "up": {"type": "boolean"},
                            "errors": {"type": "integer"},
                            "last_error": {"type": ["string", "null"]},
                            "budget_debits_queued": {"type": "integer"},
                        },
                    },
                },
            }
        },
    )
