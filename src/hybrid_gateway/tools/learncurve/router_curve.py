"""The router curve: labels bought by router audits vs APGR on the workload's unseen part.

A gateway serves every request from the light lane (so every answer may be audited and the
audited questions are a uniform sample of the traffic), with ``learning.audit.router`` at
``rate`` and the ``marks`` judge.  The workload's first part is sent in order, in chunks; once
the stored verdicts reach a checkpoint, sending pauses, ``router train --from-log`` (the CLI,
in this process) retrains from the shipped model as its prior with its replay gate, and the
candidate is kept whether the gate accepts it or not.  After the run the shipped model and each
candidate score the later part, whose questions were never sent (``scoring.router_figures``).
"""

from __future__ import annotations

import contextlib
import io
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.routing.build import default_model_path
from hybrid_gateway.routing.classifier import load_model
from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows
from hybrid_gateway.routing.outcomes import OutcomeRow
from hybrid_gateway.routing.training import scores_of
from hybrid_gateway.tools.learncurve.scoring import router_figures, split_unseen
from hybrid_gateway.tools.learncurve.stack import base_config, running, send, settled_audits
from hybrid_gateway.tools.workload.schema import WorkloadItem, last_user_text, read_workload

__all__ = ["RouterSettings", "run_router_curve"]

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class RouterSettings:
    folder: Path
    workload: Path
    unseen: int  # items at the workload's end kept for scoring, never sent
    checkpoints: tuple[int, ...]  # labels bought at which to retrain
    rate: float  # learning.audit.router.rate
    concurrency: int = 8
    chunk: int = 200
    holdout: float = 0.3  # router train --from-log --holdout (its replay gate)
    folds: int = 0  # router train --from-log --folds (2 or more: cross-fitted instead)
    prior_l2: float = 30.0
    embed_cache: Path | None = None
    floor: float = 0.99


def router_config(folder: Path, upstreams: Mapping[str, str], rate: float) -> JsonDict:
    config = base_config(folder, upstreams)
    config["learning"] = {"audit": {
        "enabled": True, "judge": {"kind": "marks"}, "max_in_flight": 16,
        "router": {"rate": rate, "daily_usd_per_tenant": 1.0e6},
    }}  # fmt: skip
    return config


def run_router_curve(s: RouterSettings) -> JsonDict:
    first, unseen = split_unseen(read_workload(s.workload), s.unseen)
    log = s.folder / "requests.sqlite3"
    points: list[JsonDict] = []
    sent = 0
    with running(s.folder, s.workload, lambda ups: router_config(s.folder, ups, s.rate)) as gw:
        for target in sorted(s.checkpoints):
            labels = settled_audits(log, "router", settle_s=0.0, limit_s=0.0)
            while labels < target and sent < len(first):
                chunk = first[sent : sent + s.chunk]
                send(gw.url, chunk, s.concurrency)
                sent += len(chunk)
                labels = settled_audits(log, "router", settle_s=0.0, limit_s=0.0)
            labels = settled_audits(log, "router")
            if points and points[-1]["labels"] == labels:
                continue  # no label since the last checkpoint: nothing new to train on
            print(f"router curve: {labels} labels after {sent} requests", file=sys.stderr)
            points.append({"target": target, "labels": labels, "requests": sent,
                           **spend(log), **_train(s, len(points))})  # fmt: skip
            if labels < target:
                break  # the first part ran out
    return {
        "settings": _settings_json(s),
        "first_part": len(first),
        "unseen_part": len(unseen),
        "checkpoints": points,
        "scores": score_models(s, unseen, points, spend(log)["light_cost_ratio"]),
    }


def spend(log: Path) -> JsonDict:
    """Audit spend so far against what heavy-only would have cost for the requests sent, and
    a light answer's cost as a share of a heavy one's (the log's token counts at both prices)."""
    with contextlib.closing(sqlite3.connect(log, timeout=10)) as db:
        audit = db.execute(
            "SELECT coalesce(sum(cost_usd), 0), count(verdict) FROM audits WHERE kind = 'router'"
        ).fetchone()
        served, tokens_in, tokens_out = db.execute(
            "SELECT coalesce(sum(cost_usd), 0), coalesce(sum(prompt_tokens), 0), "
            "coalesce(sum(completion_tokens), 0) FROM requests WHERE status = 200"
        ).fetchone()
    from hybrid_gateway.tools.learncurve.stack import full_config

    heavy = full_config()["channels"]["heavy-local"]
    heavy_only = (tokens_in * heavy["price_per_1m_input"]
                  + tokens_out * heavy["price_per_1m_output"]) / 1e6  # fmt: skip
    return {
        "audit_usd": round(float(audit[0]), 6),
        "heavy_only_usd": round(heavy_only, 6),
        "audit_share_of_heavy_only": round(float(audit[0]) / heavy_only, 4) if heavy_only else None,
        "served_usd": round(float(served), 6),
        "light_cost_ratio": round(float(served) / heavy_only, 4) if heavy_only else 0.1,
    }


def _train(s: RouterSettings, index: int) -> JsonDict:
    """``router train --from-log`` on the labels so far; the candidate is kept either way."""
    from hybrid_gateway.cli import main

    candidate = s.folder / f"candidate-{index}.npz"
    argv = ["router", "train", "--from-log", "--config", str(s.folder / "gateway.yaml"),
            "--out", str(s.folder / f"accepted-{index}.npz"), "--candidate-out", str(candidate),
            "--holdout", str(s.holdout), "--prior-l2", str(s.prior_l2),
            "--folds", str(s.folds)]  # fmt: skip
    if s.embed_cache is not None:
        argv += ["--embed-cache", str(s.embed_cache)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(argv)
    said = printed.getvalue().strip()
    print(f"  router train --from-log: exit {code}: {said}", file=sys.stderr)
    replay = load_model(candidate, None).info.get("replay") if candidate.exists() else None
    return {"train_exit": code, "accepted": code == 0, "replay": replay,
            "candidate": candidate.name if candidate.exists() else None}  # fmt: skip


def outcome_rows_of(items: Sequence[WorkloadItem]) -> list[OutcomeRow]:
    """Workload items with their outcome labels, as the rows a router is scored on."""
    return [OutcomeRow(last_user_text(i.messages), float(i.labels.light_ok),
                       float(i.labels.heavy_ok), i.labels.category, i.labels.source)
            for i in items]  # fmt: skip


def score_models(
    s: RouterSettings, unseen: Sequence[WorkloadItem], points: Sequence[JsonDict], ratio: float
) -> list[JsonDict]:
    """The shipped model and each checkpoint's candidate on the unseen part."""
    rows = outcome_rows_of(unseen)
    embedder = bundled_embedder()
    data = embed_rows(rows, embedder, s.embed_cache)
    weak, strong = data.weak, data.strong
    namespace = namespace_of(embedder)
    models = [("shipped", 0, default_model_path())]
    models += [(f"learned@{p['labels']}", p["labels"], s.folder / p["candidate"])
               for p in points if p["candidate"]]  # fmt: skip
    out = []
    for name, labels, path in models:
        scores = np.asarray(scores_of(load_model(path, namespace), data), dtype=np.float64)
        out.append({"model": name, "labels": labels,
                    **router_figures(scores, weak, strong, ratio, s.floor)})  # fmt: skip
    return out


def _settings_json(s: RouterSettings) -> JsonDict:
    return {"workload": str(s.workload), "unseen": s.unseen, "checkpoints": list(s.checkpoints),
            "rate": s.rate, "concurrency": s.concurrency, "chunk": s.chunk,
            "holdout": s.holdout, "folds": s.folds, "prior_l2": s.prior_l2,
            "quality_floor": s.floor}  # fmt: skip
