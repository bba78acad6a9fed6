"""Which upstream 500s are validation errors: relayed as 400, not retried, not counted."""

from __future__ import annotations

import orjson
import pytest

from hybrid_gateway.upstreams.validation_errors import validation_error


def llama_cpp_python(message: str) -> bytes:  # llama_cpp/server/errors.py's 500 shape
    return orjson.dumps({"error": {"message": message, "type": "internal_server_error",
                                   "param": None, "code": None}})  # fmt: skip


def llama_server(message: str) -> bytes:  # llama.cpp's own server (format_error_response)
    return orjson.dumps({"error": {"code": 500, "message": message, "type": "server_error"}})


@pytest.mark.parametrize(
    "body",
    [
        llama_cpp_python('can only concatenate str (not "list") to str'),
        llama_cpp_python("'tool_call_id'"),
        llama_cpp_python("Conversation roles must alternate user/assistant/user/assistant/..."),
        llama_cpp_python("'NoneType' object is not subscriptable"),
        llama_server("[json.exception.type_error.302] type must be string, but is array"),
        llama_server("Failed to parse messages: Missing 'content'"),
        orjson.dumps({"detail": "1 validation error for ChatCompletionRequest"}),
    ],
)
def test_validation_shapes_are_recognised(body: bytes) -> None:
    assert validation_error(body) is not None


@pytest.mark.parametrize(
    "body",
    [
        llama_cpp_python("CUDA error: out of memory"),
        llama_cpp_python("llama_decode returned -1"),
        llama_server("Server is busy"),
        b"<html><body>500 Internal Server Error</body></html>",
        b"",
        orjson.dumps({"error": {"message": 42}}),
        orjson.dumps(["not", "an", "object"]),
    ],
)
def test_server_failures_are_not(body: bytes) -> None:
    assert validation_error(body) is None
