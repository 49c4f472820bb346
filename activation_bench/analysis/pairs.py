"""Pairing runs with the baseline's: every candidate run joined to the baseline run that shares its
seed and the other config values (`pair_up`, which compare, the windows' interval and sequential
judging use), and each comparison's paired differences in seed order (`group_differences`). Pure
numpy/pandas."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from activation_bench.analysis.metrics import ACCURACY
from activation_bench.analysis.stats import filled, group_index

_KEEP = ["log10", "value", "status"]


def pair_up(values: pd.DataFrame, group_cols: Sequence[str], baseline: tuple[str, str], pair_cols: Sequence[str],
            notes: list[str]) -> pd.DataFrame:
    """Every non-baseline run joined to the baseline run with the same pair_cols values (seed and
    every other varying config value), in one merge. Columns: group columns, then log10/value/status
    with suffixes _c (candidate) and _b (baseline)."""
    key, base_value = baseline
    cols = list(dict.fromkeys([*group_cols, *pair_cols]))
    frame = pd.concat([filled(values, cols), values[_KEEP]], axis=1)
    is_base = (frame[key] == base_value).to_numpy()
    base = _dedupe(frame[is_base], pair_cols, notes, f"baseline {key}={base_value}")
    cand = _dedupe(frame[~is_base], cols, notes, "compared groups")
    if not pair_cols:  # one run per group and nothing to pair by: pair with the single baseline run
        if len(base) != 1:
            return cand.iloc[:0].assign(**{f"{k}_b": [] for k in _KEEP}).rename(columns={k: f"{k}_c" for k in _KEEP})
        return cand.rename(columns={k: f"{k}_c" for k in _KEEP}).assign(
            **{f"{k}_b": base[k].iloc[0] for k in _KEEP})
    right = base[[*pair_cols, *_KEEP]]
    return cand.merge(right, on=list(pair_cols), how="inner", suffixes=("_c", "_b"))


def _dedupe(df: pd.DataFrame, cols: Sequence[str], notes: list[str], label: str) -> pd.DataFrame:
    if not cols:
        return df
    dup = df.duplicated(subset=list(cols), keep="first")
    if dup.any():
        notes.append(f"{label}: {int(dup.sum())} runs share seed and config with another run; "
                     "only the first of each is paired")
    return df[~dup.to_numpy()]


def seed_order(pairs: pd.DataFrame) -> np.ndarray:
    """Positions of pairs in seed order (numeric where seeds are numbers), else as given."""
    if "seed" not in pairs.columns or not len(pairs):
        return np.arange(len(pairs))
    seeds = pd.to_numeric(pairs["seed"], errors="coerce")
    key = seeds if seeds.notna().all() else pairs["seed"].astype(str)
    return np.argsort(key.to_numpy(), kind="stable")


def differences(pairs: pd.DataFrame, how: str) -> np.ndarray:
    """The paired differences of pairs (compare.pair_up's rows) where both runs are ok, in seed order:
    log10 differences, or percentage points on an accuracy."""
    p = pairs.iloc[seed_order(pairs)]
    ok = (p["status_c"].to_numpy(object) == "ok") & (p["status_b"].to_numpy(object) == "ok")
    if how == ACCURACY:
        return 100 * (p["value_c"].to_numpy(float) - p["value_b"].to_numpy(float))[ok]
    return (p["log10_c"].to_numpy(float) - p["log10_b"].to_numpy(float))[ok]


def group_differences(values: pd.DataFrame, group_cols: Sequence[str], base: tuple[str, str],
                      pair_cols: Sequence[str], how: str, comp: pd.DataFrame) -> list[np.ndarray]:
    """Per row of comp (compare.comparisons' rows, by their group columns) its paired differences in
    seed order (`differences`)."""
    pairs = pair_up(values, group_cols, base, pair_cols, [])
    by_group = {k: idx for k, idx in group_index(pairs, group_cols)}
    keys = [tuple(r) for r in filled(comp, group_cols).to_numpy(object)] if group_cols else [()] * len(comp)
    return [differences(pairs.iloc[by_group.get(k, np.zeros(0, np.int64))], how) for k in keys]
