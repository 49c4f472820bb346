"""The tuning budget: how much a group's best selection score depends on how many grid values were
tried. Per kept group of a tuned comparison (selection.Selection) and k = 1..grid size, the expected best
score after k values drawn at random (Dodge et al. 2019, "Show your work"), and the chance that all k
fail. Pure numpy/pandas: no torch."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from activation_bench.analysis.selection import Selection


def expected_best(scores: Sequence[float], k: int) -> tuple[float, float]:
    """Expected best (lowest) score after trying k grid values drawn at random with replacement
    (Dodge et al. 2019, "Show your work", closed form from the sorted scores: what a bootstrap over
    the grid's values converges to). Failed values (inf/NaN) are never best. Returns
    (expected best among the draws that succeed, probability that all k draws fail)."""
    v = np.asarray(scores, dtype=float)
    n = len(v)
    if n == 0 or k < 1:
        return math.nan, math.nan
    finite = np.sort(v[np.isfinite(v)])
    p_fail = ((n - len(finite)) / n) ** k
    if not len(finite):
        return math.nan, 1.0
    # P(the best of k draws is the i-th smallest finite value) = ((n-i+1)/n)^k - ((n-i)/n)^k, i = 1..m
    i = np.arange(1, len(finite) + 1)
    prob = ((n - i + 1) / n) ** k - ((n - i) / n) ** k
    return float(np.sum(prob * finite) / (1 - p_fail)), float(p_fail)


def budget(sel: Selection) -> pd.DataFrame:
    """Per kept group and k = 1..grid size: the expected best selection score after k grid values
    (on the score's scale; the highest for an accuracy), and the chance that all k fail. A grid value
    with any failed tuning run counts as failed."""
    rows = []
    if not len(sel.scores):
        return pd.DataFrame(columns=[*sel.group_cols, "k", "expected_best", "p_all_failed"])
    parts = sel.scores.groupby(sel.group_cols, sort=False) if sel.group_cols else [((), sel.scores)]
    for gkey, part in parts:
        gkey = gkey if isinstance(gkey, tuple) else (gkey,)
        sign = -1.0 if sel.higher_is_better else 1.0  # expected_best takes the lowest
        s = np.where(part["n_failed"].to_numpy() > 0, np.inf, sign * part["score"].to_numpy(float))
        for k in range(1, len(s) + 1):
            best, p = expected_best(s, k)
            best *= sign
            rows.append({**dict(zip(sel.group_cols, gkey)), "k": k, "expected_best": best, "p_all_failed": p})
    return pd.DataFrame(rows, columns=[*sel.group_cols, "k", "expected_best", "p_all_failed"])
