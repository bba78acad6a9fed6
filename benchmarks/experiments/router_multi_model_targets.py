"""Leave-one-source-out APGR of the shipped router settings when the training target of the
RouterBench and Arena rows uses every weaker model's score (their mean) instead of Mixtral's
alone; evaluation stays Mixtral-8x7B vs GPT-4-1106.

Research code over the package's fitting functions; run from the repository root after
`hybrid-gateway router train --preset default` has filled var/embeddings.sqlite3.

    python benchmarks/experiments/router_multi_model_targets.py
"""

import csv
import dataclasses
from pathlib import Path

import numpy as np

from hybrid_gateway.embedding.base import namespace_of
from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows, load_rows, preset_files
from hybrid_gateway.routing.evaluation import router_quality
from hybrid_gateway.routing.training import FitSettings, TrainingSet, fit, scores_of

D = Path("../shared/data")
files = preset_files("default", D)
emb = bundled_embedder()
ns = namespace_of(emb)
rows = load_rows(files)
data = embed_rows(rows, emb, Path("var/embeddings.sqlite3"))
from hybrid_gateway.routing.outcomes import Columns, load_outcomes

STRONGS = {"gpt-4-1106-preview", "gpt-4-0314", "claude-v2", "claude-2", "claude-2.1"}
multi = {}
for f in files[1:]:
    header = next(csv.reader(open(f)))
    models = [
        k
        for k in header
        if "|" not in k and k not in ("sample_id", "prompt", "eval_name", "question_id")
    ]
    acc = {}
    for m in models:
        if m in STRONGS:
            continue
        try:
            for r in load_outcomes(
                f,
                Columns(
                    weak=m,
                    questions=(D / "routing/arena_bench_v1_questions.jsonl")
                    if "arena" in f.stem
                    else None,
                ),
            ):
                acc.setdefault(r.prompt, []).append(r.weak)
        except Exception as e:
            print("skip", m, e)
    multi[f.stem] = {p: float(np.mean(v)) for p, v in acc.items()}
# check alignment by source counts
src = [r.source for r in rows]
for s in multi:
    print(s, len(multi[s]), src.count(s), sum(r.prompt in multi[s] for r in rows if r.source == s))


def with_weak(mode):
    out = []
    for r in rows:
        if r.source in multi and r.prompt in multi[r.source]:
            m = multi[r.source][r.prompt]
            w = m if mode == "mean" else 0.5 * (m + r.weak)
            out.append(dataclasses.replace(r, weak=w))
        else:
            out.append(r)
    return TrainingSet(tuple(out), data.vectors, data.feats)


def loso(train_data, label, settings=FitSettings()):
    res = {}
    for s in sorted(set(src)):
        m = np.array([x != s for x in src])
        model = fit(train_data.subset(m), ns, settings)
        test = data.subset(~m)
        res[s] = router_quality(scores_of(model, test), test.weak, test.strong).apgr
    print(
        f"{label:30s} mean {np.mean(list(res.values())):.4f} ",
        {k.replace("routerbench_", "rb_")[:14]: round(v, 3) for k, v in res.items()},
        flush=True,
    )


loso(data, "baseline (mixtral weak)")
loso(with_weak("mean"), "weak=mean of others")
loso(with_weak("half"), "weak=half mixtral half mean")
