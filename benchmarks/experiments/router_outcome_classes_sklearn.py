"""Three or four outcomes as the router's target, against the soft/binary logistic models:
scikit-learn multinomial logistic regression on MMLU 5-fold (character TF-IDF, and the package's
embedding + text features) and leave one source out (embedding + features, per source).

Research code (needs scikit-learn and scipy); run from the repository root after
`hybrid-gateway router train --preset default` has filled var/embeddings.sqlite3.  The
package's own four-outcome model is `router train/eval --target outcomes` (docs/router.md).

    python benchmarks/experiments/router_outcome_classes_sklearn.py
"""

from pathlib import Path

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from hybrid_gateway.routing.dataset import bundled_embedder, embed_rows, load_rows, preset_files
from hybrid_gateway.routing.evaluation import router_quality
from hybrid_gateway.routing.training import prompt_folds, score_scale

rows = load_rows(preset_files("default", Path("../shared/data")))
data = embed_rows(rows, bundled_embedder(), Path("var/embeddings.sqlite3"))
V, F = data.vectors.astype(float), data.feats.astype(float)
W, S = data.weak, data.strong
src = data.sources
P = [r.prompt for r in rows]


def shares(w, s, classes):
    """(n, classes) outcome shares: 3 = light better / tie / heavy better; 4 splits the tie
    into both wrong / both right by the scores' level."""
    g = np.clip((s - w) / score_scale(w, s), -1, 1)
    lo, hi = min(w.min(), s.min()), max(w.max(), s.max())
    up = ((w + s) / 2 - lo) / max(hi - lo, 1e-9)
    tie = 1 - np.abs(g)
    if classes == 3:
        return np.column_stack([np.clip(-g, 0, 1), tie, np.clip(g, 0, 1)])
    return np.column_stack([np.clip(-g, 0, 1), tie * (1 - up), tie * up, np.clip(g, 0, 1)])


def fit_gain(X, w, s, classes, C):
    """Multinomial fit of the shares (rows repeated once per outcome, weighted by their share);
    returns a function scoring P(heavy better) - P(light better)."""
    M = shares(w, s, classes)
    k = M.shape[1]
    Xr = np.vstack([X] * k) if isinstance(X, np.ndarray) else sparse.vstack([X] * k).tocsr()
    y, sw = np.repeat(np.arange(k), len(w)), M.T.reshape(-1)
    keep = sw > 0
    m = LogisticRegression(C=C, max_iter=5000).fit(Xr[keep], y[keep], sample_weight=sw[keep])
    cl = list(m.classes_)

    def gain(Xt):
        p = m.predict_proba(Xt)
        out = np.zeros(Xt.shape[0])
        if k - 1 in cl:
            out += p[:, cl.index(k - 1)]
        if 0 in cl:
            out -= p[:, cl.index(0)]
        return out

    return gain


def design(fit_rows, rows_out):
    mu, sd = F[fit_rows].mean(0), F[fit_rows].std(0) + 1e-6
    return np.hstack([V[rows_out], (F[rows_out] - mu) / sd])


mmlu = np.flatnonzero(src == "mmlu_dev")
w, s = W[mmlu], S[mmlu]
folds = prompt_folds([P[i] for i in mmlu], 5)
tfidf = TfidfVectorizer(analyzer="char", ngram_range=(2, 5), sublinear_tf=True, min_df=2,
                        max_features=300000)  # fmt: skip
for name, C in (("tfidf", 1.0), ("embedding", 0.3), ("embedding", 0.1)):
    oof = {3: np.zeros(len(mmlu)), 4: np.zeros(len(mmlu)), "binary": np.zeros(len(mmlu))}
    for i in range(5):
        tr, te = mmlu[folds != i], mmlu[folds == i]
        if name == "tfidf":
            X, Xt = tfidf.fit_transform([P[j] for j in tr]), tfidf.transform([P[j] for j in te])
        else:
            X, Xt = design(tr, tr), design(tr, te)
        for classes in (3, 4):
            oof[classes][folds == i] = fit_gain(X, W[tr], S[tr], classes, C)(Xt)
        binary = LogisticRegression(C=C, max_iter=5000).fit(X, S[tr] > W[tr])
        oof["binary"][folds == i] = binary.decision_function(Xt)
    print(f"MMLU 5-fold {name} C={C}:",
          {k: round(router_quality(v, w, s).apgr, 4) for k, v in oof.items()}, flush=True)  # fmt: skip

sources = sorted(set(src.tolist()))
for classes, C in ((3, 0.3), (3, 0.1), (4, 0.3)):
    res = []
    for held in sources:
        train, test = src != held, src == held
        total, acc = 0.0, np.zeros(int(test.sum()))
        for name in sources:
            own = train & (src == name)
            if not own.any():
                continue
            gain = fit_gain(design(own, own), W[own], S[own], classes, C)
            spread = gain(design(own, train)).std()
            acc += np.sqrt(own.sum()) * gain(design(own, test)) / spread
            total += np.sqrt(own.sum())
        res.append(router_quality(acc / total, W[test], S[test]).apgr)
    print(f"LOSO {classes} outcomes C={C}:", dict(zip(sources, np.round(res, 3))),
          "mean", round(float(np.mean(res)), 4), flush=True)  # fmt: skip
