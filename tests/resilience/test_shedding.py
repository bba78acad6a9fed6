"""Load shedding: the rolling error-rate window, hysteresis and who is shed, on a manual clock."""

from __future__ import annotations

import orjson

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.settings import SheddingConfig
from hybrid_gateway.resilience.shedding import ErrorRateMonitor, Shedder
from hybrid_gateway.tenancy.settings import TenantConfig
from hybrid_gateway.types import ChatRequest, RequestRecord

TENANTS = {
    "partner": TenantConfig(core=False),
    "bank": TenantConfig(core=True, non_core_apps=("marketing-bot",)),
}


def request(model: str = "auto") -> ChatRequest:
    return ChatRequest(model, [{"role": "user", "content": "hi"}], False, False, {})


def rec(tenant: str = "partner", app: str = "default", status: int = 200) -> RequestRecord:
    record = RequestRecord(request_id="req_1", started_at=0.0, tenant=tenant, app=app)
    record.status = status
    return record


def shedder(clock: ManualClock, **overrides: object) -> Shedder:
    config = SheddingConfig.model_validate(
        {"enabled": True, "window_s": 10, "min_requests": 10, "error_rate": 0.5,
         "recover_rate": 0.2, **overrides}
    )  # fmt: skip
    return Shedder(config, TENANTS, clock)


def feed(s: Shedder, ok: int, errors: int) -> None:
    for _ in range(ok):
        s.observe(rec(status=200))
    for _ in range(errors):
        s.observe(rec(status=502))


async def test_the_monitor_forgets_what_left_the_window() -> None:
    clock = ManualClock()
    monitor = ErrorRateMonitor(clock, window_s=10)
    for error in (True, True, False, False):
        monitor.record(error)
    assert monitor.rate() == (0.5, 4)
    await clock.advance(5)
    monitor.record(False)
    assert monitor.rate() == (0.4, 5)
    await clock.advance(5.5)  # the first second's four are out
    assert monitor.rate() == (0.0, 1)


async def test_shedding_starts_at_the_threshold_and_stops_with_hysteresis() -> None:
    clock = ManualClock()
    s = shedder(clock)
    feed(s, ok=4, errors=5)
    assert not s.active  # 9 requests: under min_requests
    feed(s, ok=0, errors=1)
    assert s.active  # 6 of 10
    await clock.advance(1)
    feed(s, ok=10, errors=0)
    assert s.active  # 6 of 20 = 0.3: above recover_rate, still on
    await clock.advance(1)
    feed(s, ok=11, errors=0)
    assert not s.active  # 6 of 31 < 0.2


async def test_only_non_core_traffic_is_shed_and_the_simpler_model_answers() -> None:
    clock = ManualClock()
    s = shedder(clock, simpler_model="light")
    feed(s, ok=0, errors=10)
    assert s.sheds(request(), rec("partner"))
    assert s.sheds(request(), rec("bank", app="marketing-bot"))
    assert not s.sheds(request(), rec("bank", app="teller"))
    assert not s.sheds(request(), rec("default"))
    assert not s.sheds(request("light"), rec("partner"))


async def test_shed_answers_do_not_keep_shedding_on() -> None:
    clock = ManualClock()
    s = shedder(clock)
    feed(s, ok=0, errors=10)
    shed = rec(status=503)
    s.answer(request(), shed)
    for _ in range(50):
        s.observe(shed)
    assert s.monitor.rate() == (1.0, 10)
    await clock.advance(11)
    assert not s.sheds(request(), rec())  # the window moved on: off without new answers


async def test_the_fallback_message_is_a_marked_chat_completion_with_its_options() -> None:
    clock = ManualClock()
    s = shedder(clock, link="https://status.example.com", simpler_model="light", status=503,
                retry_after_s=20)  # fmt: skip
    record = rec()
    result = s.answer(request("auto"), record)
    body = orjson.loads(result.body)
    assert body["object"] == "chat.completion" and body["model"] == "auto"
    assert body["system_fingerprint"] == "hybrid-gateway:shed"
    assert body["choices"][0]["finish_reason"] == "stop"
    text = body["choices"][0]["message"]["content"]
    assert "20 seconds" in text and "https://status.example.com" in text and "'light'" in text
    assert [o["type"] for o in body["x_gateway"]["options"]] == [
        "retry_later",
        "link",
        "simpler_answer",
    ]
    assert (record.fallback, record.status, record.extra["retry_after_s"]) == ("shed", 503, 20.0)
