"""What the emulated model answers: ``n`` choices, each text, JSON or a tool call.

For each choice, in this order:

1. **A tool call** when ``tools`` are given and ``tool_choice`` allows: always for
   ``required`` or a named function, never for ``none``, and for ``auto`` at the profile's
   ``tool_call_rate`` (drawn from a hash of the prompt), except right after a ``tool`` message,
   which is answered with text.  The function is the named one or one picked by the hash, and
   its arguments are an instance of its ``parameters`` schema.
2. **JSON** for ``response_format``: an instance of the ``json_schema``; for ``json_object`` an
   instance of a JSON schema the prompt carries in a fenced block (as LangChain's format
   instructions do), else ``{"answer": TEXT}``.
3. **Text** from the answer source.

Everything is seeded by the model and the prompt (choice 0 exactly as with ``n = 1``; choice
``i`` by the prompt plus ``#i``), so the same request gets the same answer.  The answer's token
pieces drive the engine: a tool call's header (id, type, name) counts as one token, then one
per piece of its arguments.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from hybrid_gateway.accounting.tokens import split_tokens

from .instances import SchemaError, SchemaInstances
from .request import ChatCall, Tool
from .text import Prompt, stable_hash

_FENCED = re.compile(r"```(?:json)?\s*\n(\{.*?\})\s*\n```", re.DOTALL)
_RATE_SCALE = 1_000_000


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Choice:
    """One choice: content pieces, or (with ``call``) the call's argument pieces."""

    index: int
    pieces: list[str]
    finish_reason: str  # stop | length | tool_calls
    call: ToolCall | None = None

    @property
    def tokens(self) -> int:
        return len(self.pieces) + (1 if self.call is not None else 0)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


@dataclass(frozen=True, slots=True)
class Reply:
    """All choices of one answer, and the prompt's token count."""

    choices: list[Choice]
    prompt_tokens: int

    @property
    def completion_tokens(self) -> int:
        return sum(choice.tokens for choice in self.choices)


class ReplyBuilder:
    """Builds a request's ``Reply``; ``text`` writes the plain answer to a prompt."""

    def __init__(self, model: str, text: Callable[[Prompt], str], tool_call_rate: float) -> None:
        self._model = model
        self._text = text
        self._rate = round(tool_call_rate * _RATE_SCALE)

    def build(self, call: ChatCall) -> Reply:
        """``SchemaError`` when a schema has no instance (a 400 for the caller)."""
        if call.plain:
            return Reply([_text_choice(0, self._text(call.prompt), call)], call.prompt.tokens)
        choices = [self._choice(i, call) for i in range(call.n)]
        return Reply(choices, call.prompt.tokens)

    def _choice(self, index: int, call: ChatCall) -> Choice:
        prompt = call.prompt
        if index:
            prompt = replace(prompt, text=f"{prompt.text}\n#{index}")
        rng = random.Random(stable_hash(self._model, prompt.text, "structured"))
        tool = self._tool(call, prompt)
        if tool is not None:
            arguments = _json(SchemaInstances(rng).instance(tool.parameters))
            call_id = f"call_{stable_hash(self._model, prompt.text, 'call'):016x}"
            choice = Choice(
                index, split_tokens(arguments), "tool_calls", ToolCall(call_id, tool.name)
            )
            return _cap(choice, call)
        if call.json_schema is not None:
            text = _json(SchemaInstances(rng).instance(call.json_schema))
        elif call.json_mode:
            text = self._json_object(prompt, rng)
        else:
            text = self._text(prompt)
        return _text_choice(index, text, call)

    def _tool(self, call: ChatCall, prompt: Prompt) -> Tool | None:
        if not call.tools or call.tool_choice == "none":
            return None
        if call.forced_tool is not None:
            return next(tool for tool in call.tools if tool.name == call.forced_tool)
        if call.tool_choice == "auto":
            if call.after_tool:
                return None
            if stable_hash(self._model, prompt.text, "tool?") % _RATE_SCALE >= self._rate:
                return None
        return call.tools[stable_hash(self._model, prompt.text, "which") % len(call.tools)]

    def _json_object(self, prompt: Prompt, rng: random.Random) -> str:
        schema = _prompt_schema(prompt.text)
        if schema is not None:
            return _json(SchemaInstances(rng).instance(schema))
        return orjson.dumps({"answer": self._text(prompt)}).decode()


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError as exc:  # an enum or const orjson cannot write (a huge int)
        raise SchemaError(f"cannot write an instance of this schema: {exc}") from None


def _text_choice(index: int, text: str, call: ChatCall) -> Choice:
    return _cap(Choice(index, split_tokens(text) or [""], "stop"), call)


def _cap(choice: Choice, call: ChatCall) -> Choice:
    """Cut the choice to ``max_tokens``; a cut choice ends with ``length``."""
    limit = call.max_tokens
    if limit is None or choice.tokens <= limit:
        return choice
    keep = limit - (1 if choice.call is not None else 0)
    return replace(choice, pieces=choice.pieces[:keep], finish_reason="length")


def _prompt_schema(text: str) -> dict[str, Any] | None:
    """The last fenced JSON block of the prompt that is an object schema, if any."""
    for block in reversed(_FENCED.findall(text)):
        try:
            value = orjson.loads(block)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict) and isinstance(value.get("properties"), dict):
            return value
    return None
