"""Upstream profiles: what each OpenAI-compatible server misreads, rewritten or refused up front.

``channels.NAME.profile`` names one (``auto`` detects it from ``GET /models``, once, on the
channel's first request).  A profile says what the request sent to that server must look like:

    rename_max_completion_tokens   the server reads only ``max_tokens`` (llama-cpp-python
                                   ignores ``max_completion_tokens``: 8 asked, 45 generated)
    flatten_text_parts             content given as a list of text parts is sent as one string
                                   (llama-cpp-python answers 500 "can only concatenate str")
    fill_null_content              an assistant message calling tools with ``content: null`` is
                                   sent with ``""`` (llama-cpp-python 0.3's request model
                                   refuses null there: a 500 "7 validation errors")
    json_schema_as_object_schema   ``response_format`` ``json_schema`` is sent as
                                   ``{"type": "json_object", "schema": ...}``, the form
                                   llama-cpp-python constrains (it refuses ``json_schema``)
    native_n                       False: the server ignores ``n``; ``n > 1`` is then answered
                                   by ``n`` parallel calls merged into one answer (usage
                                   summed, choices re-indexed), or refused with 400 when the
                                   channel's ``fan_out_n`` is 0 or below ``n``
    unsupported_params/parts       refused with 400 before anything is sent, instead of a 500
                                   from the server (or a silently ignored field)

Every profile also refuses ``max_tokens``/``max_completion_tokens`` above the channel's
``context_tokens`` when that is set.  Refusals raise ``UnsupportedByUpstream``: a 400 that the
breaker does not count (the server never saw the request).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from hybrid_gateway.errors import InvalidRequest

__all__ = [
    "PROFILES",
    "Plan",
    "Profile",
    "ProfileName",
    "UnsupportedByUpstream",
    "merge_answers",
    "plan_request",
    "profile_from_models",
]


class ProfileName(enum.StrEnum):
    OPENAI = "openai"
    VLLM = "vllm"
    SGLANG = "sglang"
    LLAMA_CPP = "llama_cpp"
    OLLAMA = "ollama"
    TGI = "tgi"
    AUTO = "auto"


class UnsupportedByUpstream(InvalidRequest):
    """Refused at the gateway because the channel's server cannot do it: never sent."""

    code = "unsupported_by_upstream"


@dataclass(frozen=True, slots=True)
class Profile:
    name: ProfileName
    rename_max_completion_tokens: bool = False
    flatten_text_parts: bool = False
    fill_null_content: bool = False
    json_schema_as_object_schema: bool = False
    native_n: bool = True
    unsupported_params: frozenset[str] = frozenset()
    unsupported_parts: frozenset[str] = frozenset()


# OpenAI-only features that self-hosted servers lack: ignored at best, a 500 at worst.
_HOSTED_ONLY = frozenset({"audio", "prediction", "web_search_options"})

PROFILES: Mapping[ProfileName, Profile] = {
    ProfileName.OPENAI: Profile(ProfileName.OPENAI),
    ProfileName.VLLM: Profile(ProfileName.VLLM, unsupported_params=_HOSTED_ONLY),
    ProfileName.SGLANG: Profile(ProfileName.SGLANG, unsupported_params=_HOSTED_ONLY),
    ProfileName.LLAMA_CPP: Profile(
        ProfileName.LLAMA_CPP, rename_max_completion_tokens=True, flatten_text_parts=True,
        fill_null_content=True, json_schema_as_object_schema=True, native_n=False,
        unsupported_params=_HOSTED_ONLY | {"modalities"},
        unsupported_parts=frozenset({"input_audio", "file"}),
    ),
    ProfileName.OLLAMA: Profile(
        ProfileName.OLLAMA, rename_max_completion_tokens=True, native_n=False,
        unsupported_params=_HOSTED_ONLY | {"logit_bias", "modalities"},
        unsupported_parts=frozenset({"input_audio", "file"}),
    ),
    ProfileName.TGI: Profile(
        ProfileName.TGI, rename_max_completion_tokens=True, native_n=False,
        unsupported_params=_HOSTED_ONLY | {"logit_bias", "modalities"},
        unsupported_parts=frozenset({"input_audio", "file"}),
    ),
}  # fmt: skip

# ``owned_by`` of ``GET /models`` entries -> the server that says so.
_OWNED_BY: Mapping[str, ProfileName] = {
    "vllm": ProfileName.VLLM,
    "sglang": ProfileName.SGLANG,
    "llamacpp": ProfileName.LLAMA_CPP,  # llama.cpp's own llama-server
    "me": ProfileName.LLAMA_CPP,  # llama-cpp-python's server
    "library": ProfileName.OLLAMA,  # Ollama, for models from its library
    "ollama": ProfileName.OLLAMA,
    "tgi": ProfileName.TGI,
    "openai": ProfileName.OPENAI,
    "system": ProfileName.OPENAI,
    "openai-internal": ProfileName.OPENAI,
}
# Response headers only one kind of server sends.
_HEADERS: Mapping[str, ProfileName] = {
    "openai-version": ProfileName.OPENAI,
    "openai-organization": ProfileName.OPENAI,
    "x-compute-type": ProfileName.TGI,  # text-generation-inference
}


def profile_from_models(raw: bytes, headers: Mapping[str, str]) -> ProfileName:
    """The profile a ``GET /models`` answer points at; ``openai`` (no rewriting) if unsure."""
    for header, name in _HEADERS.items():
        if header in headers:
            return name
    try:
        listing = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ProfileName.OPENAI
    data = listing.get("data") if isinstance(listing, dict) else None
    for entry in data if isinstance(data, list) else ():
        owner = entry.get("owned_by") if isinstance(entry, dict) else None
        if isinstance(owner, str) and owner.lower() in _OWNED_BY:
            return _OWNED_BY[owner.lower()]
    return ProfileName.OPENAI


@dataclass(frozen=True, slots=True)
class Plan:
    """What to send: ``body`` once, or ``fan_out`` copies (``body_for``) merged afterwards."""

    body: Mapping[str, Any]
    fan_out: int = 1

    def body_for(self, i: int) -> Mapping[str, Any]:
        """Copy ``i`` of a fan-out: a given seed is moved on by ``i`` so answers differ."""
        seed = self.body.get("seed")
        if i == 0 or not isinstance(seed, int):
            return self.body
        return {**self.body, "seed": (seed + i + 2**63) % 2**64 - 2**63}


@dataclass(frozen=True, slots=True)
class Limits:
    """The channel's own settings that a plan respects."""

    channel: str
    context_tokens: int | None = None
    fan_out_n: int = 16


def plan_request(
    profile: Profile, body: Mapping[str, Any], limits: Limits, *, stream: bool
) -> Plan:
    """The request as ``profile``'s server must see it; ``UnsupportedByUpstream`` if it can't."""
    _refuse_unsupported(profile, body, limits.channel)
    _check_context(body, limits)
    out = dict(body)
    if profile.rename_max_completion_tokens and "max_completion_tokens" in out:
        value = out.pop("max_completion_tokens")
        if value is not None:
            out["max_tokens"] = value
    if profile.flatten_text_parts or profile.fill_null_content:
        out["messages"] = [_message_for(profile, m) for m in out["messages"]]
    if profile.json_schema_as_object_schema:
        out["response_format"] = _object_schema(out.get("response_format"))
        if out["response_format"] is None:
            del out["response_format"]
    n = out.get("n")
    if profile.native_n or not isinstance(n, int) or n <= 1:
        return Plan(out)
    if stream or n > limits.fan_out_n:
        why = "with stream" if stream else f"above channels.{limits.channel}.fan_out_n"
        raise UnsupportedByUpstream(
            f"Channel {limits.channel} ({profile.name}) does not implement 'n'; n={n} {why} "
            "cannot be answered by parallel calls. Send n=1, or several requests.",
            param="n",
        )
    del out["n"]
    return Plan(out, fan_out=n)


def _refuse_unsupported(profile: Profile, body: Mapping[str, Any], channel: str) -> None:
    for name in sorted(profile.unsupported_params):
        if body.get(name) is not None:
            raise UnsupportedByUpstream(
                f"Channel {channel} ({profile.name}) does not support '{name}'.", param=name
            )
    if not profile.unsupported_parts:
        return
    for i, message in enumerate(body.get("messages") or ()):
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if part.get("type") in profile.unsupported_parts:
                raise UnsupportedByUpstream(
                    f"Channel {channel} ({profile.name}) does not support content parts of "
                    f"type '{part['type']}'.",
                    param=f"messages[{i}].content[{j}].type",
                )


def _check_context(body: Mapping[str, Any], limits: Limits) -> None:
    if limits.context_tokens is None:
        return
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and value > limits.context_tokens:
            raise InvalidRequest(
                f"{name} is too large: {value}. This model supports at most "
                f"{limits.context_tokens} tokens of context, whereas you provided {value}.",
                param=name, code="invalid_value",
            )  # fmt: skip


def _message_for(profile: Profile, message: Mapping[str, Any]) -> Mapping[str, Any]:
    """Text parts joined by newlines into one string; a null assistant content made ``""``."""
    content = message.get("content")
    if content is None and profile.fill_null_content and message.get("role") == "assistant":
        return {**message, "content": ""}
    if (
        not profile.flatten_text_parts
        or not isinstance(content, list)
        or not all(p.get("type") == "text" for p in content)
    ):
        return message
    return {**message, "content": "\n".join(str(p.get("text", "")) for p in content)}


def _object_schema(response_format: Any) -> Any:
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return response_format
    schema = response_format.get("json_schema") or {}
    out: dict[str, Any] = {"type": "json_object"}
    if isinstance(schema.get("schema"), dict):
        out["schema"] = schema["schema"]
    return out


def merge_answers(answers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One ``chat.completion`` from the answers of a fan-out: choices re-indexed in order,
    usage summed (each call read the prompt, so each is billed)."""
    merged = dict(answers[0])
    choices: list[Any] = []
    totals: dict[str, int] = {}
    for answer in answers:
        for choice in answer.get("choices") or ():
            choices.append(
                {**choice, "index": len(choices)} if isinstance(choice, dict) else choice
            )
        usage = answer.get("usage")
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key) if isinstance(usage, dict) else None
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
    merged["choices"] = choices
    if totals:
        merged["usage"] = totals
    return merged
