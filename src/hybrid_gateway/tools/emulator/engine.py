"""The continuous-batching performance model that stands in for a GPU serving stack.

``BatchScheduler`` is the pure model (no I/O, no clock); ``Engine`` drives it in virtual decode
steps on an injected ``Clock``.  Each step:

1. admits waiting requests in arrival order while fewer than ``max_num_seqs`` run and the KV
   budget has room for the head of the queue (its prompt plus all its output tokens); the head
   that does not fit blocks the rest (FCFS, as in vLLM), and nothing running is ever pre-empted;
2. lasts ``decode_step_ms + per_seq_step_ms * batch + per_kilotoken_step_ms * context / 1000``
   plus ``prompt_tokens / prefill_tps`` for every request admitted at this step, where ``batch``
   is the number of running sequences and ``context`` the tokens they hold (prompt + generated);
3. gives every running sequence one token; a sequence that has all its tokens leaves at once, so
   its slot and KV reservation go to the next waiting request at the very next step.

So time to first token is queueing + the rest of the current step + one step with its prefill,
and per-token latency grows with the batch and with how long the batch's sequences are: one long
sequence slows everyone who shares its batch (the brief's section 8 finding).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from types import TracebackType

from hybrid_gateway.resilience.clock import Clock

from .prefix_cache import PrefixCache, PromptBlocks, prompt_blocks
from .settings import EngineSettings

# If the event loop falls this far behind the virtual schedule, resynchronise instead of running
# steps back to back to catch up.
_MAX_LAG_S = 0.25


class ContextTooLongError(ValueError):
    """A request needs more KV tokens than the whole budget: it could never be admitted."""


@dataclass(eq=False, slots=True)
class Sequence:
    """One request inside the engine, with its timeline in clock seconds."""

    prompt_tokens: int
    output_tokens: int
    submitted_at: float
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    generated: int = 0
    cancelled: bool = False
    # the prompt's block hashes (prefix_cache.py) and the prompt tokens found cached at admission
    prefix: PromptBlocks | None = None
    cached_tokens: int = 0
    _progress: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def kv_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @property
    def done(self) -> bool:
        return self.cancelled or self.generated >= self.output_tokens

    def notify(self) -> None:
        self._progress.set()

    async def progress(self) -> AsyncIterator[int]:
        """Yield the count of tokens generated so far each time it grows, until done."""
        async for (generated,) in SequenceGroup([self], self._progress).progress():
            yield generated

    async def wait_done(self) -> None:
        await SequenceGroup([self], self._progress).wait_done()


class SequenceGroup:
    """The ``n`` sequences of one request (``n > 1`` samples), woken by one shared event.

    As in vLLM's parallel sampling, the prompt is prefilled and held once: the first sequence
    carries it and the others only their own output tokens; each takes a batch slot.
    """

    def __init__(self, seqs: list[Sequence], progress: asyncio.Event) -> None:
        self.seqs = seqs
        self._progress = progress

    @property
    def done(self) -> bool:
        return all(seq.done for seq in self.seqs)

    def generated(self) -> tuple[int, ...]:
        return tuple(seq.generated for seq in self.seqs)

    async def progress(self) -> AsyncIterator[tuple[int, ...]]:
        """Yield every sequence's count of generated tokens each time one grows, until done."""
        seen = tuple(0 for _ in self.seqs)
        while True:
            self._progress.clear()
            now = self.generated()
            if now != seen:
                seen = now
                yield seen
                continue  # more tokens may have come while the consumer was busy
            if self.done:
                return
            await self._progress.wait()

    async def wait_done(self) -> None:
        while not self.done:
            self._progress.clear()
            await self._progress.wait()


@dataclass(frozen=True, slots=True)
class EngineStats:
    running: int
    waiting: int
    kv_tokens_used: int
    kv_tokens_budget: int
    steps: int
    generated_tokens: int
    # automatic prefix caching (prefix_cache.py; zeros while it is off)
    prefix_lookups: int = 0
    prefix_hits: int = 0
    prefix_hit_tokens: int = 0
    prefix_lookup_tokens: int = 0
    prefix_cached_blocks: int = 0


class BatchScheduler:
    """The pure continuous-batching model: queue, admission, step cost, token delivery."""

    def __init__(self, settings: EngineSettings) -> None:
        self._settings = settings
        self._cache = (
            PrefixCache(settings.prefix_cache_tokens, settings.prefix_block_tokens)
            if settings.prefix_cache_tokens > 0
            else None
        )
        self.running: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()
        self.kv_used = 0
        self.steps = 0
        self.generated_tokens = 0

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def enqueue(self, seq: Sequence) -> None:
        budget = self._settings.kv_budget_tokens
        if seq.kv_tokens > budget:
            raise ContextTooLongError(
                f"request needs {seq.kv_tokens} KV tokens "
                f"({seq.prompt_tokens} prompt + {seq.output_tokens} output); budget is {budget}"
            )
        self.waiting.append(seq)

    def enqueue_group(self, seqs: list[Sequence]) -> None:
        """Queue the sequences of one request together, or none of them."""
        need = sum(seq.kv_tokens for seq in seqs)
        budget = self._settings.kv_budget_tokens
        if need > budget:
            raise ContextTooLongError(
                f"request needs {need} KV tokens ({seqs[0].prompt_tokens} prompt + "
                f"{need - seqs[0].prompt_tokens} output over {len(seqs)} choices); "
                f"budget is {budget}"
            )
        self.waiting.extend(seqs)

    def cancel(self, seq: Sequence) -> None:
        """Drop a request (its client went away); a running one frees its slot at once."""
        if seq.done:
            return
        seq.cancelled = True
        if seq in self.running:
            self.running.remove(seq)
            self.kv_used -= seq.kv_tokens
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(seq)
        seq.notify()

    def admit(self, now: float) -> list[Sequence]:
        """Move waiting requests into the batch, FCFS, while slots and KV budget allow."""
        settings = self._settings
        admitted: list[Sequence] = []
        while self.waiting and len(self.running) < settings.max_num_seqs:
            head = self.waiting[0]
            if self.kv_used + head.kv_tokens > settings.kv_budget_tokens:
                break  # the head waits for memory; nobody overtakes it
            self.waiting.popleft()
            head.admitted_at = now
            if self._cache is not None and head.prefix is not None:
                head.cached_tokens = self._cache.admit(head.prefix, head.prompt_tokens)
            self.kv_used += head.kv_tokens
            self.running.append(head)
            admitted.append(head)
        return admitted

    def step_seconds(self, admitted: list[Sequence]) -> float:
        """How long the coming step takes, including the prefill of ``admitted``."""
        s = self._settings
        context = sum(seq.prompt_tokens + seq.generated for seq in self.running)
        prefill = sum(seq.prompt_tokens - seq.cached_tokens for seq in admitted)
        step_ms = (
            s.decode_step_ms
            + s.per_seq_step_ms * len(self.running)
            + s.per_kilotoken_step_ms * context / 1000.0
        )
        return step_ms / 1000.0 + prefill / s.prefill_tps

    def complete_step(self, now: float) -> list[Sequence]:
        """Give each running sequence one token; return (and release) the finished ones."""
        self.steps += 1
        finished: list[Sequence] = []
        still_running: list[Sequence] = []
        for seq in self.running:
            seq.generated += 1
            if seq.first_token_at is None:
                seq.first_token_at = now
            if seq.generated >= seq.output_tokens:
                seq.finished_at = now
                self.kv_used -= seq.kv_tokens
                finished.append(seq)
            else:
                still_running.append(seq)
            seq.notify()
        self.generated_tokens += len(self.running)
        self.running = still_running
        return finished

    def prefix_of(self, text: str) -> PromptBlocks | None:
        """The prompt's block hashes when prefix caching is on (else nothing to look up)."""
        if self._cache is None:
            return None
        return prompt_blocks(text, self._cache.block_tokens)

    def stats(self) -> EngineStats:
        prefix = asdict(self._cache.stats()) if self._cache is not None else {}
        return EngineStats(
            running=len(self.running),
            waiting=len(self.waiting),
            kv_tokens_used=self.kv_used,
            kv_tokens_budget=self._settings.kv_budget_tokens,
            steps=self.steps,
            generated_tokens=self.generated_tokens,
            **prefix,
        )


class Engine:
    """Runs the scheduler's decode steps in (virtual) time on ``clock``.

    Use as ``async with Engine(settings, clock) as engine:``; ``submit`` a request and read its
    tokens from ``Sequence.progress()`` or wait with ``Sequence.wait_done()``.
    """

    def __init__(self, settings: EngineSettings, clock: Clock) -> None:
        self._scheduler = BatchScheduler(settings)
        self._clock = clock
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._step_end = 0.0

    def submit(self, prompt_tokens: int, output_tokens: int) -> Sequence:
        """Queue a request; ``ContextTooLongError`` if it can never fit the KV budget."""
        if output_tokens < 1:
            raise ValueError("output_tokens must be >= 1")
        seq = Sequence(prompt_tokens, output_tokens, submitted_at=self._clock.now())
        self._scheduler.enqueue(seq)
        self._wake.set()
        return seq

    def submit_group(
        self, prompt_tokens: int, outputs: list[int], prompt_text: str = ""
    ) -> SequenceGroup:
        """Queue one request's ``len(outputs)`` choices; the first carries the prompt (and,
        with prefix caching on, ``prompt_text``'s blocks)."""
        if not outputs or min(outputs) < 1:
            raise ValueError("every choice needs output_tokens >= 1")
        now, event = self._clock.now(), asyncio.Event()
        prefix = self._scheduler.prefix_of(prompt_text) if prompt_text else None
        seqs = [
            Sequence(prompt_tokens, out, submitted_at=now, prefix=prefix, _progress=event)
            if i == 0
            else Sequence(0, out, submitted_at=now, _progress=event)
            for i, out in enumerate(outputs)
        ]
        self._scheduler.enqueue_group(seqs)
        self._wake.set()
        return SequenceGroup(seqs, event)

    def cancel(self, seq: Sequence) -> None:
        self._scheduler.cancel(seq)

    def cancel_group(self, group: SequenceGroup) -> None:
        for seq in group.seqs:
            self._scheduler.cancel(seq)

    def stats(self) -> EngineStats:
        return self._scheduler.stats()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="emulator-engine")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for seq in [*self._scheduler.running, *self._scheduler.waiting]:
            self._scheduler.cancel(seq)

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self) -> None:
        scheduler, clock = self._scheduler, self._clock
        while True:
            if scheduler.idle:
                self._wake.clear()
                await self._wake.wait()
                self._step_end = clock.now()
            start = max(self._step_end, clock.now() - _MAX_LAG_S)
            admitted = scheduler.admit(start)
            end = start + scheduler.step_seconds(admitted)
            delay = end - clock.now()
            if delay > 0:
                await clock.sleep(delay)
            else:
                await asyncio.sleep(0)  # behind schedule: still let clients run
            self._step_end = end
            scheduler.complete_step(end)
