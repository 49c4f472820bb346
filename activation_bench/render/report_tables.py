"""The report's compare tables as HTML cells: one row of `tables.to_json`'s rows at a time, each
cell with its text and the raw numbers behind it (data-* attributes). Used by `actbench report` and
by the study page."""

from __future__ import annotations

import json
from typing import Any

from activation_bench.analysis import compare as cmp
from activation_bench.analysis.metrics import ACCURACY
from activation_bench.render import tables


def _cell(text: str, *values: tuple[str, Any], num: bool = True) -> dict[str, Any]:
    """A table cell: the formatted text, and the raw numbers it shows (as data-key/data-value)."""
    return {"text": text, "values": [(k, "" if v is None else repr(v)) for k, v in values], "num": num}


def _row_cells(row: dict[str, Any], res: cmp.CompareResult) -> list[dict[str, Any]]:
    """Cells of one row of `tables.to_json`'s rows (raw numbers, None where undefined)."""
    if res.scale == ACCURACY:
        return _accuracy_cells(row, res)
    f, is_loss = tables.fmt_num, res.metric.is_loss
    cells = _first_cells(row, res)
    if not is_loss:
        cells.append(_cell(tables.fmt_int(row["n_not_reached"]), ("n_not_reached", row["n_not_reached"])))
    center = "geo_mean" if is_loss else "mean"
    cells.append(_cell(f(row[center], 4), (center, row[center])))
    ci = "-" if row["ci_low"] is None else f"{f(row['ci_low'])}–{f(row['ci_high'])}"
    cells.append(_cell(ci, ("ci_low", row["ci_low"]), ("ci_high", row["ci_high"])))
    cells.append(_cell(f(row["median"], 4), ("median", row["median"])))
    if res.baseline is None:
        return cells
    if row.get("is_baseline"):
        return [*cells, _cell("baseline", num=False), *[_cell("") for _ in range(5)], _cell("", num=False),
                *_verdict_cells(row, res)]
    cells += [
        _cell(tables.fmt_int(row["n_pairs"]), ("n_pairs", row["n_pairs"])),
        _cell(f(row["mean_diff"]), ("mean_diff", row["mean_diff"])),
        _cell(f(row["ratio"]), ("ratio", row["ratio"])),
        *_test_cells(row),
        *_verdict_cells(row, res),
    ]
    return cells


def _verdict_cells(row: dict[str, Any], res: cmp.CompareResult) -> list[dict[str, Any]]:
    """With a margin: the verdict and its interval; sequential: seeds used and why it stopped
    (empty cells on the baseline's row)."""
    if res.margin is None:
        return []
    seq = res.sequential is not None
    if row.get("is_baseline"):
        return [_cell("", num=False), _cell("")] + ([_cell(""), _cell("", num=False)] if seq else [])
    lo, hi = ("verdict_lo_pp", "verdict_hi_pp") if res.scale == ACCURACY else ("verdict_ratio_lo", "verdict_ratio_hi")
    if row[lo] is None:
        text = "-"
    elif res.scale == ACCURACY:
        text = f"{tables.fmt_pp(row[lo])} to {tables.fmt_pp(row[hi])}"
    else:
        text = f"{tables.fmt_num(row[lo])}–{tables.fmt_num(row[hi])}"
    cells = [_cell(str(row["verdict"]), ("verdict", row["verdict"]), num=False),
             _cell(text, (lo, row[lo]), (hi, row[hi]))]
    if seq:
        cells += [_cell(tables.fmt_int(row["seeds_used"]), ("seeds_used", row["seeds_used"])),
                  _cell(str(row["stopped"]), ("stopped", row["stopped"]), num=False)]
    return cells


def _verdict_heads(res: cmp.CompareResult) -> list[str]:
    if res.margin is None or res.baseline is None:
        return []
    level = f"{100 * (1 - res.alpha):g}%"
    if res.sequential is None:
        return [f"verdict ({res.margin.label})", f"{level} CI (all)"]
    return [f"verdict ({res.margin.label})", f"anytime {level} CI", "seeds", "stopped"]


def _first_cells(row: dict[str, Any], res: cmp.CompareResult) -> list[dict[str, Any]]:
    """The group's labels, tuned values, n and diverged runs."""
    cells = [_cell(str(row[c]), num=False) for c in res.group_cols]
    if "params" in res.table.columns:  # where the groups' parameter counts differ (analysis/compare.py)
        cells.append(_cell(f"{row['params']:,}" if isinstance(row["params"], int) else str(row["params"])))
    cells += [_cell(str(row[k]), (k, row[k])) for k in res.tuned_keys]
    cells.append(_cell(tables.fmt_int(row["n"]), ("n", row["n"])))
    cells.append(_cell(tables.fmt_int(row["n_diverged"]), ("n_diverged", row["n_diverged"])))
    return cells


def _test_cells(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Win rate, Holm-corrected p-values, d_z and the significance mark."""
    return [
        _cell(tables.fmt_pct(row["win_rate"]), ("win_rate", row["win_rate"])),
        _cell(f"{tables.fmt_p(row['p_t_holm'])} / {tables.fmt_p(row['p_wilcoxon_holm'])}",
              ("p_t_holm", row["p_t_holm"]), ("p_wilcoxon_holm", row["p_wilcoxon_holm"])),
        _cell(tables.fmt_num(row["d_z"], 2), ("d_z", row["d_z"])),
        _cell("*" if row.get("significant") else "", num=False),
    ]


def _pct(x: Any) -> str:
    """An accuracy (a fraction) in percent, two decimals."""
    return "-" if x is None else f"{100 * x:.2f}"


def _accuracy_cells(row: dict[str, Any], res: cmp.CompareResult) -> list[dict[str, Any]]:
    """An accuracy row: mean, CI and median in % (data-* keep compare's fractions); against the
    baseline the mean paired difference in percentage points and its 95% interval."""
    cells = _first_cells(row, res)
    cells.append(_cell(_pct(row["mean"]), ("mean", row["mean"])))
    ci = "-" if row["ci_low"] is None else f"{_pct(row['ci_low'])}–{_pct(row['ci_high'])}"
    cells.append(_cell(ci, ("ci_low", row["ci_low"]), ("ci_high", row["ci_high"])))
    cells.append(_cell(_pct(row["median"]), ("median", row["median"])))
    if res.baseline is None:
        return cells
    if row.get("is_baseline"):
        return [*cells, _cell("baseline", num=False), *[_cell("") for _ in range(5)], _cell("", num=False),
                *_verdict_cells(row, res)]
    pp = tables.fmt_pp
    ci = "-" if row["diff_lo_pp"] is None else f"{pp(row['diff_lo_pp'])} to {pp(row['diff_hi_pp'])}"
    return [*cells, _cell(tables.fmt_int(row["n_pairs"]), ("n_pairs", row["n_pairs"])),
            _cell(tables.fmt_pp(row["diff_pp"]), ("diff_pp", row["diff_pp"])),
            _cell(ci, ("diff_lo_pp", row["diff_lo_pp"]), ("diff_hi_pp", row["diff_hi_pp"])), *_test_cells(row),
            *_verdict_cells(row, res)]


def _headers(res: cmp.CompareResult) -> list[str]:
    params = ["params"] if "params" in res.table.columns else []
    heads = [*res.group_cols, *params, *[f"{k} (tuned)" for k in res.tuned_keys], "n", "diverged"]
    if res.scale == ACCURACY:
        heads += [f"mean {res.loss} %", "95% CI", "median %"]
        return heads + (["pairs", "Δpp", "95% CI of Δpp", "win", "p Holm t / W", "d_z", "sig"]
                        if res.baseline is not None else []) + _verdict_heads(res)
    is_loss = res.metric.is_loss
    heads += [] if is_loss else ["not reached"]
    heads += ["geo mean" if is_loss else "mean epochs", "95% CI", "median"]
    if res.baseline is not None:
        heads += ["pairs", "Δlog10" if is_loss else "Δepochs", "ratio", "win", "p Holm t / W", "d_z", "sig"]
    return heads + _verdict_heads(res)


def compare_table(res: cmp.CompareResult) -> dict[str, Any]:
    """One compare table for the template, built from `tables.to_json(res)` (compare's JSON)."""
    doc = json.loads(tables.to_json(res))
    rows = [{"cells": _row_cells(r, res), "baseline": bool(r.get("is_baseline")), "sig": bool(r.get("significant"))}
            for r in doc["rows"]]
    return {"metric": doc["metric"], "loss": doc["loss"], "headers": _headers(res), "rows": rows,
            "notes": tables.row_notes(res), "methods": doc["methods"], "warnings": doc["warnings"], "json": doc,
            "budget": tables.budget_lines(res)}
