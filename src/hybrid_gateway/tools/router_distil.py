"""`hybrid-gateway router distil`: the static student of a classifier, for the router's cascade.

    router distil --preset default          # the shipped student, routing/models/default-static.npz
    router distil --data FILE ... --teacher model.npz --out student.npz --threshold 0.57

The student (``routing/cascade.py``) is a linear model over the static embedder's vector and the
classifier's text features, fitted by ridge regression to the *teacher's logit* on the same
prompts: the teacher reads e5's vectors, the student static ones, so no outcome is needed, only
prompts (the outcome files' prompts are used).  Its P(complex) is on the teacher's scale.

Before fitting on every row, the student is fitted on 4/5 of the prompts and scored on the
fifth, five times; for each ``--margins`` value the command prints and stores in the model's
info the share of held-out prompts whose student logit lies within the margin of the
threshold's (e5 confirms those), how often the cascade's decision equals the teacher's, and the
cascade's APGR next to the teacher's on the same rows (the gain recovered across operating
points 10 %, ..., 90 % heavy calls, each with the teacher's threshold for that share).  The
teacher usually saw these rows in training, so its APGR here is optimistic for both; the
difference is the cascade's cost in routing quality.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.routing.build import DEFAULT_STUDENT_FILE, default_model_path, model_path
from hybrid_gateway.routing.cascade import (
    TEACHER_KEY,
    fingerprint,
    logit,
    logits_of,
    ridge,
    student_design,
)
from hybrid_gateway.routing.classifier import ClassifierModel, RouterModelError, load_model
from hybrid_gateway.routing.cli import add_data_arguments, columns_of
from hybrid_gateway.routing.dataset import (
    DEFAULT_DATA,
    PRESETS,
    bundled_embedder,
    embed_rows,
    load_rows,
    preset_files,
)
from hybrid_gateway.routing.evaluation import SHARES
from hybrid_gateway.routing.heads import LinearHead
from hybrid_gateway.routing.outcomes import OutcomeDataError
from hybrid_gateway.routing.settings import DEFAULT_MODEL
from hybrid_gateway.routing.training import TrainingSet, prompt_folds
from hybrid_gateway.tools.cliargs import float_at_least, int_at_least

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Student:
    weights: F64  # [embedding..., standardised features..., bias]
    mean: F64
    std: F64
    dim: int


def fit_student(data: TrainingSet, target: F64, l2: float) -> Student:
    """Ridge regression of ``target`` (the teacher's logit) on the static vectors and the
    standardised text features; the bias is not penalised."""
    mean = data.feats.mean(axis=0).astype(np.float64)
    std = data.feats.std(axis=0).astype(np.float64) + 1e-6
    weights = ridge(student_design(data, mean, std), target, l2)
    return Student(weights, mean, std, data.vectors.shape[1])


def student_logit(student: Student, data: TrainingSet) -> F64:
    return np.asarray(student_design(data, student.mean, student.std) @ student.weights)


def as_model(student: Student, namespace: str, info: dict[str, object]) -> ClassifierModel:
    w, d = student.weights, student.dim
    head = LinearHead(w[:d].astype(np.float32), w[d:-1].astype(np.float32), float(w[-1]))
    return ClassifierModel(namespace, head, student.mean.astype(np.float32),
                           student.std.astype(np.float32), info)  # fmt: skip


def held_out(
    static: TrainingSet, z_teacher: F64, threshold: float, margins: list[float] | None, l2: float
) -> dict[str, object]:
    """The student fitted on 4/5 of the prompts, scored on the fifth (5 folds); ``margins``
    None: the margins that send 10 %, 20 %, ..., 50 % of the held-out prompts to e5."""
    folds = prompt_folds(static.prompts, 5)
    z_student = np.empty(len(static.rows))
    for fold in range(5):
        test = folds == fold
        student = fit_student(static.subset(~test), z_teacher[~test], l2)
        z_student[test] = student_logit(student, static.subset(test))
    z_t = logit(threshold)
    delta = static.strong - static.weak
    out: dict[str, object] = {
        "rows": len(static.rows),
        "threshold": threshold,
        "residual_std": round(float(np.std(z_student - z_teacher)), 4),
        "teacher_apgr": _r(_apgr(lambda cut: z_teacher >= cut, z_teacher, delta)),
        "student_apgr": _r(_apgr(lambda cut: z_student >= cut, z_teacher, delta)),
    }
    distance = np.abs(z_student - z_t)
    out["teacher_logit_std"] = _r(np.std(z_teacher))
    if margins is None:
        margins = [_r(np.quantile(distance, share)) for share in (0.1, 0.2, 0.3, 0.4, 0.5)]
    margins_out = {}
    for m in margins:
        inside = distance < m
        decide = np.where(inside, z_teacher >= z_t, z_student >= z_t)

        def cascade(cut: float, m: float = m) -> npt.NDArray[np.bool_]:
            near = np.abs(z_student - cut) < m
            return np.where(near, z_teacher >= cut, z_student >= cut)

        margins_out[f"{m:g}"] = {
            "e5_share": _r(inside.mean()),
            "agreement": _r((decide == (z_teacher >= z_t)).mean()),
            "apgr": _r(_apgr(cascade, z_teacher, delta)),
        }
    out["margins"] = margins_out
    return out


def _apgr(decide_at: Callable[[float], npt.NDArray[np.bool_]], z_teacher: F64, delta: F64) -> float:
    """The area under PGR over heavy shares 0, 10 %, ..., 100 % (as `router eval`), each
    point deciding at the teacher's cut for that share."""
    total = float(delta.sum())
    if total <= 0:
        return float("nan")
    pgr = [0.0]
    for share in SHARES[1:-1]:
        cut = float(np.quantile(z_teacher, 1 - share))
        pgr.append(float(delta[decide_at(cut)].sum()) / total)
    pgr.append(1.0)
    return float(np.trapezoid(pgr, SHARES))


def _r(x: float | np.floating) -> float:
    return round(float(x), 4)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, action="append",
                        help="an outcome file whose prompts to distil on (repeatable)")  # fmt: skip
    source.add_argument("--preset", choices=sorted(PRESETS),
                        help="a named mix of the files in --data-dir")  # fmt: skip
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA,
                        help="the shared data folder (default: %(default)s)")  # fmt: skip
    parser.add_argument("--teacher", default=DEFAULT_MODEL,
                        help="the classifier to copy: 'default' (shipped) or a model file "
                        "(default: %(default)s)")  # fmt: skip
    parser.add_argument("--out", type=Path,
                        help="student file to write (default with the default teacher and "
                        "--preset default: the packaged routing/models/"
                        f"{DEFAULT_STUDENT_FILE})")  # fmt: skip
    parser.add_argument("--threshold", type=float, default=0.5,
                        help="the threshold the held-out figures are taken at "
                        "(routing.classifier.threshold; default: %(default)s)")  # fmt: skip
    parser.add_argument("--margins", type=float_at_least(0.0), nargs="+",
                        help="margins (logits) to report (default: those sending 10, 20, 30, "
                        "40 and 50 %% of the held-out prompts to e5)")  # fmt: skip
    parser.add_argument("--l2", type=float_at_least(0.0), default=1.0,
                        help="ridge penalty (default: %(default)s)")  # fmt: skip
    parser.add_argument("--sample", type=int_at_least(50),
                        help="distil on this many random prompts (seed 0): bounds the e5 "
                        "embedding time (default: every prompt)")  # fmt: skip
    add_data_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.threshold < 1:
        print("router distil: --threshold must be between 0 and 1", file=sys.stderr)
        return 2
    files = (preset_files(args.preset, args.data_dir) if args.preset is not None
             else list(args.data))  # fmt: skip
    out = args.out
    if out is None and args.preset == "default" and args.teacher == DEFAULT_MODEL:
        out = default_model_path(DEFAULT_STUDENT_FILE)
    if out is None:
        print("router distil: --out is required", file=sys.stderr)
        return 2
    from hybrid_gateway.embedding.static import StaticE5Embedder

    e5, static = bundled_embedder(), StaticE5Embedder()
    try:
        teacher = load_model(model_path(args.teacher, None), namespace_of(e5))
        rows = load_rows(files, columns_of(args))
    except (RouterModelError, OutcomeDataError) as exc:
        print(f"router distil: {exc}", file=sys.stderr)
        return 2
    rows = list({r.prompt: r for r in rows}.values())  # one row per prompt
    if args.sample is not None and args.sample < len(rows):
        rows = random.Random(0).sample(rows, args.sample)
    if len(rows) < 50:
        print(f"router distil: {len(rows)} prompts; at least 50 are needed", file=sys.stderr)
        return 2
    e5_data = embed_rows(rows, e5, args.embed_cache)
    static_data = embed_rows(rows, static, args.embed_cache)
    z_teacher = logits_of(teacher, e5_data)
    report = held_out(static_data, z_teacher, args.threshold, args.margins, args.l2)
    student = fit_student(static_data, z_teacher, args.l2)
    info: dict[str, object] = {
        TEACHER_KEY: {"namespace": teacher.namespace, "fingerprint": fingerprint(teacher),
                      "model": args.teacher},
        "target": "the teacher's logit (ridge regression)", "l2": args.l2,
        "rows": len(rows), "files": [f.name for f in files], "held_out": report,
    }  # fmt: skip
    as_model(student, namespace_of(static), info).save(out)
    print(json.dumps(report, indent=2))
    print(f"wrote {out}: student of {args.teacher} on {len(rows)} prompts; "
          f"embedder {namespace_of(static)}")  # fmt: skip
    return 0
