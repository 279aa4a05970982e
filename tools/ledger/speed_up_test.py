#!/usr/bin/env python3
"""The ledger's speed-up test (`replay.rs` `faster_beyond_noise`) on simulated increments.

For 5, 6, 7 and 9 windows, draws paired increments of pure noise (Gaussian, Laplace, t3, unit
variance) and of a consistent speed-up (Gaussian shifted by -1, -2, -3, -5 standard
deviations), and prints how often each rule flags them:
  old: three quarters below zero and the median more than 3 standard errors below zero (the
       standard error 1.2533 x 1.4826 MAD / sqrt(n)), the rule before 2026-12-05;
  new: three quarters below zero and a one-sided Student t test of the mean at 1% / 14 (the
       family-wise rate over a replay's 14 categories).
Needs numpy and scipy (pip install numpy scipy). Prints a table; no output files.
"""
import numpy as np
from scipy import stats

ALPHA, TESTS = 0.01, 14
rng = np.random.default_rng(20261205)


def old_rule(x):
    med = np.median(x, axis=1)
    q3 = np.quantile(x, 0.75, axis=1)
    mad = np.median(np.abs(x - med[:, None]), axis=1)
    se = 1.2533 * 1.4826 * mad / np.sqrt(x.shape[1])
    return (q3 < 0) & (-med > 3.0 * se)


def new_rule(x):
    n = x.shape[1]
    q3 = np.quantile(x, 0.75, axis=1)
    t = x.mean(1) / (x.std(1, ddof=1) / np.sqrt(n))
    return (q3 < 0) & (stats.t.cdf(t, n - 1) < ALPHA / TESTS)


noises = {
    "gauss": lambda s: rng.standard_normal(s),
    "laplace": lambda s: rng.laplace(size=s) / np.sqrt(2),
    "t3": lambda s: rng.standard_t(3, size=s) / np.sqrt(3),
}
print("false flags on pure noise, per category (old / new)")
for n in (5, 6, 7, 9):
    row = []
    for name, gen in noises.items():
        x = gen((400_000, n))
        row.append(f"{name} {old_rule(x).mean():.4f} / {new_rule(x).mean():.5f}")
    print(f"  {n} windows: " + " | ".join(row))
print("flags on a consistent speed-up of d standard deviations (old / new)")
for n in (5, 6, 7, 9):
    row = []
    for d in (1, 2, 3, 5):
        x = rng.standard_normal((100_000, n)) - d
        row.append(f"d={d} {old_rule(x).mean():.2f} / {new_rule(x).mean():.2f}")
    print(f"  {n} windows: " + " | ".join(row))
