"""The evaluation's own uncertainty: a bootstrap over the windows of a whole test split.

Runs of a text source that judge the whole test split (data.eval_windows null) write test_windows.csv:
per window of the split, its mean loss and accuracy at the epoch of lowest validation loss and at the
last (engine/whole_split.py). The test split is one finite sample of text, so a verdict on it has an
error of its own that the seed interval does not count. `add_interval` resamples the windows with
replacement (RESAMPLES draws, one generator with a fixed seed, so tables are reproducible), the same
draw for every run (the members and seeds of a comparison share the split: paired), recomputes each
run's split mean and the paired statistic of each compared group, seeds held fixed, and gives its 95%
percentile interval beside the seed interval: `window_ratio_lo/hi` for losses (the geometric-mean
ratio, as `ratio`), `window_diff_lo_pp/hi_pp` for accuracies. Windows are the resampled unit (each
holds block_size consecutive characters); dependence between neighbouring windows is not modelled.

Only runs with the file take part (runs that sampled the split have no per-window losses, and their
tables read as before). Pure numpy/pandas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from activation_bench.analysis.loading import Loaded
from activation_bench.analysis.metrics import ACCURACY, LOG10, Metric, scale
from activation_bench.analysis.stats import filled, group_index
from activation_bench.runs.contents import TEST_WINDOWS

RESAMPLES = 2000
SEED = 0
BLOCK_KEYS = ("model.block_size", "data.block_size")  # a window's length, by model family
COLS = {LOG10: ["window_ratio_lo", "window_ratio_hi"], ACCURACY: ["window_diff_lo_pp", "window_diff_hi_pp"]}


def _file(source: Any, run: Any) -> Path | None:
    """A run's test_windows.csv: in its own directory, given as the input or inside the input sweep."""
    for path in (Path(str(source)) / str(run) / TEST_WINDOWS, Path(str(source)) / TEST_WINDOWS):
        if path.is_file():
            return path
    return None


def column(metric: Metric, loss: str) -> str | None:
    """test_windows.csv's column behind a metric of a column, or None where there is none."""
    if loss not in ("test_loss", "test_acc") or metric.kind not in ("final", "early_stop"):
        return None
    return f"{metric.kind}_{'acc' if loss == 'test_acc' else 'loss'}"


def read(loaded: Loaded, positions: list[int], col: str) -> dict[int, np.ndarray] | None:
    """Per run position, its per-window values of `col`; None unless every one of them has the file
    and all have the same number of windows."""
    out: dict[int, np.ndarray] = {}
    for pos in positions:
        path = _file(loaded.runs["source"].iat[pos], loaded.runs["run"].iat[pos])
        if path is None:
            return None
        out[pos] = pd.read_csv(path, usecols=[col])[col].to_numpy(np.float64)
    if len({len(v) for v in out.values()}) > 1:
        return None
    return out


def add_interval(comp: pd.DataFrame, loaded: Loaded, judged: list[int], pairs: dict[tuple, list[tuple[int, int]]],
                 group_cols: list[str], metric: Metric, loss: str) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """The comparisons `comp` (one row per compared group) with the window interval of each group's
    paired statistic, where every judged run (`judged`: positions in loaded.runs) has per-window values;
    `pairs`: group key (stats.group_index's) -> [(candidate position, baseline position)] of the pairs
    whose runs both count. Returns (comp, facts for the method note; None: no run has the file)."""
    col = column(metric, loss)
    how = scale(metric, loss)
    if col is None or how not in COLS or not judged:
        return comp, None
    per = read(loaded, sorted(set(judged)), col)
    if per is None:
        return comp, None
    positions = list(per)
    n_windows = len(per[positions[0]])
    facts = {"windows": n_windows, "block": block_size(loaded, positions), "resamples": RESAMPLES, "interval": False}
    if not pairs or comp is None or not len(comp):
        return comp, facts
    rng = np.random.default_rng(SEED)
    counts = rng.multinomial(n_windows, np.full(n_windows, 1.0 / n_windows), size=RESAMPLES).astype(np.float64)
    index = {p: i for i, p in enumerate(positions)}
    means = counts @ np.stack([per[p] for p in positions], axis=1) / n_windows  # [resamples, runs]
    bounds = []
    for key in (tuple(r) for r in filled(comp, group_cols).itertuples(index=False)) if group_cols else [()]:
        ps = [(a, b) for a, b in pairs.get(key, []) if a in index and b in index]
        if len(ps) < 2:
            bounds.append((np.nan, np.nan))
            continue
        c, b = means[:, [index[a] for a, _ in ps]], means[:, [index[b] for _, b in ps]]
        stat = (np.log10(c) - np.log10(b)).mean(axis=1) if how == LOG10 else 100 * (c - b).mean(axis=1)
        lo, hi = np.percentile(stat, [2.5, 97.5])
        bounds.append((10**lo, 10**hi) if how == LOG10 else (lo, hi))
    out = comp.copy()
    out[COLS[how][0]], out[COLS[how][1]] = [b[0] for b in bounds], [b[1] for b in bounds]
    facts["interval"] = True
    return out, facts


def block_size(loaded: Loaded, positions: list[int]) -> int | None:
    """The characters per window of these runs, where they share one: model.block_size
    (model=transformer) or data.block_size (model=module's text runs), whichever the runs set."""
    values = {int(float(v)) for key in BLOCK_KEYS if key in loaded.runs.columns
              for v in loaded.runs[key].iloc[positions].dropna()}
    return values.pop() if len(values) == 1 else None


def pair_positions(pairs: pd.DataFrame, group_cols: list[str]) -> dict[tuple, list[tuple[int, int]]]:
    """compare.pair_up's frame, made with each run's position as its `value`: group key -> the
    (candidate, baseline) positions of the pairs whose runs both count."""
    ok = ((pairs["status_c"] == "ok") & (pairs["status_b"] == "ok")).to_numpy()
    c, b = pairs["value_c"].to_numpy(), pairs["value_b"].to_numpy()
    return {key: [(int(c[i]), int(b[i])) for i in idx if ok[i]] for key, idx in group_index(pairs, group_cols)}


def method_note(facts: dict[str, Any], loss: str) -> str:
    """The footer line saying what the window interval is."""
    chars = f" of {facts['block']} characters ({facts['windows'] * facts['block']:,} scored)" if facts["block"] else ""
    unit = "ratio" if loss == "test_loss" else "difference in pp"
    line = (f"{loss}: each run's whole test split, every one of its {facts['windows']:,} non-overlapping windows"
            f"{chars} (test_windows.csv).")
    if not facts["interval"]:
        return line
    return (f"{line} 95% CI (windows): the paired {unit}'s percentile interval over {facts['resamples']:,} "
            "bootstrap resamples of those windows, the same resample for every run (paired across members and "
            "seeds), seeds held fixed: the evaluation's own uncertainty, beside the seed interval.")
