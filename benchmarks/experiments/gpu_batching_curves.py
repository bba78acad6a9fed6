"""Decode-step and prefill times of Llama-shaped models on one GPU, for the emulator's step model.

The emulator (docs/emulator.md) prices one continuous-batching step as

    decode_step_ms + per_seq_step_ms x batch + per_kilotoken_step_ms x context_tokens / 1000
    + prompt_tokens / prefill_tps

This script measures those terms on a real accelerator, for the shapes of three open models
(random bf16 weights: a step's time does not depend on the values), so that a profile can be
fitted to them instead of to a guess.  A decode step is the model's whole forward pass for one
new token per sequence, replayed from a CUDA graph as vLLM and SGLang do (no Python launch cost),
with greedy sampling; attention reads a KV cache of ``ctx`` tokens per sequence through
``scaled_dot_product_attention`` (GQA packed as a query length of heads-per-KV-head, which is
exact for one query token).  Prefill is one prompt of P tokens, causal, logits for the last token
only.  Not measured: the server's scheduler, detokenisation and HTTP, paged-KV bookkeeping; so the
figures are a floor for a real server's step time.

Run where torch sees a GPU (the device machine):

    python3 benchmarks/experiments/gpu_batching_curves.py --out DIR

``--device cpu --tiny`` runs the same code on a toy shape, to check it anywhere.  Writes
``DIR/curves.json`` (every measurement) as it goes, so a cut-off run keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

# name: layers, hidden, heads, kv_heads, head_dim, intermediate, vocab (from each model's config)
SHAPES: dict[str, tuple[int, int, int, int, int, int, int]] = {
    "llama-3.2-1b": (16, 2048, 32, 8, 64, 8192, 128256),
    "llama-3.1-8b": (32, 4096, 32, 8, 128, 14336, 128256),
    "qwen2.5-32b": (64, 5120, 40, 8, 128, 27648, 152064),
}
TINY = {"tiny": (2, 64, 4, 2, 16, 128, 1000)}
BATCHES = (1, 8, 32, 64, 128, 256)
CONTEXTS = (512, 2048, 8192)
PROMPTS = (128, 512, 2048, 8192)


class Model:
    def __init__(self, shape: tuple[int, ...], device: str, dtype: torch.dtype) -> None:
        layers, hidden, heads, kv_heads, head_dim, inter, vocab = shape
        self.layers, self.hidden, self.heads, self.kv_heads = layers, hidden, heads, kv_heads
        self.head_dim, self.vocab = head_dim, vocab

        def w(*size: int) -> torch.Tensor:
            return torch.empty(*size, device=device, dtype=dtype).normal_(std=0.02)

        qkv = (heads + 2 * kv_heads) * head_dim
        self.blocks = [
            {
                "n1": torch.ones(hidden, device=device, dtype=dtype),
                "qkv": w(qkv, hidden),
                "o": w(hidden, heads * head_dim),
                "n2": torch.ones(hidden, device=device, dtype=dtype),
                "gu": w(2 * inter, hidden),
                "down": w(hidden, inter),
            }
            for _ in range(layers)
        ]
        self.norm = torch.ones(hidden, device=device, dtype=dtype)
        self.head = w(vocab, hidden)
        self.params = sum(t.numel() for b in self.blocks for t in b.values()) + self.head.numel()

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def kv_cache(self, pool: torch.Tensor, batch: int, ctx: int) -> torch.Tensor:
        """[layers, 2, batch, kv_heads, ctx, head_dim] at the start of ``pool``."""
        shape = (self.layers, 2, batch, self.kv_heads, ctx, self.head_dim)
        return pool[: math.prod(shape)].view(*shape)

    def split_qkv(self, qkv: torch.Tensor) -> tuple[torch.Tensor, ...]:
        kv = self.kv_heads * self.head_dim
        return qkv.split((self.heads * self.head_dim, kv, kv), dim=-1)


def rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + 1e-6)).to(x.dtype) * weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def decode_step(m: Model, x: torch.Tensor, cache: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
    """One token for each of B sequences; cache is [layers, 2, B, kv_heads, ctx, head_dim]."""
    b = x.shape[0]
    group = m.heads // m.kv_heads
    for i, blk in enumerate(m.blocks):
        h = rms(x, blk["n1"])
        qkv = F.linear(h, blk["qkv"])
        q, k, v = m.split_qkv(qkv)
        q = rope(q.view(b, m.kv_heads, group, m.head_dim), cos, sin)
        k = rope(k.view(b, m.kv_heads, m.head_dim), cos, sin)
        cache[i, 0, :, :, -1] = k  # the new token's K and V go into the last cache position
        cache[i, 1, :, :, -1] = v.view(b, m.kv_heads, m.head_dim)
        o = F.scaled_dot_product_attention(q, cache[i, 0], cache[i, 1])
        x = x + F.linear(o.reshape(b, m.heads * m.head_dim), blk["o"])
        gate, up = F.linear(rms(x, blk["n2"]), blk["gu"]).chunk(2, dim=-1)
        x = x + F.linear(F.silu(gate) * up, blk["down"])
    return F.linear(rms(x, m.norm), m.head).argmax(-1)


def prefill(m: Model, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """One prompt of P tokens, causal; x is [P, hidden]; logits for the last token only."""
    p = x.shape[0]
    group = m.heads // m.kv_heads
    for blk in m.blocks:
        qkv = F.linear(rms(x, blk["n1"]), blk["qkv"])
        q, k, v = m.split_qkv(qkv)
        q = rope(q.view(p, m.heads, m.head_dim).transpose(0, 1), cos, sin)
        k = rope(k.view(p, m.kv_heads, m.head_dim).transpose(0, 1), cos, sin)
        v = v.view(p, m.kv_heads, m.head_dim).transpose(0, 1)
        k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
        o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
        x = x + F.linear(o.transpose(0, 1).reshape(p, m.heads * m.head_dim), blk["o"])
        gate, up = F.linear(rms(x, blk["n2"]), blk["gu"]).chunk(2, dim=-1)
        x = x + F.linear(F.silu(gate) * up, blk["down"])
    return F.linear(rms(x[-1:], m.norm), m.head).argmax(-1)


def mixed_step(m: Model, x: torch.Tensor, cache: torch.Tensor, rot: tuple[torch.Tensor, ...],
               batch: int) -> torch.Tensor:
    """``batch`` decode tokens (the first rows, each against its cache) and one prompt chunk of
    the remaining P rows (causal among themselves) in one forward pass: the linear layers run
    on all the rows at once, as a server with chunked prefill batches them."""
    cos, sin, pcos, psin = rot
    n = x.shape[0]
    p, group = n - batch, m.heads // m.kv_heads
    for i, blk in enumerate(m.blocks):
        qkv = F.linear(rms(x, blk["n1"]), blk["qkv"])
        q, k, v = m.split_qkv(qkv)
        qd = rope(q[:batch].view(batch, m.kv_heads, group, m.head_dim), cos, sin)
        cache[i, 0, :, :, -1] = rope(k[:batch].view(batch, m.kv_heads, m.head_dim), cos, sin)
        cache[i, 1, :, :, -1] = v[:batch].view(batch, m.kv_heads, m.head_dim)
        od = F.scaled_dot_product_attention(qd, cache[i, 0], cache[i, 1])
        qp = rope(q[batch:].view(p, m.heads, m.head_dim).transpose(0, 1), pcos, psin)
        kp = rope(k[batch:].view(p, m.kv_heads, m.head_dim).transpose(0, 1), pcos, psin)
        vp = v[batch:].view(p, m.kv_heads, m.head_dim).transpose(0, 1)
        kp, vp = kp.repeat_interleave(group, dim=0), vp.repeat_interleave(group, dim=0)
        op = F.scaled_dot_product_attention(qp[None], kp[None], vp[None], is_causal=True)[0]
        o = torch.cat([od.reshape(batch, -1), op.transpose(0, 1).reshape(p, -1)])
        x = x + F.linear(o, blk["o"])
        gate, up = F.linear(rms(x, blk["n2"]), blk["gu"]).chunk(2, dim=-1)
        x = x + F.linear(F.silu(gate) * up, blk["down"])
    return F.linear(rms(x[: batch + 1], m.norm), m.head).argmax(-1)


def mixed_ms(m: Model, pool: torch.Tensor, batch: int, ctx: int, prompt: int, reps: int,
             device: str) -> dict[str, float]:
    """A step of ``batch`` decodes plus a ``prompt``-token chunk, against each part alone."""
    cache = m.kv_cache(pool, batch, ctx)
    dtype = pool.dtype
    x = torch.randn(batch + prompt, m.hidden, device=device, dtype=dtype)
    rot = (torch.rand(m.head_dim // 2, device=device, dtype=dtype),
           torch.rand(m.head_dim // 2, device=device, dtype=dtype),
           torch.rand(prompt, m.head_dim // 2, device=device, dtype=dtype),
           torch.rand(prompt, m.head_dim // 2, device=device, dtype=dtype))

    def run(step: Any) -> float:
        return graphed_ms(step, reps) if device == "cuda" else timed(step, device, reps)

    return {
        "mixed_ms": run(lambda: mixed_step(m, x, cache, rot, batch)),
        "decode_ms": run(lambda: decode_step(m, x[:batch], cache, rot[0], rot[1])),
        "prefill_ms": run(lambda: prefill(m, x[batch:], rot[2], rot[3])),
    }


def timed(fn: Any, device: str, reps: int) -> float:
    """Median milliseconds of fn() over reps runs, after two warm-ups."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return times[len(times) // 2]


def decode_ms(m: Model, pool: torch.Tensor, batch: int, ctx: int, device: str, reps: int) -> float:
    cache = m.kv_cache(pool, batch, ctx)
    x = torch.randn(batch, m.hidden, device=device, dtype=pool.dtype)
    cos = torch.rand(m.head_dim // 2, device=device, dtype=pool.dtype)
    sin = torch.rand(m.head_dim // 2, device=device, dtype=pool.dtype)
    if device != "cuda":
        return timed(lambda: decode_step(m, x, cache, cos, sin), device, reps)
    return graphed_ms(lambda: decode_step(m, x, cache, cos, sin), reps)


def graphed_ms(step: Any, reps: int) -> float:
    """Median ms of step() replayed from one CUDA graph, captured after warm-ups."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    ms = timed(graph.replay, "cuda", reps)
    del graph
    return ms


def prefill_ms(m: Model, tokens: int, device: str, dtype: torch.dtype, reps: int) -> float:
    x = torch.randn(tokens, m.hidden, device=device, dtype=dtype)
    cos = torch.rand(tokens, m.head_dim // 2, device=device, dtype=dtype)
    sin = torch.rand(tokens, m.head_dim // 2, device=device, dtype=dtype)
    with torch.inference_mode():
        return timed(lambda: prefill(m, x, cos, sin), device, reps)


def measure_curves(m: Model, pool: torch.Tensor, args: argparse.Namespace,
                   entry: dict[str, Any], budget: int, dtype: torch.dtype) -> None:
    for ctx in (16, 64) if args.tiny else CONTEXTS:
        for batch in BATCHES:
            if batch * ctx > budget:
                continue
            try:
                ms = decode_ms(m, pool, batch, ctx, args.device, args.reps)
            except torch.OutOfMemoryError as exc:  # noqa: PERF203 - one config, not the run
                print(f"  decode b={batch} ctx={ctx}: out of memory ({exc})", flush=True)
                torch.cuda.empty_cache()
                continue
            entry["decode"].append({"batch": batch, "ctx": ctx, "ms": ms})
            print(f"  decode b={batch:4d} ctx={ctx:5d}: {ms:8.3f} ms", flush=True)
    for tokens in (16, 64) if args.tiny else PROMPTS:
        ms = prefill_ms(m, tokens, args.device, dtype, max(3, args.reps // 3))
        entry["prefill"].append({"tokens": tokens, "ms": ms})
        print(f"  prefill {tokens:5d} tokens: {ms:8.3f} ms ({tokens / ms * 1000:,.0f} tok/s)",
              flush=True)


def measure_mixed(m: Model, pool: torch.Tensor, args: argparse.Namespace,
                  entry: dict[str, Any]) -> None:
    ctx = 64 if args.tiny else 2048
    for batch in (4, 8) if args.tiny else (8, 64):
        for prompt in (16, 32) if args.tiny else (128, 512, 2048):
            got = mixed_ms(m, pool, batch, ctx, prompt, args.reps, args.device)
            entry.setdefault("mixed", []).append({"batch": batch, "ctx": ctx, "prompt": prompt,
                                                  **got})
            print(f"  b={batch:3d} ctx={ctx} + prompt {prompt:5d}: mixed {got['mixed_ms']:8.3f}"
                  f" ms, decode alone {got['decode_ms']:8.3f}, prompt alone "
                  f"{got['prefill_ms']:8.3f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a toy shape (checks the code)")
    parser.add_argument("--models", default=",".join(SHAPES))
    parser.add_argument("--kv-gib", type=float, default=40.0, help="KV pool per model, GiB")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--mixed", action="store_true",
                        help="only steps that mix decodes with a prompt chunk, and each alone")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    shapes = TINY if args.tiny else {name: SHAPES[name] for name in args.models.split(",")}
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype),
        "models": {},
    }
    for name, shape in shapes.items():
        t0 = time.perf_counter()
        m = Model(shape, args.device, dtype)
        per_token = m.kv_bytes_per_token(torch.finfo(dtype).bits // 8)
        budget = int(args.kv_gib * 2**30) // per_token
        if args.tiny:
            budget = 64 * 64
        pool = torch.empty(budget * per_token // (torch.finfo(dtype).bits // 8),
                           device=args.device, dtype=dtype)
        entry: dict[str, Any] = {
            "params": m.params, "kv_bytes_per_token": per_token, "kv_pool_tokens": budget,
            "decode": [], "prefill": [],
        }
        report["models"][name] = entry
        print(f"{name}: {m.params / 1e9:.2f} B params, KV {per_token} B/token, "
              f"pool {budget} tokens", flush=True)
        if args.mixed:
            measure_mixed(m, pool, args, entry)
        else:
            measure_curves(m, pool, args, entry, budget, dtype)
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        (args.out / "curves.json").write_text(json.dumps(report, indent=1))
        del m, pool
        if args.device == "cuda":
            torch.cuda.empty_cache()
    print(f"wrote {args.out / 'curves.json'}", flush=True)
    return 0 if all(math.isfinite(d["ms"]) for e in report["models"].values()
                    for d in e["decode"]) else 1


if __name__ == "__main__":
    sys.exit(main())
