"""`bench run --router-sample`: the full strategies' classifier learned from labelled questions.

The real bundled embedders (e5 and its static student) on 80 short questions; the checks are
the step's contract (the measured questions left out, the files the gateway loads, the
threshold on the curve, the config it edits), not how good a router 80 questions give.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from hybrid_gateway.config import load_config
from hybrid_gateway.routing.build import build_router
from hybrid_gateway.routing.cascade import TEACHER_KEY, fingerprint
from hybrid_gateway.routing.classifier import load_model
from hybrid_gateway.tools.bench.learned_router import (
    LearnedRouter,
    RouterLearnError,
    apply,
    learn_from_files,
    learn_router,
)
from hybrid_gateway.tools.bench.strategies import FULL_CONFIG
from hybrid_gateway.tools.workload.schema import (
    Labels,
    WorkloadItem,
    question,
    write_workload,
)

TOPICS = ("the invoice", "my password", "the mobile app", "a refund", "the API key",
          "two-factor login", "the export", "my card", "the monthly plan", "a webhook")  # fmt: skip
SIMPLE = ("Where do I change {} in the settings page?", "Who can I contact about {} today?",
          "Is there a help article about {} for new users?",
          "Can I update {} from my phone?")  # fmt: skip
COMPLEX = ("Derive step by step the expected cost of {} under a Poisson arrival model and "
           "prove the bound you use.",
           "Write a Python function that reconciles {} records across two ledgers, then prove "
           "its complexity.",
           "Compare three designs for {} in a distributed system and argue which fails first "
           "under partition, with a proof sketch.",
           "Solve for the break-even point of {} given a convex cost curve, showing each "
           "derivation.")  # fmt: skip


def labelled_sample(path: Path) -> list[WorkloadItem]:
    """80 distinct questions: 40 the light model answers well, 40 only the heavy one does."""
    items = []
    for k, (template, hard) in enumerate(
        [(t, False) for t in SIMPLE] + [(t, True) for t in COMPLEX]
    ):
        for j, topic in enumerate(TOPICS):
            labels = Labels(
                light_ok=not hard, heavy_ok=True, complexity="complex" if hard else "simple",
                category="sample", source="sample", group=f"s{k}-{j}", lang="en",
                outcome="assumed",
            )  # fmt: skip
            items.append(
                WorkloadItem(
                    id=f"s{k}-{j}",
                    arrival_ms=0.0,
                    tenant="t",
                    messages=({"role": "user", "content": template.format(topic)},),
                    max_tokens=32,
                    expected_output_tokens=16,
                    stream=False,
                    labels=labels,
                )
            )
    write_workload(path, items, {"kind": "test", "seed": 0})
    return items


Learned = tuple[Path, LearnedRouter]


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> Learned:
    folder = tmp_path_factory.mktemp("learned-router")
    sample = labelled_sample(folder / "sample.jsonl")
    measured = folder / "measured.jsonl"
    write_workload(measured, sample[:5], {"kind": "test", "seed": 1})  # 5 questions it asks
    result = learn_from_files([folder / "sample.jsonl"], measured, FULL_CONFIG,
                              folder / "router", 0.95)  # fmt: skip
    return folder, result


class _Namespace:
    """What build_router reads of an embedder to load the classifier: its namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace


def test_learns_a_router_the_gateway_loads(learned: Learned) -> None:
    folder, result = learned
    summary = result.summary
    assert summary["items"] == 80 and summary["left_out"] == 5 and summary["rows"] == 75
    assert summary["heavy_only_share"] == pytest.approx(40 / 75, abs=1e-4)
    assert summary["floor"] == 0.95 and summary["quality"] >= 0.95
    assert 0 < result.threshold < 1
    assert (folder / "router" / "router.json").is_file()
    model = load_model(result.model, None)
    student = load_model(result.student, None)
    assert model.namespace.startswith("multilingual-e5-small")
    teacher = student.info[TEACHER_KEY]
    assert isinstance(teacher, dict) and teacher["fingerprint"] == fingerprint(model)
    note = result.note()
    assert "75 labelled questions of sample.jsonl" in note and "5 items left out" in note

    config = apply(yaml.safe_load(FULL_CONFIG.read_text()), result)
    classifier = config["routing"]["classifier"]
    assert classifier["model"] == str(result.model)
    assert classifier["threshold"] == result.threshold
    assert classifier["cascade"]["model"] == str(result.student)
    path = folder / "full.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    parsed = load_config(path)  # the edited config is valid, and its router builds: the
    # student is accepted as the learned model's (its teacher's fingerprint)
    static = _Namespace(student.namespace)
    router = build_router(parsed, config_path=path, embedder=_Namespace(model.namespace),  # type: ignore[arg-type]
                          static=static)  # type: ignore[arg-type]  # fmt: skip
    assert router.learned is not None and router.learned.cascade is not None
    assert router.learned.threshold == result.threshold


def test_no_classifier_no_edit(learned: Learned) -> None:
    _, result = learned
    config: dict[str, object] = {"routing": {"classifier": None}}
    assert apply(config, result) == {"routing": {"classifier": None}}


def test_too_few_questions_is_a_clear_error(tmp_path: Path) -> None:
    sample = labelled_sample(tmp_path / "s.jsonl")
    with pytest.raises(RouterLearnError, match="at least 50 are needed"):
        learn_router(sample[:40], set(), load_config(FULL_CONFIG), tmp_path / "r", floor=0.95,
                     embed_cache=None, sample_name="s")  # fmt: skip
    # every sample question asked by the measured workload: nothing left to learn from
    with pytest.raises(RouterLearnError, match="0 labelled questions"):
        learn_router(sample, {question(i) for i in sample}, load_config(FULL_CONFIG),
                     tmp_path / "r", floor=0.95, embed_cache=None, sample_name="s")  # fmt: skip


def test_bench_run_names_a_sample_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hybrid_gateway.cli import main
    from tests.tools.test_bench_run import EXAMPLE, tiny_workload

    tiny_workload(tmp_path / "w.jsonl")
    code = main(["bench", "run", "--workload", str(tmp_path / "w.jsonl"), "--strategies", "full",
                 "--base-config", str(EXAMPLE), "--out", str(tmp_path / "out"),
                 "--router-sample", str(tmp_path / "missing.jsonl")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("bench run: cannot read the router sample:")
    assert "missing.jsonl" in err[-1]
    with pytest.raises(SystemExit):
        main(["bench", "run", "--router-floor", "1.5"])
    assert "--router-floor: a number in (0, 1], not '1.5'" in capsys.readouterr().err


def test_a_light_rule_below_the_floor_is_handed_to_the_classifier(learned: Learned) -> None:
    from hybrid_gateway.routing.calibrate_cli import RuleDecision
    from hybrid_gateway.routing.outcomes import OutcomeRow
    from hybrid_gateway.tools.bench.learned_router import below_floor

    rows = [OutcomeRow(f"q{i}", 0.0 if i < 2 else 1.0, 1.0, "", "s") for i in range(100)]
    decided = (
        [RuleDecision("short", False)] * 50  # 2 of its 50 fail light: 96 % of heavy's quality
        + [RuleDecision("long", True)] * 10  # heavy: never handed over
        + [RuleDecision("", None)] * 40
    )
    assert below_floor(decided, rows, 0.99) == {"short"}
    assert below_floor(decided, rows, 0.95) == set()
    # judged on too few questions: not handed over (one failure in 19 is no evidence)
    few = [RuleDecision("rare", False)] * 19 + [RuleDecision("", None)] * 81
    assert below_floor(few, rows, 0.99) == set()
    # apply(): the handed-over rule asks the classifier instead of naming a lane
    _, result = learned
    handed = replace(
        result, summary={**result.summary, "handed_to_classifier": ["short-single-turn"]}
    )
    config = apply(yaml.safe_load(FULL_CONFIG.read_text()), handed)
    rules = {r["name"]: r for r in config["routing"]["rules"]}
    assert rules["short-single-turn"]["action"] == "classifier"
    assert "lane" not in rules["short-single-turn"]
    assert rules["long-question"]["lane"] == "heavy"
    assert "handed to the classifier: short-single-turn" in handed.note()


def test_the_built_sample_is_of_the_measured_workloads_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bench run --kind hard` learns from a hard sample (seed + 1000), not a default one."""
    import argparse

    from hybrid_gateway.tools.bench import runner

    built: list[tuple[int, int, str]] = []

    def build(out: Path, size: int, seed: int, kind: str) -> Path:
        built.append((size, seed, kind))
        return out

    learned_from: list[list[Path]] = []
    monkeypatch.setattr(runner, "build_workload", build)
    monkeypatch.setattr(runner, "learn_from_files",
                        lambda samples, *rest: learned_from.append(samples))  # fmt: skip
    args = argparse.Namespace(strategies=["heavy-only", "full"], router_sample=None,
                              router_sample_size=300, seed=7, kind="hard", router_floor=0.99)
    runner._learned_router(args, tmp_path, tmp_path / "w.jsonl")
    assert built == [(300, 1007, "hard")]
    assert learned_from == [[tmp_path / "router-sample.jsonl"]]
    args.strategies = ["heavy-only", "full-no-classifier"]
    assert runner._learned_router(args, tmp_path, tmp_path / "w.jsonl") is None
