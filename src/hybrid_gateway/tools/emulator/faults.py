"""Fault injection: seeded random faults, and scripted ones chosen by the model name.

Random faults follow ``FaultSettings``: one draw per request from ``random.Random(seed)`` picks an
error (``error_rate``), a stall before the first byte (``stall_rate``) or a dropped connection
(``reset_rate``).  The same seed and request order give the same faults.

Scripted faults make a request behave the same way every time, for gateway tests (in the style
of TensorZero's dummy provider).  Append ``@directive`` to the model name, several if needed:

=====================  ==========================================================================
``NAME@status=502``    always answer HTTP 502 with an OpenAI error body
``NAME@fail-first=2``  only the first 2 requests for this exact model name get the other
                       directives (alone: HTTP ``error_status``); later ones are served normally.
                       For retry tests: ``m@fail-first=1@reset``, ``m@fail-first=1@stall=5``
``NAME@reset``         drop the TCP connection before sending any byte
``NAME@midstream-reset`` send the headers and part of the answer (a few chunks when streaming),
                       then drop the connection
``NAME@stall=2.5``     wait 2.5 s before the first byte
``NAME@slow=0.2``      wait 0.2 s between streamed tokens (``@slow`` alone: 0.05 s)
``NAME@retry-after=3`` send ``Retry-After: 3`` with the error (``m@status=429@retry-after=3``)
=====================  ==========================================================================

The answer echoes the full requested name, suffix included.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from .settings import FaultSettings

_DEFAULT_SLOW_TOKEN_S = 0.05


@dataclass(frozen=True, slots=True)
class Script:
    """Scripted behaviour parsed from a model name's ``@`` suffix."""

    status: int | None = None
    fail_first: int = 0
    reset: bool = False
    midstream_reset: bool = False
    stall_s: float = 0.0
    slow_token_s: float = 0.0
    retry_after_s: float | None = None


NO_SCRIPT = Script()


class FaultKind(enum.Enum):
    NONE = "none"
    ERROR = "error"  # answer with an HTTP error status
    RESET = "reset"  # drop the connection before any byte
    MIDSTREAM_RESET = "midstream_reset"  # drop it after part of the answer


@dataclass(frozen=True, slots=True)
class Fault:
    """What to do to one request; ``stall_s`` and ``token_delay_s`` apply to any kind."""

    kind: FaultKind = FaultKind.NONE
    status: int = 0
    stall_s: float = 0.0
    token_delay_s: float = 0.0
    retry_after_s: float | None = None  # an ERROR's Retry-After header


NO_FAULT = Fault()


def _number(value: str | None, directive: str) -> float:
    try:
        number = float(value) if value is not None else -1.0
    except ValueError:
        number = -1.0
    if number < 0:
        raise ValueError(f"@{directive} needs a non-negative number, got {value!r}")
    return number


def _status(script: Script, value: str | None) -> Script:
    status = int(_number(value, "status"))
    if not 400 <= status <= 599:
        raise ValueError(f"@status must be an HTTP error status (400-599), got {value!r}")
    return replace(script, status=status)


def _fail_first(script: Script, value: str | None) -> Script:
    return replace(script, fail_first=int(_number(value, "fail-first")))


def _reset(script: Script, value: str | None) -> Script:
    return replace(script, reset=True)


def _midstream_reset(script: Script, value: str | None) -> Script:
    return replace(script, midstream_reset=True)


def _stall(script: Script, value: str | None) -> Script:
    return replace(script, stall_s=_number(value, "stall"))


def _retry_after(script: Script, value: str | None) -> Script:
    return replace(script, retry_after_s=_number(value, "retry-after"))


def _slow(script: Script, value: str | None) -> Script:
    delay = _DEFAULT_SLOW_TOKEN_S if value is None else _number(value, "slow")
    return replace(script, slow_token_s=delay)


_DIRECTIVES: Mapping[str, Callable[[Script, str | None], Script]] = MappingProxyType(
    {
        "status": _status,
        "fail-first": _fail_first,
        "reset": _reset,
        "midstream-reset": _midstream_reset,
        "stall": _stall,
        "slow": _slow,
        "retry-after": _retry_after,
    }
)


def parse_model(name: str) -> tuple[str, Script]:
    """Split ``"base@d1@d2=v"`` into the base name and its script; ``ValueError`` if unknown."""
    base, *directives = name.split("@")
    script = NO_SCRIPT
    for directive in directives:
        key, sep, value = directive.partition("=")
        apply = _DIRECTIVES.get(key)
        if apply is None:
            known = ", ".join(f"@{k}" for k in _DIRECTIVES)
            raise ValueError(f"unknown scripted behaviour @{key} (known: {known})")
        script = apply(script, value if sep else None)
    return base, script


class FaultInjector:
    """Decides each request's fault: the script first, then one seeded random draw."""

    def __init__(self, settings: FaultSettings) -> None:
        self._settings = settings
        self._rng = random.Random(settings.seed)
        self._random = settings.error_rate + settings.stall_rate + settings.reset_rate > 0
        self._seen: dict[str, int] = {}  # model name -> requests seen, for @fail-first

    def decide(self, model: str, script: Script) -> Fault:
        fault = self._scripted(model, script) if script is not NO_SCRIPT else NO_FAULT
        if self._random and fault.kind is FaultKind.NONE:
            fault = self._draw(fault)
        return fault

    def _scripted(self, model: str, script: Script) -> Fault:
        if script.fail_first:
            seen = self._seen.get(model, 0)
            self._seen[model] = seen + 1
            if seen >= script.fail_first:
                return NO_FAULT
        if script.reset:
            kind = FaultKind.RESET
        elif script.midstream_reset:
            kind = FaultKind.MIDSTREAM_RESET
        elif script.status is not None or (
            script.fail_first and script == Script(fail_first=script.fail_first)
        ):
            kind = FaultKind.ERROR  # an explicit status, or a bare @fail-first
        else:
            kind = FaultKind.NONE
        status = script.status or self._settings.error_status
        return Fault(kind, status, script.stall_s, script.slow_token_s, script.retry_after_s)

    def _draw(self, fault: Fault) -> Fault:
        s = self._settings
        draw = self._rng.random()
        if draw < s.error_rate:
            return replace(fault, kind=FaultKind.ERROR, status=s.error_status)
        draw -= s.error_rate
        if draw < s.stall_rate:
            return replace(fault, stall_s=max(fault.stall_s, s.stall_s))
        draw -= s.stall_rate
        if draw < s.reset_rate:
            return replace(fault, kind=FaultKind.RESET)
        return fault
