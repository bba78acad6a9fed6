"""The regression corpus against the parser: each case is accepted or refused as recorded."""

from __future__ import annotations

import pytest

from hybrid_gateway.api.schema import parse_body, parse_chat_request
from hybrid_gateway.errors import InvalidRequest
from tests.hardening.corpus import CorpusCase, load_corpus


@pytest.mark.parametrize("case", load_corpus(), ids=lambda c: c.id)
def test_corpus_case_parses_as_recorded(case: CorpusCase) -> None:
    if case.status == 200:
        parse_chat_request(parse_body(case.raw))
        return
    with pytest.raises(InvalidRequest) as caught:
        parse_chat_request(parse_body(case.raw))
    assert (caught.value.status, caught.value.code) == (case.status, case.code)
