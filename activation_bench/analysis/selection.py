"""The choice rule of tuning, on a table of per-run selection scores (tune.py builds it from runs).

For every group (e.g. activation x task) and every combination of the tuned keys' values (the grid),
the selection score is the mean, over the *tuning seeds*, of each run's score: the metric applied to
the validation loss, on a log10 scale, lower is better (the default, `--tune-on val_loss`), or to
the validation accuracy, higher is better (`--tune-on val_acc`). The chosen combination is the one with

1. the smallest share of failed tuning runs (diverged, or `to=EPS` never reached), then
2. the best mean score, then
3. on an exact tie, the first combination in grid order: each key's values sorted ascending
   (numerically where they are numbers), the first --tune key deciding first (so the smallest lr).

`select` returns the Selection: each group's chosen values, every combination's score and rank, and
the notes (groups left out, choices at a grid's end). Pure pandas/numpy: no torch, no scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

TIE_RULE = ("ties in the selection score go to the first value in grid order (each key's values ascending, "
            "the first --tune key first)")
FAILED = ("diverged", "not_reached")


def as_number(value: object) -> float:
    """A value as a float (NaN where it is not a number)."""
    try:
        return float(str(value))
    except ValueError:
        return math.nan


def sort_values(values: Sequence[object]) -> list[object]:
    """Numbers ascending, then other values alphabetically (None last)."""
    def key(v: object) -> tuple:
        x = as_number(v) if v is not None else math.nan
        return (0, x, "") if not math.isnan(x) else (1 if v is not None else 2, 0.0, str(v))
    return sorted(dict.fromkeys(values), key=key)



def spelled(df: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """These columns as objects, a missing value spelled "(none)" (so that it groups and merges)."""
    return pd.DataFrame({c: df[c].astype(object).where(df[c].notna(), "(none)") for c in cols}, index=df.index)


def describe(cols: Sequence[str], key: Sequence[object]) -> str:
    """A group's key as `col=value, ...` (or "all runs")."""
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
    """A group's values as text, missing ones spelled "(none)" as spelled does: the key of own_grids."""
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
    sp = spelled(values, [*group_cols, *keys])
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
        label = describe(group_cols, gkey)
        have = set(map(tuple, ranked.loc[ranked["_g"] == code, keys].to_numpy(object).tolist()))
        missing = [c for c in needs[code] if c not in have]
        if not missing:
            keep_codes.append(code)
            continue
        what = "; ".join(describe(keys, c) for c in missing[:3]) + (" ..." if len(missing) > 3 else "")
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
        notes.append(f"{describe(group_cols, code)}: {count} grid value(s) have runs on fewer than the "
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
        parts.append(f"{describe(group_cols, code)}: " + "; ".join(f"{k} {', '.join(g[k])}" for k in keys))
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
    labels = [describe(group_cols, k) for k in chosen[list(group_cols)].itertuples(index=False, name=None)] \
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
