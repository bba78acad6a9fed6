"""Would one threshold shipped with the model mean the same on every kind of traffic?  Out-of-fold
P(complex) (5 folds by prompt over all five routing files, the shipped settings), and per file
the largest threshold that keeps 95 % of heavy-only quality, with the share it sends heavy.

Research code over the package's fitting functions; run from the repository root after
`hybrid-gateway router train --preset default` has filled var/embeddings.sqlite3.

    python benchmarks/experiments/router_threshold_per_source.py
"""

from pathlib import Path

import numpy as np

from hybrid_gateway.routing.calibration import calibrate
from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows, load_rows, preset_files
from hybrid_gateway.routing.training import FitSettings, fit, prompt_folds, scores_of

rows = load_rows(preset_files("default", Path("../shared/data")))
data = embed_rows(rows, bundled_embedder(), Path("var/embeddings.sqlite3"))
src = np.array([r.source for r in rows])
folds = prompt_folds(data.prompts, 5)
oof = np.zeros(len(rows))
for k in range(5):
    test = folds == k
    oof[test] = scores_of(fit(data.subset(~test), "x", FitSettings()), data.subset(test))
print(f"out-of-fold P(complex): {oof.min():.3f}-{oof.max():.3f}, "
      f"5-95 % {np.percentile(oof, 5):.3f}-{np.percentile(oof, 95):.3f}, "
      f"heavy at 0.5: {(oof >= 0.5).mean():.1%}")  # fmt: skip
for name in sorted(set(src.tolist())):
    m = src == name
    result = calibrate(oof[m], data.weak[m], data.strong[m], [""] * int(m.sum()),
                       floor=0.95, light_cost=0.1)  # fmt: skip
    chosen = result.chosen
    if chosen is None:
        print(f"{name}: no threshold meets the floor")
    else:
        print(f"{name}: threshold {chosen.threshold:.3f}, heavy {chosen.heavy_share:.1%}, "
              f"quality {chosen.quality:.3f}")  # fmt: skip
