"""How many seeds: power of the paired t-test on log10 loss differences (`actbench compare --power`).

For a comparison with n pairs whose log10 differences have standard deviation sd, a geometric-mean
ratio r is the standardised effect d = |log10 r| / sd. statsmodels' `TTestPower` (one-sample t-test,
which is the paired t-test on the differences) gives the number of pairs needed to detect d with the
given power at the given two-sided alpha, and the smallest d detectable with the current n, turned
back into a ratio 10**(d * sd). On an accuracy column the value of --power is a difference D in
percentage points and d = |D| / sd of the paired differences in percentage points; the smallest
detectable difference is d * sd percentage points. statsmodels is imported only when --power is given.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from activation_bench.errors import UsageError

POWER_COLS = ["seeds_needed", "min_detectable_ratio"]  # on accuracies: seeds_needed, min_detectable_pp


@dataclass(frozen=True)
class PowerSpec:
    ratio: float  # the geometric-mean ratio to detect, e.g. 1.05 (or 0.95: the same size of effect);
    #               with unit "pp" the accuracy difference in percentage points, e.g. 1 (or -1)
    power: float = 0.8
    alpha: float = 0.05
    unit: str = "ratio"  # "ratio" (losses) or "pp" (accuracies)

    @property
    def log_ratio(self) -> float:
        return abs(math.log10(self.ratio))

    @property
    def size(self) -> float:
        """The effect in the units of the paired differences: |log10 ratio|, or |D| percentage points."""
        return abs(self.ratio) if self.unit == "pp" else self.log_ratio

    @property
    def label(self) -> str:
        """The effect as the tables name it: '1.05x' or '1 pp'."""
        return f"{abs(self.ratio):g} pp" if self.unit == "pp" else f"{self.ratio:g}x"


def _number(text: str | float, option: str, need: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{option} {text}: not a number; needs {need}") from None
    if not math.isfinite(value):
        raise UsageError(f"{option} {text}: needs {need}")
    return value


def parse_power(ratio: str | float, power: str | float = 0.8, alpha: str | float = 0.05,
                accuracy: bool = False) -> PowerSpec:
    """--power RATIO (positive, not 1), --power-level and --alpha (each strictly between 0 and 1).
    accuracy=True (an accuracy column): --power is a difference in percentage points, 0 < |D| <= 100."""
    if accuracy:
        r = _number(ratio, "--power", "a difference in percentage points, e.g. 1")
        if not 0 < abs(r) <= 100:
            raise UsageError(f"--power {ratio}: on an accuracy column it is a difference in percentage points: "
                             "needs a number between 0 and 100 other than 0, e.g. 1")
    else:
        r = _number(ratio, "--power", "a positive ratio other than 1, e.g. 1.05")
    if not accuracy and (r <= 0 or r == 1):
        raise UsageError(f"--power {ratio}: needs a positive ratio other than 1, e.g. 1.05")
    levels = {}
    for option, text in (("--power-level", power), ("--alpha", alpha)):
        value = _number(text, option, "a number between 0 and 1")
        if not 0 < value < 1:
            raise UsageError(f"{option} {text}: needs a number between 0 and 1")
        levels[option] = value
    return PowerSpec(r, levels["--power-level"], levels["--alpha"], "pp" if accuracy else "ratio")


def _solver():  # noqa: ANN202 (statsmodels type, imported lazily)
    import statsmodels.tools.sm_exceptions  # noqa: F401 (sets its warning filters now, not inside ours)
    from statsmodels.stats.power import TTestPower

    return TTestPower()


def _enough(solver, d: np.ndarray, n: np.ndarray, spec: PowerSpec) -> np.ndarray:  # noqa: ANN001
    """power(d, n) >= spec.power, elementwise, with statsmodels' power (vectorised). Its power is NaN
    for some large effects at few pairs (scipy's noncentral t); power grows with the effect, so a
    smaller effect's power then serves as a safe lower bound."""
    ok = np.zeros(len(d), dtype=bool)
    todo = np.ones(len(d), dtype=bool)
    for scale in (1.0, 0.75, 0.5, 0.25):
        if not todo.any():
            break
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            p = np.asarray(solver.power(effect_size=d[todo] * scale, nobs=n[todo], alpha=spec.alpha,
                                        alternative="two-sided"), dtype=float).reshape(-1)
        idx = np.flatnonzero(todo)
        done = np.isfinite(p)
        ok[idx[done]] = p[done] >= spec.power
        todo[idx[done]] = False
    return ok


def seeds_needed_many(sd: np.ndarray, spec: PowerSpec, solver=None) -> np.ndarray:  # noqa: ANN001
    """For each sd (of the paired differences, in the units of spec.size): the smallest number of
    pairs (at least 2) whose two-sided paired t-test at spec.alpha detects spec.ratio with power
    spec.power, found by bisection on statsmodels' power
    over whole numbers (the same as rounding up statsmodels' solve_power, checked in tests, and
    robust where its root finder fails). NaN where sd is not positive and finite, or where more
    than 2**40 pairs would be needed."""
    sd = np.asarray(sd, dtype=float)
    out = np.full(len(sd), np.nan)
    good = np.flatnonzero(np.isfinite(sd) & (sd > 0))
    if not len(good):
        return out
    solver = solver or _solver()
    d = spec.size / sd[good]
    lo = np.full(len(d), 1.0)  # power(lo) < target (one pair: no test)
    hi = np.full(len(d), 2.0)
    grow = ~_enough(solver, d, hi, spec)
    while grow.any():
        lo[grow], hi[grow] = hi[grow], hi[grow] * 2
        grow[grow] = ~_enough(solver, d[grow], hi[grow], spec) & (hi[grow] < 2.0**40)
    while (wide := hi - lo > 1).any():
        mid = np.floor((lo[wide] + hi[wide]) / 2)
        ok = _enough(solver, d[wide], mid, spec)
        hi[np.flatnonzero(wide)[ok]] = mid[ok]
        lo[np.flatnonzero(wide)[~ok]] = mid[~ok]
    out[good] = np.where(_enough(solver, d, hi, spec), hi, np.nan)
    return out


def seeds_needed(sd: float, spec: PowerSpec, solver=None) -> float:  # noqa: ANN001
    """seeds_needed_many for one sd."""
    return float(seeds_needed_many(np.array([sd]), spec, solver)[0])


def min_detectable_d(n: int, spec: PowerSpec, solver=None) -> float:  # noqa: ANN001
    """The smallest standardised effect (mean / sd of the differences) detectable with n pairs:
    statsmodels' solve_power. NaN with fewer than 2 pairs."""
    if n < 2:
        return float("nan")
    solver = solver or _solver()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(solver.solve_power(effect_size=None, nobs=n, power=spec.power, alpha=spec.alpha,
                                        alternative="two-sided"))


def min_detectable_ratio(sd: float, n: int, spec: PowerSpec, solver=None) -> float:  # noqa: ANN001
    """The smallest geometric-mean ratio (> 1) detectable with n pairs, spec.power and spec.alpha.
    NaN with fewer than 2 pairs or when sd is not positive and finite."""
    if n < 2 or not (math.isfinite(sd) and sd > 0):
        return float("nan")
    d = min_detectable_d(n, spec, solver)
    return 10 ** (d * sd) if math.isfinite(d) else float("nan")


def add_power(comp: pd.DataFrame, spec: PowerSpec) -> pd.DataFrame:
    """The comparison table (with n_pairs and sd_diff of the paired log10 differences) with the
    columns seeds_needed and min_detectable_ratio added; on accuracies (spec.unit "pp": sd_diff_pp)
    seeds_needed and min_detectable_pp. The smallest detectable effect depends on the number of
    pairs only, so it is solved once per distinct number."""
    solver = _solver()
    pp = spec.unit == "pp"
    sd = comp["sd_diff_pp" if pp else "sd_diff"].to_numpy(float)
    n = np.nan_to_num(comp["n_pairs"].to_numpy(float), nan=0).astype(int)
    d_min = {k: min_detectable_d(k, spec, solver) for k in set(n[np.isfinite(sd) & (sd > 0)].tolist())}
    out = comp.copy()
    out["seeds_needed"] = seeds_needed_many(sd, spec, solver)
    smallest = [d_min[k] * s if k in d_min and math.isfinite(d_min[k]) and math.isfinite(s) and s > 0
                else float("nan") for s, k in zip(sd, n)]
    if pp:
        out["min_detectable_pp"] = smallest
    else:
        out["min_detectable_ratio"] = [10 ** x for x in smallest]
    return out


def method_note(spec: PowerSpec) -> str:
    if spec.unit == "pp":
        points = "point" if abs(spec.ratio) == 1 else "points"
        return (f"seeds_needed: seeds (pairs) to detect an accuracy difference of {abs(spec.ratio):g} percentage "
                f"{points} with power {spec.power:g} at two-sided alpha {spec.alpha:g} (paired t-test, statsmodels "
                "TTestPower), assuming the observed sd of the paired differences (sd_diff_pp); min_detectable_pp: "
                "the smallest difference detectable with the current pairs. Per comparison: with Holm over m "
                "comparisons, --alpha 0.05/m gives a safe figure. Empty where there are fewer than 2 pairs or no "
                "spread.")
    return (f"seeds_needed: seeds (pairs) to detect a geometric-mean ratio of {spec.ratio:g} with power "
            f"{spec.power:g} at two-sided alpha {spec.alpha:g} (paired t-test, statsmodels TTestPower), assuming "
            "the observed sd of the paired log10 differences (sd_diff); min_detectable_ratio: the smallest ratio "
            "detectable with the current pairs. Per comparison: with Holm over m comparisons, --alpha 0.05/m "
            "gives a safe figure. Empty where there are fewer than 2 pairs or no spread.")
