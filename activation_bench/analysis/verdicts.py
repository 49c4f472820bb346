"""Verdicts against a margin of practical equivalence (`--margin`): better, worse, equivalent or undecided.

A margin is a region of practical equivalence around "no difference", in the compared column's units
and chosen before looking: a geometric-mean ratio on a loss (`--margin 1.05`: ratios between 1/1.05 and
1.05 are equivalent; 0.95 means the same as 1/0.95) or percentage points on an accuracy (`--margin 1`:
differences within +-1 pp). Each comparison with the baseline reads, from one interval of its mean
paired difference (`verdict_of`):

- equivalent: the interval lies wholly inside the margin (a difference, if any, too small to matter);
- better / worse: otherwise, the interval lies wholly on the better (worse) side of no difference;
- undecided: anything else (the interval reaches over no difference and out of the margin).

Every wrong verdict (better or worse against the true sign, equivalent for a true effect at or outside
the margin) needs the interval to miss the true mean difference, so the error rate is at most the
interval's miss rate. The interval: without sequential judging the paired t interval at the
simultaneous level 1 - alpha over the table's comparisons (Bonferroni: each at 1 - alpha/m; `add_verdicts`);
with it, the anytime-valid confidence sequence of sequential.py. Pure numpy/pandas (scipy's t quantile
imported where an interval is computed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from activation_bench.analysis.metrics import ACCURACY, LOG10
from activation_bench.errors import UsageError

VERDICTS = ("better", "worse", "equivalent", "undecided")
LOSS_COLS = ["verdict", "verdict_ratio_lo", "verdict_ratio_hi"]  # the interval as a geometric-mean ratio
ACCURACY_COLS = ["verdict", "verdict_lo_pp", "verdict_hi_pp"]  # the interval in percentage points


@dataclass(frozen=True)
class Margin:
    """--margin: `value` as given, a ratio (unit "ratio", losses) or percentage points (unit "pp",
    accuracies)."""

    value: float
    unit: str = "ratio"

    @property
    def size(self) -> float:
        """Half the width of the region in the paired differences' units: |log10 ratio|, or pp."""
        return abs(self.value) if self.unit == "pp" else abs(math.log10(self.value))

    @property
    def label(self) -> str:
        """'1.05x' or '1 pp'."""
        return f"{self.value:g} pp" if self.unit == "pp" else f"{self.value:g}x"

    def to_dict(self) -> dict[str, object]:
        """The margin in the JSON: value, unit and the region in the table's units."""
        if self.unit == "pp":
            return {"value": self.value, "unit": "pp", "low": -self.size, "high": self.size}
        return {"value": self.value, "unit": "ratio", "low": 10 ** -self.size, "high": 10**self.size}


def parse_margin(text: str | float, accuracy: bool = False) -> Margin:
    """--margin: on a loss a positive ratio other than 1 (1.05, or 0.95 for the same region); on an
    accuracy a positive difference in percentage points up to 100. Anything else: UsageError."""
    need = "a difference in percentage points, e.g. 1" if accuracy else "a ratio above 0 other than 1, e.g. 1.05"
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"--margin {text}: not a number; needs {need}") from None
    if not math.isfinite(value) or value <= 0 or (accuracy and value > 100) or (not accuracy and value == 1):
        why = "negative" if math.isfinite(value) and value < 0 else "out of range"
        raise UsageError(f"--margin {text}: {why}; needs {need}")
    return Margin(value, "pp" if accuracy else "ratio")


def check_margin(margin: Margin | None, how: str, metric_label: str) -> None:
    """A margin needs a loss (log10) or accuracy metric, in that column's units."""
    if margin is None:
        return
    if how not in (LOG10, ACCURACY):
        raise UsageError(f"--margin works on loss metrics (ratios) and accuracies (percentage points), "
                         f"not --metric {metric_label}")
    if (margin.unit == "pp") != (how == ACCURACY):
        want = "percentage points" if how == ACCURACY else "a geometric-mean ratio"
        raise UsageError(f"--margin {margin.value:g}: this column needs {want} (parse_margin(..., accuracy=...))")


def verdict_of(lo: np.ndarray, hi: np.ndarray, size: float, higher_is_better: bool) -> np.ndarray:
    """The verdict of each interval [lo, hi] of a mean paired difference (candidate - baseline, in
    the differences' units) against a margin of half-width `size` (module docstring). NaN: undecided."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    out = np.full(lo.shape, "undecided", dtype=object)
    above, below = lo > 0, hi < 0
    out[(below if higher_is_better else above)] = "worse"
    out[(above if higher_is_better else below)] = "better"
    out[(lo > -size) & (hi < size)] = "equivalent"
    return out


def t_bounds(mean: np.ndarray, sd: np.ndarray, n: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The two-sided t interval of means at `level` (NaN where n < 2; the mean itself where sd is 0)."""
    from scipy import special

    mean, sd, n = (np.asarray(x, float) for x in (mean, sd, n))
    ok = n >= 2
    q = np.full(mean.shape, np.nan)
    q[ok] = special.stdtrit(n[ok] - 1, 0.5 + level / 2)
    half = q * np.where(sd > 0, sd, 0.0) / np.sqrt(np.where(ok, n, 1))
    return mean - half, mean + half


def add_verdicts(comp: pd.DataFrame, how: str, margin: Margin, alpha: float = 0.05) -> pd.DataFrame:
    """comp (compare.comparisons' rows) with the verdict and its interval: the paired t interval at
    1 - alpha/m, m the comparisons with at least two pairs (Bonferroni: the intervals hold together
    with probability 1 - alpha). Losses: the interval as a ratio; accuracies: in percentage points."""
    comp = comp.copy()
    acc = how == ACCURACY
    mean = comp["diff_pp" if acc else "mean_diff"].to_numpy(float)
    sd = comp["sd_diff_pp" if acc else "sd_diff"].to_numpy(float)
    n = comp["n_pairs"].to_numpy(float)
    m = max(int(np.sum(n >= 2)), 1)
    lo, hi = t_bounds(mean, sd, n, 1 - alpha / m)
    return with_verdict(comp, lo, hi, how, margin)


def with_verdict(comp: pd.DataFrame, lo: np.ndarray, hi: np.ndarray, how: str, margin: Margin) -> pd.DataFrame:
    """comp with `verdict` and the interval [lo, hi] (difference units) in the table's units."""
    acc = how == ACCURACY
    comp["verdict"] = verdict_of(lo, hi, margin.size, higher_is_better=acc)
    if acc:
        comp["verdict_lo_pp"], comp["verdict_hi_pp"] = lo, hi
    else:
        with np.errstate(over="ignore"):
            comp["verdict_ratio_lo"], comp["verdict_ratio_hi"] = 10.0**lo, 10.0**hi
    return comp


def columns(how: str) -> list[str]:
    """The verdict columns on a scale."""
    return list(ACCURACY_COLS if how == ACCURACY else LOSS_COLS)


def method_note(margin: Margin, alpha: float, sequential: bool) -> str:
    """The line under a table that says how the verdicts were read."""
    region = (f"differences within +-{margin.size:g} pp" if margin.unit == "pp" else
              f"ratios between {10 ** -margin.size:.4g} and {10 ** margin.size:.4g}")
    how = ("an anytime-valid confidence sequence over the seeds in order (valid at every look; "
           "sequential.py)" if sequential else "the paired t interval")
    return (f"Verdict, margin {margin.label} ({region} are equivalent): equivalent where the interval lies inside the "
            f"margin, else better/worse where it lies wholly on one side of no difference, else undecided; interval: "
            f"{how}, at {1 - alpha:g} for all comparisons together (Bonferroni).")
