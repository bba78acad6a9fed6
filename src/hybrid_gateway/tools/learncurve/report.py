"""`bench learn`'s verdicts (issue 23's goals) and its JSON + Markdown files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["markdown", "verdicts", "write_report"]

JsonDict = dict[str, Any]
APGR_GAIN = 0.10
SPEND_SHARE = 0.05
HIT_FACTOR = 2.0
FALSE_HIT_SLACK = 0.01


def verdicts(report: Mapping[str, Any]) -> list[JsonDict]:
    """One line per goal the run measured: what was asked, what was measured, met or not."""
    lines: list[JsonDict] = []
    router = report.get("router")
    if router and router["checkpoints"]:
        scores = {s["model"]: s for s in router["scores"]}
        shipped = scores["shipped"]["apgr"]
        learned = [s for s in router["scores"] if s["model"] != "shipped"]
        last = learned[-1] if learned else None
        gain = None if last is None else round(last["apgr"] - shipped, 4)
        lines.append(_line(
            "router APGR on the unseen part, learned - shipped", f">= +{APGR_GAIN:.2f}", gain,
            gain is not None and gain >= APGR_GAIN,
            f"shipped {shipped:.4f}; {last['model']} {last['apgr']:.4f}" if last else "no model",
        ))  # fmt: skip
        share = router["checkpoints"][-1]["audit_share_of_heavy_only"]
        lines.append(_line("router audit spend / heavy-only cost", f"<= {SPEND_SHARE:.0%}",
                           share, share is not None and share <= SPEND_SHARE, ""))  # fmt: skip
    lines += _default_verdicts(report.get("default"))
    cache = report.get("cache")
    if cache:
        lines += _cache_verdicts(cache)
    return lines


def _cache_verdicts(cache: Mapping[str, Any]) -> list[JsonDict]:
    """Hits and the realised false-hit rate, learned vs bundled: on the unseen workload served
    at the final thresholds when the run has one, else over the learning run itself."""
    unseen = cache.get("unseen")
    runs = unseen if unseen else {k: r["total"] for k, r in cache["runs"].items()}
    part = "unseen workload, final thresholds" if unseen else "the learning run"
    bundled, learned = runs["bundled"], runs["learned"]
    factor = learned["hits"] / bundled["hits"] if bundled["hits"] else None
    limit = 1 - cache["settings"]["target_precision"] + FALSE_HIT_SLACK
    rate = learned["false_hit_rate"]
    return [
        _line(f"semantic hits, learned / bundled ({part})", f">= {HIT_FACTOR:.0f}x",
              None if factor is None else round(factor, 3),
              factor is not None and factor >= HIT_FACTOR,
              f"{learned['hits']} vs {bundled['hits']} hits"),
        _line(f"learned threshold's realised false-hit rate ({part})",
              f"<= {limit:.1%} (target + 1 point)", rate, rate is not None and rate <= limit,
              f"{learned['false_hits']} false of {learned['hits']} hits"),
    ]  # fmt: skip


def _default_verdicts(default: Mapping[str, Any] | None) -> list[JsonDict]:
    """Issue 23's default-workload goal (default_goal.py): quality at the floor, below the
    rules' cost, with the spend of the hard-workload goal."""
    if not default:
        return []
    ours = default["routings"]["rules + classifier learned from audits"]
    rules = default["routings"]["rules alone"]
    floor = default["settings"]["floor"]
    share = default["audit_share_of_heavy_only"]
    return [
        _line("default workload: quality, rules + router learned from audits", f">= {floor:.0%}",
              ours["quality"], ours["quality"] >= floor - 1e-12,
              f"{default['learned']['rows']} audited questions, {default['unseen_part']} unseen"),
        _line("default workload: relative cost, learned router / rules alone", "< 1",
              round(ours["relative_cost"] / rules["relative_cost"], 4),
              ours["relative_cost"] < rules["relative_cost"],
              f"{ours['relative_cost']} vs {rules['relative_cost']} of heavy-only"),
        _line("default workload: audit spend / heavy-only cost", f"<= {SPEND_SHARE:.0%}",
              share, share is not None and share <= SPEND_SHARE, ""),
    ]  # fmt: skip


def _default_markdown(default: Mapping[str, Any]) -> list[str]:
    learned = default["learned"]
    out = ["", f"## Default workload: {default['sent']} items sent, {default['audits']} router "
           f"audits; scored on the {default['unseen_part']} unseen questions", "",
           f"Learned from {learned['rows']} audited questions ({learned['heavy_only_share']:.1%} "
           f"answered well by the heavy model only): threshold {learned['threshold']} through "
           f"the rules of examples/gateway-full.yaml, out of fold on the shipped model as prior "
           f"(expected heavy share {learned['expected_heavy_share']:.1%}, quality "
           f"{learned['expected_quality']:.2%}); rules handed to the classifier: "
           f"{', '.join(learned['handed_to_classifier']) or 'none'}. A light answer costs "
           f"{default['light_cost']} of a heavy one.", "",
           "| routing | quality | heavy share | relative cost | decided by rules |",
           "|---|---|---|---|---|"]  # fmt: skip
    for name, r in default["routings"].items():
        out.append(f"| {name} | {r['quality']:.2%} | {r['heavy_share']:.1%} | "
                   f"{r['relative_cost']:.1%} | {r['by_rules']} |")  # fmt: skip
    return out


def _line(goal: str, target: str, value: float | None, met: bool, note: str) -> JsonDict:
    return {"goal": goal, "target": target, "measured": value, "met": met, "note": note}


def markdown(report: Mapping[str, Any]) -> str:
    out = [f"# bench learn ({report['started_at'][:19]}Z, {report['wall_s']} s)", "",
           f"`{report['command']}`", "", "| goal | target | measured | met |",
           "|---|---|---|---|"]  # fmt: skip
    for v in report["verdicts"]:
        note = f" ({v['note']})" if v["note"] else ""
        out.append(f"| {v['goal']}{note} | {v['target']} | {v['measured']} | "
                   f"{'yes' if v['met'] else 'NO'} |")  # fmt: skip
    router = report.get("router")
    if router:
        out += ["", f"## Router: {router['first_part']} items sent in order, scored on the "
                f"{router['unseen_part']} unseen", "",
                "| checkpoint | labels | requests | audit share | gate (candidate vs live) |",
                "|---|---|---|---|---|"]  # fmt: skip
        for p in router["checkpoints"]:
            replay = p["replay"] or {}
            gate = "accepted" if p["accepted"] else f"refused (exit {p['train_exit']})"
            out.append(f"| {p['target']} | {p['labels']} | {p['requests']} | "
                       f"{p['audit_share_of_heavy_only']} | {gate} "
                       f"({replay.get('candidate')} vs {replay.get('live')}) |")  # fmt: skip
        out += ["", "| model | APGR | CPT(50%) | CPT(80%) | heavy share at 99 % quality | "
                "relative cost there |", "|---|---|---|---|---|---|"]  # fmt: skip
        for s in router["scores"]:
            out.append(
                f"| {s['model']} | {s['apgr']} | {s['cpt50']} | {s['cpt80']} | "
                f"{s['heavy_share_at_floor']} | {s['relative_cost_at_floor']} |"
            )
    if report.get("default"):
        out += _default_markdown(report["default"])
    cache = report.get("cache")
    if cache:
        out += ["", f"## Cache (bundled threshold {cache['bundled_threshold']}, target precision "
                f"{cache['settings']['target_precision']})", "",
                "| run | requests | hit labels | near-miss labels | hits | hit rate | false hits "
                "| false-hit rate | final threshold |",
                "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for name, run in cache["runs"].items():
            t = run["total"]
            near = run.get("near_miss_labels", 0)
            out.append(f"| {name} | {t['requests']} | {run['labels']} | {near} | {t['hits']} | "
                       f"{t['hit_rate']} | {t['false_hits']} | {t['false_hit_rate']} | "
                       f"{run['final_threshold']} |")  # fmt: skip
        if cache.get("unseen"):
            out += ["", "Unseen workload (none of its questions sent in the runs above), served "
                    "at each run's final threshold, fixed:", "",
                    "| threshold | requests | hits | hit rate | false hits | false-hit rate |",
                    "|---|---|---|---|---|---|"]  # fmt: skip
            for name, t in cache["unseen"].items():
                out.append(f"| {name} {t['threshold']} | {t['requests']} | {t['hits']} | "
                           f"{t['hit_rate']} | {t['false_hits']} | {t['false_hit_rate']} |")
        out += ["", "Held-out pairs (`cache eval`, TEST half; pairs with a question the run sent "
                "removed):", "", "| file | pairs | AUC | threshold | precision | recall |",
                "|---|---|---|---|---|---|"]  # fmt: skip
        for h in cache.get("held_out", []):
            for name, row in h["at"].items():
                got = row or {}
                out.append(f"| {h['file']} | {h['pairs']} | {h['auc']} | {name} "
                           f"{got.get('threshold')} | {got.get('precision')} | "
                           f"{got.get('recall')} |")  # fmt: skip
    return "\n".join(out) + "\n"


def write_report(report: Mapping[str, Any], out: Path, name: str, *, plots: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    md_path.write_text(markdown(report))
    paths = [json_path, md_path]
    if plots:
        from hybrid_gateway.tools.learncurve.plots import draw

        paths += draw(report, out, name)
    return paths
