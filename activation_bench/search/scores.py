"""A rung's numbers from its finished runs, computed by the analysis layer as `compare` computes
them: per run the early-stopped validation loss (or accuracy), per candidate and learning rate the
geometric mean (or mean) over the seeds, per candidate its best learning rate."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from activation_bench.analysis.configs import canon
from activation_bench.analysis.loading import Loaded, load
from activation_bench.analysis.metrics import Metric, run_values
from activation_bench.analysis.selection import sort_values
from activation_bench.errors import UsageError
from activation_bench.search import halving

COLUMNS = ["activation", "lr", "seed", "value"]


def lr_label(lr: float | str) -> str:
    """A learning rate as it appears in overrides, labels and loaded columns (1e-3 and 0.001 alike)."""
    return str(canon(lr))


def has_validation(loaded: Loaded) -> bool:
    return "val_loss" in loaded.losses and bool(np.isfinite(loaded.losses["val_loss"]).any())


def selection(loaded: Loaded, on: str) -> tuple[Metric, str]:
    """The metric and column a rung selects on: early_stop of val_loss (val_acc with on="val_acc")
    where the runs have a validation split, else the final training loss (final val_acc)."""
    if has_validation(loaded):
        return Metric("early_stop"), on
    return Metric("final"), ("val_acc" if on == "val_acc" else "train_loss")


def run_table(directory: Path, on: str) -> pd.DataFrame:
    """One row per finished run of a rung: activation, lr, seed and `value` (its selection number,
    `halving.worst(on)` where it failed). Empty where no run has finished."""
    try:
        loaded = load([directory], "train_loss")
    except UsageError:
        return pd.DataFrame(columns=COLUMNS)
    metric, column = selection(loaded, on)
    if column not in loaded.losses:
        values = loaded.runs.assign(value=halving.worst(on))
    else:
        v = run_values(loaded, metric, column)
        ok = (v["status"] == "ok").to_numpy() & np.isfinite(v["value"].to_numpy(float))
        values = v.assign(value=np.where(ok, v["value"].to_numpy(float), halving.worst(on)))
    for col in ("activation", "lr", "seed"):
        if col not in values.columns:
            values[col] = None
    return values[COLUMNS].reset_index(drop=True)


def candidate_scores(table: pd.DataFrame, tried: Mapping[str, Sequence[str]], seeds: Sequence[int],
                     on: str) -> dict[str, tuple[float, str]]:
    """Per candidate (fn -> the learning rates it was trained at): (its best score over those
    learning rates, that learning rate). A learning rate's score is `halving.score` of the values on
    `seeds`; a seed without a finished run scores `halving.worst(on)`. Ties: the smaller rate."""
    want = {str(s) for s in seeds}
    per: dict[tuple[str, str], dict[str, float]] = {}
    for fn, lr, seed, value in table[COLUMNS].itertuples(index=False, name=None):
        if str(seed) in want:
            per.setdefault((str(fn), str(lr)), {}).setdefault(str(seed), float(value))
    sign = -1.0 if halving.higher_is_better(on) else 1.0
    out: dict[str, tuple[float, str]] = {}
    for fn, lrs in tried.items():
        best: tuple[float, str] | None = None
        for lr in sort_values([lr_label(x) for x in lrs]):
            got = per.get((fn, str(lr)), {})
            sc = halving.score(list(got.values()), on) if len(got) == len(want) else halving.worst(on)
            if best is None or sign * sc < sign * best[0]:
                best = (sc, str(lr))
        out[fn] = best if best is not None else (halving.worst(on), "")
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties) of the finite pairs; NaN below 3 pairs."""
    a, b = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(a) & np.isfinite(b)
    if keep.sum() < 3:
        return math.nan
    ra = pd.Series(a[keep]).rank().to_numpy()
    rb = pd.Series(b[keep]).rank().to_numpy()
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])
