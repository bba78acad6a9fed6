"""Hypothesis strategies shared by the property tests: JSON values and chat request bodies."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from hybrid_gateway.api.schema import KNOWN_PARAMS, ROLES

# What orjson can parse: 64-bit integers, finite floats.
INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), INT64, st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)  # fmt: skip


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    return st.recursive(
        SCALARS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                     max_size=4),
        max_leaves=max_leaves,
    )  # fmt: skip


# Keys biased towards the ones the parser looks at, so checks past the unknown-key test run.
_KEYS = st.sampled_from(sorted(KNOWN_PARAMS)) | st.text(max_size=10)


@st.composite
def chat_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """Arbitrary objects shaped roughly like a chat request: mostly invalid, some valid."""
    body: dict[str, Any] = draw(st.dictionaries(_KEYS, json_values(), max_size=6))
    if draw(st.booleans()):
        body["model"] = draw(st.sampled_from(["auto", "light", ""]) | json_values(2))
    if draw(st.booleans()):
        body["messages"] = draw(st.lists(messages() | odd_messages() | json_values(4), max_size=3))
    return body


def odd_messages() -> st.SearchStrategy[dict[str, Any]]:
    """Message-shaped objects whose fields hold anything at all."""
    roles = st.sampled_from(sorted(ROLES)) | json_values(3)
    return st.fixed_dictionaries(
        {"role": roles},
        optional={"content": contents() | json_values(4), "tool_calls": json_values(2),
                  "function_call": json_values(2), "name": json_values(1)},
    )  # fmt: skip


def contents() -> st.SearchStrategy[Any]:
    part = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=30)})
    return st.text(max_size=40) | st.lists(part, min_size=1, max_size=3)


def messages() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"role": st.sampled_from(sorted(ROLES - {"tool", "function"})), "content": contents()}
    )


# Answer-changing parameters with valid values.
VALID_PARAMS: dict[str, st.SearchStrategy[Any]] = {
    "temperature": st.floats(0, 2) | st.integers(0, 2),
    "top_p": st.floats(0, 1) | st.integers(0, 1),
    "max_tokens": st.integers(1, 2**63 - 1) | st.integers(2**53 - 2, 2**53 + 2),
    # Around 2**53, where a float stops telling neighbouring integers apart.
    "seed": st.integers(-(2**63), 2**63 - 1) | st.integers(2**53 - 2, 2**53 + 2),
    "presence_penalty": st.floats(-2, 2),
    "frequency_penalty": st.floats(-2, 2),
    "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=4),
    "n": st.integers(1, 128),
    "top_k": st.integers(0, 2**63 - 1),
    "repetition_penalty": st.floats(0, 1e308),
}


@st.composite
def valid_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": draw(st.sampled_from(["auto", "light", "heavy"])),
        "messages": draw(st.lists(messages(), min_size=1, max_size=3)),
    }
    for name in draw(st.sets(st.sampled_from(sorted(VALID_PARAMS)), max_size=4)):
        body[name] = draw(VALID_PARAMS[name])
    return body
