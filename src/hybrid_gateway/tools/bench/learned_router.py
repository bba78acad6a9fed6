"""The `full` strategies' classifier, learned from a labelled sample of the same kind of traffic.

The shipped classifier was fitted on public outcome files (MMLU, RouterBench, Arena): on
questions of kinds it never saw it is barely above a length baseline (docs/router.md), and on
the bench's mix it sends about one complex question in six to the light lane.  A deployment
learns from its own traffic instead (``learning.audit`` labels a sample, ``router train
--from-log`` fits on it); the bench does the same before its strategies run, with the labels of
a sample workload standing in for the audits:

1. rows: one per distinct question of the sample, its light and heavy labels as 0/1 outcomes
   (as ``workload export`` writes them), leaving out every question the measured workload asks;
2. threshold: each row's P(complex) from a model fitted on the other 4/5 of the rows (5 folds),
   each question routed through the config's rules first (``router calibrate --through-rules``):
   the cheapest threshold whose quality keeps ``floor`` of heavy-only's, end to end;
   a rule that sends questions light whose light quality on the sample is below the floor
   costs quality no threshold wins back: as the article gates a category, its questions are
   handed to the classifier (the rule gets ``action: classifier``);
3. model: fitted on every row (``router train``), and its static student distilled on the same
   questions (``router distil``), so the classifier's cascade stays on.

``router.npz``, ``router-static.npz`` and ``router.json`` (what was learned, from what) go to the
run folder; ``apply`` points a strategy's ``routing.classifier`` at them.  No category gates:
the bench's requests carry no category.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_gateway.config import GatewayConfig, load_config
from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.routing.calibrate_cli import RuleDecision, light_cost_of, rule_decisions
from hybrid_gateway.routing.calibration import calibrate
from hybrid_gateway.routing.cascade import TEACHER_KEY, fingerprint, logits_of
from hybrid_gateway.routing.dataset import DEFAULT_EMBED_CACHE, bundled_embedder, embed_rows
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.training import fit, out_of_fold_scores
from hybrid_gateway.tools.router_distil import as_model, fit_student
from hybrid_gateway.tools.workload.export import router_rows
from hybrid_gateway.tools.workload.schema import WorkloadItem, question, read_workload

__all__ = [
    "LearnedRouter",
    "RouterLearnError",
    "apply",
    "hand_over",
    "learn_from_files",
    "learn_router",
]

MIN_ROWS = 50  # fewer labelled questions say nothing a threshold could rest on
MIN_RULE_ROWS = 20  # a rule judged on fewer questions is not handed over (as category gates)
FOLDS = 5
STUDENT_L2 = 1.0  # `router distil`'s default


class RouterLearnError(ValueError):
    """The sample cannot give a router: too few rows, or no threshold meets the floor."""


@dataclass(frozen=True, slots=True)
class LearnedRouter:
    model: Path
    student: Path
    threshold: float
    summary: Mapping[str, Any]  # router.json: the report's `router` entry

    def note(self) -> str:
        s = self.summary
        return (
            f"The full strategies' classifier was learned before the run from {s['rows']} "
            f"labelled questions of {s['sample']} ({s['heavy_only_share']:.1%} of them answered "
            f"well by the heavy model only; "
            f"{s['left_out']} items left out because the measured workload asks them), and its "
            f"threshold {s['threshold']:.4f} calibrated through the config's rules on 5-fold "
            f"out-of-fold scores at {s['floor']:.1%} of heavy-only's quality (expected there: "
            f"heavy share {s['heavy_share']:.1%}, quality {s['quality']:.2%} of heavy-only); "
            "no measured question was in the sample (bench run --router-sample)."
            + (f" Rules whose light answers were below the floor on the sample, handed to the "
               f"classifier: {', '.join(s['handed_to_classifier'])}."
               if s["handed_to_classifier"] else "")
        )  # fmt: skip


def learn_from_files(
    samples: Sequence[Path], measured: Path, config_path: Path, out_dir: Path, floor: float
) -> LearnedRouter:
    """`bench run`'s step: the sample workloads' labels, minus the measured workload's
    questions, under the strategy config at ``config_path`` (its rules and prices)."""
    try:
        items = [item for path in samples for item in read_workload(path)]
        asked = {question(item) for item in read_workload(measured)}
    except (OSError, TypeError, KeyError, ValueError) as exc:
        raise RouterLearnError(f"cannot read the router sample: {exc}") from None
    print(f"learning the full strategies' router from {len(items)} sample items",
          file=sys.stderr)  # fmt: skip
    name = ", ".join(path.name for path in samples)
    return learn_router(items, asked, load_config(config_path), out_dir, floor=floor,
                        embed_cache=DEFAULT_EMBED_CACHE, sample_name=name)  # fmt: skip


def learn_router(
    sample: Sequence[WorkloadItem],
    measured: Collection[str],
    config: GatewayConfig,
    out_dir: Path,
    *,
    floor: float,
    embed_cache: Path | None,
    sample_name: str,
) -> LearnedRouter:
    """Fit, calibrate and distil on ``sample`` minus the ``measured`` questions (see above)."""
    kept = [item for item in sample if question(item) not in measured]
    rows = [OutcomeRow(text, float(weak), float(strong), "", "sample")
            for text, weak, strong, _category in router_rows(kept)]  # fmt: skip
    if len(rows) < MIN_ROWS:
        raise RouterLearnError(
            f"{len(rows)} labelled questions in the router sample once the measured ones are "
            f"left out; at least {MIN_ROWS} are needed"
        )
    e5 = bundled_embedder()
    namespace = namespace_of(e5)
    data = embed_rows(rows, e5, embed_cache)
    decided = rule_decisions(config, rows)
    handed = below_floor(decided, rows, floor)
    if handed:  # their questions go to the classifier instead (apply edits the rules so)
        decided = hand_over(decided, handed)
    result = calibrate(
        out_of_fold_scores(data, namespace, FOLDS),
        data.weak,
        data.strong,
        [""] * len(rows),
        floor=floor,
        light_cost=light_cost_of(config),
        fixed=[d.heavy for d in decided],
    )
    if result.chosen is None:
        raise RouterLearnError(
            f"no threshold keeps {floor:.1%} of heavy-only's quality on the router sample, "
            "even with every classifier question heavy"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    model = fit(data, namespace)
    model_path, student_path = out_dir / "router.npz", out_dir / "router-static.npz"
    model.save(model_path)
    _distil(model, rows, embed_cache, student_path)
    chosen = result.chosen
    heavy_only = sum(1 for r in rows if r.strong > r.weak)
    summary = {
        "sample": sample_name,
        "items": len(sample),
        "left_out": len(sample) - len(kept),
        "rows": len(rows),
        "heavy_only_share": round(heavy_only / len(rows), 4),
        "rules": dict(Counter(d.rule or "classifier" for d in decided)),
        "handed_to_classifier": sorted(handed),
        "floor": floor,
        "threshold": round(chosen.threshold, 4),
        "heavy_share": round(chosen.heavy_share, 4),
        "quality": round(chosen.quality, 4),
        "folds": FOLDS,
        "model": str(model_path),
        "student": str(student_path),
    }
    (out_dir / "router.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    return LearnedRouter(model_path, student_path, round(chosen.threshold, 4), summary)


def below_floor(
    decided: Sequence[RuleDecision], rows: Sequence[OutcomeRow], floor: float
) -> set[str]:
    """The rules that send questions light whose light quality on the sample is below ``floor``
    of their heavy quality: no threshold wins that back, so (as the article gates a category
    the light model answers below the floor) their questions are handed to the classifier.
    A rule that decided fewer than ``MIN_RULE_ROWS`` sample questions is not judged."""
    sums: dict[str, list[float]] = {}
    for d, row in zip(decided, rows, strict=True):
        if d.heavy is False:
            weak_strong = sums.setdefault(d.rule, [0.0, 0.0])
            weak_strong[0] += row.weak
            weak_strong[1] += row.strong
    counts = Counter(d.rule for d in decided if d.heavy is False)
    return {
        rule
        for rule, (weak, strong) in sums.items()
        if counts[rule] >= MIN_RULE_ROWS and strong > 0 and weak / strong < floor
    }


def hand_over(decided: Sequence[RuleDecision], rules: Collection[str]) -> list[RuleDecision]:
    """``decided`` with the questions of ``rules`` left to the classifier."""
    return [RuleDecision("", None) if d.rule in rules else d for d in decided]


def _distil(model: Any, rows: Sequence[OutcomeRow], embed_cache: Path | None, out: Path) -> None:
    """The static student of ``model`` (the cascade's), fitted to its logits on ``rows``."""
    from hybrid_gateway.embedding.static import StaticE5Embedder

    static = StaticE5Embedder()
    try:
        static_data = embed_rows(rows, static, embed_cache)
        e5_data = embed_rows(rows, bundled_embedder(), embed_cache)
        student = fit_student(static_data, logits_of(model, e5_data), STUDENT_L2)
        info: dict[str, object] = {
            TEACHER_KEY: {"namespace": model.namespace, "fingerprint": fingerprint(model),
                          "model": str(out.with_name("router.npz"))},
            "target": "the teacher's logit (ridge regression)", "l2": STUDENT_L2,
            "rows": len(rows),
        }  # fmt: skip
        as_model(student, namespace_of(static), info).save(out)
    finally:
        static.close()


def apply(config: dict[str, Any], learned: LearnedRouter) -> dict[str, Any]:
    """``config`` (a strategy's) routing with the learned classifier, where it has one."""
    classifier = (config.get("routing") or {}).get("classifier")
    if not isinstance(classifier, dict):
        return config  # full-no-classifier: nothing to replace
    handed = set(learned.summary.get("handed_to_classifier") or ())
    for rule in config["routing"].get("rules") or []:
        if isinstance(rule, dict) and rule.get("name") in handed:
            rule.pop("lane", None)
            rule["action"] = "classifier"
    classifier["model"] = str(learned.model)
    classifier["threshold"] = learned.threshold
    if isinstance(classifier.get("cascade"), dict):
        classifier["cascade"] = {**classifier["cascade"], "model": str(learned.student)}
    return config
