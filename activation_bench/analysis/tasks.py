"""Regression and classification runs in one analysis: which run is which, and what is refused.

A classification run has accuracy values (val_acc, test_acc); a regression run has none (no such
column, or NaN where one results.csv holds both). A sweep's results.csv seldom has a `data.task`
column, so the values decide. Losses of the two kinds (mean squared error, cross-entropy) are not
on one scale, so every group of a comparison (every task of a ranking) must hold one kind only; an
accuracy column needs classification runs in every group. Pure pandas/numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from activation_bench.analysis.loading import Loaded, is_accuracy
from activation_bench.analysis.stats import filled, group_index
from activation_bench.errors import UsageError


def check_tasks(loaded: Loaded, column: str, group_cols: Sequence[str], option: str = "--by",
                what: str = "--loss") -> None:
    """Refuse (UsageError, one line) an accuracy column without classification runs, a group that
    mixes regression and classification runs (naming a column that would group them apart, for
    `option`), and regression groups on an accuracy column. `what` names the column's option."""
    cls = loaded.has_accuracy()
    if is_accuracy(column) and not cls.any():
        raise UsageError(f"{what} {column}: no run has accuracy values; accuracy needs classification runs "
                         "(data.task=classification), and these are regression runs: compare a loss instead")
    if cls.all() or (not cls.any() and not is_accuracy(column)):
        return
    runs = loaded.runs
    for key, idx in group_index(runs, group_cols):
        if cls[idx].any() and not cls[idx].all():
            how = _how(runs, cls, group_cols, option)
            raise UsageError(f"{_label(group_cols, key)} mixes regression runs (no accuracy values) and "
                             f"classification runs, whose losses are not comparable: {how}")
    if is_accuracy(column):
        first = runs.index[~cls][0]
        example = _label(group_cols, tuple(filled(runs.loc[[first]], group_cols).iloc[0])) if group_cols else ""
        raise UsageError(f"{what} {column}: {int((~cls).sum())} runs are regression runs (no accuracy values)"
                         f"{', e.g. ' + example if example else ''}; leave them out of the inputs, or compare a loss")


def _label(cols: Sequence[str], key: tuple) -> str:
    return ", ".join(f"{c}={v}" for c, v in zip(cols, key)) or "the comparison"


def separating_column(runs: pd.DataFrame, cls: np.ndarray, skip: Sequence[str]) -> str | None:
    """A config column whose every value holds one kind of run only (data first), or None."""
    cols = [c for c in runs.columns if c not in ("source", "run", "status", "seed", *skip)]
    cols.sort(key=lambda c: (c != "data", not c.startswith("data")))
    kind = pd.Series(cls, index=runs.index)
    for c in cols:
        spelled = filled(runs, [c])[c]
        if spelled.nunique() > 1 and kind.groupby(spelled).nunique().max() == 1:
            return c
    return None


def _how(runs: pd.DataFrame, cls: np.ndarray, group_cols: Sequence[str], option: str) -> str:
    sep = separating_column(runs, cls, group_cols)
    if sep is None:
        return "compare them in separate commands"
    return f"group them apart ({option} {','.join([*group_cols, sep])}) or compare them in separate commands"
