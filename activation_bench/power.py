"""How many seeds: power of the paired t-test on log10 loss differences (`actbench compare --power`).

For a comparison with n pairs whose log10 differences have standard deviation sd, a geometric-mean
ratio r is the standardised effect d = |log10 r| / sd. statsmodels' `TTestPower` (one-sample t-test,
which is the paired t-test on the differences) gives the number of pairs needed to detect d with the
given power at the given two-sided alpha, and the smallest d detectable with the current n, turned
back into a ratio 10**(d * sd). statsmodels is imported only when --power is given.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from activation_bench.errors import UsageError

POWER_COLS = ["seeds_needed", "min_detectable_ratio"]


@dataclass(frozen=True)
class PowerSpec:
    ratio: float  # the geometric-mean ratio to detect, e.g. 1.05 (or 0.95: the same size of effect)
    power: float = 0.8
    alpha: float = 0.05

    @property
    def log_ratio(self) -> float:
        return abs(math.log10(self.ratio))


def _number(text: str | float, option: str, need: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{option} {text}: not a number; needs {need}") from None
    if not math.isfinite(value):
        raise UsageError(f"{option} {text}: needs {need}")
    return value


def parse_power(ratio: str | float, power: str | float = 0.8, alpha: str | float = 0.05) -> PowerSpec:
    """--power RATIO (positive, not 1), --power-level and --alpha (each strictly between 0 and 1)."""
    r = _number(ratio, "--power", "a positive ratio other than 1, e.g. 1.05")
    if r <= 0 or r == 1:
        raise UsageError(f"--power {ratio}: needs a positive ratio other than 1, e.g. 1.05")
    levels = {}
    for option, text in (("--power-level", power), ("--alpha", alpha)):
        value = _number(text, option, "a number between 0 and 1")
        if not 0 < value < 1:
            raise UsageError(f"{option} {text}: needs a number between 0 and 1")
        levels[option] = value
    return PowerSpec(r, levels["--power-level"], levels["--alpha"])


def _solver():  # noqa: ANN202 (statsmodels type, imported lazily)
    import statsmodels.tools.sm_exceptions  # noqa: F401 (sets its warning filters now, not inside ours)
    from statsmodels.stats.power import TTestPower

    return TTestPower()


def seeds_needed(sd: float, spec: PowerSpec, solver=None) -> float:  # noqa: ANN001
    """The smallest number of pairs (at least 2) whose paired t-test detects spec.ratio with power
    spec.power at two-sided spec.alpha: statsmodels' solve_power, rounded up. NaN when sd is not
    positive and finite."""
    if not (math.isfinite(sd) and sd > 0):
        return float("nan")
    solver = solver or _solver()
    d = spec.log_ratio / sd
    kw = dict(effect_size=d, alpha=spec.alpha, alternative="two-sided")

    def enough(n: float) -> bool:
        # statsmodels' power is NaN for some large effects at few pairs (scipy's noncentral t);
        # power grows with the effect, so a smaller effect's power is a safe lower bound
        for scale in (1, 0.75, 0.5, 0.25):
            p = float(solver.power(nobs=n, **{**kw, "effect_size": d * scale}))
            if math.isfinite(p):
                return p >= spec.power
        return False

    if enough(2):
        return 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n = float(solver.solve_power(nobs=None, power=spec.power, **kw))
    if math.isfinite(n):
        return float(max(2, math.ceil(n - 1e-9)))
    lo, hi = 2, 4  # the root finder failed (rare, near n = 2): bisect on statsmodels' power instead
    while not enough(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return float(hi)


def min_detectable_ratio(sd: float, n: int, spec: PowerSpec, solver=None) -> float:  # noqa: ANN001
    """The smallest geometric-mean ratio (> 1) detectable with n pairs, spec.power and spec.alpha.
    NaN with fewer than 2 pairs or when sd is not positive and finite."""
    if n < 2 or not (math.isfinite(sd) and sd > 0):
        return float("nan")
    solver = solver or _solver()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = float(solver.solve_power(effect_size=None, nobs=n, power=spec.power, alpha=spec.alpha,
                                     alternative="two-sided"))
    return 10 ** (d * sd) if math.isfinite(d) else float("nan")


def add_power(comp: pd.DataFrame, spec: PowerSpec) -> pd.DataFrame:
    """The comparison table (with n_pairs and sd_diff of the paired log10 differences) with the
    columns seeds_needed and min_detectable_ratio added."""
    solver = _solver()
    sd = comp["sd_diff"].to_numpy(float)
    n = comp["n_pairs"].to_numpy(float)
    out = comp.copy()
    out["seeds_needed"] = [seeds_needed(s, spec, solver) for s in sd]
    out["min_detectable_ratio"] = [min_detectable_ratio(s, int(k) if np.isfinite(k) else 0, spec, solver)
                                   for s, k in zip(sd, n)]
    return out


def method_note(spec: PowerSpec) -> str:
    return (f"seeds_needed: seeds (pairs) to detect a geometric-mean ratio of {spec.ratio:g} with power "
            f"{spec.power:g} at two-sided alpha {spec.alpha:g} (paired t-test, statsmodels TTestPower), assuming "
            "the observed sd of the paired log10 differences (sd_diff); min_detectable_ratio: the smallest ratio "
            "detectable with the current pairs. Per comparison: with Holm over m comparisons, --alpha 0.05/m "
            "gives a safe figure. Empty where there are fewer than 2 pairs or no spread.")
