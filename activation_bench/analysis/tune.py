"""Tuned comparisons: each group at its own best hyperparameters, chosen on some seeds, judged on the others.

For every group (e.g. activation x task) and every combination of the tuned keys' values (the grid),
the selection score is the mean, over the *tuning seeds*, of each run's score: the metric applied to
the validation loss, on a log10 scale, lower is better (the default, `--tune-on val_loss`), or to
the validation accuracy, higher is better (`--tune-on val_acc`). The chosen combination is the one with

1. the smallest share of failed tuning runs (diverged, or `to=EPS` never reached), then
2. the best mean score, then
3. on an exact tie, the first combination in grid order: each key's values sorted ascending
   (numerically where they are numbers), the first --tune key deciding first (so the smallest lr).

Every statistic is then computed on the *evaluation seeds* only, at each group's chosen values:
a run never both selects and is judged. Pure pandas/numpy: no torch, no scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from activation_bench.analysis.loading import Loaded
from activation_bench.analysis.metrics import ACCURACY, Metric, run_values, scale
from activation_bench.errors import UsageError

TIE_RULE = ("ties in the selection score go to the first value in grid order (each key's values ascending, "
            "the first --tune key first)")
FAILED = ("diverged", "not_reached")
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


def _num(value: object) -> float:
    try:
        return float(str(value))
    except ValueError:
        return math.nan


def sort_values(values: Sequence[object]) -> list[object]:
    """Numbers ascending, then other values alphabetically (None last)."""
    def key(v: object) -> tuple:
        x = _num(v) if v is not None else math.nan
        return (0, x, "") if not math.isnan(x) else (1 if v is not None else 2, 0.0, str(v))
    return sorted(dict.fromkeys(values), key=key)


def grid_seeds(values: pd.DataFrame, group_cols: Sequence[str], keys: Sequence[str]) -> list[str] | None:
    """The seeds that hold a grid where the other seeds hold one value per group, as in a search's
    judgement (the grid on the tuning seeds, each group's chosen value on the judging seeds); None
    where the seeds are not split that way (every seed has the grid, or none has)."""
    cols = [*group_cols, *keys]
    runs = _spelled(values, cols).assign(seed=values["seed"].astype(object).to_numpy())
    runs = runs[values["seed"].notna().to_numpy()]
    combos = runs.drop_duplicates().groupby(["seed", *group_cols], sort=False, dropna=False).size()
    widest = combos.groupby(level="seed", sort=False).max()
    with_grid = [str(s) for s, n in widest.items() if n > 1]
    return with_grid if 0 < len(with_grid) < len(widest) else None


def split_seeds(seeds: Sequence[object], k: int | None, smallest: bool = True) -> tuple[list[str], list[str]]:
    """The k smallest seed values tune, the rest evaluate; k None: ceil(n/3), at least 2. With
    smallest=False the first k seeds as given tune instead. Each part comes sorted."""
    present = [str(s) for s in dict.fromkeys(seeds) if s is not None]
    bad = [s for s in present if math.isnan(_num(s))]
    if bad:
        raise UsageError(f"--tune: seed '{bad[0]}' is not a number")
    if smallest:
        present = sorted(present, key=_num)
    n = len(present)
    k = max(2, math.ceil(n / 3)) if k is None else k
    if n - k < 2:
        raise UsageError(f"--tune-seeds {k}: {n} seeds leave {max(n - k, 0)} to evaluate on; at least 2 are needed "
                         f"(give fewer tuning seeds, or run more seeds)")
    return sorted(present[:k], key=_num), sorted(present[k:], key=_num)


def _spelled(df: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({c: df[c].astype(object).where(df[c].notna(), "(none)") for c in cols}, index=df.index)


def _describe(cols: Sequence[str], key: Sequence[object]) -> str:
    return ", ".join(f"{c}={v}" for c, v in zip(cols, key)) or "all runs"


@dataclass
class Selection:
    """The outcome of tuning. `chosen`: one row per kept group (group columns, tuned keys,
    tune_score, tune_n); `scores`: every group x grid combination (score, n_ok, n_failed, rank).
    `higher_is_better`: the score is an accuracy (--tune-on val_acc), else lower is better."""

    keys: list[str]
    group_cols: list[str]
    tune_seeds: list[str]
    eval_seeds: list[str]
    grid: dict[str, list[str]]
    chosen: pd.DataFrame
    scores: pd.DataFrame
    selected_on: str
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    higher_is_better: bool = False
    own_grid: bool = False
    # with own_grid, each kept group's own grid, keyed by its group values as text (_text_code)
    own_grids: dict[tuple[str, ...], dict[str, list[str]]] = field(default_factory=dict)

    def grid_of(self, row: Any) -> dict[str, list[str]]:
        """The grid the group of `row` (a chosen or table row: its group columns) was tuned over: the
        common grid, or with own_grid the values its own runs have of each key (grid order), so that
        a value is called the grid's end only where it is the end of the values that group tried."""
        if not self.own_grid:
            return self.grid
        code = _text_code([row[c] for c in self.group_cols])
        return self.own_grids.get(code, {k: [] for k in self.keys})


def _text_code(values: Sequence[object]) -> tuple[str, ...]:
    """A group's values as text, missing ones spelled "(none)" as _spelled does: the key of own_grids."""
    return tuple("(none)" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in values)


def select(values: pd.DataFrame, group_cols: Sequence[str], keys: Sequence[str], tune_seeds: Sequence[str],
           eval_seeds: Sequence[str] = (), score: str = "log10", selected_on: str = "val_loss",
           higher_is_better: bool = False, own_grid: bool = False) -> Selection:
    """Choose each group's tuned values from the tuning seeds' runs.

    `values`: one row per run with the group columns, the tuned keys, `seed`, `status` (ok | diverged |
    not_reached | missing) and the `score` column (lower is better, e.g. log10 of the best val_loss;
    higher is better with `higher_is_better`, e.g. the final val_acc).
    A group that lacks a grid combination on every tuning seed is named in a note and left out. With
    own_grid, a group's grid is the combinations its own runs have (on any seed), and only those must
    be on its tuning seeds."""
    group_cols, keys = list(group_cols), list(keys)
    grid = {k: [str(v) for v in sort_values(values[k].dropna().unique())] for k in keys}
    sp = _spelled(values, [*group_cols, *keys])
    tuning = values["seed"].astype(object).isin(list(tune_seeds)).to_numpy()
    status = values["status"].to_numpy(object)
    present = tuning & (status != "missing")
    frame = sp[present].assign(
        _ok=(status[present] == "ok"), _failed=np.isin(status[present], FAILED),
        _score=np.where(status[present] == "ok", values[score].to_numpy(float)[present], np.nan))
    agg = frame.groupby([*group_cols, *keys], sort=False, dropna=False)
    scores = agg.agg(score=("_score", "mean"), n_ok=("_ok", "sum"), n_failed=("_failed", "sum")).reset_index()
    scores["n_ok"] = scores["n_ok"].astype(int)
    scores["n_failed"] = scores["n_failed"].astype(int)
    combos = _grid_combos(sp[[*keys]], grid, keys)
    ranked = _rank(scores, group_cols, keys, grid, higher_is_better)
    order = _groups(sp, group_cols)  # every group, in order of first appearance
    needs = _own_combos(sp, group_cols, keys, grid) if own_grid else {tuple(g): combos for g in order}
    notes: list[str] = []
    dropped: list[str] = []
    keep_codes = []
    for gkey in order:
        code = tuple(gkey)
        label = _describe(group_cols, gkey)
        have = set(map(tuple, ranked.loc[ranked["_g"] == code, keys].to_numpy(object).tolist()))
        missing = [c for c in needs[code] if c not in have]
        if not missing:
            keep_codes.append(code)
            continue
        what = "; ".join(_describe(keys, c) for c in missing[:3]) + (" ..." if len(missing) > 3 else "")
        dropped.append(label)
        where = "its other seeds have it" if own_grid else "the grid's other groups have it"
        notes.append(f"{label}: no tuning run with {what} ({where}): left out, not tuned over fewer values")
    kept = ranked[ranked["_g"].isin(set(keep_codes))]
    best = kept[kept["rank"] == 1].set_index("_g").loc[keep_codes].reset_index(drop=True) if keep_codes \
        else kept.iloc[:0].drop(columns="_g")
    chosen = best[[*group_cols, *keys]].assign(tune_score=best["score"].to_numpy(float),
                                               tune_n=best["n_ok"].to_numpy(int))
    own = {code: _grid_of(needs[code], keys, grid) for code in keep_codes} if own_grid else {}
    if own_grid:
        notes.append(_own_grid_note(own, group_cols, keys))
    notes.extend(_edge_notes(chosen, group_cols, keys, [own.get(c, grid) for c in keep_codes], own=own_grid))
    short = kept[(kept["n_ok"] + kept["n_failed"]) < len(tune_seeds)].groupby("_g", sort=False).size()
    for code, count in short.items():
        notes.append(f"{_describe(group_cols, code)}: {count} grid value(s) have runs on fewer than the "
                     f"{len(tune_seeds)} tuning seeds; scored on the runs there are")
    return Selection(keys, group_cols, list(tune_seeds), list(eval_seeds), grid, chosen.reset_index(drop=True),
                     kept.drop(columns="_g").reset_index(drop=True), selected_on, dropped, notes, higher_is_better,
                     own_grid, {_text_code(code): g for code, g in own.items()})


def _own_combos(sp: pd.DataFrame, group_cols: Sequence[str], keys: Sequence[str],
                grid: dict[str, list[str]]) -> dict[tuple, list[tuple]]:
    """Per group (its key tuple) the combinations of tuned values its runs have on any seed, in grid order."""
    out: dict[tuple, list[tuple]] = {}
    for row in sp[[*group_cols, *keys]].drop_duplicates().itertuples(index=False, name=None):
        out.setdefault(tuple(row[:len(group_cols)]), []).append(tuple(row[len(group_cols):]))
    order = {k: {v: i for i, v in enumerate(grid[k])} for k in keys}
    return {g: sorted(c, key=lambda t: tuple(order[k].get(v, len(order[k])) for k, v in zip(keys, t)))
            for g, c in out.items()}


def _grid_of(combos: Sequence[tuple], keys: Sequence[str], grid: dict[str, list[str]]) -> dict[str, list[str]]:
    """The values of each key among these combinations, in grid order (ascending). Not the order the
    combinations come in: with two keys, (lr 1e-2, warmup 500) sorts after (lr 3e-3, warmup 1000)."""
    return {k: [v for v in grid[k] if v in {c[i] for c in combos}] for i, k in enumerate(keys)}


def _own_grid_note(own: dict[tuple, dict[str, list[str]]], group_cols: Sequence[str], keys: Sequence[str]) -> str:
    """The one note that names each kept group's own grid (`own`: per group's key tuple, in group order)."""
    parts = []
    for code, g in own.items():
        parts.append(f"{_describe(group_cols, code)}: " + "; ".join(f"{k} {', '.join(g[k])}" for k in keys))
    return "each group tuned over its own grid (--tune-grid own): " + " | ".join(parts)


def _groups(df: pd.DataFrame, cols: Sequence[str]) -> list[tuple]:
    """The groups' keys in order of first appearance (one empty key without cols)."""
    if not cols:
        return [()]
    return list(dict.fromkeys(df[list(cols)].itertuples(index=False, name=None)))


def _grid_combos(sp: pd.DataFrame, grid: dict[str, list[str]], keys: Sequence[str]) -> list[tuple]:
    """The combinations of tuned values that any run has, in grid order."""
    seen = set(sp.drop_duplicates().itertuples(index=False, name=None))
    order = {k: {v: i for i, v in enumerate(grid[k])} for k in keys}
    return sorted(seen, key=lambda c: tuple(order[k].get(v, len(order[k])) for k, v in zip(keys, c)))


def _rank(scores: pd.DataFrame, group_cols: Sequence[str], keys: Sequence[str],
          grid: dict[str, list[str]], higher_is_better: bool = False) -> pd.DataFrame:
    """Every group's grid combinations, best first within the group (fewest failed, best score:
    lowest, or highest with higher_is_better; then grid order), numbered by `rank`; `_g` holds the
    group's key tuple. One sort for all groups."""
    t = scores.copy()
    t["_g"] = list(t[list(group_cols)].itertuples(index=False, name=None)) if group_cols else [()] * len(t)
    t["_code"] = t.groupby(list(group_cols), sort=False).ngroup() if group_cols else 0
    t["_fail"] = t["n_failed"] / (t["n_ok"] + t["n_failed"]).clip(lower=1)
    t["_score"] = (-t["score"] if higher_is_better else t["score"]).fillna(np.inf)
    order = [f"_o{i}" for i in range(len(keys))]
    for col, k in zip(order, keys):
        pos = {v: i for i, v in enumerate(grid[k])}
        t[col] = t[k].map(pos).fillna(len(pos))
    t = t.sort_values(["_code", "_fail", "_score", *order], kind="stable")
    t["rank"] = t.groupby("_code", sort=False).cumcount() + 1
    return t.drop(columns=["_code", "_fail", "_score", *order]).reset_index(drop=True)


def _edge_notes(chosen: pd.DataFrame, group_cols: Sequence[str], keys: Sequence[str],
                grids: Sequence[dict[str, list[str]]], shown: int = 4, own: bool = False) -> list[str]:
    """One note per tuned key, grid end and chosen value that some group chose, naming the groups;
    `grids`: each chosen row's grid (the same one for every row, or each group's own)."""
    out = []
    labels = [_describe(group_cols, k) for k in chosen[list(group_cols)].itertuples(index=False, name=None)] \
        if group_cols else ["all runs"] * len(chosen)
    for k in keys:
        ends: dict[tuple[str, str], list[str]] = {}
        for label, value, grid in zip(labels, chosen[k].tolist(), grids):
            values = grid[k]
            if len(values) >= 2 and value in (values[0], values[-1]):
                end = "smallest" if value == values[0] else "largest"
                ends.setdefault((end, value), []).append(label)
        order = {v: i for i, v in enumerate(sort_values([v for _, v in ends]))}
        for (end, value), at in sorted(ends.items(), key=lambda e: (e[0][0] != "smallest", order[e[0][1]])):
            who = "; ".join(at[:shown]) + (f"; and {len(at) - shown} more" if len(at) > shown else "")
            many = f"{len(at)} groups ({who})" if len(at) > 1 else who
            where = f"the {end} value of its own grid" if own else f"the grid's {end} value"
            out.append(f"chosen {k}={value}, {where}, for {many}: widen the grid")
    return out


def eval_mask(values: pd.DataFrame, sel: Selection) -> np.ndarray:
    """Which runs are evaluated: an evaluation seed, at its group's chosen values (kept groups only)."""
    cols = [*sel.group_cols, *sel.keys]
    is_eval = values["seed"].astype(object).isin(sel.eval_seeds).to_numpy()
    if not len(sel.chosen):
        return np.zeros(len(values), bool)
    chosen = sel.chosen[cols].assign(_hit=True)
    hit = _spelled(values, cols).merge(chosen, on=cols, how="left")["_hit"].notna().to_numpy()
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
        return set(_spelled(df, cols).itertuples(index=False, name=None)) if cols else ({()} if len(df) else set())
    on_eval = values[values["seed"].astype(object).isin(sel.eval_seeds).to_numpy()]
    kept = set(sel.chosen[cols].itertuples(index=False, name=None)) if cols else {()}
    missing = sorted((kept & groups(on_eval)) - groups(judged), key=str)
    if not missing:
        return []
    first = _describe(cols, missing[0])
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
    nums = [_num(s) for s in seeds]
    if nums and all(x.is_integer() for x in nums) and nums == list(np.arange(nums[0], nums[0] + len(nums))):
        return f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    return "seeds " + ", ".join(seeds)
