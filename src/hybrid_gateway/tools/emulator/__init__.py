"""An OpenAI-compatible LLM serving-stack emulator: continuous batching, KV budget, faults.

It stands in for a GPU serving stack (vLLM, SGLang) in tests and benchmarks; two instances with
the ``light`` and ``heavy`` profiles play the two models.  See ``docs/emulator.md``.
"""

from .engine import (
    BatchScheduler,
    ContextTooLongError,
    Engine,
    EngineStats,
    Sequence,
    SequenceGroup,
)
from .faults import Fault, FaultInjector, FaultKind, Script, parse_model
from .server import EmulatorService, create_emulator_app
from .settings import (
    HEAVY,
    LIGHT,
    PROFILES,
    EmulatorSettings,
    EngineSettings,
    FaultSettings,
    profile,
)
from .text import AnswerSource, Prompt, PseudoAnswers

__all__ = [
    "HEAVY",
    "LIGHT",
    "PROFILES",
    "AnswerSource",
    "BatchScheduler",
    "ContextTooLongError",
    "EmulatorService",
    "EmulatorSettings",
    "Engine",
    "EngineSettings",
    "EngineStats",
    "Fault",
    "FaultInjector",
    "FaultKind",
    "FaultSettings",
    "Prompt",
    "PseudoAnswers",
    "Script",
    "Sequence",
    "SequenceGroup",
    "create_emulator_app",
    "parse_model",
    "profile",
]
