#!/usr/bin/env python3
"""Reference values for crates/eval/tests/stats_reference.rs, computed with numpy/scipy.

Run: python3 crates/eval/tests/reference_stats.py
The printed numbers are pasted into stats_reference.rs as expected values. Bootstrap
references use 200,000 numpy resamples (seed 12345) so that their Monte-Carlo error is far
below the tolerance the Rust test allows for its own 5,000-resample, differently seeded run.
"""
import numpy as np
from scipy import stats

# Data sets shared with the Rust test (keep in sync).
X = [3.1, 0.4, 2.2, 5.9, 1.0, 2.2, 4.4, 0.0, 3.3, 1.7, 2.8, 6.1, 0.9, 2.2, 3.0, 4.8, 1.1, 0.2, 2.5, 3.9]
Y = [2.0, 1.0, 2.0, 6.0, 1.5, 3.0, 4.0, 0.5, 3.0, 2.0, 2.0, 5.0, 1.0, 2.0, 3.5, 4.0, 1.0, 0.5, 2.0, 6.0]
# 0/1 outcomes: 13 of 30.
P = [1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0]
# Paired units (cluster, a, b): a = no-op rescue, b = fix rescue per trace.
U = [("t0", 0.0, 1.0), ("t0", 0.0, 0.5), ("t1", 0.0, 0.0), ("t2", 1.0, 1.0), ("t3", 0.0, 1.0),
     ("t3", 0.0, 0.0), ("t3", 0.5, 1.0), ("t4", 0.0, 0.0), ("t5", 0.0, 1.0), ("t6", 0.0, 0.0),
     ("t7", 1.0, 0.0), ("t8", 0.0, 1.0), ("t9", 0.0, 0.5), ("t9", 0.0, 1.0), ("t10", 0.0, 0.0),
     ("t11", 0.0, 1.0)]

Q = [0.0, 0.025, 0.1, 0.5, 0.9, 0.975, 1.0]
x = np.array(X)
print("mean X", repr(float(np.mean(x))))
print("std X (ddof=1)", repr(float(np.std(x, ddof=1))))
print("quantiles X", [repr(float(np.quantile(x, q))) for q in Q])
print("spearman X,Y", repr(float(stats.spearmanr(X, Y).statistic)))
print("spearman ties-only", repr(float(stats.spearmanr([1, 1, 2, 2, 3], [1, 2, 2, 3, 3]).statistic)))
print("rankdata Y", list(stats.rankdata(Y)))

rng = np.random.default_rng(12345)
B = 200_000
n = len(x)
boot = x[rng.integers(0, n, size=(B, n))].mean(axis=1)
print("bootstrap mean X 95%", repr(float(np.quantile(boot, 0.025))), repr(float(np.quantile(boot, 0.975))))

p = np.array(P, dtype=float)
boot = p[rng.integers(0, len(p), size=(B, len(p)))].mean(axis=1)
print("bootstrap proportion P 95%", repr(float(np.quantile(boot, 0.025))), repr(float(np.quantile(boot, 0.975))))

clusters = {}
for c, a, b in U:
    clusters.setdefault(c, []).append((a, b))
keys = list(clusters)
arrs = [np.array(clusters[k]) for k in keys]
est = np.mean([b - a for _, a, b in U])
vals = np.empty(B)
picks = rng.integers(0, len(keys), size=(B, len(keys)))
for r in range(B):
    rows = np.concatenate([arrs[k] for k in picks[r]])
    vals[r] = rows[:, 1].mean() - rows[:, 0].mean()
print("paired cluster estimate", repr(float(est)))
print("paired cluster 95%", repr(float(np.quantile(vals, 0.025))), repr(float(np.quantile(vals, 0.975))))
