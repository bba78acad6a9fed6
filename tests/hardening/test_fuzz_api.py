"""Schemathesis fuzzes the running gateway against its own ``/openapi.json``.

Real processes: the gateway on loopback in front of zero-delay emulators (conftest.py).  For
every described operation, schema-valid and schema-violating requests (schemathesis'
positive and negative modes); chat requests mostly name a served model, fault lanes included,
so generated bodies travel the whole pipeline.  Every answer must:

- not be a 5xx, except the documented upstream 502/503/504;
- carry no traceback;
- if 4xx/5xx, be the OpenAI error object whose ``request_id`` is the ``x-request-id`` header;
- match the spec (status, content type, headers, body schema: schemathesis' checks).

Every operation the spec describes is fuzzed, a bounded number of cases each (``CASES``,
``DEFAULT_CASES``), so the whole run stays under a minute here.
"""

from __future__ import annotations

import collections
import re
import urllib.error
import urllib.request
from typing import Any

import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config._checks import NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES
from schemathesis.specs.openapi.checks import positive_data_acceptance

from hybrid_gateway.api.openapi import build_spec
from hybrid_gateway.api.schema import _INT_RANGES
from tests.e2e.stack import Gateway
from tests.hardening.conftest import ADMIN_KEY, FUZZ_LANES
from tests.hardening.corpus import CorpusCase, load_corpus

# (method, path) -> generated cases; every other described operation gets DEFAULT_CASES.
# The chat endpoint gets most: it parses the bodies.
CASES: dict[tuple[str, str], int] = {
    ("POST", "/v1/chat/completions"): 300,
    ("GET", "/v1/models/{model_id}"): 40,
}
DEFAULT_CASES = 25
# Every operation /openapi.json describes: a new endpoint is fuzzed once it is described.
OPERATIONS = sorted(
    (method.upper(), path) for path, item in build_spec()["paths"].items() for method in item
)
UPSTREAM_STATUSES = frozenset({502, 503, 504})
# Body fields whose valid values only the running config knows: valid cases mostly name one,
# so they get past "no such model/tenant" (None keeps the generated value).
KNOWN_VALUES: dict[tuple[str, str], tuple[str, list[str | None]]] = {
    ("POST", "/v1/chat/completions"): ("model", [None, "auto", *FUZZ_LANES]),
    ("POST", "/admin/keys"): ("tenant", [None, "default", "default"]),
}
_SEEN: collections.Counter[int] = collections.Counter()
# The params of the rule that spans messages (a tool message answers the call before it).
_CONVERSATION = re.compile(r"messages\[\d+\]\.(role|tool_call_id)")
# Replaced by ``check_answer`` (no 5xx but the documented upstream ones) and the check in
# ``run`` (a schema-valid request is refused only by the upstream, never by the gateway).
_EXCLUDED: list[schemathesis.CheckFunction] = [not_a_server_error, positive_data_acceptance]


@pytest.fixture(scope="module")
def api(fuzz_gateway: Gateway) -> schemathesis.BaseSchema:
    # A negative case past a body limit (a feedback comment over its maxLength, say) is refused
    # with the documented 413, which schemathesis does not count as a rejection by default.
    rejected = [*NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES, "413"]
    config = schemathesis.Config.from_dict(
        {"checks": {"negative_data_rejection": {"expected-statuses": rejected}}}
    )
    return schemathesis.openapi.from_url(fuzz_gateway.url + "/openapi.json", config=config)


def check_answer(response: Any) -> None:
    status = response.status_code
    text = response.text
    assert "Traceback (most recent call last)" not in text, text[:500]
    assert status < 500 or status in UPSTREAM_STATUSES, f"{status}: {text[:500]}"
    if status >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code", "request_id"}, error
        assert [error["request_id"]] == response.headers["x-request-id"], error
        assert error["message"] and error["type"], error


def _integers_as_integers(body: dict[str, Any]) -> None:
    """JSON Schema's ``integer`` admits 2.0; the gateway, like OpenAI, takes only 2."""
    for name in (*_INT_RANGES, "seed"):
        value = body.get(name)
        if isinstance(value, float) and value.is_integer():
            body[name] = int(value)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=lambda v: str(v))
def test_fuzz_operation(
    api: schemathesis.BaseSchema, fuzz_gateway: Gateway, method: str, path: str
) -> None:
    operation = api[path][method]
    chat = path == "/v1/chat/completions"
    field, known = KNOWN_VALUES.get((method, path), ("", [None]))
    positive = st.tuples(
        operation.as_strategy(GenerationMode.POSITIVE), st.sampled_from(known), st.just(True)
    )
    negative = st.tuples(operation.as_strategy(GenerationMode.NEGATIVE), st.none(), st.just(False))

    @settings(
        max_examples=CASES.get((method, path), DEFAULT_CASES),
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(positive | negative)
    def run(generated: tuple[schemathesis.Case[Any], str | None, bool]) -> None:
        case, value, valid = generated
        if valid and isinstance(case.body, dict):
            _integers_as_integers(case.body)
            if value is not None:
                case.body[field] = value
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"} if path.startswith("/admin") else None
        response = case.call(base_url=fuzz_gateway.url, headers=headers, timeout=15)
        _SEEN[response.status_code] += 1
        check_answer(response)
        if chat and valid and response.status_code == 400:
            # A schema-valid request passed the gateway's checks; only the upstream may refuse it
            # (this emulator takes only n=1, for one), or the one rule no per-message schema can
            # say: a tool message answers the tool_calls of the message before it
            # (api/openapi/chat_rules.py).  Other operations take values only the running config
            # knows (tenant names, ids), which no static schema can list.
            error = response.json()["error"]
            assert error["code"] == "upstream_rejected_request" or _CONVERSATION.fullmatch(
                error["param"] or ""
            ), response.text
        case.validate_response(response, excluded_checks=_EXCLUDED, headers=headers)

    run()
    print(f"\nfuzz {method} {path}: {sum(_SEEN.values())} cases so far, statuses {dict(_SEEN)}")


@pytest.mark.parametrize("case", load_corpus(), ids=lambda c: c.id)
def test_corpus_case_against_the_gateway(fuzz_gateway: Gateway, case: CorpusCase) -> None:
    request = urllib.request.Request(
        fuzz_gateway.base_url + "/chat/completions",
        data=case.raw,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            status, body, headers = response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        status, body, headers = exc.code, exc.read(), exc.headers
    assert status == case.status, body[:300]
    assert b"Traceback" not in body
    if status >= 400:
        error = orjson.loads(body)["error"]
        assert error["code"] == case.code and error["request_id"] == headers["x-request-id"]
    elif headers["Content-Type"].startswith("text/event-stream"):
        assert body.endswith(b"data: [DONE]\n\n")
