"""The emulator's HTTP face: an OpenAI-compatible aiohttp application.

Endpoints: ``POST /v1/chat/completions`` (plain and SSE streaming), ``GET /v1/models``,
``GET /healthz`` (and ``GET /health``, the path vLLM, SGLang and llama.cpp serve, which a
replica pool's active checks probe) and ``GET /stats``.  Each chat request goes: parse ->
scripted/random fault -> answer text -> either straight back (``zero_delay``) or through the
batching ``Engine``, whose token timeline paces the response.

Run it with ``handler_cancellation=True`` (the CLI does) so a client that hangs up cancels its
request and frees its batch slot, as vLLM aborts requests on disconnect.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass

import orjson
from aiohttp import web

from hybrid_gateway.resilience.clock import Clock, MonotonicClock

from .engine import ContextTooLongError, Engine, SequenceGroup
from .faults import NO_FAULT, NO_SCRIPT, Fault, FaultInjector, FaultKind, parse_model
from .instances import SchemaError
from .replies import Choice, Reply, ReplyBuilder
from .request import BadRequestError, ChatCall, parse_chat_call
from .settings import EmulatorSettings
from .text import AnswerSource, Prompt, PseudoAnswers, stable_hash
from .wire import ChunkEncoder, CompletionIds, completion_body, error_body

_JSON = "application/json"
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_MIDSTREAM_CHUNKS = 3  # content chunks sent before a scripted mid-stream reset
_MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class Counters:
    served: int = 0
    errors: int = 0
    resets: int = 0
    stalls: int = 0
    cancelled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class EmulatorService:
    """Request handlers plus the state they share, one per application."""

    def __init__(self, settings: EmulatorSettings, clock: Clock, answers: AnswerSource) -> None:
        self.settings = settings
        self.counters = Counters()
        self._clock = clock
        self._answers = answers
        self._engine = Engine(settings.engine, clock)
        self._faults = FaultInjector(settings.faults)
        self._ids = CompletionIds()
        text = self._zero_delay_text if settings.zero_delay else self._answer_text
        self._replies = ReplyBuilder(settings.model, text, settings.tool_call_rate)
        model = {
            "id": settings.model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "hybrid-gateway-emulator",
        }
        self._models_body = orjson.dumps({"object": "list", "data": [model]})

    async def lifespan(self, app: web.Application) -> AsyncIterator[None]:
        if not self.settings.zero_delay:
            await self._engine.start()
        yield
        await self._engine.aclose()

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(body=b'{"status":"ok"}', content_type=_JSON)

    async def models(self, request: web.Request) -> web.Response:
        return web.Response(body=self._models_body, content_type=_JSON)

    async def stats(self, request: web.Request) -> web.Response:
        engine = asdict(self._engine.stats())
        body = {"model": self.settings.model, **engine, **asdict(self.counters)}
        return web.Response(body=orjson.dumps(body), content_type=_JSON)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            call = parse_chat_call(await request.read(), self.settings.model)
            base, script = parse_model(call.model) if "@" in call.model else (call.model, NO_SCRIPT)
        except BadRequestError as exc:
            return self._error(400, str(exc), exc.param, exc.code)
        except ValueError as exc:  # an unknown @directive
            return self._error(400, str(exc), "model", None)
        if self.settings.strict_model and base != self.settings.model:
            message = f"The model `{base}` does not exist."
            return self._error(404, message, "model", "model_not_found")
        fault = self._faults.decide(call.model, script)
        if fault.stall_s > 0:
            self.counters.stalls += 1
            await self._clock.sleep(fault.stall_s)
        if fault.kind is FaultKind.ERROR:
            message = f"emulated upstream failure (HTTP {fault.status})"
            response = self._error(fault.status, message, None, "emulated_fault")
            if fault.retry_after_s is not None:
                response.headers["Retry-After"] = f"{fault.retry_after_s:g}"
            return response
        if fault.kind is FaultKind.RESET:
            return self._reset(request)
        return await self._answer(request, call, fault)

    def _error(
        self, status: int, message: str, param: str | None, code: str | None
    ) -> web.Response:
        self.counters.errors += 1
        body = error_body(status, message, param, code)
        return web.Response(status=status, body=body, content_type=_JSON)

    def _reset(self, request: web.Request) -> web.StreamResponse:
        """Drop the connection; aiohttp sees the closed transport and sends nothing more."""
        self.counters.resets += 1
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=499)  # never reaches the client

    def _zero_delay_text(self, prompt: Prompt) -> str:
        # The upstream of the overhead benchmark: a short answer that still differs per prompt,
        # without the engine or the answer source.
        return f"[{self.settings.model}] answer {stable_hash(prompt.text) & 0xFFFFFFFF:08x}."

    def _answer_text(self, prompt: Prompt) -> str:
        return self._answers.answer(prompt, self.settings.model)

    async def _answer(
        self, request: web.Request, call: ChatCall, fault: Fault
    ) -> web.StreamResponse:
        try:
            reply = self._replies.build(call)
        except SchemaError as exc:
            param = "response_format" if call.json_schema is not None else "tools"
            return self._error(400, str(exc), param, "invalid_json_schema")
        if self.settings.zero_delay:
            if fault is NO_FAULT and not call.stream:
                return self._complete(call, reply)  # the hot path of the overhead benchmark
            return await self._respond(request, call, reply, fault, None)
        outputs = [choice.tokens for choice in reply.choices]
        try:
            group = self._engine.submit_group(reply.prompt_tokens, outputs, call.prompt.text)
        except ContextTooLongError as exc:
            return self._error(400, str(exc), "messages", "context_length_exceeded")
        try:
            return await self._respond(request, call, reply, fault, group)
        finally:
            if not group.done:  # the client went away (handler cancelled): free the slots
                self.counters.cancelled += 1
                self._engine.cancel_group(group)

    async def _respond(
        self,
        request: web.Request,
        call: ChatCall,
        reply: Reply,
        fault: Fault,
        group: SequenceGroup | None,
    ) -> web.StreamResponse:
        if call.stream:
            return await self._stream(request, call, reply, fault, group)
        if group is not None:
            await group.wait_done()
        if fault.token_delay_s:
            longest = max(choice.tokens for choice in reply.choices)
            await self._clock.sleep(fault.token_delay_s * longest)
        if fault.kind is FaultKind.MIDSTREAM_RESET:
            return await self._partial_body(request, call, reply)
        return self._complete(call, reply)

    def _complete(self, call: ChatCall, reply: Reply) -> web.Response:
        self._count_served(reply)
        body = completion_body(self._ids.next(), int(time.time()), call.model, reply)
        return web.Response(body=body, content_type=_JSON)

    def _count_served(self, reply: Reply) -> None:
        self.counters.served += 1
        self.counters.prompt_tokens += reply.prompt_tokens
        self.counters.completion_tokens += reply.completion_tokens

    async def _partial_body(
        self, request: web.Request, call: ChatCall, reply: Reply
    ) -> web.StreamResponse:
        """Headers and half the body of a plain reply, then a dropped connection."""
        body = completion_body(self._ids.next(), int(time.time()), call.model, reply)
        response = web.StreamResponse(headers={"Content-Type": _JSON})
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body[: len(body) // 2])
        return self._reset(request)

    async def _stream(
        self,
        request: web.Request,
        call: ChatCall,
        reply: Reply,
        fault: Fault,
        group: SequenceGroup | None,
    ) -> web.StreamResponse:
        """Send each token as the engine makes it (all at once without an engine)."""
        encoder = ChunkEncoder(self._ids.next(), int(time.time()), call.model, call.include_usage)
        response = web.StreamResponse(headers=_SSE_HEADERS)
        try:
            if group is None and fault is NO_FAULT:  # zero-delay: the whole stream in one write
                await response.prepare(request)
                frames = [encoder.advance(c, 0, c.tokens) for c in reply.choices]
                await response.write(b"".join(frames) + encoder.end(reply))
            elif await self._stream_tokens(request, response, encoder, reply, fault, group):
                await response.write(encoder.end(reply))
            else:
                return self._reset(request)
        except ConnectionResetError:
            return response  # the client left; the caller frees its engine slots
        self._count_served(reply)
        return response

    async def _stream_tokens(
        self,
        request: web.Request,
        response: web.StreamResponse,
        encoder: ChunkEncoder,
        reply: Reply,
        fault: Fault,
        group: SequenceGroup | None,
    ) -> bool:
        """Write each choice's tokens as they come; False if a mid-stream reset cut them short."""
        midstream = fault.kind is FaultKind.MIDSTREAM_RESET
        sent = [0] * len(reply.choices)
        async for generated in _timeline(group, reply):
            if not response.prepared:  # headers go out with the first token, as in vLLM
                await response.prepare(request)
            for choice, upto in zip(reply.choices, generated, strict=True):
                if midstream:
                    upto = min(upto, _MIDSTREAM_CHUNKS)
                await self._write_tokens(response, encoder, choice, sent[choice.index], upto, fault)
                sent[choice.index] = upto
            if midstream and all(
                n >= min(_MIDSTREAM_CHUNKS, c.tokens)
                for n, c in zip(sent, reply.choices, strict=True)
            ):
                return False
        return True

    async def _write_tokens(
        self,
        response: web.StreamResponse,
        encoder: ChunkEncoder,
        choice: Choice,
        start: int,
        stop: int,
        fault: Fault,
    ) -> None:
        finish = fault.kind is not FaultKind.MIDSTREAM_RESET
        if start >= stop:
            return
        if not fault.token_delay_s:
            await response.write(encoder.advance(choice, start, stop, finish))
            return
        for token in range(start, stop):
            await self._clock.sleep(fault.token_delay_s)
            await response.write(encoder.advance(choice, token, token + 1, finish))


SERVICE = web.AppKey("emulator_service", EmulatorService)


async def _timeline(group: SequenceGroup | None, reply: Reply) -> AsyncIterator[tuple[int, ...]]:
    """Each choice's cumulative token count, as the counts grow."""
    if group is None:
        yield tuple(choice.tokens for choice in reply.choices)
        return
    async for generated in group.progress():
        yield generated


def create_emulator_app(
    settings: EmulatorSettings,
    clock: Clock | None = None,
    answers: AnswerSource | None = None,
) -> web.Application:
    """Build the emulator application; the engine starts and stops with it."""
    if answers is None:
        answers = PseudoAnswers(settings.min_output_tokens, settings.max_output_tokens)
    service = EmulatorService(settings, clock or MonotonicClock(), answers)
    app = web.Application(client_max_size=_MAX_BODY_BYTES)
    app[SERVICE] = service
    app.cleanup_ctx.append(service.lifespan)
    app.router.add_post("/v1/chat/completions", service.chat_completions)
    app.router.add_get("/v1/models", service.models)
    app.router.add_get("/healthz", service.healthz)
    app.router.add_get("/health", service.healthz)
    app.router.add_get("/stats", service.stats)
    return app
