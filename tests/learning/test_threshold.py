"""The threshold that follows the cache audits: tightens at once, loosens only with evidence,
keeps the false-hit bound under 1 - target_precision; applied through replace_decision."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from hybrid_gateway.cache.semantic.cache import CacheBounds, SemanticCache
from hybrid_gateway.cache.semantic.decision import DecisionRule
from hybrid_gateway.cache.semantic.hygiene import NoiseStripper
from hybrid_gateway.cache.semantic.stage import SemanticStage
from hybrid_gateway.learning.settings import CacheThresholdConfig
from hybrid_gateway.learning.store import AuditRow
from hybrid_gateway.learning.threshold import ThresholdFollower, ThresholdPolicy
from hybrid_gateway.resilience.clock import ManualClock
from tests.embedding.fakes import AsyncHashingEmbedder

SETTINGS = CacheThresholdConfig(enabled=True, target_precision=0.95, min_audits=100, step=0.005,
                                hold_s=600, min_threshold=0.9)  # fmt: skip


def test_a_false_hit_tightens_at_once() -> None:
    clock = ManualClock()
    policy = ThresholdPolicy(SETTINGS, 0.95, clock)
    for i in range(50):
        assert policy.observe(0.96 + i * 0.0005, False) is None
    move = policy.observe(0.955, True)
    assert move is not None and move.reason == "tighten"
    assert policy.threshold == pytest.approx(0.955, abs=1e-5) and policy.threshold > 0.955
    assert policy.stats()[0] == 50  # the clean hits above the new cut remain
    assert policy.observe(0.951, True) is None  # below the threshold: not a served hit


def test_with_too_little_evidence_the_cut_goes_above_every_false_hit() -> None:
    policy = ThresholdPolicy(SETTINGS, 0.95, ManualClock())
    policy.observe(0.97, False)
    move = policy.observe(0.99, True)
    assert move is not None and move.new == pytest.approx(0.99, abs=1e-5) and move.new > 0.99


async def test_it_loosens_only_after_enough_audits_and_time() -> None:
    clock = ManualClock()
    policy = ThresholdPolicy(SETTINGS, 0.95, clock)
    for _ in range(99):
        assert policy.observe(0.97, False) is None
    await clock.advance(600)
    assert policy.observe(0.97, False) is not None  # the 100th audit, after hold_s
    assert policy.threshold == pytest.approx(0.945)
    for _ in range(200):  # enough audits again, but not the time
        assert policy.observe(0.97, False) is None
    await clock.advance(600)
    policy.observe(0.97, False)
    assert policy.threshold == pytest.approx(0.94)


async def test_it_never_loosens_under_the_floor_nor_with_a_high_bound() -> None:
    clock = ManualClock()
    policy = ThresholdPolicy(SETTINGS.model_copy(update={"min_threshold": 0.945}), 0.95, clock)
    for _ in range(3):
        for _ in range(100):
            policy.observe(0.99, False)
        await clock.advance(600)
        policy.observe(0.99, False)
    assert policy.threshold == pytest.approx(0.945)
    noisy = ThresholdPolicy(SETTINGS, 0.95, clock)
    for i in range(300):  # 1 in 15 false: the bound stays above 5 %, so no step down
        noisy.observe(0.999, i % 15 == 0)
    await clock.advance(600)
    noisy.observe(0.9995, False)
    assert noisy.threshold >= 0.95


async def test_the_bound_stays_under_the_limit_on_a_simulated_stream() -> None:
    """False hits are common under 0.97 (30 %) and rare above (1 %): the threshold settles
    near 0.97 and the realised false-hit rate of what it serves stays under 5 %."""
    clock = ManualClock()
    policy = ThresholdPolicy(SETTINGS, 0.93, clock)
    rng = random.Random(11)
    served = false_served = 0
    for _ in range(20_000):
        similarity = rng.uniform(0.9, 1.0)
        if similarity < policy.threshold:
            continue  # not a hit: not served, not audited
        false = rng.random() < (0.3 if similarity < 0.97 else 0.01)
        served += 1
        false_served += false
        policy.observe(similarity, false)
        await clock.advance(30)
    assert 0.965 <= policy.threshold <= 0.985
    audits, bound = policy.stats()
    assert bound <= 0.05 and audits > 500
    assert false_served / served < 0.1  # early exploration included


async def test_the_follower_moves_the_stage_threshold_through_replace_decision() -> None:
    clock = ManualClock()
    rule = DecisionRule(threshold=0.95, guards=("numbers",))
    cache = SemanticCache(bounds=CacheBounds(3600, 100, 10_000_000), rule=rule, clock=clock)
    stage = SemanticStage(cache, AsyncHashingEmbedder(), stripper=NoiseStripper(),
                          shared_scopes={})  # fmt: skip
    reported: list[float] = []

    def apply(threshold: float) -> None:
        stage.replace_decision(replace(stage.cache.rule, threshold=threshold), None)

    follower = ThresholdFollower(ThresholdPolicy(SETTINGS, 0.95, clock), apply, reported.append)
    row = AuditRow("r", 0.0, "acme", "cache", "marks", None, "a_worse", None, None, "light",
                   0.97, "tenant:acme", 0.1, None)  # fmt: skip
    follower.verdict(row)
    assert stage.cache.rule.threshold == pytest.approx(0.97, abs=1e-5)
    assert stage.cache.rule.guards == ("numbers",)  # only the threshold moved
    assert reported == [0.95, stage.cache.rule.threshold]
    follower.verdict(replace(row, kind="router", similarity=0.99))
    assert len(reported) == 2  # router verdicts do not move it
    await stage.aclose()


# -- with near-miss audits: evidence under the threshold -----------------------------------------
EXPLORE = SETTINGS.model_copy(update={"min_audits": 20})


async def test_near_misses_let_it_loosen_to_where_the_evidence_holds() -> None:
    """Misses at 0.96-0.99 are as clean as the hits above 0.99; under 0.96 half are false: the
    threshold goes from 0.99 down to the clean band in one move, not into the false one."""
    clock = ManualClock()
    policy = ThresholdPolicy(EXPLORE, 0.99, clock, explores=True)
    rng = random.Random(3)
    for _ in range(200):
        policy.observe(rng.uniform(0.99, 1.0), False)
    for _ in range(300):
        s = rng.uniform(0.94, 0.99)
        policy.observe(s, s < 0.96 and rng.random() < 0.5, near=True)
    assert policy.threshold == 0.99  # hold_s not passed yet
    await clock.advance(600)
    move = policy.observe(0.995, False)
    assert move is not None and move.reason == "loosen"
    assert 0.955 <= policy.threshold <= 0.975
    audits, bound = policy.stats()
    assert bound <= 0.05 and audits == move.audits


async def test_without_enough_near_misses_it_does_not_step_down_blind() -> None:
    clock = ManualClock()
    policy = ThresholdPolicy(EXPLORE, 0.99, clock, explores=True)
    for _ in range(500):
        policy.observe(0.995, False)  # plenty of clean hits: the blind rule would step down
    for _ in range(19):
        policy.observe(0.98, False, near=True)  # one short of min_audits under the threshold
    await clock.advance(600)
    assert policy.observe(0.995, False) is None and policy.threshold == 0.99
    for _ in range(9):  # the next search comes 10 verdicts later (_TRY_EVERY)
        assert policy.observe(0.98, False, near=True) is None
    assert policy.observe(0.98, False, near=True) is not None
    assert policy.threshold == pytest.approx(0.98)


async def test_weights_make_rarely_sampled_near_misses_count_for_their_traffic() -> None:
    """Hits audited at rate 1, near misses at 0.1: 20 near misses with 3 false stand for 200
    with 30, against 200 clean hits; 30 / 400 is over 5 %, so the band stays closed.  At equal
    weights the same counts (3 in 220) would open it."""
    clock = ManualClock()
    weighted = ThresholdPolicy(EXPLORE, 0.99, clock, explores=True)
    equal = ThresholdPolicy(EXPLORE, 0.99, clock, explores=True)
    for policy, weight in ((weighted, 10.0), (equal, 1.0)):
        for _ in range(200):
            policy.observe(0.995, False)
        for i in range(20):
            policy.observe(0.98, i < 3, weight, near=True)
    await clock.advance(600)
    for policy in (weighted, equal):
        policy.observe(0.995, False)
    assert weighted.threshold == 0.99
    assert equal.threshold == pytest.approx(0.98)


def test_the_weighted_bound_is_wilson_s_with_equal_weights() -> None:
    from hybrid_gateway.learning.bound import weighted_upper, wilson_upper

    trials = [(i % 7 == 0, 1.0) for i in range(70)]
    assert weighted_upper(trials) == pytest.approx(wilson_upper(10, 70))
    scaled = [(false, 4.0) for false, _ in trials]  # same rate, same effective n
    assert weighted_upper(scaled) == pytest.approx(wilson_upper(10, 70))


async def test_the_follower_weighs_near_miss_verdicts_by_their_stream_rate() -> None:
    clock = ManualClock()
    moved: list[float] = []
    policy = ThresholdPolicy(EXPLORE, 0.99, clock, explores=True)
    follower = ThresholdFollower(policy, moved.append, None, {"cache": 1.0, "near_miss": 0.5})
    row = AuditRow("r", 0.0, "acme", "cache", "marks", None, "equivalent", None, None, "light",
                   0.995, "tenant:acme", 0.0, None)  # fmt: skip
    for _ in range(100):
        follower.verdict(row)
    for _ in range(20):
        follower.verdict(replace(row, kind="near_miss", similarity=0.985))
    follower.verdict(replace(row, kind="router", similarity=0.5))  # not the cache's
    await clock.advance(600)
    follower.verdict(row)
    assert moved == [pytest.approx(0.985)]
    weights = {near: {s[2] for s in policy._seen if s[3] == near} for near in (True, False)}
    assert weights == {True: {2.0}, False: {1.0}}
