"""The issue's "character TF-IDF + logistic regression" MMLU baseline, with scikit-learn.

Research code (needs scikit-learn; not a dependency of the package).  Same prompt-hash folds as
`hybrid-gateway router eval --cv 5` (seed 0), target "the strong model scores above the weak
one", scored with the package's own APGR (`routing/evaluation.py`).  Run from the repository root:

    python benchmarks/experiments/router_tfidf_sklearn.py
"""

import csv
import hashlib
import time

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from hybrid_gateway.routing.evaluation import router_quality

rows = list(csv.DictReader(open("../shared/data/routing/mmlu_dev.csv")))
P = [r["prompt"] for r in rows]
w = np.array([float(r["weak_score"]) for r in rows])
s = np.array([float(r["strong_score"]) for r in rows])
subj = [r["subject"] for r in rows]


def folds(k, seed=0):
    salt = str(seed).encode()
    return np.array(
        [int.from_bytes(hashlib.blake2b(p.encode() + salt, digest_size=8).digest()) % k for p in P]
    )


def run(name, make, target, k=5, seed=0):
    f = folds(k, seed)
    out = np.empty(len(P))
    t0 = time.time()
    for i in range(k):
        tr = f != i
        m = make()
        y = target
        if y.dtype == bool or set(np.unique(y)) <= {0, 1}:
            m.fit([P[j] for j in np.flatnonzero(tr)], y[tr].astype(int))
        out[~tr] = m.predict_proba([P[j] for j in np.flatnonzero(~tr)])[:, 1]
    q = router_quality(out, w, s)
    print(
        f"{name:50s} k={k} seed={seed} apgr={q.apgr:.4f} cpt50={q.cpt50:.3f} ({time.time() - t0:.0f}s)",
        flush=True,
    )
    return out


hard = (s > w).astype(int)
weakfail = (w < 1).astype(int)
variants = {
    "char_wb 1-5, C=1, hard(s>w)": lambda: make_pipeline(
        TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 5), sublinear_tf=True, min_df=2),
        LogisticRegression(C=1, max_iter=2000),
    ),
    "char 2-5, C=1, hard": lambda: make_pipeline(
        TfidfVectorizer(analyzer="char", ngram_range=(2, 5), sublinear_tf=True, min_df=2),
        LogisticRegression(C=1, max_iter=2000),
    ),
    "word 1-2, C=1, hard": lambda: make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2),
        LogisticRegression(C=1, max_iter=2000),
    ),
    "char_wb 1-5, C=10, hard": lambda: make_pipeline(
        TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 5), sublinear_tf=True, min_df=2),
        LogisticRegression(C=10, max_iter=2000),
    ),
}
for name, mk in variants.items():
    run(name, mk, hard)
    for seed in (1, 2):
        run(name + " 2-fold", mk, hard, k=2, seed=seed)
run("char_wb 1-5 C=1 target weak-fail", variants["char_wb 1-5, C=1, hard(s>w)"], weakfail)
