"""Property tests of the canonical cache key (pipeline/key.py).

Same question, same answer-changing parameters -> same key, however the body is written; any
change that can change the answer -> a different key (a shared key would serve one request
the answer to another).
"""

from __future__ import annotations

import math
import random
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hybrid_gateway.api.schema import parse_chat_request
from hybrid_gateway.errors import InvalidRequest
from hybrid_gateway.pipeline.key import request_key
from tests.hardening.strategies import VALID_PARAMS, valid_bodies


def key(body: dict[str, Any], namespace: str = "tenant") -> str:
    return request_key(parse_chat_request(body), namespace)


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = [(k, _shuffled(v, rng)) for k, v in value.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@settings(max_examples=200)
@given(valid_bodies(), st.randoms(use_true_random=False))
def test_key_ignores_the_order_of_keys(body: dict[str, Any], rng: random.Random) -> None:
    assert key(_shuffled(body, rng)) == key(body)


_NEUTRAL: dict[str, st.SearchStrategy[Any]] = {
    "user": st.text(max_size=10),
    "metadata": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    "stream": st.booleans(),
    "store": st.booleans(),
    "prompt_cache_key": st.text(max_size=10),
    "safety_identifier": st.text(max_size=10),
    # Parameters at the API default are the same request as the parameter left out.
    "temperature": st.sampled_from([1, 1.0, None]),
    "top_p": st.sampled_from([1, 1.0, None]),
    "n": st.sampled_from([1, None]),
    "presence_penalty": st.sampled_from([0, 0.0, -0.0, None]),
    "frequency_penalty": st.sampled_from([0, 0.0, -0.0, None]),
    "logprobs": st.sampled_from([False, None]),
}


@settings(max_examples=200)
@given(valid_bodies(), st.data())
def test_key_ignores_parameters_that_do_not_change_the_answer(
    body: dict[str, Any], data: st.DataObject
) -> None:
    base = {k: v for k, v in body.items() if k not in _NEUTRAL}
    extra = data.draw(st.fixed_dictionaries({}, optional=_NEUTRAL))
    assert key({**base, **extra}) == key(base)


@settings(max_examples=200)
@given(valid_bodies(), st.sampled_from(sorted(VALID_PARAMS)), st.data())
def test_key_changes_with_any_answer_changing_value(
    body: dict[str, Any], name: str, data: st.DataObject
) -> None:
    first = data.draw(VALID_PARAMS[name], label="first")
    # The nearest other value is the hardest case: 2**53 + 1 next to 2**53, a float's neighbour.
    second = data.draw(VALID_PARAMS[name] | st.sampled_from(_neighbours(first)), label="second")
    assume(_different(first, second) and not _both_defaults(name, first, second))
    try:
        pair = key({**body, name: first}), key({**body, name: second})
    except InvalidRequest:  # a neighbour outside the parameter's range
        assume(False)
        raise
    assert pair[0] != pair[1]


@settings(max_examples=100)
@given(valid_bodies(), st.text(min_size=1, max_size=10))
def test_key_changes_with_the_question_the_model_and_the_tenant(
    body: dict[str, Any], suffix: str
) -> None:
    changed = [dict(m) for m in body["messages"]]
    changed[-1]["content"] = "x" + suffix  # never equal to a plain-string or parts content
    assume(changed[-1]["content"] != body["messages"][-1]["content"])
    assert key({**body, "messages": changed}) != key(body)
    assert key({**body, "model": body["model"] + "-2"}) != key(body)
    assert key(body, "tenant-a") != key(body, "tenant-b")


_DEFAULTS = {"temperature": 1, "top_p": 1, "n": 1, "presence_penalty": 0, "frequency_penalty": 0}


def _neighbours(value: Any) -> list[Any]:
    if isinstance(value, bool) or not _number(value):
        return [value]
    if isinstance(value, int):
        return [value - 1, value + 1]
    return [math.nextafter(value, -math.inf), math.nextafter(value, math.inf)]


def _both_defaults(name: str, a: Any, b: Any) -> bool:
    default = _DEFAULTS.get(name)
    return default is not None and a == default and b == default


def _different(a: Any, b: Any) -> bool:
    """Different as the model sees it: 1 and 1.0 (and 0.0 and -0.0) are the same number."""
    if type(a) is not type(b) and not (_number(a) and _number(b)):
        return True
    return bool(a != b)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def test_regression_seeds_beyond_float_precision_are_different_requests() -> None:
    """Found by hypothesis: seeds were normalised through float(), so 2**53 and 2**53 + 1
    (both valid int64 seeds) shared one key and one cached answer."""
    body = {"model": "auto", "messages": [{"role": "user", "content": "q"}]}
    assert key({**body, "seed": 2**53}) != key({**body, "seed": 2**53 + 1})
    assert key({**body, "max_tokens": 2**62}) != key({**body, "max_tokens": 2**62 + 1})


def test_regression_negative_zero_is_zero() -> None:
    body = {"model": "auto", "messages": [{"role": "user", "content": "q"}]}
    assert key({**body, "temperature": -0.0}) == key({**body, "temperature": 0})
