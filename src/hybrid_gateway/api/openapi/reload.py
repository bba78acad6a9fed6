"""Hot reload (routing, tenants, limits, the semantic cache's decision, pooled channels'
endpoints), behind the admin key (api/reload.py, docs/operations.md)."""

from __future__ import annotations

from hybrid_gateway.api.openapi.admin import SECURITY_NOTE
from hybrid_gateway.api.openapi.parts import Section, error_responses, json_response, ref

__all__ = ["section"]


def section() -> Section:
    return Section(
        paths={
            "/admin/reload": {
                "post": {
                    "operationId": "reloadConfig",
                    "summary": "Reload routing, tenants, limits, the semantic cache's "
                    "decision and pooled channels' endpoints from the config file",
                    "description": "Reads the file `serve --config` named again. Only "
                    "`routing`, `tenants`, `limits` and the decision keys of `cache.semantic` "
                    "(threshold, guards, target_precision, calibrated_on, verifier, "
                    "verifier_threshold, reranker.min_score, reranker.cosine_weight), and "
                    "`endpoints` and `balancing` of a channel that lists endpoints before and "
                    "after, may differ from the config in "
                    "force; rate-bucket levels and budget spend are kept, endpoints kept keep "
                    "their state, removed ones finish their requests in flight and take no "
                    "new one (docs/replicas.md). A file that fails "
                    "validation or changes any other field is refused with 400 "
                    "`config_rejected` (the message names the file, the dotted field and what "
                    "was expected; `param` is the field) and the old config stays, all of it. "
                    "Requests in flight finish with the parts they started with." + SECURITY_NOTE,
                    "tags": ["admin"],
                    "responses": {
                        "200": json_response("The new config is in force.", ref("ConfigReload")),
                        **error_responses(400, 401, 403),
                    },
                }
            },
        },
        schemas={
            "ConfigReload": {
                "type": "object",
                "required": ["object", "status", "sha256", "loaded_at", "changed"],
                "properties": {
                    "object": {"type": "string", "const": "gateway.config_reload"},
                    "status": {"type": "string", "const": "reloaded"},
                    "sha256": {"type": "string", "description": "SHA-256 of the file read"},
                    "loaded_at": {"type": "number", "description": "Unix seconds"},
                    "changed": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Config sections that differed: routing, tenants, "
                        "limits, cache.semantic, channels (empty: none)",
                    },
                    "endpoints": {
                        "type": "array",
                        "description": "Per pooled channel changed: the endpoints added, "
                        "removed (draining) and retuned (weight, max_concurrency), and "
                        "`balancing`: '' unchanged, 'knobs', or 'new <policy>'",
                        "items": {
                            "type": "object",
                            "required": ["channel", "added", "removed", "retuned", "balancing"],
                            "properties": {
                                "channel": {"type": "string"},
                                "added": {"type": "array", "items": {"type": "string"}},
                                "removed": {"type": "array", "items": {"type": "string"}},
                                "retuned": {"type": "array", "items": {"type": "string"}},
                                "balancing": {"type": "string"},
                            },
                        },
                    },
                },
            }
        },
    )
