"""`hybrid-gateway router train --from-log`: a candidate router from audited traffic, written
only when a replay on audited questions it was not trained on accepts it (``router_fit.py``).

    router train --from-log --config gateway.yaml --out candidate.npz [--since 30d]
                 [--holdout 0.3] [--prior-l2 30] [--prior MODEL.npz] [--candidate-out C.npz]

The prior is the config's classifier model (the shipped one by default, or ``--prior``); the
audits are read from the config's records store.  Exit 0: written; 1: refused by the replay
(nothing written); 2: bad input, one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from zoneinfo import ZoneInfo

from hybrid_gateway.accounting.log_source import config_source
from hybrid_gateway.accounting.report import ReportError, parse_instant
from hybrid_gateway.config import GatewayConfig, load_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.learning.labels import read_labels
from hybrid_gateway.learning.router_fit import outcome_rows, train_candidate
from hybrid_gateway.routing.build import default_model_path, model_path
from hybrid_gateway.routing.classifier import RouterModelError, load_model
from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows
from hybrid_gateway.routing.outcomes import OutcomeRow

__all__ = ["add_from_log_arguments", "train_from_log"]

MIN_ROWS = 20  # fewer audited questions tell nothing either way


class FromLogError(ValueError):
    """Bad input for --from-log: one line on stderr, exit code 2."""


def add_from_log_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--from-log (audited traffic, learning.audit)")
    group.add_argument("--config", type=Path, help="the gateway config whose audits to read")
    group.add_argument("--since", default="30d", help="audits since: 30d, 12h, or a UTC date")
    group.add_argument(
        "--holdout",
        type=float,
        default=0.3,
        help="the latest share of the audits, kept for the replay (0.3)",
    )
    group.add_argument(
        "--folds",
        type=int,
        default=0,
        help="2 or more: cross-fitted (one model per fold, every audit replayed; the candidate "
        "is their mean) instead of the --holdout split (0)",
    )
    group.add_argument(
        "--prior-l2",
        type=float,
        default=30.0,
        help="pull towards the prior's weights (higher: nearer the prior)",
    )
    group.add_argument("--prior", type=Path, help="the prior model (default: the config's)")
    group.add_argument(
        "--candidate-out", type=Path, help="also write the candidate here, accepted or not"
    )


def train_from_log(args: argparse.Namespace) -> int:
    try:
        return _train(args)
    except (FromLogError, ReportError, ConfigError, RouterModelError, OSError) as exc:
        print(f"router train --from-log: {exc}", file=sys.stderr)
        return 2


def _train(args: argparse.Namespace) -> int:
    if args.config is None or args.out is None:
        raise FromLogError("--config (whose audits to read) and --out are required")
    if not 0 < args.holdout < 1:
        raise FromLogError(f"--holdout must be between 0 and 1, got {args.holdout}")
    if args.folds == 1 or not 0 <= args.folds <= 20:
        raise FromLogError(f"--folds must be 0 or between 2 and 20, got {args.folds}")
    config = load_config(args.config)
    if config.server.request_log.prompts not in ("full", "redacted"):
        raise FromLogError(
            "the audits keep no question text: set server.request_log.prompts to full or redacted"
        )
    rows = _rows(config, args)
    cut = int(len(rows) * (1 - args.holdout))
    if cut < MIN_ROWS // 2 or len(rows) - cut < MIN_ROWS // 2:
        raise FromLogError(f"{len(rows)} usable router audits; at least {MIN_ROWS} are needed")
    classifier = config.routing.classifier
    prior_file = args.prior or (
        model_path(classifier.model, args.config) if classifier else default_model_path()
    )
    prior = load_model(prior_file, None)
    data = embed_rows(rows, bundled_embedder(), getattr(args, "embed_cache", None))
    trained = train_candidate(data, prior, holdout=args.holdout, l2=args.prior_l2,
                              folds=args.folds)  # fmt: skip
    result, candidate = trained.replay, trained.model
    print(result.describe())
    if args.candidate_out is not None:
        candidate.save(args.candidate_out)
    if not result.accepted:
        return 1
    candidate.save(args.out)
    how = f", the mean of {args.folds} cross-fitted models" if args.folds >= 2 else ""
    print(f"wrote {args.out}: trained on {trained.trained} audited questions{how}, prior "
          f"{prior_file}")  # fmt: skip
    return 0


def _rows(config: GatewayConfig, args: argparse.Namespace) -> list[OutcomeRow]:
    now = time.time()
    since = parse_instant(args.since, now, ZoneInfo("UTC"))
    with config_source(config, args.config) as source:
        return outcome_rows(read_labels(source, since, now + 1))
