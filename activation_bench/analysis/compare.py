"""`actbench compare`: loss tables in, paired statistics out. Pure pandas/numpy/scipy (no torch, no rich).

Pipeline: `load(paths)` (loading.py) reads the inputs into one `Loaded`; `run_values` (metrics.py)
extracts one number per run for a `Metric`; `group_stats` (stats.py) summarises groups;
`comparisons` pairs every group with its baseline by seed and the other config values (pairs.py).
`compare(...)` does all of it and returns a `CompareResult`; its result type and prose are in notes.py,
rendering in render/tables.py. On an accuracy column (val_acc, test_acc) the paired differences are
in percentage points with their 95% interval, and higher is better (`compare_cols`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from activation_bench.analysis import windows
from activation_bench.analysis.budget import budget_check, validation_column
from activation_bench.analysis.configs import canon
from activation_bench.analysis.loading import Loaded, load, varying_columns
from activation_bench.analysis.metrics import (
    ACCURACY,
    FLOOR,
    LOG10,
    Metric,
    default_loss,
    parse_metric,
    run_values,
    scale,
)
from activation_bench.analysis.notes import CompareResult, tie_note
from activation_bench.analysis.pairs import group_differences, pair_up
from activation_bench.analysis.selection import Selection
from activation_bench.analysis.stats import (
    ALPHA,
    group_index,
    group_stats,
    holm,
    paired_test,
    stat_cols,
    t_interval,
)
from activation_bench.analysis.tasks import check_tasks
from activation_bench.analysis.tune import TuneSpec, parse_tune, tuned_values
from activation_bench.analysis.verdicts import Margin, add_verdicts, check_margin
from activation_bench.analysis.verdicts import columns as verdict_cols
from activation_bench.errors import UsageError


def resolve_groups(loaded: Loaded, by: Sequence[str] | None) -> list[str]:
    """--by columns (checked), else every varying config column except seed."""
    if by:
        cols = [c.strip() for item in by for c in str(item).split(",") if c.strip()]
        unknown = [c for c in cols if c not in loaded.config_cols]
        if unknown:
            have = ", ".join(loaded.config_cols) or "none"
            raise UsageError(f"--by {','.join(unknown)}: no such config column (columns: {have})")
        return list(dict.fromkeys(cols))
    return [c for c in varying_columns(loaded) if c != "seed"]



def parse_baseline(text: str | None, group_cols: Sequence[str], values: pd.DataFrame) -> tuple[str, str] | None:
    """KEY=VALUE, checked against the groups. Default: activation=relu where `activation` is a
    group column with relu among its values, else the first value of the first group column."""
    if not group_cols:
        if text:
            raise UsageError(f"--baseline {text}: nothing varies between the runs, so there are no groups")
        return None
    if not text:
        if "activation" in group_cols and (values["activation"] == "relu").any():
            return "activation", "relu"
        first = values[group_cols[0]].dropna()
        return (group_cols[0], str(first.iloc[0])) if len(first) else None
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"--baseline {text}: expected KEY=VALUE, e.g. activation=relu")
    if key not in group_cols:
        raise UsageError(f"--baseline {text}: '{key}' is not a group column (group columns: {', '.join(group_cols)})")
    want = canon(raw)
    present = [str(v) for v in values[key].dropna().unique()]
    if want not in present:
        raise UsageError(f"--baseline {text}: no runs with {key}={raw} (values: {', '.join(present)})")
    return key, str(want)



def compare_one(pairs: pd.DataFrame, metric: Metric, column: str = "train_loss") -> dict[str, Any]:
    """Paired statistics for one candidate group against its baseline.

    Loss metrics: differences of log10 loss, ratio = 10**mean_diff (geometric-mean ratio), its 95%
    interval ratio_lo..ratio_hi = 10**(the t interval of mean_diff).
    Accuracies: differences in percentage points (diff_pp, its 95% t interval diff_lo_pp..diff_hi_pp,
    sd_diff_pp); a win is a higher accuracy; d_z = diff_pp / sd_diff_pp (positive: candidate better).
    to=EPS: differences of epochs over pairs where both reached EPS, ratio = mean epochs ratio;
    the win rate counts a run that reached EPS against one that did not as a win."""
    sc, sb = pairs["status_c"].to_numpy(object), pairs["status_b"].to_numpy(object)
    both_ok = (sc == "ok") & (sb == "ok")
    how = scale(metric, column)
    if how == ACCURACY:
        return _compare_accuracy(pairs, both_ok)
    if how == LOG10:
        d = (pairs["log10_c"].to_numpy(float) - pairs["log10_b"].to_numpy(float))[both_ok]
        out = paired_test(d)
        out["ratio"] = 10 ** out["mean_diff"] if out["n_pairs"] else float("nan")
        lo, hi = t_interval(d)
        out["ratio_lo"], out["ratio_hi"] = 10**lo, 10**hi  # the 95% t interval of the mean log10 difference
        if out["n_pairs"] >= 2 and out["n_ties"] == out["n_pairs"]:
            vc, vb = pairs["value_c"].to_numpy(float), pairs["value_b"].to_numpy(float)
            out["note"] = tie_note(vc[both_ok], vb[both_ok])
        return out
    vc, vb = pairs["value_c"].to_numpy(float), pairs["value_b"].to_numpy(float)
    out = paired_test(vc[both_ok] - vb[both_ok])
    out["ratio"] = float(vc[both_ok].mean() / vb[both_ok].mean()) if both_ok.any() else float("nan")
    usable = np.isin(sc, ["ok", "not_reached"]) & np.isin(sb, ["ok", "not_reached"])
    ec, eb = np.where(sc == "ok", vc, np.inf)[usable], np.where(sb == "ok", vb, np.inf)[usable]
    out["win_rate"] = float(np.mean(ec < eb)) if len(ec) else float("nan")
    return out



def _compare_accuracy(pairs: pd.DataFrame, both_ok: np.ndarray) -> dict[str, Any]:
    """compare_one on accuracies: paired differences in percentage points, higher is better."""
    vc, vb = pairs["value_c"].to_numpy(float), pairs["value_b"].to_numpy(float)
    d = 100 * (vc[both_ok] - vb[both_ok])
    res = paired_test(d, higher_is_better=True)
    lo, hi = t_interval(d)
    if res["n_pairs"] >= 2 and res["n_ties"] == res["n_pairs"]:
        res["note"] = f"all {res['n_pairs']} pairs tie: identical accuracies in every pair"
    res["diff_pp"], res["sd_diff_pp"] = res.pop("mean_diff"), res.pop("sd_diff")
    res["diff_lo_pp"], res["diff_hi_pp"] = lo, hi
    return res


COMPARE_COLS = ["baseline", "n_pairs", "n_ties", "mean_diff", "sd_diff", "ratio", "ratio_lo", "ratio_hi", "win_rate",
                "p_t", "p_wilcoxon", "p_t_holm", "p_wilcoxon_holm", "d_z", "significant", "note"]
# on accuracies: differences in percentage points with their 95% interval, no ratio
ACCURACY_COMPARE_COLS = ["baseline", "n_pairs", "n_ties", "diff_pp", "diff_lo_pp", "diff_hi_pp", "sd_diff_pp",
                         "win_rate", "p_t", "p_wilcoxon", "p_t_holm", "p_wilcoxon_holm", "d_z", "significant", "note"]


def compare_cols(how: str) -> list[str]:
    """The comparison columns on a scale (metrics.scale)."""
    return list(ACCURACY_COMPARE_COLS if how == ACCURACY else COMPARE_COLS)


def comparisons(values: pd.DataFrame, group_cols: Sequence[str], baseline: tuple[str, str], metric: Metric,
                pair_cols: Sequence[str], notes: list[str], column: str = "train_loss") -> pd.DataFrame:
    """One row per non-baseline group: paired statistics against the baseline runs that share seed
    and the other config values (so the other group columns match too); Holm-corrected across rows."""
    key, base_value = baseline
    pairs = pair_up(values, group_cols, baseline, pair_cols, notes)
    by_group = {k: idx for k, idx in group_index(pairs, group_cols)}
    rows = []
    for gkey, _ in group_index(values, group_cols):
        labels = dict(zip(group_cols, gkey))
        if labels[key] == base_value:
            continue
        res = compare_one(pairs.iloc[by_group.get(gkey, np.zeros(0, np.int64))], metric, column)
        if res["n_pairs"] < 2:
            desc = ", ".join(f"{k}={v}" for k, v in labels.items())
            notes.append(f"{desc}: only {res['n_pairs']} pair(s) with the baseline {key}={base_value}; no test")
        rows.append({**labels, "baseline": f"{key}={base_value}", **res})
    out = pd.DataFrame(rows, columns=[*group_cols, *compare_cols(scale(metric, column))])
    if len(out):
        out["p_t_holm"] = holm(out["p_t"].to_numpy(float))
        out["p_wilcoxon_holm"] = holm(out["p_wilcoxon"].to_numpy(float))
        out["significant"] = (out["p_t_holm"] < ALPHA) & (out["p_wilcoxon_holm"] < ALPHA)
    return out


SEQ_COLS = ["seeds_used", "stopped", "decided_at", "p_anytime_holm"]  # with sequential verdicts (sequential.py)
EXTRA_COLS = ["seeds_needed", "min_detectable_ratio"]  # with --power (power.POWER_COLS)
TUNE_COLS = ["tune_n", "tune_score"]  # with --tune


def extra_cols(how: str) -> list[str]:
    """The --power columns on a scale: accuracies give the smallest detectable difference in pp."""
    return ["seeds_needed", "min_detectable_pp"] if how == ACCURACY else list(EXTRA_COLS)


def output_columns(res: CompareResult) -> list[str]:
    """A result's columns in output order: group columns, tuned keys, group statistics, then the
    tuning, comparison and --power columns it has."""
    how = res.scale
    extra = [*TUNE_COLS, *compare_cols(how), *windows.COLS.get(how, []), *verdict_cols(how), *SEQ_COLS,
             *extra_cols(how), "is_baseline"]
    params = ["params"] if "params" in res.table.columns else []
    return [*res.group_cols, *params, *res.tuned_keys, *stat_cols(how)] + [c for c in extra if c in res.table.columns]


def _with_params(table: pd.DataFrame, loaded: Loaded, group_cols: list[str]) -> pd.DataFrame:
    """Each group's parameter count per member (`params`; "min-max" where its runs differ), where the
    groups' counts differ (gated units, widths, depths): a reader sees whether the compared models
    match. Left out where every run has the same count, so such tables read as before."""
    runs = loaded.runs
    if "n_params" not in runs.columns or runs["n_params"].nunique(dropna=True) <= 1 or not group_cols:
        return table
    spans = runs.groupby(group_cols, dropna=False)["n_params"].agg(["min", "max"]).reset_index()
    spans["params"] = [int(lo) if lo == hi else f"{int(lo)}-{int(hi)}" for lo, hi in zip(spans["min"], spans["max"])]
    return table.merge(spans[[*group_cols, "params"]], on=group_cols, how="left")


def compare(loaded: Loaded, metric: Metric | str = "final", by: Sequence[str] | None = None,
            baseline: str | None = None, loss: str = "train_loss", floor: float = FLOOR,
            power: Any = None, tune: TuneSpec | None = None, pair_by: Sequence[str] | None = None,
            margin: Margin | None = None, sequential: Any = None, alpha: float = ALPHA) -> CompareResult:
    """Group, summarise and pair-compare the loaded runs. Rows come best first within each
    combination of the group columns other than the baseline key. `power` (a power.PowerSpec)
    adds the columns seeds_needed and min_detectable_ratio to the comparisons. `tune` (a
    tune.TuneSpec): each group at its tuned values, statistics on the evaluation seeds only.
    `loss` is the compared column, a loss or an accuracy (see the module docstring). `pair_by`: the
    columns a pair shares (default: seed and every other varying column but the baseline key and the
    tuned keys); e.g. seed alone where each group trains at its own recipe (lr, warmup) chosen elsewhere.
    `margin` (verdicts.Margin): each comparison's verdict (better, worse, equivalent, undecided) at level
    `alpha` for all comparisons together; with `sequential` (sequential.SequentialSpec) from the
    anytime-valid confidence sequence over the seeds in order, with seeds_used and stopped."""
    metric = parse_metric(metric) if isinstance(metric, str) else metric
    how = scale(metric, loss)
    _check_power(power, metric, how)
    check_margin(margin, how, metric.label)
    if sequential is not None and margin is None:
        raise UsageError("sequential verdicts need a margin: give --margin too, e.g. --margin 1.05")
    notes = list(loaded.warnings)
    if tune is not None:
        parse_tune(tune.keys, tune.tune_seeds, by)
    values = run_values(loaded, metric, loss, floor)
    group_cols = [c for c in resolve_groups(loaded, by) if tune is None or c not in tune.keys]
    check_tasks(loaded, loss, group_cols)
    if metric.kind == "epoch" and not (values["status"] != "missing").any():
        raise UsageError(f"--metric {metric.label}: no run has epoch {int(metric.param or 0)}")
    selection = None
    if tune is not None:
        values, selection = tuned_values(loaded, values, metric, group_cols, tune, floor, notes)
    judged = loaded.runs.index.get_indexer(values.index)  # the runs the statistics use (positions)
    _note_missing(values, metric, notes)
    table = group_stats(values, group_cols, metric, loss)
    if selection is not None:
        table = _with_choice(table, selection)
        _check_kept(selection, baseline, values)
    base = parse_baseline(baseline, group_cols, values)
    pair_cols: list[str] = []
    window_facts = None
    if base is not None:
        skip = {base[0], *(tune.keys if tune is not None else ())}
        pair_cols = _pair_cols(loaded, pair_by) if pair_by else [c for c in varying_columns(loaded) if c not in skip]
        comp = comparisons(values, group_cols, base, metric, pair_cols, notes, loss)
        comp, window_facts = _window_interval(comp, loaded, values, judged, group_cols, base, pair_cols, metric, loss)
        if margin is not None:
            comp = _verdicts(comp, values, group_cols, base, pair_cols, how, margin, sequential, alpha)
        if power is not None:
            from activation_bench.analysis.power import add_power

            comp = add_power(comp, power)
        table = table.merge(comp, on=list(group_cols), how="left") if group_cols else table
        table["is_baseline"] = table[base[0]] == base[1]
    table = _order(_tidy(_with_params(table, loaded, group_cols)), group_cols, base, how)
    if base is None:  # no pairs: the note on a whole test split's windows still applies
        window_facts = windows.add_interval(pd.DataFrame(), loaded, list(judged), {}, group_cols, metric, loss)[1]
    res = CompareResult(table, list(group_cols), metric, loss, base, pair_cols, notes, floor, power, selection,
                        windows=window_facts, margin=margin, sequential=sequential, alpha=alpha)
    res.table = table[output_columns(res)].reset_index(drop=True)
    res.budget = budget_check(loaded, group_cols, judged if selection is not None else None, selection,
                              validation_column(tune), loss, order=res.table)
    if metric.kind in ("epoch", "to") and res.budget.warning:  # read at a fixed epoch or loss, not the end
        res.budget.warning = None
        res.budget.notes.append(f"no warning for --metric {metric.label}: the verdict is read at a fixed epoch "
                                "or loss, not at the end of the budget")
    return res


def _verdicts(comp: pd.DataFrame, values: pd.DataFrame, group_cols: list[str], base: tuple[str, str],
              pair_cols: list[str], how: str, margin: Margin, sequential: Any, alpha: float) -> pd.DataFrame:
    """comp with each comparison's verdict against the margin (verdicts.py); sequential: from the
    confidence sequence of its differences in seed order (sequential.py)."""
    if sequential is None:
        return add_verdicts(comp, how, margin, alpha)
    from activation_bench.analysis.sequential import add_sequential

    diffs = group_differences(values, group_cols, base, pair_cols, how, comp)
    return add_sequential(comp, diffs, how, margin, sequential, alpha)


def _pair_cols(loaded: Loaded, pair_by: Sequence[str]) -> list[str]:
    """--pair-by's columns (repeat or comma list), checked against the config columns."""
    cols = list(dict.fromkeys(c.strip() for item in pair_by for c in str(item).split(",") if c.strip()))
    unknown = [c for c in cols if c not in loaded.config_cols]
    if unknown:
        raise UsageError(f"--pair-by {','.join(unknown)}: no such config column (columns: "
                         f"{', '.join(loaded.config_cols) or 'none'})")
    return cols


def _window_interval(comp: pd.DataFrame, loaded: Loaded, values: pd.DataFrame, judged: np.ndarray,
                     group_cols: list[str], base: tuple[str, str], pair_cols: list[str], metric: Metric,
                     loss: str) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """comp with the bootstrap interval over a whole test split's windows (analysis/windows.py) where the
    judged runs have per-window values; the pairs are pair_up's, made with run positions as values."""
    if windows.column(metric, loss) is None:
        return comp, None
    pairs = pair_up(values.assign(value=judged.astype(float)), group_cols, base, pair_cols, [])
    return windows.add_interval(comp, loaded, list(judged), windows.pair_positions(pairs, group_cols), group_cols,
                                metric, loss)


def _check_kept(sel: Selection, baseline: str | None, values: pd.DataFrame) -> None:
    """UsageError where the tuning left out every group, or the baseline's group, saying why (its note)."""
    why = {label: next((n for n in sel.notes if n.startswith(f"{label}: ")), label) for label in sel.dropped}
    hint = "" if sel.own_grid else "; --tune-grid own tunes each group over the values its own runs have"
    if sel.chosen.empty:
        more = f" (and {len(why) - 1} more groups)" if len(why) > 1 else ""
        raise UsageError(f"--tune: every group was left out: {next(iter(why.values()), 'no tuning runs')}{more}{hint}")
    key, _, raw = (baseline or "").partition("=")
    key, want = key.strip(), canon(raw)
    left = [reason for label, reason in why.items() if f"{key}={want}" in label.split(", ")]
    if left and key in values.columns and not (values[key].astype(str) == want).any():
        raise UsageError(f"--baseline {baseline}: left out by the tuning: {left[0]}{hint}")


def _check_power(power: Any, metric: Metric, how: str) -> None:
    """--power needs values (not epoch counts) and a spec in the column's units."""
    if power is None:
        return
    if not metric.is_loss:
        raise UsageError(f"--power works on loss metrics (log10 ratios) and accuracies (percentage points), "
                         f"not --metric {metric.label}")
    if (power.unit == "pp") != (how == ACCURACY):
        want = "a difference in percentage points" if how == ACCURACY else "a geometric-mean ratio"
        raise UsageError(f"--power {power.ratio:g}: this column needs {want} (parse_power(..., accuracy=...))")


def _with_choice(table: pd.DataFrame, sel: Selection) -> pd.DataFrame:
    """The group statistics of the kept groups with their chosen values, tune_n and tune_score."""
    if not sel.group_cols:
        chosen = sel.chosen
        return table.assign(**{c: chosen[c].iloc[0] for c in chosen.columns}) if len(chosen) else table.iloc[:0]
    return table.merge(sel.chosen, on=sel.group_cols, how="inner")  # both spell missing values '(none)'


def _tidy(table: pd.DataFrame) -> pd.DataFrame:
    """Counts as (nullable) integers, flags as (nullable) booleans, empty notes as ''."""
    for c in ("n", "n_diverged", "n_not_reached", "n_missing", "n_pairs", "n_ties", "seeds_needed", "seeds_used",
              "decided_at"):
        if c in table.columns:
            table[c] = table[c].astype("Int64")
    for c in ("significant", "is_baseline"):
        if c in table.columns:
            table[c] = table[c].astype("boolean")
    if "note" in table.columns:
        table["note"] = table["note"].fillna("").astype(object)
    for c in ("baseline", "verdict", "stopped"):
        if c in table.columns:
            table[c] = table[c].fillna("").astype(object)
    return table


def _note_missing(values: pd.DataFrame, metric: Metric, notes: list[str]) -> None:
    n_missing = int((values["status"] == "missing").sum())
    if n_missing:
        why = f"have no epoch {int(metric.param or 0)}" if metric.kind == "epoch" else "have no loss values"
        notes.append(f"{n_missing} runs {why}: left out")


def _order(table: pd.DataFrame, group_cols: Sequence[str], base: tuple[str, str] | None,
           how: str) -> pd.DataFrame:
    """Best first (lowest geo_mean, highest mean accuracy, or most reached then fewest epochs),
    within blocks of the group columns other than the baseline key (e.g. per data distribution)."""
    if not len(table):
        return table
    blocks = [c for c in group_cols if base is None or c != base[0]][: max(len(group_cols) - 1, 0)]
    t = table.copy()
    t["_block"] = t.groupby(blocks, sort=False, dropna=False).ngroup() if blocks else 0
    if how == LOG10:
        t["_k1"], t["_k2"] = 0.0, t["geo_mean"].fillna(np.inf)
    elif how == ACCURACY:
        t["_k1"], t["_k2"] = 0.0, (-t["mean"]).fillna(np.inf)
    else:
        t["_k1"] = t["n_not_reached"] / (t["n"] + t["n_not_reached"]).clip(lower=1)
        t["_k2"] = t["mean"].fillna(np.inf)
    t = t.sort_values(["_block", "_k1", "_k2"], kind="stable")
    return t.drop(columns=["_block", "_k1", "_k2"])


def run_compare(paths: Sequence[str | Path], metric: str = "final", by: Sequence[str] | None = None,
                baseline: str | None = None, loss: str | None = None, floor: float = FLOOR,
                tune: TuneSpec | None = None) -> CompareResult:
    """load + compare, with the metric checked before any file is read. loss None: train_loss, or
    test_loss for early_stop where the inputs have it (`default_loss`)."""
    m = parse_metric(metric)
    loaded = load(paths, loss or "train_loss")
    return compare(loaded, m, by, baseline, default_loss(loaded, m, loss), floor, tune=tune)

