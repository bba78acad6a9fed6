"""How far text-only routers go on MMLU: TF-IDF logistic/ridge, a predicted-subject prior,
TF-IDF nearest neighbours, and their rank averages; also the oracle subject prior (the test
row's true subject, shrunk means of the training rows).

Research code (needs scikit-learn and scipy).  Same 5 prompt-hash folds as `router eval --cv 5`.

    python benchmarks/experiments/router_stack_sklearn.py
"""

import csv
import hashlib
import time

import numpy as np
from scipy.stats import rankdata
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression, Ridge

from hybrid_gateway.routing.evaluation import router_quality

rows = list(csv.DictReader(open("../shared/data/routing/mmlu_dev.csv")))
P = [r["prompt"] for r in rows]
w = np.array([float(r["weak_score"]) for r in rows])
s = np.array([float(r["strong_score"]) for r in rows])
subj = np.array([r["subject"] for r in rows])
subjects = sorted(set(subj))
sidx = np.array([subjects.index(x) for x in subj])
salt = b"0"
f = np.array(
    [int.from_bytes(hashlib.blake2b(p.encode() + salt, digest_size=8).digest()) % 5 for p in P]
)
gain = s - w
soft = 0.5 + 0.5 * gain
vec = TfidfVectorizer(
    analyzer="char", ngram_range=(2, 5), sublinear_tf=True, min_df=2, max_features=300000
)


def q(x):
    return router_quality(x, w, s).apgr


oof = {
    k: np.zeros(len(P))
    for k in ["lr", "subjprior_pred", "subjprior_oracle", "knn50", "knn200", "lr_soft"]
}
t0 = time.time()
for i in range(5):
    tr, te = f != i, f == i
    X = vec.fit_transform([P[j] for j in np.flatnonzero(tr)])
    Xt = vec.transform([P[j] for j in np.flatnonzero(te)])
    lr = LogisticRegression(C=1, max_iter=3000).fit(X, (gain[tr] > 0).astype(int))
    oof["lr"][te] = lr.decision_function(Xt)
    # soft target via ridge on gain
    rg = Ridge(alpha=3.0).fit(X, gain[tr])
    oof["lr_soft"][te] = rg.predict(Xt)
    # subject means (shrunk)
    sm = np.array(
        [
            (gain[tr][sidx[tr] == k].sum() + 10 * gain[tr].mean()) / ((sidx[tr] == k).sum() + 10)
            for k in range(len(subjects))
        ]
    )
    oof["subjprior_oracle"][te] = sm[sidx[te]]
    sc = LogisticRegression(C=10, max_iter=3000).fit(X, sidx[tr])
    pr = sc.predict_proba(Xt)
    full = np.zeros((pr.shape[0], len(subjects)))
    full[:, sc.classes_] = pr
    oof["subjprior_pred"][te] = full @ sm
    S = (Xt @ X.T).toarray()
    for k in (50, 200):
        nn = np.argpartition(-S, k, axis=1)[:, :k]
        oof[f"knn{k}"][te] = gain[tr][nn].mean(1)
    print("fold", i, f"{time.time() - t0:.0f}s", flush=True)
for k, v in oof.items():
    print(k, round(q(v), 4))


def z(v):
    return rankdata(v) / len(v)


for a in (0.3, 0.5, 0.7):
    print(
        "lr+subjprior_pred", a, round(q(a * z(oof["lr"]) + (1 - a) * z(oof["subjprior_pred"])), 4)
    )
    print("lr+knn200", a, round(q(a * z(oof["lr"]) + (1 - a) * z(oof["knn200"])), 4))
print("lr+pred+knn", round(q(z(oof["lr"]) + z(oof["subjprior_pred"]) + z(oof["knn200"])), 4))
print("lr_soft+pred", round(q(z(oof["lr_soft"]) + z(oof["subjprior_pred"])), 4))
