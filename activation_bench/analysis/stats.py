"""Statistics: group summaries with t intervals, paired tests on differences, Holm's correction.

t quantiles and tail probabilities come from scipy.special (`stdtrit`, `stdtr`: what scipy.stats.t's
ppf and sf call, so the numbers are the same). scipy is slow to import (scipy.special 0.2 s, scipy.stats
another 0.5 s): it is imported inside the functions, where an interval or a test is computed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from activation_bench.analysis.metrics import ACCURACY, EPOCHS, LOG10, Metric, scale

ALPHA = 0.05
STAT_COLS = ["metric", "n", "mean", "std", "median", "geo_mean", "ci_low", "ci_high",
             "n_diverged", "n_not_reached", "n_missing"]


def stat_cols(how: str) -> list[str]:
    """The group statistics' columns on a scale (metrics.scale): accuracies have no geo_mean."""
    return [c for c in STAT_COLS if c != "geo_mean"] if how == ACCURACY else list(STAT_COLS)


def t_half_width(n: int, se: float, level: float = 0.95) -> float:
    """Half the width of a t interval of a mean over n values with standard error se."""
    from scipy import special  # 0.2 s to import: only where an interval is computed

    return float(special.stdtrit(n - 1, 0.5 + level / 2)) * se


def t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    n = len(x)
    if n < 2:
        return (float("nan"), float("nan"))
    m, se = float(np.mean(x)), float(np.std(x, ddof=1)) / math.sqrt(n)
    half = t_half_width(n, se, level)
    return (m - half, m + half)


def group_stats(values: pd.DataFrame, group_cols: Sequence[str], metric: Metric,
                column: str = "train_loss") -> pd.DataFrame:
    """One row per group: n, mean, std, median, geo_mean, ci_low, ci_high, n_diverged, n_not_reached,
    n_missing. Loss metrics: geo_mean and CI are 10**(mean log10 and its 95% t interval).
    Accuracies (the metric of an accuracy `column`): no geo_mean; the CI is the t interval of the
    mean accuracy (fractions, as the column). Epoch counts (to=EPS): the CI is the t interval of the
    mean epochs of runs that reached EPS."""
    how = scale(metric, column)
    value, log10 = values["value"].to_numpy(float), values["log10"].to_numpy(float)
    status = values["status"].to_numpy(object)
    rows = []
    for key, idx in group_index(values, group_cols):
        st = status[idx]
        ok = idx[st == "ok"]
        v, lg = value[ok], log10[ok]
        row: dict[str, Any] = dict(zip(group_cols, key))
        row.update(metric=metric.label, n=len(ok), mean=_safe(np.mean, v), std=_safe(np.std, v, ddof=1, need=2),
                   median=_safe(np.median, v))
        if how == LOG10:
            lo, hi = t_interval(lg)
            row.update(geo_mean=10 ** _safe(np.mean, lg), ci_low=10**lo, ci_high=10**hi)
        else:
            lo, hi = t_interval(v)
            if how == ACCURACY:  # an accuracy lies in [0, 1]; so does what its interval can claim
                lo, hi = max(lo, 0.0), min(hi, 1.0)
            elif how == EPOCHS:  # an epoch count is at least 1
                lo = max(lo, 1.0)
            row.update(geo_mean=float("nan"), ci_low=lo, ci_high=hi)  # accuracies: stat_cols leaves it out
        row.update(n_diverged=int(np.sum(st == "diverged")), n_not_reached=int(np.sum(st == "not_reached")),
                   n_missing=int(np.sum(st == "missing")))
        rows.append(row)
    return pd.DataFrame(rows, columns=[*group_cols, *stat_cols(how)])


def _safe(fn: Any, x: np.ndarray, need: int = 1, **kw: Any) -> float:
    return float(fn(x, **kw)) if len(x) >= need else float("nan")


def filled(df: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """The columns with missing values spelled '(none)' (so they group and join)."""
    return pd.DataFrame({c: df[c].astype(object).where(df[c].notna(), "(none)") for c in cols}, index=df.index)


def group_index(df: pd.DataFrame, cols: Sequence[str]) -> list[tuple[tuple, np.ndarray]]:
    """(key, row positions) per group, groups in order of first appearance; missing = '(none)'."""
    if not cols:
        return [((), np.arange(len(df)))]
    if not len(df):
        return []
    spelled = filled(df, cols)
    codes = spelled.groupby(list(cols), sort=False).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    parts = np.split(order, cuts)
    keys = spelled.to_numpy(object)
    return [(tuple(keys[p[0]]), p) for p in parts]



def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values; NaN entries are left out of the family and stay NaN."""
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = len(idx)
    if not m:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = adj
    return out


def paired_test(d: np.ndarray, higher_is_better: bool = False) -> dict[str, Any]:
    """Statistics of paired differences d (candidate - baseline; negative = candidate better, or
    positive with `higher_is_better`): mean_diff, sd_diff, win_rate (share of pairs where the
    candidate is strictly better), n_ties, paired t-test p (two-sided, equal to
    scipy.stats.ttest_rel), Wilcoxon signed-rank p (scipy, Pratt's zero handling), Cohen's d_z,
    and a note for degenerate cases (all pairs tie: p = 1)."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    out: dict[str, Any] = dict(n_pairs=n, n_ties=int(np.sum(d == 0)), mean_diff=_safe(np.mean, d),
                               sd_diff=_safe(np.std, d, ddof=1, need=2),
                               win_rate=float(np.mean(d > 0 if higher_is_better else d < 0)) if n else float("nan"),
                               p_t=float("nan"), p_wilcoxon=float("nan"), d_z=float("nan"), note="")
    if n < 2:
        out["note"] = f"{n} pair{'s' if n != 1 else ''}: no test"
        return out
    if np.all(d == 0):
        out.update(p_t=1.0, p_wilcoxon=1.0, d_z=0.0, note=f"all {n} pairs tie: every paired difference is exactly zero")
        return out
    from scipy import special, stats  # 0.7 s to import: only where a test is computed

    sd = float(np.std(d, ddof=1))
    if sd <= 1e-12 * max(abs(out["mean_diff"]), 1e-300):
        out["note"] = "paired differences are all equal: no t-test"
    else:
        out["d_z"] = out["mean_diff"] / sd
        t = out["d_z"] * math.sqrt(n)
        out["p_t"] = float(min(1.0, 2 * special.stdtr(n - 1, -abs(t))))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out["p_wilcoxon"] = float(stats.wilcoxon(d, zero_method="pratt").pvalue)
    if out["n_ties"] and not out["note"]:
        out["note"] = f"{out['n_ties']} tied pair{'s' if out['n_ties'] != 1 else ''}"
    return out

