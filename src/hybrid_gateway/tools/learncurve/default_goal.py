"""Issue 23's default-workload goal: a router trained from audits holds quality at lower cost
than the rules alone.

A gateway serves the default workload's first part from the light lane, with
``learning.audit.router`` at ``rate`` and the ``marks`` judge (as the router curve does, so the
audited questions are a uniform sample of the traffic).  The stored verdicts become labelled
rows (``learning.from_log``, what ``router train --from-log`` reads).  From them, under the
rules and prices of examples/gateway-full.yaml:

1. each row's P(complex) from a model fitted with the shipped model as its prior
   (``fit_with_prior``, as ``router train --from-log``) on the other 4/5 of the rows;
2. the threshold: the cheapest one whose quality, each question routed through the rules first,
   keeps ``floor`` of heavy-only's on those out-of-fold scores (``router calibrate --from-log
   --through-rules``); a rule whose light answers are below the floor on the audits is handed to
   the classifier, as ``bench run`` does with its labelled sample (``learned_router.below_floor``);
3. the model: fitted with the prior on every row.

About ``unseen`` items spread evenly through the workload are kept back (never sent: a long
build's tail is another mix, ``scoring.split_interleaved``); their labels then score three
routings: the rules alone (every other question to the default lane), the rules with the shipped
classifier at the config's threshold, and the rules with the learned one.  Quality is the
bench's (an answer at least as good as the heavy model's); relative cost counts a light answer
at the channels' price ratio (``light_cost_of``).  Requests carry no category, so no gates.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hybrid_gateway.config import GatewayConfig, load_config
from hybrid_gateway.embedding.base import Embedder, namespace_of
from hybrid_gateway.learning.from_log import audited_router_rows, read_audits
from hybrid_gateway.learning.router_fit import fit_with_prior
from hybrid_gateway.routing.build import default_model_path
from hybrid_gateway.routing.calibrate_cli import RuleDecision, light_cost_of, rule_decisions
from hybrid_gateway.routing.calibration import calibrate
from hybrid_gateway.routing.classifier import ClassifierModel, load_model
from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.training import TrainingSet, prompt_folds, scores_of
from hybrid_gateway.tools.bench.learned_router import below_floor, hand_over
from hybrid_gateway.tools.bench.strategies import FULL_CONFIG
from hybrid_gateway.tools.learncurve.router_curve import router_config, spend
from hybrid_gateway.tools.learncurve.scoring import split_interleaved
from hybrid_gateway.tools.learncurve.stack import running, send, settled_audits
from hybrid_gateway.tools.workload.export import router_rows
from hybrid_gateway.tools.workload.schema import read_workload

__all__ = ["DefaultSettings", "routing_figures", "run_default_goal"]

JsonDict = dict[str, Any]
F64 = npt.NDArray[np.float64]
FOLDS = 5


@dataclass(frozen=True)
class DefaultSettings:
    folder: Path
    workload: Path
    unseen: int  # items spread evenly through the workload, kept for scoring, never sent
    rate: float  # learning.audit.router.rate
    concurrency: int = 16
    floor: float = 0.99
    prior_l2: float = 30.0
    embed_cache: Path | None = None


def run_default_goal(s: DefaultSettings) -> JsonDict:
    first, unseen = split_interleaved(read_workload(s.workload), s.unseen)
    log = s.folder / "requests.sqlite3"
    with running(s.folder, s.workload, lambda ups: router_config(s.folder, ups, s.rate)) as gw:
        send(gw.url, first, s.concurrency)
        labels = settled_audits(log, "router")
    print(f"default goal: {labels} router audits after {len(first)} requests", file=sys.stderr)
    rows = audited_router_rows(read_audits(str(log), None, "3650d"))
    config = load_config(FULL_CONFIG)
    e5 = bundled_embedder()
    shipped = load_model(default_model_path(), namespace_of(e5))  # the prior, and a baseline
    model, learned = learn(rows, config, e5, shipped, s)
    test = [OutcomeRow(text, float(weak), float(strong), "", "unseen")
            for text, weak, strong, _category in router_rows(unseen)]  # fmt: skip
    data = embed_rows(test, e5, s.embed_cache)
    decided = rule_decisions(config, test)
    light_cost = light_cost_of(config)
    routing = config.routing
    shipped_threshold = routing.classifier.threshold if routing.classifier is not None else 0.5
    # the rules alone: every question no rule decides goes to the default lane
    default = -np.inf if routing.default_lane == routing.complex_lane else np.inf
    weak, strong = data.weak, data.strong
    routings = {
        "rules alone": routing_figures(
            decided, np.zeros(len(test)), default, weak, strong, light_cost
        ),
        "rules + shipped classifier": routing_figures(
            decided, scores_of(shipped, data), shipped_threshold, weak, strong, light_cost
        ),
        "rules + classifier learned from audits": routing_figures(
            hand_over(decided, learned["handed_to_classifier"]),
            scores_of(model, data),
            learned["threshold"],
            weak,
            strong,
            light_cost,
        ),
    }
    settings = {"workload": str(s.workload), "unseen": s.unseen, "rate": s.rate,
                "floor": s.floor, "prior_l2": s.prior_l2, "folds": FOLDS}  # fmt: skip
    return {  # the verdicts are report.py's, from these figures
        "settings": settings,
        "sent": len(first),
        "unseen_part": len(test),
        "audits": labels,
        **{k: v for k, v in spend(log).items() if k.startswith("audit")},
        "learned": learned,
        "light_cost": round(light_cost, 4),
        "routings": routings,
    }


def learn(
    rows: Sequence[OutcomeRow],
    config: GatewayConfig,
    e5: Embedder,
    prior: ClassifierModel,
    s: DefaultSettings,
) -> tuple[ClassifierModel, JsonDict]:
    """Threshold (out of fold, through the rules) and model (every row), both on the prior."""
    data = embed_rows(rows, e5, s.embed_cache)
    decided = rule_decisions(config, rows)
    handed = below_floor(decided, rows, s.floor)
    decided = hand_over(decided, handed)
    result = calibrate(
        out_of_fold_with_prior(data, prior, s.prior_l2),
        data.weak,
        data.strong,
        [""] * len(rows),
        floor=s.floor,
        light_cost=light_cost_of(config),
        fixed=[d.heavy for d in decided],
    )
    if result.chosen is None:
        raise ValueError(f"no threshold keeps {s.floor:.1%} of heavy-only's quality on the audits")
    model = fit_with_prior(data, prior, l2=s.prior_l2)
    model.save(s.folder / "learned.npz")
    return model, {
        "rows": len(rows),
        "heavy_only_share": round(float(np.mean(data.strong > data.weak)), 4),
        "handed_to_classifier": sorted(handed),
        "threshold": round(result.chosen.threshold, 4),
        "expected_heavy_share": round(result.chosen.heavy_share, 4),
        "expected_quality": round(result.chosen.quality, 4),
        "model": str(s.folder / "learned.npz"),
    }


def out_of_fold_with_prior(data: TrainingSet, prior: ClassifierModel, l2: float) -> F64:
    """P(complex) for every row from a prior-pulled model that never saw that row's prompt."""
    folds = prompt_folds(data.prompts, FOLDS)
    out = np.empty(len(data.rows))
    for fold in range(FOLDS):
        test = folds == fold
        if test.any():
            model = fit_with_prior(data.subset(~test), prior, l2=l2) if (~test).any() else prior
            out[test] = scores_of(model, data.subset(test))
    return out


def routing_figures(
    decided: Sequence[RuleDecision],
    scores: F64,
    threshold: float,
    weak: F64,
    strong: F64,
    light_cost: float,
) -> JsonDict:
    """Quality (an answer at least as good as heavy's) and relative cost of a routing: a rule's
    lane where one decides, else heavy when the score reaches ``threshold``."""
    heavy = np.array([d.heavy if d.heavy is not None else bool(score >= threshold)
                      for d, score in zip(decided, scores, strict=True)])  # fmt: skip
    good = np.where(heavy, True, weak >= strong)
    share = float(heavy.mean()) if len(heavy) else 0.0
    return {
        "quality": round(float(good.mean()) if len(good) else 1.0, 4),
        "heavy_share": round(share, 4),
        "relative_cost": round(share + (1 - share) * light_cost, 4),
        "by_rules": int(sum(d.heavy is not None for d in decided)),
    }
