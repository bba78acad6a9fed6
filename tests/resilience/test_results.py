"""The deferred results store (TTL, bound, tenant isolation) and webhook retries, by hand."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping

from hybrid_gateway.resilience.clock import ManualClock
from hybrid_gateway.resilience.settings import WebhookConfig
from hybrid_gateway.results.store import ResultsStore, ResultState
from hybrid_gateway.results.webhook import WebhookSender


async def test_results_are_per_tenant_and_expire() -> None:
    clock = ManualClock()
    store = ResultsStore(clock, ttl_s=60, max_entries=10)
    store.open("req_1", "acme", "heavy")
    assert store.get("req_1", "acme") is not None
    assert store.get("req_1", "globex") is None  # another tenant: as if it never existed
    store.finish("req_1", b"{}")
    entry = store.get("req_1", "acme")
    assert entry is not None and entry.state is ResultState.DONE and entry.body == b"{}"
    await clock.advance(61)
    assert store.get("req_1", "acme") is None and len(store) == 0
    store.finish("req_1", b"late")  # finished after expiry: nothing comes back
    assert len(store) == 0


async def test_the_store_is_bounded_oldest_first() -> None:
    store = ResultsStore(ManualClock(), ttl_s=60, max_entries=2)
    for i in range(3):
        store.open(f"req_{i}", "acme", "heavy")
    assert len(store) == 2 and store.get("req_0", "acme") is None
    store.fail("req_2", 502, "upstream_status_502", "boom")
    failed = store.get("req_2", "acme")
    assert failed is not None and (failed.state, failed.status) == (ResultState.FAILED, 502)


class Receiver:
    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[float, str, bytes]] = []
        self.clock: ManualClock | None = None

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> int:
        assert self.clock is not None
        self.calls.append((self.clock.now(), url, body))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def aclose(self) -> None:
        pass


class Outcomes:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def webhook(self, outcome: str) -> None:
        self.seen.append(outcome)


def sender(receiver: Receiver, **overrides: object) -> tuple[WebhookSender, ManualClock, Outcomes]:
    clock = ManualClock()
    receiver.clock = clock
    config = WebhookConfig.model_validate(
        {"url": "http://127.0.0.1:9/hook", "backoff_s": [1, 5, 30], **overrides}
    )
    outcomes = Outcomes()
    return WebhookSender(config, receiver, clock, [outcomes]), clock, outcomes


async def drive(clock: ManualClock, task: asyncio.Future[bool]) -> bool:
    while not task.done():
        await clock.advance(0.5)
    return task.result()


async def test_failed_deliveries_are_retried_on_the_backoff_schedule() -> None:
    receiver = Receiver(OSError("refused"), 503, TimeoutError(), 204)
    webhook, clock, outcomes = sender(receiver)
    task = webhook.submit("req_1", b'{"id":"req_1"}')
    assert task is not None
    assert await drive(clock, task)
    times = [at for at, _, _ in receiver.calls]
    assert [later - earlier for earlier, later in itertools.pairwise(times)] == [1.0, 5.0, 30.0]
    assert {url for _, url, _ in receiver.calls} == {"http://127.0.0.1:9/hook"}
    assert outcomes.seen == ["delivered"]


async def test_a_refusal_is_not_retried_and_running_out_of_retries_fails() -> None:
    receiver = Receiver(400)
    webhook, clock, outcomes = sender(receiver)
    task = webhook.submit("req_1", b"{}")
    assert task is not None and not await drive(clock, task)
    assert len(receiver.calls) == 1
    receiver.answers = [500, 500]
    webhook, clock, outcomes = sender(receiver, backoff_s=[2])
    task = webhook.submit("req_2", b"{}")
    assert task is not None and not await drive(clock, task)
    assert outcomes.seen == ["failed"]


async def test_deliveries_beyond_max_pending_are_dropped() -> None:
    receiver = Receiver(OSError(), OSError(), OSError(), OSError())
    webhook, _, outcomes = sender(receiver, max_pending=1)
    first = webhook.submit("req_1", b"{}")
    assert first is not None and webhook.submit("req_2", b"{}") is None
    assert outcomes.seen == ["dropped"]
    await webhook.aclose()
    assert first.cancelled() and webhook.pending == 0
