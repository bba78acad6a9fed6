"""The gateway's exception tree.  Only ``api/error_mapping.py`` turns these into HTTP responses.

    GatewayError
    ├── ConfigError                 a bad config file: names the file, the field, what was expected
    ├── RequestError                the client's request is wrong (4xx)
    │   ├── InvalidRequest          400: bad JSON, wrong types, missing fields, unknown params
    │   ├── PayloadTooLarge         413: body over server.max_body_bytes
    │   ├── HeadersTooLarge         431: request headers over server.max_header_bytes
    │   ├── ModelNotFound           404: a model id the gateway does not serve
    │   ├── RequestNotFound         404: a request id this caller's tenant never made
    │   ├── AuthenticationFailed    401: no API key, an unknown or a revoked one (never echoed)
    │   ├── PermissionDenied        403: a lane the tenant may not use; admin API not enabled
    │   └── InsufficientQuota       402: the tenant's budget is spent and its policy is refuse
    ├── Overloaded                  503 + Retry-After: no capacity now (full lane, upstream 429)
    │   ├── CircuitOpen             503: the channel's breaker is open and there is no backup
    │   └── RateLimited             429: over the tenant's or the global rate quota
    └── UpstreamError               an upstream channel failed (5xx)
        ├── UpstreamUnavailable     502: connection refused/reset, bad status, broken body
        └── UpstreamTimeout         504: no answer before the channel's timeout

Each carries an OpenAI-style ``type`` and ``code`` so the mapping to the wire is one table.
"""

from __future__ import annotations


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class ConfigError(GatewayError):
    """Raised at start-up; never reaches a client."""

    def __init__(self, file: str, field: str, expected: str) -> None:
        super().__init__(f"{file}: {field}: {expected}")
        self.file = file
        self.field = field
        self.expected = expected


class RequestError(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class InvalidRequest(RequestError):
    pass


class PayloadTooLarge(RequestError):
    status = 413
    code = "request_too_large"


class HeadersTooLarge(RequestError):
    status = 431
    code = "request_header_fields_too_large"


class ModelNotFound(RequestError):
    status = 404
    code = "model_not_found"


class RequestNotFound(RequestError):
    """Also for another tenant's request: whether an id exists is not told across tenants."""

    status = 404
    code = "request_not_found"


class AuthenticationFailed(RequestError):
    status = 401
    code = "invalid_api_key"


class PermissionDenied(RequestError):
    status = 403
    code = "model_not_allowed"


class InsufficientQuota(RequestError):
    # 402, not OpenAI's 429: SDKs retry a 429 on their own, and a spent budget does not come
    # back in a few seconds.
    status = 402
    type = "insufficient_quota"
    code = "insufficient_quota"


class Overloaded(GatewayError):
    status = 503
    type = "overloaded_error"
    code = "lane_queue_timeout"

    def __init__(self, message: str, *, retry_after_s: float, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class CircuitOpen(Overloaded):
    code = "circuit_open"


class RateLimited(Overloaded):
    """Over a rate quota; ``retry_after_s`` is when the bucket next holds enough."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class UpstreamError(GatewayError):
    status = 502
    type = "upstream_error"
    code = "upstream_error"

    def __init__(self, message: str, *, channel: str, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.channel = channel


class UpstreamUnavailable(UpstreamError):
    code = "upstream_unavailable"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"
