"""A comparison's result (`CompareResult`, made by compare.py, read by the renderers) and its prose:
the method lines under a table and the note on all-tied comparisons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from activation_bench.analysis.loading import higher_is_better
from activation_bench.analysis.metrics import ACCURACY, EPOCHS, FLOOR, LOG10, Metric, scale
from activation_bench.analysis.stats import ALPHA


@dataclass
class CompareResult:
    table: pd.DataFrame  # group columns, metric, n, mean, std, median, geo_mean, ci_low, ci_high, ...
    group_cols: list[str]
    metric: Metric
    loss: str  # the compared column: a loss, or an accuracy (val_acc, test_acc)
    baseline: tuple[str, str] | None
    pair_cols: list[str]
    warnings: list[str]
    floor: float = FLOOR
    power: Any = None  # a power.PowerSpec when --power was given
    tuning: Any = None  # a selection.Selection when --tune was given
    budget: Any = None  # a budget.BudgetCheck: the runs still improving when the budget ran out
    windows: Any = None  # a whole test split's windows (analysis/windows.py): facts for its method note
    margin: Any = None  # a verdicts.Margin when --margin was given: each comparison's verdict
    sequential: Any = None  # a sequential.SequentialSpec: verdicts from the anytime-valid confidence sequence
    alpha: float = ALPHA  # the verdicts' level for all comparisons together

    @property
    def all_warnings(self) -> list[str]:
        """`warnings` and, where it fires, the budget check's warning (the lines printed and listed
        under a table and in the JSON's `warnings`)."""
        extra = self.budget.warning if self.budget is not None else None
        return [*self.warnings, extra] if extra else list(self.warnings)

    @property
    def scale(self) -> str:
        """metrics.scale of the metric on the compared column: log10, accuracy or epochs."""
        return scale(self.metric, self.loss)

    @property
    def higher_is_better(self) -> bool:
        """Whether a higher value of the compared numbers is better (accuracies, not to=EPS)."""
        return self.scale != EPOCHS and higher_is_better(self.loss)

    @property
    def tuned_keys(self) -> list[str]:
        return list(self.tuning.keys) if self.tuning is not None else []

    @property
    def methods(self) -> list[str]:
        """Footer lines: how the numbers were computed."""
        return method_notes(self)


def _what(res: CompareResult) -> str:
    m = res.metric
    if m.kind == "early_stop":
        return f"{res.loss} at each run's epoch of lowest val_loss (early_stop; earliest on ties)"
    if m.kind == "auc":
        return f"mean {res.loss} over the epochs (auc)" if res.scale == ACCURACY else "mean log10 loss per run (auc)"
    return f"{res.loss} ({m.label})"


def method_notes(res: CompareResult) -> list[str]:
    m = res.metric
    lines = []
    if res.scale == LOG10:
        lines.append(f"Metric: {_what(res)}. Loss metrics are compared on a log10 scale; losses <= {res.floor:g} "
                     "(float floor) are clipped there, so runs at the floor tie.")
        lines.append("geo_mean = 10^(mean log10); 95% CI: t interval of the mean log10 value, converted back.")
    elif res.scale == ACCURACY:
        best = " (the highest)" if m.kind == "best" else ""
        lines.append(f"Metric: {_what(res)}{best}; accuracy, higher is better; no log scale and no floor.")
        lines.append("mean: mean accuracy (shown in %); 95% CI: t interval of the mean accuracy, cut to 0-100%.")
    else:
        cmp_ = ">=" if higher_is_better(res.loss) else "<="
        lines.append(f"Metric: first epoch with {res.loss} {cmp_} {m.param:g}; runs that never get there are counted "
                     "as not reached; 95% CI: t interval of the mean epochs of the runs that reached it (from 1).")
        if res.baseline is not None:
            lines.append("Tests use the pairs where both runs reached it (n_pairs); the win rate also counts "
                         "reaching it against not reaching it as a win.")
    lines.append("Diverged runs (NaN/inf loss) are counted apart and left out of every statistic.")
    if res.windows is not None:
        from activation_bench.analysis.windows import method_note as windows_note

        lines.append(windows_note(res.windows, res.loss))
    if res.tuning is not None:
        from activation_bench.analysis.tune import method_note

        lines.append(method_note(res.tuning, m.label))
    if res.baseline is not None:
        pair = ", ".join(res.pair_cols) or "nothing (one run per group)"
        if res.scale == ACCURACY:
            lines.append(f"Paired vs {res.baseline[0]}={res.baseline[1]} by {pair}: differences of {res.loss} in "
                         "percentage points (group - baseline; > 0 is better) with their 95% t interval; "
                         "win = share of pairs where the group's accuracy is strictly higher.")
        else:
            diff = "log10 loss (ratio = geometric-mean ratio)" if res.scale == LOG10 else \
                "epochs (ratio = ratio of mean epochs)"
            lines.append(f"Paired vs {res.baseline[0]}={res.baseline[1]} by {pair}: differences of {diff}; "
                         "win = share of pairs where the group is strictly better; ratio < 1 is better.")
        lines.append(f"p: paired t-test and Wilcoxon signed-rank (Pratt zeros), Holm-corrected; "
                     f"* = both corrected p < {ALPHA:g}. d_z = mean/sd of paired differences.")
        if res.power is not None:
            from activation_bench.analysis.power import method_note

            lines.append(method_note(res.power))
        if res.margin is not None:
            from activation_bench.analysis.verdicts import method_note as verdict_note

            lines.append(verdict_note(res.margin, res.alpha, res.sequential is not None))
    return lines


def tie_note(vc: np.ndarray, vb: np.ndarray) -> str:
    """Why every pair of a loss metric ties: the same losses (identical functions on these inputs,
    e.g. relu6 and relu below 6, celu and elu at alpha 1), or both runs clipped at the float floor."""
    n, same = len(vc), int(np.sum(vc == vb))
    if same == n:
        return f"all {n} pairs tie: identical losses (every paired difference is exactly zero)"
    if same == 0:
        return f"all {n} pairs tie: both runs at or below the float floor in every pair"
    return f"all {n} pairs tie: identical losses in {same}, both at or below the float floor in {n - same}"
