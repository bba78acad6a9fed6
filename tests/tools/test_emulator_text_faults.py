"""The default answers, model-name scripts and seeded random faults."""

from __future__ import annotations

import pytest

from hybrid_gateway.accounting.tokens import count_tokens
from hybrid_gateway.tools.emulator.faults import (
    NO_SCRIPT,
    FaultInjector,
    FaultKind,
    Script,
    parse_model,
)
from hybrid_gateway.tools.emulator.settings import FaultSettings
from hybrid_gateway.tools.emulator.text import Prompt, PseudoAnswers


def test_prompt_counts_every_message_plus_chat_overhead() -> None:
    prompt = Prompt.from_contents([("system", "Be brief."), ("user", "What is KV cache?")])
    assert prompt.last_user == "What is KV cache?"
    assert prompt.tokens == count_tokens("Be brief.") + count_tokens("What is KV cache?") + 9


def make_prompt(text: str) -> Prompt:
    return Prompt.from_contents([("user", text)])


def test_pseudo_answers_are_deterministic_prefixed_and_exactly_as_long_as_planned() -> None:
    answers = PseudoAnswers(min_tokens=8, max_tokens=96)
    lengths = set()
    for i in range(200):
        prompt = make_prompt(f"question number {i}")
        text = answers.answer(prompt, "light")
        assert text == answers.answer(prompt, "light")
        assert text.startswith("[light]") and text.endswith(".")
        assert count_tokens(text) == answers.target_tokens(prompt)
        assert 8 <= count_tokens(text) <= 96
        lengths.add(count_tokens(text))
    assert len(lengths) > 40  # spread over the range, not one fixed length


def test_the_same_prompt_gets_different_words_from_different_models() -> None:
    answers = PseudoAnswers(min_tokens=30, max_tokens=30)
    prompt = make_prompt("what is the refund policy?")
    light, heavy = answers.answer(prompt, "light"), answers.answer(prompt, "heavy")
    assert light.startswith("[light]") and heavy.startswith("[heavy]")
    assert light.removeprefix("[light]") != heavy.removeprefix("[heavy]")


def test_a_tiny_range_still_gives_the_exact_length() -> None:
    answers = PseudoAnswers(min_tokens=2, max_tokens=2)
    assert count_tokens(answers.answer(make_prompt("hi"), "a-very-long-model-name")) == 2


# -- scripted faults ----------------------------------------------------------------------------


def test_model_suffixes_parse_into_scripts() -> None:
    assert parse_model("heavy") == ("heavy", NO_SCRIPT)
    assert parse_model("heavy@status=502") == ("heavy", Script(status=502))
    assert parse_model("m@stall=2.5@slow") == ("m", Script(stall_s=2.5, slow_token_s=0.05))
    assert parse_model("m@fail-first=2@reset") == ("m", Script(fail_first=2, reset=True))
    assert parse_model("m@midstream-reset")[1].midstream_reset


@pytest.mark.parametrize("name", ["m@bogus", "m@status=200", "m@status=abc", "m@stall=-1"])
def test_bad_suffixes_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="@"):
        parse_model(name)


def test_scripted_status_and_reset_apply_every_time() -> None:
    injector = FaultInjector(FaultSettings())
    for _ in range(3):
        fault = injector.decide("m@status=429", Script(status=429))
        assert (fault.kind, fault.status) == (FaultKind.ERROR, 429)
        assert injector.decide("m@reset", Script(reset=True)).kind is FaultKind.RESET


def test_fail_first_fails_only_the_first_requests_of_that_name() -> None:
    injector = FaultInjector(FaultSettings(error_status=503))
    script = Script(fail_first=2)
    kinds = [injector.decide("m@fail-first=2", script).kind for _ in range(4)]
    assert kinds == [FaultKind.ERROR, FaultKind.ERROR, FaultKind.NONE, FaultKind.NONE]
    assert injector.decide("m@fail-first=2", script).status == 0
    # a stall limited to the first request, not an error
    stall = Script(fail_first=1, stall_s=5.0)
    first, second = (injector.decide("n", stall) for _ in range(2))
    assert (first.kind, first.stall_s, second.stall_s) == (FaultKind.NONE, 5.0, 0.0)


# -- random faults ------------------------------------------------------------------------------


def draw(settings: FaultSettings, n: int = 2000) -> list[FaultKind | str]:
    injector = FaultInjector(settings)
    out: list[FaultKind | str] = []
    for _ in range(n):
        fault = injector.decide("m", NO_SCRIPT)
        out.append("stall" if fault.stall_s else fault.kind)
    return out


def test_random_faults_follow_their_rates_and_the_seed() -> None:
    settings = FaultSettings(error_rate=0.1, stall_rate=0.2, reset_rate=0.05, seed=7)
    faults = draw(settings)
    assert faults == draw(settings)  # same seed, same faults
    assert faults != draw(FaultSettings(error_rate=0.1, stall_rate=0.2, reset_rate=0.05, seed=8))
    assert faults.count(FaultKind.ERROR) == pytest.approx(200, abs=50)
    assert faults.count("stall") == pytest.approx(400, abs=70)
    assert faults.count(FaultKind.RESET) == pytest.approx(100, abs=35)


def test_no_random_faults_by_default() -> None:
    assert set(draw(FaultSettings(), n=200)) == {FaultKind.NONE}


def test_fault_rates_are_validated() -> None:
    with pytest.raises(ValueError, match="must be <= 1"):
        FaultSettings(error_rate=0.6, reset_rate=0.6)
    with pytest.raises(ValueError, match="error_status"):
        FaultSettings(error_status=200)
