"""Metrics: one number per run from its curve (final, best, epoch=K, to=EPS, auc, early_stop).

Loss metrics are compared on a log10 scale: losses span orders of magnitude and hit the float floor
(`FLOOR`, about 1e-13 in float32), where they are clipped and tie. Accuracy metrics (val_acc,
test_acc: fractions, higher is better) are compared as they are, in percentage points: no floor, no
log. `scale(metric, column)` names which of the three ways (log10, accuracy, epochs) applies.
Pure pandas/numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from activation_bench.analysis.loading import Loaded, higher_is_better, is_accuracy, judged_only
from activation_bench.errors import UsageError

FLOOR = 1e-13  # losses at or below this are the float floor: clipped, and equal ones tie
METRIC_HELP = "final, best, epoch=K, to=EPS, auc, early_stop"
LOG10, ACCURACY, EPOCHS = "log10", "accuracy", "epochs"  # the scales of scale()


@dataclass(frozen=True)
class Metric:
    kind: str  # final | best | epoch | to | auc | early_stop
    param: float | None = None

    @property
    def label(self) -> str:
        if self.kind == "epoch":
            return f"epoch={int(self.param or 0)}"
        if self.kind == "to":
            return f"to={self.param:g}"
        return self.kind

    @property
    def is_loss(self) -> bool:
        """A value of the column (a loss, compared on log10, or an accuracy); `to=EPS` is an epoch
        count. Which of the two: `scale(metric, column)`."""
        return self.kind != "to"


def scale(metric: Metric, column: str) -> str:
    """How a metric of a column is compared: LOG10 (a loss value: log10 scale, clipped at the float
    floor, lower is better), ACCURACY (an accuracy value: fractions, differences in percentage points,
    higher is better) or EPOCHS (to=EPS: an epoch count, fewer is better)."""
    if not metric.is_loss:
        return EPOCHS
    return ACCURACY if is_accuracy(column) else LOG10


def parse_metric(text: str) -> Metric:
    """'final' | 'best' | 'auc' | 'early_stop' | 'epoch=K' (K >= 1) | 'to=EPS' (EPS > 0)."""
    t = text.strip().lower()
    if t in ("final", "best", "auc", "early_stop"):
        return Metric(t)
    key, sep, value = t.partition("=")
    if sep and key in ("epoch", "to"):
        try:
            num = float(value)
        except ValueError:
            num = float("nan")
        if key == "epoch" and num >= 1 and num.is_integer():
            return Metric("epoch", float(int(num)))
        if key == "to" and math.isfinite(num) and num > 0:
            return Metric("to", num)
        need = "a positive integer" if key == "epoch" else "a positive number"
        raise UsageError(f"--metric {text}: {key}= needs {need}")
    raise UsageError(f"unknown metric '{text}'; valid: {METRIC_HELP}")



def run_values(loaded: Loaded, metric: Metric, loss: str = "train_loss", floor: float = FLOOR) -> pd.DataFrame:
    """Per run: `value` of the metric and `status`: ok | diverged | not_reached | missing.

    Diverged runs (any NaN/inf loss) never get a value. For loss metrics `log10` is the log10 of
    the value clipped at the floor (for auc the value is already a mean log10 loss). On an accuracy
    column `value` is the accuracy (best: the highest; auc: the mean over epochs; to=EPS: the first
    epoch with accuracy >= EPS), `log10` is NaN, and a run diverged if its train_loss did."""
    if loss not in loaded.losses:
        raise UsageError(f"no input has a {loss} column")
    if metric.kind == "early_stop" and "val_loss" not in loaded.losses:
        raise UsageError("--metric early_stop needs a val_loss column (real or function data, or data.n_val > 0)")
    _check_threshold(metric, loss)
    y, starts = loaded.losses[loss], loaded.bounds[:-1]
    counts = np.diff(loaded.bounds)
    nonfinite = ~np.isfinite(y)
    judged = judged_only(loaded, loss)
    if judged.any():  # a whole test split, judged at the epoch of lowest val_loss and at the last only
        if metric.kind not in ("final", "early_stop"):
            raise UsageError(f"--metric {metric.label} of {loss}: these runs judge the whole test split at their "
                             "epoch of lowest val_loss and at their last only; use early_stop or final")
        nonfinite &= ~(np.isnan(y) & judged[loaded.run_index()])  # not evaluated there: no divergence
    if is_accuracy(loss) and "train_loss" in loaded.losses:
        nonfinite |= ~np.isfinite(loaded.losses["train_loss"])
    empty = counts == 0
    diverged = np.logical_or.reduceat(nonfinite, starts) if len(y) else np.zeros(len(starts), bool)
    # the trainer stops a run when it diverges; its summary says so even if the last loss written is finite
    diverged |= (loaded.runs["status"] == "diverged").to_numpy()
    diverged &= ~empty
    all_nan = np.logical_and.reduceat(np.isnan(y), starts) if len(y) else np.ones(len(starts), bool)
    value, log10 = _metric_values(loaded, metric, y, floor, higher_is_better(loss))
    status = np.where(diverged, "diverged", np.where(np.isnan(value), "missing", "ok")).astype(object)
    if metric.kind == "to":
        status[(status == "missing")] = "not_reached"
    # a run whose loss is all NaN: diverged at epoch 1 (train_loss), or no values in that column (val_loss)
    status[empty | (all_nan if loss != "train_loss" else False)] = "missing"
    bad = status != "ok"
    value[bad], log10[bad] = np.nan, np.nan
    out = loaded.runs.copy()
    out["value"], out["log10"], out["status"] = value, log10, status
    return out


def _check_threshold(metric: Metric, column: str) -> None:
    if metric.kind == "to" and is_accuracy(column) and (metric.param or 0.0) > 1:
        raise UsageError(f"--metric {metric.label} on {column}: accuracies are fractions in [0, 1]; "
                         "give 0 < EPS <= 1, e.g. to=0.9 (the first epoch with 90% accuracy)")


def _metric_values(loaded: Loaded, metric: Metric, y: np.ndarray, floor: float,
                   higher: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(value, log10) per run. Losses: log10 of the value clipped at the floor (auc: the mean log10
    loss). Accuracies (`higher`): no floor and no log10 (NaN); best is the highest, auc the mean
    accuracy, to=EPS the first epoch with accuracy >= EPS. to=EPS is an epoch count either way."""
    starts, ends = loaded.bounds[:-1], loaded.bounds[1:]
    n = len(starts)
    counts = ends - starts
    if len(y) == 0:
        return np.full(n, np.nan), np.full(n, np.nan)
    safe_starts = np.minimum(starts, len(y) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        logy = y if higher else np.log10(np.maximum(y, floor))  # auc averages these
        if metric.kind == "final":
            value = y[np.maximum(ends - 1, 0)]
        elif metric.kind == "best":
            value = (np.fmax if higher else np.fmin).reduceat(y, safe_starts)
        elif metric.kind == "epoch":
            value = np.full(n, np.nan)
            hit = np.flatnonzero(loaded.epoch == int(metric.param or 0))
            value[loaded.run_index()[hit]] = y[hit]
        elif metric.kind == "early_stop":
            value = _early_stop(loaded, y)
        elif metric.kind == "to":
            eps = metric.param or 0.0
            reached = np.where(y >= eps if higher else y <= eps, loaded.epoch.astype(np.float64), np.inf)
            value = np.minimum.reduceat(reached, safe_starts)
            value[~np.isfinite(value)] = np.nan
            value = np.where(counts > 0, value, np.nan)
            return value, value.copy()
        else:  # auc: the mean log10 loss (the mean accuracy) over the epochs
            value = np.add.reduceat(np.where(np.isfinite(logy), logy, 0.0), safe_starts) / np.maximum(counts, 1)
            value = np.where(counts > 0, value, np.nan)
            return value, (np.full(n, np.nan) if higher else value.copy())
        value = np.where(counts > 0, value, np.nan)
        return value, (np.full(n, np.nan) if higher else np.log10(np.maximum(value, floor)))


def _early_stop(loaded: Loaded, y: np.ndarray) -> np.ndarray:
    """Per run: y at the epoch of the lowest val_loss (earliest on ties); NaN without val_loss."""
    val = loaded.losses["val_loss"]
    starts, n = loaded.bounds[:-1], len(val)
    safe = np.minimum(starts, n - 1)
    with np.errstate(invalid="ignore"):
        best = np.fmin.reduceat(np.where(np.isfinite(val), val, np.nan), safe)
    run = loaded.run_index()
    pos = np.where(val == best[run], np.arange(n), n)  # NaN never equals: runs without val_loss stay at n
    first = np.minimum.reduceat(pos, safe)
    first[np.diff(loaded.bounds) == 0] = n
    return np.where(first < n, y[np.minimum(first, n - 1)], np.nan)


def default_loss(loaded: Loaded, metric: Metric, loss: str | None) -> str:
    """--loss when given; else test_loss for early_stop where the inputs have it; else train_loss."""
    if loss is not None:
        return loss
    return "test_loss" if metric.kind == "early_stop" and "test_loss" in loaded.losses else "train_loss"
