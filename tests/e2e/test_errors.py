"""Bad input and broken upstreams, seen through the official SDK and raw HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from tests.e2e.stack import Gateway

USER: Any = [{"role": "user", "content": "hello"}]


def post_raw(
    stack: Gateway, body: bytes, path: str = "/v1/chat/completions"
) -> tuple[int, dict[str, Any], dict[str, str]]:
    request = urllib.request.Request(stack.url + path, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


def assert_openai_error(payload: dict[str, Any], code: str) -> None:
    error = payload["error"]
    assert set(error) >= {"message", "type", "param", "code", "request_id"}
    assert error["code"] == code, error
    assert error["request_id"].startswith("req_")
    assert "Traceback" not in error["message"]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b'{"model": "auto", "messages": [', 400, "invalid_json"),
        (b"[]", 400, "invalid_json"),
        (b'{"model": "auto"}', 400, "missing_required_parameter"),
        (b'{"model": "auto", "messages": "hi"}', 400, "invalid_type"),
        (b'{"model": "auto", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
         400, "invalid_type"),
        (b'{"model": "auto", "messages": [{"role": "user", "content": "x"}], "frobnicate": true}',
         400, "unsupported_parameter"),
        (b'{"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}', 404,
         "model_not_found"),
    ],
)  # fmt: skip
def test_bad_input_raw(stack: Gateway, body: bytes, status: int, code: str) -> None:
    got_status, payload, headers = post_raw(stack, body)
    assert got_status == status
    assert_openai_error(payload, code)
    assert headers["x-request-id"] == payload["error"]["request_id"]


def test_body_over_the_limit_is_413(stack: Gateway) -> None:
    big = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "x" * 70_000}]})
    status, payload, _ = post_raw(stack, big.encode())
    assert status == 413
    assert_openai_error(payload, "request_too_large")


def test_unknown_path_and_method(stack: Gateway) -> None:
    status, payload, _ = post_raw(stack, b"{}", "/v1/nothing")
    assert status == 404
    assert_openai_error(payload, "not_found")


def test_sdk_error_classes(stack: Gateway, sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        sdk.chat.completions.create(model="gpt-9", messages=USER)
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as empty:
        sdk.chat.completions.create(model="auto", messages=[])
    assert empty.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as unsupported:
        sdk.chat.completions.create(model="auto", messages=USER, extra_body={"bogus": 1})
    assert unsupported.value.code == "unsupported_parameter"


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("fault-reset", 502, "upstream_connection_error"),
        ("refused", 502, "upstream_connection_error"),
        ("fault-502", 502, "upstream_status_502"),
        ("fault-stall", 504, "upstream_timeout"),
        ("fault-400", 400, "upstream_rejected_request"),
        ("fault-429", 503, None),
    ],
)
def test_upstream_failures_map_to_gateway_errors(
    stack: Gateway, model: str, status: int, code: str | None, sdk: openai.OpenAI
) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        sdk.chat.completions.create(model=model, messages=USER)
    response = info.value.response
    assert response.status_code == status
    payload = response.json()
    assert_openai_error(payload, code or payload["error"]["code"])
    assert response.headers["x-gateway-route"].startswith(f"lane={model}")
    if status == 503:
        assert int(response.headers["retry-after"]) >= 1


def test_stream_that_breaks_midway_ends_with_an_error_event(
    stack: Gateway, sdk: openai.OpenAI
) -> None:
    stream = sdk.chat.completions.create(
        model="fault-midstream",
        messages=USER,
        stream=True,
    )
    received: list[str] = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            received.extend(c.delta.content or "" for c in chunk.choices)
    assert received, "some chunks arrive before the break"
    assert "broke the stream" in info.value.message


def test_stream_failing_before_first_byte_is_a_plain_http_error(
    stack: Gateway, sdk: openai.OpenAI
) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        sdk.chat.completions.create(model="fault-502", messages=USER, stream=True)
    assert info.value.status_code == 502
