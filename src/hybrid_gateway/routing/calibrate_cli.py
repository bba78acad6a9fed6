"""`hybrid-gateway router calibrate`: pick the threshold under a quality floor and write it.

    router calibrate --data FILE --model MODEL.npz --quality-floor 0.95 --config gateway.yaml
    router calibrate --from-log [LOG_OR_CONFIG] --config gateway.yaml   audited router traffic
    router calibrate ... --through-rules      the config's rules decide first, as in the gateway

Writes ``curve.csv`` (threshold, heavy share, cost, quality), ``gates.csv``, ``calibration.json``
and ``curve.png`` under ``--out``, then sets ``routing.classifier.threshold`` (and ``model``,
when given) and ``routing.gates.heavy_categories`` in the config, keeping the old file as
``<config>.bak``.  ``--dry-run`` writes the outputs but leaves the config alone.  The relative
cost of a light call comes from the config's channel prices unless ``--light-cost`` is given.

``--through-rules`` routes each row's question (one user message, its category as metadata)
through the config's rules first, as the gateway does: a row a rule sends to a lane stays there
and the threshold is chosen for the whole set, so the floor holds end to end.  ``rules.csv``
then shows, per rule, its rows, where it sends them and their light and heavy quality: a rule
that sends light questions whose light quality is below the floor costs quality no threshold
can win back (the summary names it).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hybrid_gateway.accounting.report import ReportError
from hybrid_gateway.config import GatewayConfig, load_config
from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.learning.from_log import (
    FromLogError,
    add_from_log_flag,
    audited_router_rows,
    read_audits,
)
from hybrid_gateway.routing.build import default_model_path, model_path
from hybrid_gateway.routing.calibration import Calibration, calibrate
from hybrid_gateway.routing.classifier import RouterModelError, load_model
from hybrid_gateway.routing.cli import add_data_arguments, columns_of
from hybrid_gateway.routing.config_edit import update_config_file
from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows, load_rows
from hybrid_gateway.routing.outcomes import OutcomeDataError, OutcomeRow
from hybrid_gateway.routing.rules import RuleBook, extract_features
from hybrid_gateway.routing.training import scores_of
from hybrid_gateway.tools.cliargs import float_at_least, int_at_least
from hybrid_gateway.types import RouteDecision


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, help="an outcome or label file")
    add_from_log_flag(source)  # --from-log: the router audits (learning/from_log.py)
    parser.add_argument("--since", default="30d", help="--from-log: audits since (30d)")
    parser.add_argument("--model", type=Path, help="model file (default: the packaged model; "
                        "with --from-log the config's routing.classifier.model)")  # fmt: skip
    parser.add_argument(
        "--quality-floor",
        type=float,
        default=0.95,
        help="quality relative to heavy-only to keep (default: %(default)s)",
    )
    parser.add_argument("--config", type=Path, required=True, help="gateway config to update")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("router-calibration"),
        help="folder for curve.csv, gates.csv, calibration.json, curve.png",
    )
    parser.add_argument(
        "--min-category-rows",
        type=int_at_least(1),
        default=20,
        help="categories with fewer rows are not gated (default: %(default)s)",
    )
    parser.add_argument(
        "--light-cost",
        type=float_at_least(0.0),
        help="cost of a light call relative to a heavy one (default: from the "
        "config's channel prices)",
    )
    parser.add_argument("--dry-run", action="store_true", help="do not modify the config")
    parser.add_argument(
        "--through-rules",
        action="store_true",
        help="route each question through the config's rules first; calibrate on the whole "
        "set, rule-decided rows where their rules send them",
    )
    add_data_arguments(parser)


def light_cost_of(config: GatewayConfig) -> float:
    """Light / heavy price per token (input + output price per 1M, summed)."""
    routing = config.routing

    def price(lane: str) -> float:
        channel = config.channels[config.lanes[lane].channel]
        return channel.price_per_1m_input + channel.price_per_1m_output

    heavy = price(routing.complex_lane)
    return price(routing.simple_lane) / heavy if heavy > 0 else 1.0


def run(args: argparse.Namespace) -> int:
    if not 0 < args.quality_floor <= 1:
        print("router calibrate: --quality-floor must be in (0, 1]", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config)
        rows = _rows(args, config)
        embedder = bundled_embedder()
        model = load_model(args.model or _model_of(args, config), namespace_of(embedder))
    except (ConfigError, OutcomeDataError, RouterModelError, FromLogError, ReportError) as exc:
        print(f"router calibrate: {exc}", file=sys.stderr)
        return 2
    data = embed_rows(rows, embedder, args.embed_cache)
    light_cost = args.light_cost if args.light_cost is not None else light_cost_of(config)
    decided = rule_decisions(config, rows) if args.through_rules else None
    result = calibrate(
        scores_of(model, data),
        data.weak,
        data.strong,
        [r.category for r in rows],
        floor=args.quality_floor,
        light_cost=light_cost,
        min_rows=args.min_category_rows,
        fixed=None if decided is None else [d.heavy for d in decided],
    )
    write_outputs(args.out, result, args.quality_floor)
    if decided is not None:
        for line in write_rule_table(args.out / "rules.csv", decided, rows, args.quality_floor):
            print(line)
    if result.chosen is None:
        print(f"router calibrate: no threshold meets quality {args.quality_floor}", file=sys.stderr)
        return 1
    print(_summary(result, args.quality_floor, light_cost))
    if not args.dry_run:
        values: dict[tuple[str, ...], object] = {
            ("routing", "classifier", "threshold"): round(result.chosen.threshold, 4),
            ("routing", "gates", "heavy_categories"): [g.category for g in result.gates],
        }
        if args.model is not None:
            values[("routing", "classifier", "model")] = str(args.model.resolve())
        try:
            backup = update_config_file(args.config, values)
        except ConfigError as exc:
            print(f"router calibrate: not written: {exc}", file=sys.stderr)
            return 2
        print(f"updated {args.config} (previous version: {backup})")
    print(f"curve: {args.out / 'curve.csv'}, {args.out / 'curve.png'}")
    return 0


@dataclass(frozen=True, slots=True)
class RuleDecision:
    rule: str  # the rule's name; "" where no rule decides (the classifier does)
    heavy: bool | None  # True / False: the rule sends the row heavy / light; None: classifier


def rule_decisions(config: GatewayConfig, rows: Sequence[OutcomeRow]) -> list[RuleDecision]:
    """Each row's question through the config's rules, as a one-message chat with its category
    as metadata (under the gates' key).  A rule that hands over (``action: classifier``) or no
    rule at all leaves the row to the classifier."""
    routing = config.routing
    lanes = {name: lane.channel for name, lane in config.lanes.items()}
    book = RuleBook(routing.rules, lanes)
    out: list[RuleDecision] = []
    for row in rows:
        metadata = {routing.category_key: row.category} if row.category else None
        features = extract_features([{"role": "user", "content": row.prompt}], metadata)
        match = book.match(features, "default")
        if isinstance(match, RouteDecision):
            out.append(RuleDecision(match.rule, match.lane == routing.complex_lane))
        else:
            out.append(RuleDecision("", None))
    return out


def write_rule_table(
    path: Path, decided: Sequence[RuleDecision], rows: Sequence[OutcomeRow], floor: float
) -> list[str]:
    """``rules.csv``: rows, lane and light / heavy quality per deciding rule; the summary lines,
    naming each light rule whose rows' light quality is below ``floor`` of their heavy one."""
    by_rule: dict[str, list[OutcomeRow]] = {}
    for d, row in zip(decided, rows, strict=True):
        if d.heavy is not None:
            by_rule.setdefault(f"{d.rule}\t{'heavy' if d.heavy else 'light'}", []).append(row)
    lines = [f"rules decide {sum(len(v) for v in by_rule.values())} of {len(rows)} questions"]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["rule", "lane", "rows", "light_quality", "heavy_quality"])
        for key, group in sorted(by_rule.items(), key=lambda kv: -len(kv[1])):
            rule, lane = key.split("\t")
            weak = sum(r.weak for r in group) / len(group)
            strong = sum(r.strong for r in group) / len(group)
            writer.writerow([rule, lane, len(group), f"{weak:.4f}", f"{strong:.4f}"])
            line = (
                f"  rule {rule} -> {lane}: {len(group)} rows, light {weak:.1%}, heavy {strong:.1%}"
            )
            if lane == "light" and strong > 0 and weak / strong < floor:
                line += " (below the floor: no threshold wins these rows back)"
            lines.append(line)
    return lines


def _rows(args: argparse.Namespace, config: GatewayConfig) -> list[OutcomeRow]:
    if args.from_log is None:
        return load_rows([args.data], columns_of(args))
    labels = read_audits(args.from_log, args.config, args.since, categories=True)
    return audited_router_rows(labels)


def _model_of(args: argparse.Namespace, config: GatewayConfig) -> Path:
    classifier = config.routing.classifier
    if args.from_log is None or classifier is None:
        return default_model_path()
    return model_path(classifier.model, args.config)


def _summary(result: Calibration, floor: float, light_cost: float) -> str:
    chosen = result.chosen
    assert chosen is not None
    gated = ", ".join(g.category for g in result.gates) or "none"
    return (
        f"threshold {chosen.threshold:.4f}: heavy share {chosen.heavy_share:.1%}, quality "
        f"{chosen.quality:.2%} of heavy-only (floor {floor:.1%}), cost {chosen.cost:.1%} of "
        f"heavy-only (light call = {light_cost:.2f} heavy)\n"
        f"gated to heavy ({len(result.gates)} of {result.judged} categories judged): {gated}"
    )


def write_outputs(out: Path, result: Calibration, floor: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "curve.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["threshold", "heavy_share", "cost", "quality", "chosen"])
        for pt in result.curve:
            writer.writerow(
                [
                    f"{pt.threshold:.4f}",
                    f"{pt.heavy_share:.4f}",
                    f"{pt.cost:.4f}",
                    f"{pt.quality:.4f}",
                    int(pt is result.chosen),
                ]
            )
    with (out / "gates.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["category", "rows", "light_quality"])
        for gate in result.gates:
            writer.writerow([gate.category, gate.rows, f"{gate.light_quality:.4f}"])
    chosen = result.chosen
    summary = {
        "quality_floor": floor,
        "chosen": None if chosen is None else {k: getattr(chosen, k) for k in chosen.__slots__},
        "heavy_categories": [g.category for g in result.gates],
        "categories_judged": result.judged,
    }
    (out / "calibration.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    _plot(out / "curve.png", result, floor)


def _plot(path: Path, result: Calibration, floor: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [pt.threshold for pt in result.curve]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(xs, [pt.quality for pt in result.curve], label="quality (vs heavy-only)")
    ax.plot(xs, [pt.cost for pt in result.curve], label="cost (vs heavy-only)")
    ax.plot(xs, [pt.heavy_share for pt in result.curve], label="share sent to heavy", ls="--")
    ax.axhline(floor, color="grey", lw=0.8, ls=":", label=f"quality floor {floor:.0%}")
    if result.chosen is not None:
        ax.axvline(
            result.chosen.threshold,
            color="black",
            lw=0.8,
            label=f"chosen threshold {result.chosen.threshold:.3f}",
        )
    ax.set_xlabel("threshold on P(complex)")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title("router calibration: threshold -> heavy share, cost, quality")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
