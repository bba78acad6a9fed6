"""In distribution: 5 folds by prompt over all five routing files together, each file's APGR on
its held-out rows, for the soft-target and the outcome models (the shipped per-source fit).

Research code over the package's fitting functions; run from the repository root after
`hybrid-gateway router train --preset default` has filled var/embeddings.sqlite3.

    python benchmarks/experiments/router_in_distribution.py
"""

from pathlib import Path

import numpy as np

from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows, load_rows, preset_files
from hybrid_gateway.routing.evaluation import router_quality
from hybrid_gateway.routing.training import FitSettings, fit, prompt_folds, scores_of

rows = load_rows(preset_files("default", Path("../shared/data")))
data = embed_rows(rows, bundled_embedder(), Path("var/embeddings.sqlite3"))
src = np.array([r.source for r in rows])
folds = prompt_folds(data.prompts, 5)
for label, settings in (("soft", FitSettings()), ("outcomes", FitSettings(target="outcomes"))):
    oof = np.zeros(len(rows))
    for k in range(5):
        test = folds == k
        oof[test] = scores_of(fit(data.subset(~test), "x", settings), data.subset(test))
    per_file = {
        name: round(router_quality(oof[src == name], data.weak[src == name],
                                   data.strong[src == name]).apgr, 3)
        for name in sorted(set(src.tolist()))
    }  # fmt: skip
    print(label, per_file, "mean", round(float(np.mean(list(per_file.values()))), 4))
