"""In distribution: 5 folds by prompt over all five routing files together, each file's APGR on
its held-out rows, for the soft-target and the outcome models (the shipped per-source fit);
then, for the soft-target (shipped) settings, the out-of-fold P(complex) range and per file the
largest threshold that keeps 95 % of heavy-only quality, with the share it sends heavy (would
one threshold shipped with the model mean the same on every kind of traffic?).

Research code over the package's fitting functions; run from the repository root after
`hybrid-gateway router train --preset default` has filled var/embeddings.sqlite3.

    python benchmarks/experiments/router_in_distribution.py
"""

from pathlib import Path

import numpy as np

from hybrid_gateway.routing.calibration import calibrate
from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows, load_rows, preset_files
from hybrid_gateway.routing.evaluation import router_quality
from hybrid_gateway.routing.training import FitSettings, fit, prompt_folds, scores_of

rows = load_rows(preset_files("default", Path("../shared/data")))
data = embed_rows(rows, bundled_embedder(), Path("var/embeddings.sqlite3"))
src = data.sources
names = sorted(set(src.tolist()))
folds = prompt_folds(data.prompts, 5)
oof = {}
for label, settings in (("soft", FitSettings()), ("outcomes", FitSettings(target="outcomes"))):
    scores = np.zeros(len(rows))
    for k in range(5):
        test = folds == k
        scores[test] = scores_of(fit(data.subset(~test), "x", settings), data.subset(test))
    oof[label] = scores
    per_file = {
        name: round(router_quality(scores[src == name], data.weak[src == name],
                                   data.strong[src == name]).apgr, 3)
        for name in names
    }  # fmt: skip
    print(label, per_file, "mean", round(float(np.mean(list(per_file.values()))), 4))

p = oof["soft"]
print(f"soft out-of-fold P(complex): {p.min():.3f}-{p.max():.3f}, "
      f"5-95 % {np.percentile(p, 5):.3f}-{np.percentile(p, 95):.3f}, "
      f"heavy at 0.5: {(p >= 0.5).mean():.1%}")  # fmt: skip
for name in names:
    m = src == name
    chosen = calibrate(p[m], data.weak[m], data.strong[m], [""] * int(m.sum()), floor=0.95,
                       light_cost=0.1).chosen  # fmt: skip
    if chosen is None:
        print(f"  {name}: no threshold meets the floor")
    else:
        print(f"  {name}: threshold {chosen.threshold:.3f}, heavy {chosen.heavy_share:.1%}, "
              f"quality {chosen.quality:.3f}")  # fmt: skip
