"""GPU memory planning for a self-hosted model: weights + KV cache + headroom.

    total = weights + KV per request x concurrency + headroom

    weights          = parameters x bytes per parameter (int4: + one fp16 scale and one packed
                       int4 zero per group of ``group_size`` weights)
    KV per token     = 2 (K and V) x layers x KV heads x head dim x KV dtype bytes
    KV per request   = KV per token x context length (worst case: every request at full length)
    headroom         = fixed runtime overhead (CUDA context, workspaces, graphs; default 1 GiB)
                       + a fraction of the weights for activations (default 10 %)
    budget           = GPU memory x gpu-memory-utilization
    max concurrency  = floor((budget - weights - headroom) / KV per request)

Pure functions and frozen dataclasses; the only I/O is reading a Hugging Face ``config.json``.
Errors are ``PlanError`` (a ``ValueError``): the CLI turns them into exit code 2.
See docs/capacity.md for the presets' sources and the seed's worked example.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "GIB",
    "KV_DTYPE_BYTES",
    "PRESETS",
    "WEIGHT_BITS",
    "AttentionShape",
    "EngineFlags",
    "Headroom",
    "MlpShape",
    "ModelArch",
    "PlanError",
    "VramPlan",
    "WeightFormat",
    "Workload",
    "arch_from_config",
    "estimate_params",
    "kv_bytes_per_token",
    "load_config_json",
    "plan_vram",
    "preset",
]

GIB: Final = 1024**3

WEIGHT_BITS: Final[Mapping[str, int]] = MappingProxyType(
    {"fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "int8": 8, "int4": 4}
)
KV_DTYPE_BYTES: Final[Mapping[str, int]] = MappingProxyType(
    {"fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
)
# AWQ / GPTQ store, per group of weights, one fp16 scale (2 bytes) and one int4 zero point
# packed eight to an int32 (0.5 byte).
_GROUP_OVERHEAD_BYTES: Final = 2.5

# Families whose MLP is gated (gate, up and down projections) whatever their activation name.
_GATED_MODEL_TYPES: Final = frozenset(
    {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "internlm2"}
)
_GATED_ACTIVATIONS: Final = frozenset({"silu", "swiglu", "swish"})


class PlanError(ValueError):
    """Bad planner input: unknown preset or precision, unreadable or incomplete config.json."""


@dataclass(frozen=True)
class AttentionShape:
    heads: int
    kv_heads: int  # < heads with grouped-query attention (GQA); 1 with multi-query
    head_dim: int


@dataclass(frozen=True)
class MlpShape:
    intermediate_size: int
    gated: bool = True  # SwiGLU-style: three matrices instead of two


@dataclass(frozen=True)
class ModelArch:
    name: str
    layers: int
    hidden_size: int
    vocab_size: int
    attention: AttentionShape
    mlp: MlpShape
    tie_word_embeddings: bool = False
    param_count: int | None = None  # given (model card); estimated from the shapes when None

    @property
    def params(self) -> int:
        return self.param_count if self.param_count is not None else estimate_params(self)


@dataclass(frozen=True)
class WeightFormat:
    precision: str = "fp16"
    group_size: int = 128  # int4 only
    int4_method: str = "awq"  # or "gptq": the checkpoint format, for --quantization

    def __post_init__(self) -> None:
        if self.int4_method not in ("awq", "gptq"):
            raise PlanError(f"int4 method must be awq or gptq, got {self.int4_method!r}")
        if self.precision not in WEIGHT_BITS:
            raise PlanError(
                f"unknown weight precision {self.precision!r}; one of {', '.join(WEIGHT_BITS)}"
            )
        if self.group_size <= 0:
            raise PlanError(f"group size must be positive, got {self.group_size}")

    def bytes_per_param(self) -> float:
        base = WEIGHT_BITS[self.precision] / 8
        if self.precision == "int4":
            return base + _GROUP_OVERHEAD_BYTES / self.group_size
        return base  # int8 / fp8 per-channel or per-tensor scales are negligible


@dataclass(frozen=True)
class Workload:
    context_len: int = 4096
    concurrency: int = 16
    kv_dtype: str = "fp16"

    def __post_init__(self) -> None:
        if self.kv_dtype not in KV_DTYPE_BYTES:
            raise PlanError(
                f"unknown KV-cache dtype {self.kv_dtype!r}; one of {', '.join(KV_DTYPE_BYTES)}"
            )
        if self.context_len <= 0 or self.concurrency <= 0:
            raise PlanError("context length and concurrency must be positive")


@dataclass(frozen=True)
class Headroom:
    fixed_gib: float = 1.0  # CUDA context, cuBLAS/attention workspaces, CUDA graphs
    weight_fraction: float = 0.10  # activations and allocator fragmentation, scaled by model size

    def bytes_for(self, weight_bytes: int) -> int:
        return int(self.fixed_gib * GIB + self.weight_fraction * weight_bytes)


@dataclass(frozen=True)
class EngineFlags:
    engine: str
    flags: tuple[tuple[str, str], ...]

    def command_line(self) -> str:
        return " ".join(f"{flag} {value}" for flag, value in self.flags)


@dataclass(frozen=True)
class VramPlan:
    model: str
    params: int
    params_estimated: bool
    weights: WeightFormat
    workload: Workload
    gpu_gib: float
    gpu_memory_utilization: float
    weight_bytes: int
    kv_bytes_per_token: int
    kv_bytes_per_request: int
    kv_bytes_total: int
    headroom_bytes: int
    total_bytes: int
    budget_bytes: int
    max_concurrency: int
    engines: tuple[EngineFlags, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.budget_bytes


def kv_bytes_per_token(arch: ModelArch, kv_dtype: str) -> int:
    """2 (K and V) x layers x KV heads x head dim x bytes per element."""
    if kv_dtype not in KV_DTYPE_BYTES:
        raise PlanError(f"unknown KV-cache dtype {kv_dtype!r}; one of {', '.join(KV_DTYPE_BYTES)}")
    att = arch.attention
    return 2 * arch.layers * att.kv_heads * att.head_dim * KV_DTYPE_BYTES[kv_dtype]


def estimate_params(arch: ModelArch) -> int:
    """Embeddings (+ LM head unless tied) + per layer (attention, MLP, two norms) + final norm.

    Biases are left out (Qwen2's q/k/v biases are ~0.01 % of the model).
    """
    att, h = arch.attention, arch.hidden_size
    q_and_o = 2 * h * att.heads * att.head_dim
    k_and_v = 2 * h * att.kv_heads * att.head_dim
    mlp = (3 if arch.mlp.gated else 2) * h * arch.mlp.intermediate_size
    per_layer = q_and_o + k_and_v + mlp + 2 * h
    embeddings = arch.vocab_size * h * (1 if arch.tie_word_embeddings else 2)
    return embeddings + arch.layers * per_layer + h


def plan_vram(
    arch: ModelArch,
    weights: WeightFormat,
    workload: Workload,
    gpu: tuple[float, float],
    headroom: Headroom | None = None,
) -> VramPlan:
    """Plan one model on one GPU; ``gpu`` is (memory in GiB, gpu-memory-utilization)."""
    gpu_gib, utilization = gpu
    if gpu_gib <= 0 or not 0 < utilization <= 1:
        raise PlanError("GPU memory must be positive and utilization in (0, 1]")
    headroom = headroom or Headroom()
    weight_bytes = math.ceil(arch.params * weights.bytes_per_param())
    per_token = kv_bytes_per_token(arch, workload.kv_dtype)
    per_request = per_token * workload.context_len
    headroom_bytes = headroom.bytes_for(weight_bytes)
    budget = int(gpu_gib * GIB * utilization)
    kv_total = per_request * workload.concurrency
    free_for_kv = budget - weight_bytes - headroom_bytes
    max_concurrency = max(0, free_for_kv // per_request)
    plan = VramPlan(
        model=arch.name,
        params=arch.params,
        params_estimated=arch.param_count is None,
        weights=weights,
        workload=workload,
        gpu_gib=gpu_gib,
        gpu_memory_utilization=utilization,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=per_token,
        kv_bytes_per_request=per_request,
        kv_bytes_total=kv_total,
        headroom_bytes=headroom_bytes,
        total_bytes=weight_bytes + kv_total + headroom_bytes,
        budget_bytes=budget,
        max_concurrency=max_concurrency,
    )
    engines, notes = _serving_flags(plan)
    return replace(plan, engines=engines, notes=notes)


_VLLM_KV: Final[Mapping[str, str]] = MappingProxyType(
    {"fp16": "auto", "bf16": "auto", "fp8": "fp8"}
)
_SGLANG_KV: Final[Mapping[str, str]] = MappingProxyType(
    {"fp16": "auto", "bf16": "auto", "fp8": "fp8_e5m2"}
)


def _quantization(precision: str, engine: str, int4_method: str) -> str | None:
    if precision == "int4":
        return int4_method
    if precision == "fp8":
        return "fp8"
    if precision == "int8" and engine == "sglang":
        return "w8a8_int8"
    return None  # fp16/bf16/fp32; vLLM reads an int8 checkpoint's quantization_config itself


def _serving_flags(plan: VramPlan) -> tuple[tuple[EngineFlags, ...], tuple[str, ...]]:
    seqs = max(1, min(plan.workload.concurrency, plan.max_concurrency))
    util = plan.gpu_memory_utilization
    # SGLang's static pool holds weights + KV; activations live outside it, so the static
    # fraction is the budget minus the headroom.
    static = math.floor((util - plan.headroom_bytes / (plan.gpu_gib * GIB)) * 100) / 100
    kv, precision, ctx = plan.workload.kv_dtype, plan.weights.precision, plan.workload.context_len
    notes: list[str] = []
    if not plan.fits:
        notes.append(
            f"requested concurrency {plan.workload.concurrency} does not fit: at most "
            f"{plan.max_concurrency} at {ctx} tokens; lower concurrency/context or a bigger GPU"
        )
    if kv not in _VLLM_KV:
        notes.append(f"vLLM and SGLang have no {kv} KV cache; fp8 has the same size")
    vllm: list[tuple[str, str]] = [
        ("--max-num-seqs", str(seqs)),
        ("--gpu-memory-utilization", f"{util:g}"),
        ("--max-model-len", str(ctx)),
        ("--kv-cache-dtype", _VLLM_KV.get(kv, "fp8")),
    ]
    sglang: list[tuple[str, str]] = [
        ("--max-running-requests", str(seqs)),
        ("--mem-fraction-static", f"{max(static, 0.0):.2f}"),
        ("--context-length", str(ctx)),
        ("--kv-cache-dtype", _SGLANG_KV.get(kv, "fp8_e5m2")),
    ]
    for engine, flags in (("vllm", vllm), ("sglang", sglang)):
        method = _quantization(precision, engine, plan.weights.int4_method)
        if method is not None:
            flags.append(("--quantization", method))
    engines = (EngineFlags("vllm", tuple(vllm)), EngineFlags("sglang", tuple(sglang)))
    return engines, tuple(notes)


def _required_int(config: Mapping[str, Any], key: str, source: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PlanError(f"{source}: {key}: expected a positive integer, got {value!r}")
    return value


def arch_from_config(config: Mapping[str, Any], name: str, params: int | None = None) -> ModelArch:
    """Build a ``ModelArch`` from a Hugging Face ``config.json`` mapping."""
    if "num_local_experts" in config and params is None:
        raise PlanError(f"{name}: mixture-of-experts model: give the parameter count (--params)")
    hidden = _required_int(config, "hidden_size", name)
    heads = _required_int(config, "num_attention_heads", name)
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    act = str(config.get("hidden_act", "")).lower()
    gated = act in _GATED_ACTIVATIONS or config.get("model_type") in _GATED_MODEL_TYPES
    return ModelArch(
        name=name,
        layers=_required_int(config, "num_hidden_layers", name),
        hidden_size=hidden,
        vocab_size=_required_int(config, "vocab_size", name),
        attention=AttentionShape(heads=heads, kv_heads=int(kv_heads), head_dim=int(head_dim)),
        mlp=MlpShape(_required_int(config, "intermediate_size", name), gated=gated),
        # transformers' PretrainedConfig default is True; Llama/Qwen/Mistral files say false
        tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
        param_count=params,
    )


def load_config_json(path: Path, params: int | None = None) -> ModelArch:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise PlanError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise PlanError(f"{path}: expected a JSON object")
    return arch_from_config(config, name=str(path), params=params)


def _preset(
    name: str,
    shape: tuple[int, int, int, int, int, int],
    tied: bool = False,
    gated: bool = True,
    params: int | None = None,
) -> ModelArch:
    layers, hidden, heads, kv_heads, vocab, intermediate = shape
    return ModelArch(
        name=name,
        layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        attention=AttentionShape(heads, kv_heads, hidden // heads),
        mlp=MlpShape(intermediate, gated=gated),
        tie_word_embeddings=tied,
        param_count=params,
    )


# (layers, hidden, heads, KV heads, vocab, intermediate) from each model's config.json on the
# Hugging Face Hub; sources in docs/capacity.md.  Parameter counts are estimated from the shapes
# except "6b", which carries the seed's nominal 6.0e9 so its example comes out as written.
PRESETS: Final[Mapping[str, ModelArch]] = MappingProxyType(
    {
        "llama-2-7b": _preset("llama-2-7b", (32, 4096, 32, 32, 32000, 11008)),
        "llama-2-13b": _preset("llama-2-13b", (40, 5120, 40, 40, 32000, 13824)),
        "llama-2-70b": _preset("llama-2-70b", (80, 8192, 64, 8, 32000, 28672)),
        "llama-3-8b": _preset("llama-3-8b", (32, 4096, 32, 8, 128256, 14336)),
        "llama-3-70b": _preset("llama-3-70b", (80, 8192, 64, 8, 128256, 28672)),
        "qwen2.5-7b": _preset("qwen2.5-7b", (28, 3584, 28, 4, 152064, 18944)),
        "qwen2.5-72b": _preset("qwen2.5-72b", (80, 8192, 64, 8, 152064, 29568)),
        "mistral-7b": _preset("mistral-7b", (32, 4096, 32, 8, 32000, 14336)),
        # ChatGLM-6B: 28 layers, MHA, GELU (not gated) MLP, tied embeddings
        "6b": _preset(
            "6b", (28, 4096, 32, 32, 130528, 16384), tied=True, gated=False, params=6_000_000_000
        ),
    }
)


def preset(name: str) -> ModelArch:
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise PlanError(f"unknown preset {name!r}; one of {', '.join(PRESETS)}") from None
