"""Rendering a `CompareResult`: a rich table (numbers formatted) or csv | markdown | json (raw numbers).

On an accuracy column the table shows accuracies in % and paired differences in percentage points
with their 95% interval; csv and json keep the raw numbers (accuracies as fractions, differences in
the `*_pp` columns). rich is imported only inside `rich_table`, so `import activation_bench.render`
stays light.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from activation_bench import terminal
from activation_bench.analysis.compare import output_columns
from activation_bench.analysis.metrics import ACCURACY
from activation_bench.analysis.notes import CompareResult

FORMATS = ("table", "csv", "markdown", "json")


# ---------------------------------------------------------------------------------------------
# number formatting (table and markdown only)


def _missing(x: Any) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def fmt_num(x: Any, digits: int = 3) -> str:
    if _missing(x):
        return "-"
    x = float(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def fmt_p(x: Any) -> str:
    if _missing(x):
        return "-"
    x = float(x)
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def fmt_pct(x: Any) -> str:
    return "-" if _missing(x) else f"{100 * float(x):.0f}%"


def fmt_int(x: Any) -> str:
    return "-" if _missing(x) else str(int(x))


def fmt_acc(x: Any) -> str:
    """An accuracy (a fraction) in percent, two decimals: 0.93056 -> '93.06%'."""
    return "-" if _missing(x) else f"{100 * float(x):.2f}%"


def fmt_pp(x: Any) -> str:
    """A difference in percentage points, signed, two decimals: '+1.25'."""
    return "-" if _missing(x) else f"{float(x):+.2f}"


# ---------------------------------------------------------------------------------------------
# the human table (shared by rich and markdown)


def _columns(res: CompareResult, compact: bool) -> list[tuple[str, Any, bool]]:
    """(header, cell function of a row, right-aligned). compact: the terminal table (notes go below)."""
    if res.scale == ACCURACY:
        return _accuracy_columns(res, compact)
    is_loss = res.metric.is_loss
    cols = _head_columns(res, compact)
    if not is_loss:
        cols.append(("not reached", lambda r: fmt_int(r["n_not_reached"]), True))
    center = "geo_mean" if is_loss else "mean"
    cols.append(("geo mean" if is_loss else "mean epochs", lambda r: fmt_num(r[center], 4), True))
    cols.append(("95% CI", _ci_cell, True))
    if not compact:
        cols.append(("median", lambda r: fmt_num(r["median"], 4), True))
    if res.baseline is None:
        return cols
    if not compact:
        cols.append(("pairs", lambda r: "baseline" if _is_base(r) else fmt_int(r["n_pairs"]), True))
        cols.append(("Δlog10" if is_loss else "Δepochs", lambda r: _cmp(r, fmt_num(r["mean_diff"])), True))
        cols.append(("ratio", lambda r: _cmp(r, fmt_num(r["ratio"])), True))
    else:
        cols.append(("ratio", lambda r: "baseline" if _is_base(r) else fmt_num(r["ratio"]), True))
    if is_loss:
        cols.append(("ratio 95% CI", lambda r: _cmp(r, _ratio_ci(r)), True))
    if "window_ratio_lo" in res.table.columns:  # a whole test split's windows resampled (analysis/windows.py)
        cols.append(("95% CI (windows)", lambda r: _cmp(r, _ratio_ci(r, "window_")), True))
    power = [(f"seeds for {res.power.ratio:g}x", lambda r: _cmp(r, fmt_int(r["seeds_needed"])), True),
             ("min ratio", lambda r: _cmp(r, fmt_num(r["min_detectable_ratio"])), True)] if res.power else []
    return cols + _paired_tail(res, compact, power)


def _paired_tail(res: CompareResult, compact: bool, power: list[tuple[str, Any, bool]]) -> list[tuple[str, Any, bool]]:
    """The columns every paired table ends with: win rate, p-values, d_z, significance, the power
    columns (where --power ran) and the note."""
    cols: list[tuple[str, Any, bool]] = [
        ("win", lambda r: _cmp(r, fmt_pct(r["win_rate"])), True),
        ("p Holm t/W", lambda r: _cmp(r, f"{fmt_p(r['p_t_holm'])}/{fmt_p(r['p_wilcoxon_holm'])}"), True),
        ("d_z", lambda r: _cmp(r, fmt_num(r["d_z"], 2)), True),
        ("sig", lambda r: "*" if _significant(r) else "", False),
    ]
    if res.power is not None and "seeds_needed" in res.table.columns:
        cols += power
    if res.margin is not None and "verdict" in res.table.columns:
        cols += _verdict_columns(res, compact)
    if not compact:
        cols.append(("note", lambda r: str(r.get("note") or ""), False))
    return cols


def _verdict_columns(res: CompareResult, compact: bool) -> list[tuple[str, Any, bool]]:
    """With --margin: the verdict and the interval it was read from; sequential: seeds used and why
    it stopped (and, in the long table, the seeds at which it was first decided)."""
    acc, seq, level = res.scale == ACCURACY, res.sequential is not None, f"{100 * (1 - res.alpha):g}%"

    def interval(r: pd.Series) -> str:
        if acc:
            lo, hi = r["verdict_lo_pp"], r["verdict_hi_pp"]
            return "-" if _missing(lo) else f"[{fmt_pp(lo)}, {fmt_pp(hi)}]"
        lo, hi = r["verdict_ratio_lo"], r["verdict_ratio_hi"]
        return "-" if _missing(lo) else f"[{fmt_num(lo)}, {fmt_num(hi)}]"

    cols: list[tuple[str, Any, bool]] = [
        (f"verdict ({res.margin.label})", lambda r: _cmp(r, str(r["verdict"])), False),
        (f"anytime {level} CI" if seq else f"{level} CI (all)", lambda r: _cmp(r, interval(r)), True),
    ]
    if seq:
        cols.append(("seeds", lambda r: _cmp(r, fmt_int(r["seeds_used"])), True))
        cols.append(("stopped", lambda r: _cmp(r, str(r["stopped"])), False))
        if not compact:
            cols.append(("decided at", lambda r: _cmp(r, fmt_int(r["decided_at"])), True))
            cols.append(("p anytime", lambda r: _cmp(r, fmt_p(r["p_anytime_holm"])), True))
    return cols


def _head_columns(res: CompareResult, compact: bool) -> list[tuple[str, Any, bool]]:
    """The group, tuned-key and count columns every table starts with."""
    cols: list[tuple[str, Any, bool]] = [(c, (lambda r, c=c: str(r[c])), False) for c in res.group_cols]
    if "params" in res.table.columns:  # where the groups' parameter counts differ (analysis/compare.py)
        cols.append(("params", lambda r: f"{r['params']:,}" if isinstance(r["params"], int) else str(r["params"]),
                     True))
    cols += [(f"{k} (tuned)", (lambda r, k=k: _tuned_cell(res, r, k)), True) for k in res.tuned_keys]
    cols.append(("n", lambda r: fmt_int(r["n"]), True))
    if res.tuning is not None and not compact:
        cols.append(("tune n", lambda r: fmt_int(r["tune_n"]), True))
    if not compact or int(res.table["n_diverged"].fillna(0).sum()):
        cols.append(("diverged", lambda r: fmt_int(r["n_diverged"]), True))
    return cols


def _accuracy_columns(res: CompareResult, compact: bool) -> list[tuple[str, Any, bool]]:
    """_columns on an accuracy column: mean accuracy in %, differences in percentage points."""
    cols = _head_columns(res, compact)
    cols.append((f"mean {res.loss}", lambda r: fmt_acc(r["mean"]), True))
    cols.append(("95% CI", lambda r: "-" if _missing(r["ci_low"]) else
                 f"{100 * r['ci_low']:.2f}–{100 * r['ci_high']:.2f}%", True))
    if not compact:
        cols.append(("median", lambda r: fmt_acc(r["median"]), True))
    if res.baseline is None:
        return cols
    if not compact:
        cols.append(("pairs", lambda r: "baseline" if _is_base(r) else fmt_int(r["n_pairs"]), True))
    cols += [
        ("Δ pp", lambda r: ("baseline" if compact else "") if _is_base(r) else fmt_pp(r["diff_pp"]), True),
        ("Δ 95% CI", lambda r: _cmp(r, "-" if _missing(r["diff_lo_pp"]) else
                                    f"[{fmt_pp(r['diff_lo_pp'])}, {fmt_pp(r['diff_hi_pp'])}]"), True),
    ]
    if "window_diff_lo_pp" in res.table.columns:  # a whole test split's windows resampled (analysis/windows.py)
        cols.append(("Δ 95% CI (windows)", lambda r: _cmp(r, "-" if _missing(r["window_diff_lo_pp"]) else
                     f"[{fmt_pp(r['window_diff_lo_pp'])}, {fmt_pp(r['window_diff_hi_pp'])}]"), True))
    power = [(f"seeds for {res.power.label}", lambda r: _cmp(r, fmt_int(r["seeds_needed"])), True),
             ("min Δ pp", lambda r: _cmp(r, fmt_num(r["min_detectable_pp"])), True)] if res.power else []
    return cols + _paired_tail(res, compact, power)


def _ci_cell(row: pd.Series) -> str:
    return "-" if _missing(row["ci_low"]) else f"{fmt_num(row['ci_low'])}–{fmt_num(row['ci_high'])}"


def _ratio_ci(row: pd.Series, prefix: str = "") -> str:
    lo, hi = row.get(f"{prefix}ratio_lo"), row.get(f"{prefix}ratio_hi")
    return "" if _missing(lo) or _missing(hi) else f"[{fmt_num(lo)}, {fmt_num(hi)}]"


def _tuned_cell(res: CompareResult, row: pd.Series, key: str) -> str:
    """A tuned value, marked where it is the grid's smallest or largest (a note says: widen the grid)."""
    value = str(row[key])
    grid = res.tuning.grid_of(row).get(key, []) if res.tuning is not None else []
    if len(grid) > 1 and value in (grid[0], grid[-1]):
        return f"{value} (grid {'min' if value == grid[0] else 'max'})"
    return value


def _is_base(row: pd.Series) -> bool:
    v = row.get("is_baseline")
    return not _missing(v) and bool(v)


def _significant(row: pd.Series) -> bool:
    v = row.get("significant")
    return v is not None and not _missing(v) and bool(v)


def _cmp(row: pd.Series, text: str) -> str:
    return "" if _is_base(row) else text


def _title(res: CompareResult) -> str:
    return f"{res.metric.label} of {res.loss}, {len(res.table)} groups"


def _group_name(res: CompareResult, row: pd.Series) -> str:
    return ", ".join(f"{c}={row[c]}" for c in res.group_cols) or "all runs"


def row_notes(res: CompareResult) -> list[str]:
    """Per-row notes of the comparison (ties, too few pairs), for below the terminal table."""
    if "note" not in res.table.columns:
        return []
    return [f"{_group_name(res, r)}: {r['note']}" for _, r in res.table.iterrows() if r.get("note")]


def rich_table(res: CompareResult) -> Any:
    """A rich.table.Table, best first; significant rows in bold with a '*', the baseline dimmed;
    the method notes as its caption."""
    from rich import box
    from rich.table import Table

    caption = [*res.methods, *([res.budget.short()] if res.budget is not None else []), *row_notes(res)]
    table = Table(title=_title(res), caption="\n".join(caption), caption_justify="left", box=box.SIMPLE_HEAD)
    cols = _columns(res, compact=True)
    for i, (header, _, right) in enumerate(cols):
        # group values are identifiers: never wrapped; numbers fold only in a terminal too narrow for them
        ident = i < len(res.group_cols)
        table.add_column(header, justify="right" if right else "left", no_wrap=ident,
                         overflow="ellipsis" if ident else "fold")
    for _, row in res.table.iterrows():
        style = "dim" if _is_base(row) else ("bold" if _significant(row) else None)
        table.add_row(*[fn(row) for _, fn, _ in cols], style=style)
    return table


def print_table(res: CompareResult) -> None:
    """The rich table on stdout (at its natural width when stdout is not a terminal)."""
    terminal.print_table(rich_table(res))


def table_text(res: CompareResult) -> str:
    """The rich table as plain text (for --output with --format table)."""
    return terminal.table_text(rich_table(res))


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(res: CompareResult) -> str:
    """GitHub markdown table (numbers formatted) and the method notes below it."""
    cols = _columns(res, compact=False)
    lines = [f"**{_title(res)}**", "", "| " + " | ".join(_md_escape(h) for h, _, _ in cols) + " |",
             "|" + "|".join("---:" if right else ":---" for _, _, right in cols) + "|"]
    for _, row in res.table.iterrows():
        lines.append("| " + " | ".join(_md_escape(fn(row)) for _, fn, _ in cols) + " |")
    lines.append("")
    lines += [f"- {_md_escape(m)}" for m in [*res.methods, *budget_lines(res)]]
    lines += [f"- warning: {_md_escape(w)}" for w in res.all_warnings]
    return "\n".join(lines) + "\n"


def budget_lines(res: CompareResult) -> list[str]:
    """The budget check's line (analysis/budget.py) for under a table; none without one."""
    return [res.budget.line()] if res.budget is not None else []


# ---------------------------------------------------------------------------------------------
# raw formats


def _csv_columns(res: CompareResult) -> list[str]:
    return output_columns(res)


def to_csv(res: CompareResult) -> str:
    """One row per group: group columns, metric,n,mean,std,median,geo_mean,ci_low,ci_high, counts,
    then the comparison statistics (on accuracies no geo_mean, and diff_pp, diff_lo_pp, diff_hi_pp,
    sd_diff_pp instead of mean_diff, sd_diff, ratio), then the budget check's shares
    still_improving_late and still_improving_last. Raw numbers (full precision); empty cells
    where undefined."""
    out = res.table[_csv_columns(res)]
    if res.budget is not None:
        shares = res.budget.per_group(res.table)
        out = out.assign(still_improving_late=shares["late"].to_numpy(float),
                         still_improving_last=shares["last"].to_numpy(float))
    return out.to_csv(index=False, lineterminator="\n")


def _plain(x: Any) -> Any:
    if _missing(x):
        return None
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and math.isinf(x):
        return None
    return x


def to_json(res: CompareResult) -> str:
    """{metric, loss, scale, higher_is_better, group_columns, baseline, pair_columns, floor, methods,
    warnings, rows: [...], budget_check: {...} (budget.BudgetCheck.to_dict)}. Raw numbers; NaN/inf
    as null; floor is null on accuracies (no floor); `warnings` includes the budget check's."""
    rows = [{c: _plain(v) for c, v in row.items()} for row in res.table[_csv_columns(res)].to_dict("records")]
    doc = {
        "metric": res.metric.label,
        "loss": res.loss,
        "scale": res.scale,
        "higher_is_better": res.higher_is_better,
        "group_columns": res.group_cols,
        "baseline": None if res.baseline is None else {"key": res.baseline[0], "value": res.baseline[1]},
        "pair_columns": res.pair_cols,
        "floor": None if res.scale == ACCURACY else res.floor,
        "methods": res.methods,
        "warnings": res.all_warnings,
        "rows": rows,
    }
    if res.budget is not None:
        doc["budget_check"] = res.budget.to_dict()
    if res.tuning is not None:
        doc["tuning"] = tuning_json(res.tuning)
    if res.margin is not None:
        doc["margin"] = margin_json(res)
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def margin_json(res: CompareResult) -> dict[str, Any] | None:
    """The margin the verdicts were read against, as the JSON gives it; None without one."""
    if res.margin is None:
        return None
    interval = "confidence sequence" if res.sequential is not None else "t, Bonferroni"
    out: dict[str, Any] = {**res.margin.to_dict(), "alpha": res.alpha, "interval": interval}
    if res.sequential is not None:
        out["max_seeds"] = res.sequential.max_seeds
    return out


def tuning_json(sel: Any) -> dict[str, Any]:
    """What --tune did: keys, grid, seeds, what was selected on, groups left out, and the expected
    best selection score after k grid values per group (expected_best.budget)."""
    from activation_bench.analysis.expected_best import budget
    from activation_bench.analysis.selection import TIE_RULE

    b = budget(sel)
    out = {"keys": sel.keys, "grid": sel.grid, "tune_seeds": sel.tune_seeds, "eval_seeds": sel.eval_seeds,
           "selected_on": sel.selected_on, "higher_is_better": sel.higher_is_better, "tie_rule": TIE_RULE,
           "left_out": sel.dropped,
           "budget": [{c: _plain(v) for c, v in row.items()} for row in b.to_dict("records")]}
    if sel.own_grid:  # "grid" is then every value of any group; each group's own is in the notes
        out["own_grid"] = True
    return out


def render(res: CompareResult, fmt: str) -> str:
    """Text in the given format (table: plain text of the rich table)."""
    if fmt == "csv":
        return to_csv(res)
    if fmt == "markdown":
        return to_markdown(res)
    if fmt == "json":
        return to_json(res)
    if fmt == "table":
        return table_text(res)
    from activation_bench.errors import UsageError

    raise UsageError(f"unknown format '{fmt}'; valid: {', '.join(FORMATS)}")
