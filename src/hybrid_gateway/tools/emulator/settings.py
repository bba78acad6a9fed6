"""Emulator settings: one frozen tree, and the calibrated profiles.

The numbers in ``LIGHT`` and ``HEAVY`` are chosen so the emulator reproduces the brief's figures
(REQUIREMENTS.md sections 0 and 8), those in ``ARTICLE_*`` its load test, and those in ``H200_*``
are fitted to step times measured on a GPU; ``docs/emulator.md`` shows how, with measured latencies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """The continuous-batching performance model (see ``engine.py``).

    One decode step lasts
    ``decode_step_ms + per_seq_step_ms * batch + per_kilotoken_step_ms * context_tokens / 1000``
    plus ``prompt_tokens / prefill_tps`` for each request admitted at that step.
    """

    max_num_seqs: int = 32
    prefill_tps: float = 10000.0
    decode_step_ms: float = 16.0
    per_seq_step_ms: float = 0.05
    per_kilotoken_step_ms: float = 0.5
    kv_budget_tokens: int = 65536
    # Automatic prefix caching (prefix_cache.py): an LRU of prompt blocks holding this many
    # tokens (0: off, every prompt prefilled in full) in blocks of prefix_block_tokens.
    prefix_cache_tokens: int = 0
    prefix_block_tokens: int = 16

    def __post_init__(self) -> None:
        _check(self.max_num_seqs >= 1, "max_num_seqs must be >= 1")
        _check(self.prefill_tps > 0, "prefill_tps must be > 0")
        _check(self.decode_step_ms >= 0, "decode_step_ms must be >= 0")
        _check(self.per_seq_step_ms >= 0, "per_seq_step_ms must be >= 0")
        _check(self.per_kilotoken_step_ms >= 0, "per_kilotoken_step_ms must be >= 0")
        _check(self.kv_budget_tokens >= 1, "kv_budget_tokens must be >= 1")
        _check(self.prefix_cache_tokens >= 0, "prefix_cache_tokens must be >= 0")
        _check(self.prefix_block_tokens >= 1, "prefix_block_tokens must be >= 1")


@dataclass(frozen=True, slots=True)
class FaultSettings:
    """Random faults, drawn once per request from ``random.Random(seed)``.

    One uniform draw picks at most one fault: error, then stall, then reset, so the three rates
    must sum to at most 1.
    """

    error_rate: float = 0.0
    error_status: int = 503
    stall_rate: float = 0.0
    stall_s: float = 5.0
    reset_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("error_rate", "stall_rate", "reset_rate"):
            rate = getattr(self, name)
            _check(0.0 <= rate <= 1.0, f"{name} must be within [0, 1]")
        _check(
            self.error_rate + self.stall_rate + self.reset_rate <= 1.0 + 1e-9,
            "error_rate + stall_rate + reset_rate must be <= 1",
        )
        _check(400 <= self.error_status <= 599, "error_status must be an HTTP error (400-599)")
        _check(self.stall_s >= 0, "stall_s must be >= 0")


@dataclass(frozen=True, slots=True)
class EmulatorSettings:
    """Everything one emulator instance needs.

    ``min_output_tokens`` / ``max_output_tokens`` bound the natural answer length, which is picked
    from a hash of the prompt (so the same prompt always gets the same length); a request's
    ``max_tokens`` can only shorten it.  ``strict_model`` answers other model names with 404,
    as vLLM does; by default any name is accepted and echoed.  ``tool_call_rate`` is how often
    a request offering ``tools`` with ``tool_choice: auto`` gets a tool call (by a hash of the
    prompt); ``required`` or a named function always gets one, ``none`` never.
    """

    model: str
    engine: EngineSettings = field(default_factory=EngineSettings)
    min_output_tokens: int = 16
    max_output_tokens: int = 160
    faults: FaultSettings = field(default_factory=FaultSettings)
    zero_delay: bool = False
    strict_model: bool = False
    tool_call_rate: float = 1.0

    def __post_init__(self) -> None:
        _check(bool(self.model), "model must not be empty")
        _check(0.0 <= self.tool_call_rate <= 1.0, "tool_call_rate must be within [0, 1]")
        _check("@" not in self.model, "model must not contain '@' (it selects scripted faults)")
        _check(self.min_output_tokens >= 1, "min_output_tokens must be >= 1")
        _check(
            self.max_output_tokens >= self.min_output_tokens,
            "max_output_tokens must be >= min_output_tokens",
        )


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


# A small model: fast steps, 64 slots and short answers.  At 100 concurrent a third of the
# requests queue briefly, which is what lifts its peak TTFT towards (but under) 1 s.
LIGHT = EmulatorSettings(
    model="light",
    engine=EngineSettings(
        max_num_seqs=64,
        prefill_tps=20000.0,
        decode_step_ms=6.0,
        per_seq_step_ms=0.04,
        per_kilotoken_step_ms=0.1,
        kv_budget_tokens=131072,
    ),
    min_output_tokens=8,
    max_output_tokens=96,
)

# A large model: slower steps and the brief's batch of 32, so at 100 concurrent two thirds of
# the requests queue for a slot; that queue is what pushes p95 to the 8-12 s of the brief.
HEAVY = EmulatorSettings(
    model="heavy",
    engine=EngineSettings(
        max_num_seqs=32,
        prefill_tps=10000.0,
        decode_step_ms=16.0,
        per_seq_step_ms=0.05,
        per_kilotoken_step_ms=0.5,
        kv_budget_tokens=65536,
    ),
    min_output_tokens=16,
    max_output_tokens=160,
)

# The article's load test (REQUIREMENTS.md section 8), reproduced on the bench's default
# workload: heavy-only at 100 closed-loop clients lands within 15 % of its row (p50 1.8 s, p95
# 8.5 s, success 98.2 %); docs/emulator.md has the calibration run.  No queue at 100 clients
# (128 slots): latency follows the answer's length, as the article's wide p50-p95 gap suggests,
# and 1.8 % of requests fail with a 503 (seeded), as its heavy-only success rate says.
_ARTICLE_FAULTS = FaultSettings(error_rate=0.018)
ARTICLE_HEAVY = EmulatorSettings(
    model="heavy",
    engine=EngineSettings(
        max_num_seqs=128,
        prefill_tps=20000.0,
        decode_step_ms=12.0,
        per_seq_step_ms=0.03,
        per_kilotoken_step_ms=0.05,
        kv_budget_tokens=262144,
    ),
    min_output_tokens=16,
    max_output_tokens=512,
    faults=_ARTICLE_FAULTS,
)
# Its light model: 4x faster steps (0.57 s p50 / 2.2 s p95 alone at 100 clients, the article's
# hybrid row says 0.6 s / 3.1 s), 256 slots, and the same error rate.
ARTICLE_LIGHT = EmulatorSettings(
    model="light",
    engine=EngineSettings(
        max_num_seqs=256,
        prefill_tps=40000.0,
        decode_step_ms=3.0,
        per_seq_step_ms=0.01,
        per_kilotoken_step_ms=0.02,
        kv_budget_tokens=524288,
    ),
    min_output_tokens=8,
    max_output_tokens=512,
    faults=_ARTICLE_FAULTS,
)

# Fitted to an NVIDIA H200 (benchmarks/experiments/gpu_batching_curves.py; the measurements in
# benchmarks/results/gpu/): bf16 decode steps from CUDA graphs at batch 1-256 and 512-8,192 tokens
# of context, least squares on the step model above, and prefill tokens/s on 512-8,192-token
# prompts.  Light: the shape of Llama-3.1-8B (the article's light model is a 6B-class one); heavy:
# Qwen2.5-32B.  256 slots (vLLM's max_num_seqs default and the largest batch measured); KV budget =
# 90 % of the GPU's 140.4 GiB (vLLM's gpu_memory_utilization) less the weights and 4 GiB of
# activations, at 128 KiB (8B) and 256 KiB (32B) of KV a token.  No injected faults.
H200_LIGHT = EmulatorSettings(
    model="light",
    engine=EngineSettings(
        max_num_seqs=256,
        prefill_tps=30300.0,
        decode_step_ms=7.52,
        per_seq_step_ms=0.0127,
        per_kilotoken_step_ms=0.0274,
        kv_budget_tokens=880000,
    ),
    min_output_tokens=8,
    max_output_tokens=512,
)
H200_HEAVY = EmulatorSettings(
    model="heavy",
    engine=EngineSettings(
        max_num_seqs=256,
        prefill_tps=7880.0,
        decode_step_ms=22.6,
        per_seq_step_ms=0.0496,
        per_kilotoken_step_ms=0.0546,
        kv_budget_tokens=250000,
    ),
    min_output_tokens=16,
    max_output_tokens=512,
)

PROFILES: Mapping[str, EmulatorSettings] = MappingProxyType(
    {
        "light": LIGHT,
        "heavy": HEAVY,
        "article-light": ARTICLE_LIGHT,
        "article-heavy": ARTICLE_HEAVY,
        "h200-light": H200_LIGHT,
        "h200-heavy": H200_HEAVY,
    }
)


def profile(name: str) -> EmulatorSettings:
    """The named profile; ``ValueError`` lists the known names."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}") from None
