"""Tuned comparisons: each group at its own best hyperparameters, chosen on some seeds, judged on the others.

For every group (e.g. activation x task) and every combination of the tuned keys' values (the grid),
the selection score is the mean, over the *tuning seeds*, of each run's score (the metric applied to
the validation loss, on a log10 scale; lower is better). The chosen combination is the one with

1. the smallest share of failed tuning runs (diverged, or `to=EPS` never reached), then
2. the lowest mean score, then
3. on an exact tie, the first combination in grid order: each key's values sorted ascending
   (numerically where they are numbers), the first --tune key deciding first (so the smallest lr).

Every statistic is then computed on the *evaluation seeds* only, at each group's chosen values:
a run never both selects and is judged. Pure pandas/numpy: no torch, no scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from activation_bench.errors import UsageError

TIE_RULE = ("ties in the selection score go to the first value in grid order (each key's values ascending, "
            "the first --tune key first)")
FAILED = ("diverged", "not_reached")


@dataclass(frozen=True)
class TuneSpec:
    """--tune KEY (repeatable) and --tune-seeds K (None: a third of the seeds, rounded up, at least 2)."""

    keys: tuple[str, ...]
    tune_seeds: int | None = None


def parse_tune(keys: Sequence[str] | None, tune_seeds: int | str | None = None,
               by: Sequence[str] | None = None) -> TuneSpec | None:
    """The --tune/--tune-seeds options checked before any file is read; None without --tune."""
    names = list(dict.fromkeys(c.strip() for item in keys or [] for c in str(item).split(",") if c.strip()))
    if not names:
        if tune_seeds is not None:
            raise UsageError("--tune-seeds sets up --tune: give --tune KEY too, e.g. --tune lr")
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
    return TuneSpec(tuple(names), k)


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


def split_seeds(seeds: Sequence[object], k: int | None) -> tuple[list[str], list[str]]:
    """The k smallest seed values tune, the rest evaluate; k None: ceil(n/3), at least 2."""
    present = [str(s) for s in dict.fromkeys(seeds) if s is not None]
    bad = [s for s in present if math.isnan(_num(s))]
    if bad:
        raise UsageError(f"--tune: seed '{bad[0]}' is not a number")
    ordered = sorted(present, key=_num)
    n = len(ordered)
    k = max(2, math.ceil(n / 3)) if k is None else k
    if n - k < 2:
        raise UsageError(f"--tune-seeds {k}: {n} seeds leave {max(n - k, 0)} to evaluate on; at least 2 are needed "
                         f"(give fewer tuning seeds, or run more seeds)")
    return ordered[:k], ordered[k:]


def _spelled(df: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({c: df[c].astype(object).where(df[c].notna(), "(none)") for c in cols}, index=df.index)


def _describe(cols: Sequence[str], key: Sequence[object]) -> str:
    return ", ".join(f"{c}={v}" for c, v in zip(cols, key)) or "all runs"


@dataclass
class Selection:
    """The outcome of tuning. `chosen`: one row per kept group (group columns, tuned keys,
    tune_score, tune_n); `scores`: every group x grid combination (score, n_ok, n_failed, rank)."""

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


def select(values: pd.DataFrame, group_cols: Sequence[str], keys: Sequence[str], tune_seeds: Sequence[str],
           eval_seeds: Sequence[str] = (), score: str = "log10", selected_on: str = "val_loss") -> Selection:
    """Choose each group's tuned values from the tuning seeds' runs.

    `values`: one row per run with the group columns, the tuned keys, `seed`, `status` (ok | diverged |
    not_reached | missing) and the `score` column (lower is better, e.g. log10 of the best val_loss).
    A group that lacks a grid combination on every tuning seed is named in a note and left out."""
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
    notes: list[str] = []
    dropped: list[str] = []
    chosen_rows, kept = [], []
    by_group = dict(_groups(scores, group_cols))
    for gkey, _ in _groups(sp, group_cols):
        part = by_group.get(gkey, scores.iloc[:0])
        have = set(map(tuple, part[keys].to_numpy(object).tolist()))
        missing = [c for c in combos if c not in have]
        label = _describe(group_cols, gkey)
        if missing:
            what = "; ".join(_describe(keys, c) for c in missing[:3]) + (" ..." if len(missing) > 3 else "")
            dropped.append(label)
            notes.append(f"{label}: no tuning run with {what} (the grid's other groups have it): left out, "
                         "not tuned over fewer values")
            continue
        ranked = _rank(part, keys, grid)
        kept.append(ranked)
        best = ranked.iloc[0]
        chosen_rows.append({**dict(zip(group_cols, gkey)), **{k: best[k] for k in keys},
                            "tune_score": float(best["score"]), "tune_n": int(best["n_ok"])})
        notes.extend(_edge_notes(label, best, keys, grid))
        short = part[(part["n_ok"] + part["n_failed"]) < len(tune_seeds)]
        if len(short):
            notes.append(f"{label}: {len(short)} grid value(s) have runs on fewer than the {len(tune_seeds)} "
                         "tuning seeds; scored on the runs there are")
    chosen = pd.DataFrame(chosen_rows, columns=[*group_cols, *keys, "tune_score", "tune_n"])
    all_scores = pd.concat(kept, ignore_index=True) if kept else scores.iloc[:0].assign(rank=[])
    return Selection(keys, group_cols, list(tune_seeds), list(eval_seeds), grid, chosen, all_scores,
                     selected_on, dropped, notes)


def _groups(df: pd.DataFrame, cols: Sequence[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """(key tuple, rows) per group in order of first appearance; one group of everything without cols."""
    if not cols:
        return [((), df)]
    return [(k if isinstance(k, tuple) else (k,), part) for k, part in df.groupby(list(cols), sort=False)]


def _grid_combos(sp: pd.DataFrame, grid: dict[str, list[str]], keys: Sequence[str]) -> list[tuple]:
    """The combinations of tuned values that any run has, in grid order."""
    seen = set(map(tuple, sp.to_numpy(object).tolist()))
    order = {k: {v: i for i, v in enumerate(grid[k])} for k in keys}
    return sorted(seen, key=lambda c: tuple(order[k].get(v, len(order[k])) for k, v in zip(keys, c)))


def _rank(part: pd.DataFrame, keys: Sequence[str], grid: dict[str, list[str]]) -> pd.DataFrame:
    """The group's grid combinations, best first (fewest failed, lowest score, grid order)."""
    t = part.copy()
    total = (t["n_ok"] + t["n_failed"]).clip(lower=1)
    t["_fail"] = t["n_failed"] / total
    t["_score"] = t["score"].fillna(np.inf)
    order = [f"_o{i}" for i in range(len(keys))]
    for col, k in zip(order, keys):
        pos = {v: i for i, v in enumerate(grid[k])}
        t[col] = t[k].map(lambda v, pos=pos: pos.get(v, len(pos)))
    t = t.sort_values(["_fail", "_score", *order], kind="stable")
    t["rank"] = np.arange(1, len(t) + 1)
    return t.drop(columns=["_fail", "_score", *order]).reset_index(drop=True)


def _edge_notes(label: str, best: pd.Series, keys: Sequence[str], grid: dict[str, list[str]]) -> list[str]:
    out = []
    for k in keys:
        values = grid[k]
        if len(values) < 2 or best[k] not in (values[0], values[-1]):
            continue
        end = "smallest" if best[k] == values[0] else "largest"
        out.append(f"{label}: chosen {k}={best[k]} is the grid's {end} value: widen the grid")
    return out


def evaluated(values: pd.DataFrame, sel: Selection) -> pd.DataFrame:
    """The evaluation seeds' runs at each kept group's chosen values (tuning seeds never appear)."""
    cols = [*sel.group_cols, *sel.keys]
    sp = _spelled(values, cols)
    is_eval = values["seed"].astype(object).isin(sel.eval_seeds).to_numpy()
    want = set(map(tuple, _spelled(sel.chosen, cols).to_numpy(object).tolist()))
    at_chosen = np.fromiter((tuple(r) in want for r in sp.to_numpy(object).tolist()), bool, len(sp))
    return values[is_eval & at_chosen].reset_index(drop=True)


def expected_best(scores: Sequence[float], k: int) -> tuple[float, float]:
    """Expected best (lowest) score after trying k grid values drawn at random with replacement
    (Dodge et al. 2019, "Show your work", closed form from the sorted scores: what a bootstrap over
    the grid's values converges to). Failed values (inf/NaN) are never best. Returns
    (expected best among the draws that succeed, probability that all k draws fail)."""
    v = np.asarray(scores, dtype=float)
    n = len(v)
    if n == 0 or k < 1:
        return math.nan, math.nan
    finite = np.sort(v[np.isfinite(v)])
    p_fail = ((n - len(finite)) / n) ** k
    if not len(finite):
        return math.nan, 1.0
    # P(the best of k draws is the i-th smallest finite value) = ((n-i+1)/n)^k - ((n-i)/n)^k, i = 1..m
    i = np.arange(1, len(finite) + 1)
    prob = ((n - i + 1) / n) ** k - ((n - i) / n) ** k
    return float(np.sum(prob * finite) / (1 - p_fail)), float(p_fail)


def budget(sel: Selection) -> pd.DataFrame:
    """Per kept group and k = 1..grid size: the expected best selection score after k grid values
    (on the score's scale), and the chance that all k fail. A grid value with any failed tuning run counts as failed."""
    rows = []
    if not len(sel.scores):
        return pd.DataFrame(columns=[*sel.group_cols, "k", "expected_best", "p_all_failed"])
    for gkey, part in _groups(sel.scores, sel.group_cols):
        s = np.where(part["n_failed"].to_numpy() > 0, np.inf, part["score"].to_numpy(float))
        for k in range(1, len(s) + 1):
            best, p = expected_best(s, k)
            rows.append({**dict(zip(sel.group_cols, gkey)), "k": k, "expected_best": best, "p_all_failed": p})
    return pd.DataFrame(rows, columns=[*sel.group_cols, "k", "expected_best", "p_all_failed"])


def method_note(sel: Selection, metric_label: str) -> str:
    """The footer line that says how the tuned values were chosen."""
    keys = ", ".join(sel.keys)
    seeds = _seed_list(sel.tune_seeds)
    return (f"Tuned {keys} per group: the value(s) with the lowest mean log10 {metric_label} of {sel.selected_on} "
            f"over the {len(sel.tune_seeds)} tuning seeds ({seeds}), fewest failed runs first; {TIE_RULE}. "
            f"Every statistic uses the other {len(sel.eval_seeds)} seeds only (n); tune_n = tuning runs scored.")


def _seed_list(seeds: Sequence[str]) -> str:
    nums = [_num(s) for s in seeds]
    if nums and all(x.is_integer() for x in nums) and nums == list(np.arange(nums[0], nums[0] + len(nums))):
        return f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    return "seeds " + ", ".join(seeds)
