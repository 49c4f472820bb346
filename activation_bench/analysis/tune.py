"""Tuned comparisons: each group at its own best hyperparameters, chosen on some seeds, judged on the others.

The --tune options, the split of the seeds into tuning and evaluation seeds, each run's selection
score (the metric applied to val_loss or val_acc), `choose` (the choice itself, by selection.py's
rule: fewest failed tuning runs, best mean score, then grid order) and the evaluation seeds' runs at
each group's chosen values. Every statistic is computed on the *evaluation seeds* only: a run never
both selects and is judged. Pure pandas/numpy: no torch, no scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from activation_bench.analysis.loading import Loaded
from activation_bench.analysis.metrics import ACCURACY, Metric, run_values, scale
from activation_bench.analysis.selection import TIE_RULE, Selection, as_number, describe, select, spelled
from activation_bench.errors import UsageError

TUNE_ON = ("val_loss", "val_acc")  # what --tune-on may select on: validation only, never the test split
# --tune-grid: "shared", every group tuned over the same grid (a group lacking a value is left out);
# "own", each group over the values its own runs have (a grid fixed per group beforehand, e.g. a
# longer budget re-training each group's earlier choice and its neighbours)
TUNE_GRIDS = ("shared", "own")


@dataclass(frozen=True)
class TuneSpec:
    """--tune KEY (repeatable), --tune-seeds K (None: a third of the seeds, rounded up, at least 2),
    --tune-on (the validation column the metric is applied to for selection) and --tune-grid
    (TUNE_GRIDS: one grid for every group, or each group's own)."""

    keys: tuple[str, ...]
    tune_seeds: int | None = None
    on: str = "val_loss"
    grid: str = "shared"


def parse_tune(keys: Sequence[str] | None, tune_seeds: int | str | None = None,
               by: Sequence[str] | None = None, on: str | None = None, grid: str | None = None) -> TuneSpec | None:
    """The --tune/--tune-seeds/--tune-on/--tune-grid options checked before any file is read; None
    without --tune."""
    names = list(dict.fromkeys(c.strip() for item in keys or [] for c in str(item).split(",") if c.strip()))
    if on is not None and on not in TUNE_ON:
        raise UsageError(f"--tune-on {on}: tuning selects on validation numbers only; valid: {', '.join(TUNE_ON)}")
    if grid is not None and grid not in TUNE_GRIDS:
        raise UsageError(f"--tune-grid {grid}: valid: {', '.join(TUNE_GRIDS)}")
    if not names:
        if tune_seeds is not None or on is not None or grid is not None:
            flag = "--tune-seeds" if tune_seeds is not None else "--tune-on" if on is not None else "--tune-grid"
            raise UsageError(f"{flag} sets up --tune: give --tune KEY too, e.g. --tune lr")
        return None
    if "seed" in names:
        raise UsageError("--tune seed: seeds are what tuning is judged over, not a setting to tune")
    by_cols = {c.strip() for item in by or [] for c in str(item).split(",") if c.strip()}
    both = [k for k in names if k in by_cols]
    if both:
        raise UsageError(f"--tune {both[0]} and --by {both[0]}: a key is either tuned (its best value per group) "
                         "or a group column, not both")
    k = None
    if tune_seeds is not None:
        try:
            k = int(str(tune_seeds))
        except ValueError:
            k = 0
        if k < 1:
            raise UsageError(f"--tune-seeds {tune_seeds}: needs a whole number of seeds >= 1")
    return TuneSpec(tuple(names), k, on or "val_loss", grid or "shared")


def check_keys(spec: TuneSpec, config_cols: Sequence[str], runs: pd.DataFrame) -> list[str]:
    """Refuse keys that were not swept (no such column); notes for keys with a single value."""
    notes = []
    for key in spec.keys:
        if key not in config_cols:
            have = ", ".join(c for c in config_cols if c != "seed" and runs[c].nunique() > 1) or "none"
            raise UsageError(f"--tune {key}: '{key}' was not swept (swept keys: {have})")
        values = runs[key].dropna().unique()
        if len(values) < 2:
            notes.append(f"--tune {key}: every run has {key}={values[0] if len(values) else 'nothing'}; "
                         "nothing to tune")
    if "seed" not in config_cols:
        raise UsageError("--tune needs a seed column: tuning and evaluation use different seeds")
    return notes



def grid_seeds(values: pd.DataFrame, group_cols: Sequence[str], keys: Sequence[str]) -> list[str] | None:
    """The seeds that hold a grid where the other seeds hold one value per group, as in a search's
    judgement (the grid on the tuning seeds, each group's chosen value on the judging seeds); None
    where the seeds are not split that way (every seed has the grid, or none has)."""
    cols = [*group_cols, *keys]
    runs = spelled(values, cols).assign(seed=values["seed"].astype(object).to_numpy())
    runs = runs[values["seed"].notna().to_numpy()]
    combos = runs.drop_duplicates().groupby(["seed", *group_cols], sort=False, dropna=False).size()
    widest = combos.groupby(level="seed", sort=False).max()
    with_grid = [str(s) for s, n in widest.items() if n > 1]
    return with_grid if 0 < len(with_grid) < len(widest) else None


def split_seeds(seeds: Sequence[object], k: int | None, smallest: bool = True) -> tuple[list[str], list[str]]:
    """The k smallest seed values tune, the rest evaluate; k None: ceil(n/3), at least 2. With
    smallest=False the first k seeds as given tune instead. Each part comes sorted."""
    present = [str(s) for s in dict.fromkeys(seeds) if s is not None]
    bad = [s for s in present if math.isnan(as_number(s))]
    if bad:
        raise UsageError(f"--tune: seed '{bad[0]}' is not a number")
    if smallest:
        present = sorted(present, key=as_number)
    n = len(present)
    k = max(2, math.ceil(n / 3)) if k is None else k
    if n - k < 2:
        raise UsageError(f"--tune-seeds {k}: {n} seeds leave {max(n - k, 0)} to evaluate on; at least 2 are needed "
                         f"(give fewer tuning seeds, or run more seeds)")
    return sorted(present[:k], key=as_number), sorted(present[k:], key=as_number)



def eval_mask(values: pd.DataFrame, sel: Selection) -> np.ndarray:
    """Which runs are evaluated: an evaluation seed, at its group's chosen values (kept groups only)."""
    cols = [*sel.group_cols, *sel.keys]
    is_eval = values["seed"].astype(object).isin(sel.eval_seeds).to_numpy()
    if not len(sel.chosen):
        return np.zeros(len(values), bool)
    chosen = sel.chosen[cols].assign(_hit=True)
    hit = spelled(values, cols).merge(chosen, on=cols, how="left")["_hit"].notna().to_numpy()
    return is_eval & hit


def evaluated(values: pd.DataFrame, sel: Selection) -> pd.DataFrame:
    """The evaluation seeds' runs at each kept group's chosen values (tuning seeds never appear);
    the index of `values` is kept."""
    return values[eval_mask(values, sel)]


def selection_values(loaded: Loaded, metric: Metric, floor: float,
                     on: str = "val_loss") -> tuple[pd.DataFrame, str, list[str]]:
    """Per run the selection score. on="val_loss": the metric applied to val_loss, as log10 (lower
    is better); runs without validation losses fall back to train_loss (early_stop: the lowest
    train_loss). on="val_acc": the metric applied to val_acc (higher is better; to=EPS: log10 epochs,
    lower is better); there is no fallback, since only classification runs have accuracy.
    Returns (run values with a `score` column, what was selected on, notes)."""
    if on == "val_acc":
        return _accuracy_selection(loaded, metric, floor)
    has_val = "val_loss" in loaded.losses and bool(np.isfinite(loaded.losses["val_loss"]).any())
    train = run_values(loaded, Metric("best") if metric.kind == "early_stop" else metric, "train_loss", floor)
    if has_val:
        val = run_values(loaded, metric, "val_loss", floor)
        no_val = (val["status"] == "missing").to_numpy() & (train["status"] != "missing").to_numpy()
        out = val.copy()
        for col in ("value", "log10", "status"):
            out.loc[no_val, col] = train.loc[no_val, col]
    else:
        no_val = np.ones(len(train), bool)
        out = train
    score = out["log10"].to_numpy(float) if metric.is_loss else np.log10(out["value"].to_numpy(float))
    out = out.assign(score=score)
    if not has_val:
        return out, "train_loss", ["no run has a val_loss: tuned values are selected on train_loss (the "
                                   "evaluation seeds are still not used to select)"]
    if no_val.any():
        return out, "val_loss (train_loss where a run has none)", [
            f"{int(no_val.sum())} runs have no val_loss: their groups are tuned on train_loss"]
    return out, "val_loss", []


def _accuracy_selection(loaded: Loaded, metric: Metric, floor: float) -> tuple[pd.DataFrame, str, list[str]]:
    """selection_values on val_acc: the metric's accuracy (or log10 epochs for to=EPS)."""
    if "val_acc" not in loaded.losses or not bool(np.isfinite(loaded.losses["val_acc"]).any()):
        raise UsageError("--tune-on val_acc: no run has val_acc values; only classification runs have accuracy "
                         "(tune on val_loss instead)")
    out = run_values(loaded, metric, "val_acc", floor)
    none = int((out["status"] == "missing").sum())
    if none:
        raise UsageError(f"--tune-on val_acc: {none} runs have no val_acc values (regression runs have none): "
                         "leave them out, or tune on val_loss")
    value = out["value"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = value if metric.is_loss else np.log10(value)
    return out.assign(score=score), "val_acc", []


def tuned_values(loaded: Loaded, values: pd.DataFrame, metric: Metric, group_cols: Sequence[str], spec: TuneSpec,
                 floor: float, notes: list[str]) -> tuple[pd.DataFrame, Selection]:
    """The evaluation runs of `values` (run_values of the compared loss) at each group's tuned values,
    and the Selection. Notes go to `notes`."""
    notes.extend(check_keys(spec, loaded.config_cols, loaded.runs))
    seeds = values["seed"].dropna().unique()
    with_grid = grid_seeds(values, group_cols, spec.keys) if spec.tune_seeds is None else None
    if with_grid is not None:  # the seeds with the grid tune; the others, at one value each, are judged
        tune_s, eval_s = split_seeds(with_grid + [str(s) for s in seeds if str(s) not in with_grid],
                                     len(with_grid), smallest=False)
    else:
        tune_s, eval_s = split_seeds(seeds, spec.tune_seeds)
    sel = choose(loaded, metric, group_cols, spec, tune_s, eval_s, floor)
    notes.extend(sel.notes)
    judged = evaluated(values, sel)
    notes.extend(_judged_elsewhere(values, sel, judged))
    return judged, sel


def _judged_elsewhere(values: pd.DataFrame, sel: Selection, judged: pd.DataFrame) -> list[str]:
    """A note where kept groups have judging-seed runs but none at their chosen values: judging seeds
    trained at values chosen otherwise (a sweep tuned, then judged, by another metric or --tune-on)."""
    cols = list(sel.group_cols)
    if not len(sel.chosen):
        return []
    def groups(df: pd.DataFrame) -> set[tuple]:
        return set(spelled(df, cols).itertuples(index=False, name=None)) if cols else ({()} if len(df) else set())
    on_eval = values[values["seed"].astype(object).isin(sel.eval_seeds).to_numpy()]
    kept = set(sel.chosen[cols].itertuples(index=False, name=None)) if cols else {()}
    missing = sorted((kept & groups(on_eval)) - groups(judged), key=str)
    if not missing:
        return []
    first = describe(cols, missing[0])
    return [f"{len(missing)} group(s) ({first}{', ...' if len(missing) > 1 else ''}) have judging-seed runs but none "
            f"at their chosen {', '.join(sel.keys)}: those seeds were trained at values chosen otherwise (a tuned "
            "sweep's tuning.json says how: compare with its --metric and --tune-on)"]


def choose(loaded: Loaded, metric: Metric, group_cols: Sequence[str], spec: TuneSpec, tune_seeds: Sequence[str],
           eval_seeds: Sequence[str], floor: float, keep: np.ndarray | None = None) -> Selection:
    """The choice itself, from the tuning seeds' runs of `loaded`: what `compare --tune` and a tuned
    sweep (analysis/staged.py, before its judging seeds are trained) both call. `keep` (a mask over
    loaded.runs): the runs it may read; the notes of the selection score come first in sel.notes."""
    sel_values, source, why = selection_values(loaded, metric, floor, spec.on)
    if keep is not None:
        sel_values = sel_values[keep]
    higher = scale(metric, spec.on) == ACCURACY
    sel = select(sel_values, group_cols, spec.keys, tune_seeds, eval_seeds, score="score", selected_on=source,
                 higher_is_better=higher, own_grid=spec.grid == "own")
    sel.notes[:0] = why
    return sel


def method_note(sel: Selection, metric_label: str) -> str:
    """The footer line that says how the tuned values were chosen."""
    keys = ", ".join(sel.keys)
    seeds = _seed_list(sel.tune_seeds)
    best = f"highest mean {metric_label}" if sel.higher_is_better else f"lowest mean log10 {metric_label}"
    return (f"Tuned {keys} per group: the value(s) with the {best} of {sel.selected_on} "
            f"over the {len(sel.tune_seeds)} tuning seeds ({seeds}), fewest failed runs first; {TIE_RULE}. "
            f"Every statistic uses the other {len(sel.eval_seeds)} seeds only (n); tune_n = tuning runs scored.")


def _seed_list(seeds: Sequence[str]) -> str:
    nums = [as_number(s) for s in seeds]
    if nums and all(x.is_integer() for x in nums) and nums == list(np.arange(nums[0], nums[0] + len(nums))):
        return f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    return "seeds " + ", ".join(seeds)
