"""Load shedding: while the gateway's error rate is high, non-core traffic gets the cache only.

``ErrorRateMonitor`` counts answered requests and 5xx answers in one-second buckets over a
rolling ``window_s`` (memory bounded by the window, time from the injected clock).  ``Shedder``
turns that into a switch with hysteresis: it goes on when the 5xx share reaches ``error_rate``
(with at least ``min_requests`` in the window) and off only when it falls under
``recover_rate``, so it does not flap around the threshold.

While it is on, a request from a non-core tenant (``tenants.NAME.core: false``) or a non-core
app of a core tenant (``non_core_apps``) is answered from the cache when it hits, and otherwise
with the configured message as a normal ``chat.completion``: ``system_fingerprint``
``hybrid-gateway:shed``, an ``x_gateway`` field listing the options offered (retry later, a
link, a simpler model), ``x-gateway-fallback: shed`` and status 200 or 503 as configured.  A
non-core request for ``simpler_model`` still goes through: that is the simpler answer offered.
Core traffic is never shed.  Shed answers do not count in the monitor (they would keep it on).
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Mapping

import orjson

from hybrid_gateway.resilience.clock import Clock
from hybrid_gateway.resilience.settings import SheddingConfig
from hybrid_gateway.tenancy.settings import TenantConfig
from hybrid_gateway.types import ChatRequest, ChatResult, RequestRecord, Usage

__all__ = ["ErrorRateMonitor", "Shedder"]

SHED_FINGERPRINT = "hybrid-gateway:shed"


class ErrorRateMonitor:
    def __init__(self, clock: Clock, *, window_s: float) -> None:
        self._clock = clock
        self._window = max(1, round(window_s))
        self._buckets: deque[list[int]] = deque()  # [second, requests, errors], oldest first
        self.requests = 0
        self.errors = 0

    def record(self, error: bool) -> None:
        bucket = self._bucket()
        bucket[1] += 1
        bucket[2] += error
        self.requests += 1
        self.errors += error

    def rate(self) -> tuple[float, int]:
        """(share of errors, requests) over the window."""
        self._bucket()
        if not self.requests:
            return 0.0, 0
        return self.errors / self.requests, self.requests

    def _bucket(self) -> list[int]:
        second = int(self._clock.now())
        while self._buckets and self._buckets[0][0] <= second - self._window:
            _, requests, errors = self._buckets.popleft()
            self.requests -= requests
            self.errors -= errors
        if not self._buckets or self._buckets[-1][0] != second:
            self._buckets.append([second, 0, 0])
        return self._buckets[-1]


class Shedder:
    def __init__(
        self, config: SheddingConfig, tenants: Mapping[str, TenantConfig], clock: Clock
    ) -> None:
        self._config = config
        self._tenants = tenants
        self.monitor = ErrorRateMonitor(clock, window_s=config.window_s)
        self.active = False

    def replace_tenants(self, tenants: Mapping[str, TenantConfig]) -> None:
        """Hot reload (api/reload.py): the next request is judged by the new core flags."""
        self._tenants = tenants

    def observe(self, record: RequestRecord) -> None:
        """Count a finished request (shed answers excluded) and update the switch."""
        if record.fallback == "shed":
            return
        self.monitor.record(record.status >= 500)
        self._update()

    def _update(self) -> None:
        rate, requests = self.monitor.rate()
        if self.active:
            self.active = rate >= self._config.recover_rate and requests > 0
        else:
            self.active = requests >= self._config.min_requests and rate >= self._config.error_rate

    def sheds(self, request: ChatRequest, record: RequestRecord) -> bool:
        """Is this request to be answered from the cache only, now?"""
        if not self.active:
            return False
        self._update()  # the window may have moved on since the last answer
        if not self.active or request.model == self._config.simpler_model:
            return False
        tenant = self._tenants.get(record.tenant)
        if tenant is None:
            return False  # undeclared tenants (and ``default``) are core
        return not tenant.core or record.app in tenant.non_core_apps

    def answer(self, request: ChatRequest, record: RequestRecord) -> ChatResult:
        """The fallback message as a chat.completion; marks the record."""
        config = self._config
        options: list[dict[str, object]] = []
        text = config.message
        if config.retry_after_s is not None:
            options.append({"type": "retry_later", "after_s": config.retry_after_s})
            text += f" Please retry in about {config.retry_after_s:g} seconds."
        if config.link is not None:
            options.append({"type": "link", "url": config.link})
            text += f" Status and alternatives: {config.link}"
        if config.simpler_model is not None:
            options.append({"type": "simpler_answer", "model": config.simpler_model})
            text += f" A simpler answer is available now with model {config.simpler_model!r}."
        body = {
            "id": f"chatcmpl-shed-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "system_fingerprint": SHED_FINGERPRINT,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "x_gateway": {"fallback": "shed", "options": options},
        }  # fmt: skip
        record.fallback = "shed"
        record.status = config.status
        if config.status == 503 and config.retry_after_s is not None:
            record.extra["retry_after_s"] = config.retry_after_s
        usage = Usage(0, 0)
        record.usage = usage
        return ChatResult(orjson.dumps(body), usage)
