"""Combined tables: several comparisons of the same groups side by side, one row per group (say test
accuracy and test loss, each with its interval, effect against the baseline and significance), as
markdown, CSV and JSON. Numbers are the comparisons' own (`compare --format json`), not recomputed.
A comparison with a margin (`compare --margin`) also shows its verdict, and where its sweep was judged
sequentially the seeds it used and why it stopped, in its own table's words (CSV and JSON also carry
the interval the verdict read and the anytime p-value); without one its columns are as they always
were."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd

from activation_bench.analysis.metrics import ACCURACY, LOG10
from activation_bench.analysis.notes import CompareResult
from activation_bench.errors import UsageError
from activation_bench.render.tables import (
    _cmp,
    _md_escape,
    _plain,
    _significant,
    _tuned_cell,
    fmt_acc,
    fmt_int,
    fmt_num,
    fmt_p,
    fmt_pp,
    margin_json,
)

# the raw columns each part contributes to CSV and JSON, where its table has them
RAW = ("n", "mean", "geo_mean", "ci_low", "ci_high", "mean_diff", "ratio", "ratio_lo", "ratio_hi", "diff_pp",
       "diff_lo_pp", "diff_hi_pp", "win_rate", "p_t_holm", "p_wilcoxon_holm", "significant", "is_baseline")
# with a margin, after those: the verdict, and over a sequentially judged sweep the seeds used and why it stopped
VERDICT = ("verdict",)
SEQUENTIAL = ("seeds_used", "stopped")
# and in CSV and JSON only (the markdown stays as narrow as it was): the interval the verdict read
# (its level's, anytime-valid where sequential) and, judged sequentially, the anytime p-value (Holm)
JUDGED_RAW = ("verdict_lo_pp", "verdict_hi_pp", "verdict_ratio_lo", "verdict_ratio_hi", "p_anytime_holm")


def title(given: str | None, parts: Sequence[tuple[str, CompareResult]]) -> str:
    """A combined table's title: the given one, else what each part compares."""
    return given or "; ".join(f"{r.metric.label} of {r.loss}" for _, r in parts)


def _groups(parts: Sequence[tuple[str, CompareResult]], where: str) -> list[str]:
    """The group columns every part shares (tuned keys excepted), else one line saying which differ."""
    first_name, first = parts[0]
    for name, res in parts[1:]:
        if set(res.group_cols) != set(first.group_cols):
            raise UsageError(f"{where}: '{first_name}' groups by {', '.join(first.group_cols) or 'nothing'} "
                             f"but '{name}' by {', '.join(res.group_cols) or 'nothing'}: set the same `by`")
    return list(first.group_cols)


def _key(row: pd.Series, cols: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(row[c]) for c in cols)


def _rows(res: CompareResult, cols: Sequence[str]) -> dict[tuple[str, ...], pd.Series]:
    return {_key(r, cols): r for _, r in res.table.iterrows()}


def _judged(res: CompareResult) -> tuple[str, ...]:
    """The verdict columns a part shows: none without a margin (the table as before), else the
    verdict, and the seeds used and why it stopped where the verdicts were read sequentially."""
    if res.margin is None or "verdict" not in res.table.columns:
        return ()
    seq = res.sequential is not None and all(c in res.table.columns for c in SEQUENTIAL)
    return VERDICT + (SEQUENTIAL if seq else ())


def _verdict_cells(res: CompareResult, row: pd.Series) -> list[str]:
    """The verdict cells as the comparison's own table writes them (blank on the baseline's row)."""
    return [_cmp(row, fmt_int(row[c]) if c == "seeds_used" else str(row[c])) for c in _judged(res)]


def _cells(res: CompareResult, row: pd.Series | None) -> list[str]:
    """One part's cells of a row: tuned values, the centre with its interval, the effect against the
    baseline with its interval, the Holm p-values and the significance mark; with a margin the
    verdict (and, judged sequentially, the seeds used and why it stopped)."""
    n_cells = len(_headers(res, ""))
    if row is None:
        return ["-"] * n_cells
    cells = [_tuned_cell(res, row, k) for k in res.tuned_keys]
    base = bool(row.get("is_baseline")) if not pd.isna(row.get("is_baseline", pd.NA)) else False
    if res.scale == ACCURACY:
        ci = "" if pd.isna(row["ci_low"]) else f" [{100 * row['ci_low']:.2f}, {100 * row['ci_high']:.2f}]"
        cells.append(f"{fmt_acc(row['mean'])}{ci}")
        if res.baseline is not None:
            cells.append("baseline" if base else "-" if pd.isna(row.get("diff_pp")) else
                         f"{fmt_pp(row['diff_pp'])} [{fmt_pp(row['diff_lo_pp'])}, {fmt_pp(row['diff_hi_pp'])}]")
    else:
        centre = "geo_mean" if res.scale == LOG10 else "mean"
        ci = "" if pd.isna(row["ci_low"]) else f" [{fmt_num(row['ci_low'])}, {fmt_num(row['ci_high'])}]"
        cells.append(f"{fmt_num(row[centre], 4)}{ci}")
        if res.baseline is not None:
            lo, hi = row.get("ratio_lo"), row.get("ratio_hi")
            interval = "" if lo is None or pd.isna(lo) else f" [{fmt_num(lo)}, {fmt_num(hi)}]"
            cells.append("baseline" if base else f"{fmt_num(row['ratio'])}{interval}")
    if res.baseline is not None:
        cells.append("" if base else f"{fmt_p(row['p_t_holm'])}/{fmt_p(row['p_wilcoxon_holm'])}")
        cells.append("*" if _significant(row) else "")
    return cells + _verdict_cells(res, row)


def _headers(res: CompareResult, label: str) -> list[str]:
    pre = f"{label}: " if label else ""
    heads = [f"{pre}{k} (tuned)" for k in res.tuned_keys]
    if res.scale == ACCURACY:
        heads.append(f"{pre}mean {res.loss} [95% CI]")
        heads += [f"{pre}Δ pp [95% CI]"] if res.baseline is not None else []
    else:
        heads.append(f"{pre}{'geo mean' if res.scale == LOG10 else 'mean epochs'} [95% CI]")
        heads += [f"{pre}ratio [95% CI]"] if res.baseline is not None else []
    heads += [f"{pre}p Holm t/W", f"{pre}sig"] if res.baseline is not None else []
    names = {"verdict": f"verdict ({res.margin.label})" if res.margin is not None else "",
             "seeds_used": "seeds", "stopped": "stopped"}  # the comparison's own table's headers
    return heads + [f"{pre}{names[c]}" for c in _judged(res)]


def _order(parts: Sequence[tuple[str, CompareResult]], cols: Sequence[str]) -> list[tuple[str, ...]]:
    """The first part's row order (best first per block), then groups only later parts have."""
    keys = [_key(r, cols) for _, r in parts[0][1].table.iterrows()]
    for _, res in parts[1:]:
        keys += [k for k in (_key(r, cols) for _, r in res.table.iterrows()) if k not in keys]
    return keys


def grid(parts: Sequence[tuple[str, CompareResult]], where: str = "table") -> tuple[list[str], int, list[list[str]],
                                                                                list[str]]:
    """The table as text: headers, how many of them are group columns, the rows' cells, and a
    note per part saying what it is (the markdown and the study page both show these)."""
    cols = _groups(parts, where)
    rows = [_rows(res, cols) for _, res in parts]
    heads = [*cols, *(h for name, res in parts for h in _headers(res, name))]
    body = []
    for key in _order(parts, cols):
        cells = list(key)
        for (_, res), by_key in zip(parts, rows):
            cells += _cells(res, by_key.get(key))
        body.append(cells)
    notes = []
    for name, res in parts:
        base = f", paired vs {res.baseline[0]}={res.baseline[1]}" if res.baseline is not None else ""
        notes.append(f"{name}: {res.metric.label} of {res.loss}{base}; {res.methods[0]}")
    notes.append("Each part's method notes and warnings are in its own table; * = both Holm-corrected p < 0.05.")
    return heads, len(cols), body, notes


def to_markdown(parts: Sequence[tuple[str, CompareResult]], title: str, where: str = "table") -> str:
    """A markdown table (groups down, each comparison's columns across) and what each part is."""
    heads, n_groups, body, notes = grid(parts, where)
    lines = [f"**{_md_escape(title)}**", "", "| " + " | ".join(_md_escape(h) for h in heads) + " |",
             "|" + "|".join([":---"] * n_groups + ["---:"] * (len(heads) - n_groups)) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in cells) + " |" for cells in body]
    lines.append("")
    lines += [f"- {_md_escape(n)}" for n in notes]
    return "\n".join(lines) + "\n"


def _raw(parts: Sequence[tuple[str, CompareResult]], where: str) -> tuple[list[str], list[dict[str, Any]]]:
    cols = _groups(parts, where)
    rows = [_rows(res, cols) for _, res in parts]
    out = []
    for key in _order(parts, cols):
        rec: dict[str, Any] = dict(zip(cols, key))
        for (name, res), by_key in zip(parts, rows):
            row = by_key.get(key)
            judged = _judged(res)
            keep = [*res.tuned_keys, *(c for c in RAW if c in res.table.columns), *judged,
                    *(c for c in JUDGED_RAW if judged and c in res.table.columns)]
            rec[name] = {c: (_plain(row[c]) if row is not None else None) for c in keep}
        out.append(rec)
    return cols, out


def to_csv(parts: Sequence[tuple[str, CompareResult]], where: str = "table") -> str:
    """One row per group: the group columns, then NAME.COLUMN for each part's raw numbers."""
    cols, recs = _raw(parts, where)
    flat = [{**{c: r[c] for c in cols}, **{f"{n}.{k}": v for n, _ in parts for k, v in r[n].items()}} for r in recs]
    table = pd.DataFrame(flat)
    seeds = [f"{n}.seeds_used" for n, res in parts if "seeds_used" in _judged(res)]
    table[seeds] = table[seeds].astype("Int64")  # counts, blank on the baseline's row, as in the part's own CSV
    return table.to_csv(index=False, lineterminator="\n")


def to_json(parts: Sequence[tuple[str, CompareResult]], title: str, where: str = "table") -> str:
    """{title, group_columns, parts: [{name, metric, loss, scale, baseline, tuned}], rows: [{group...,
    NAME: {...}}]}; a part with a margin also has `margin` as its comparison's JSON gives it."""
    cols, recs = _raw(parts, where)
    doc = {
        "title": title,
        "group_columns": cols,
        "parts": [_part(n, r) for n, r in parts],
        "rows": recs,
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _part(name: str, res: CompareResult) -> dict[str, Any]:
    part = {"name": name, "metric": res.metric.label, "loss": res.loss, "scale": res.scale,
            "baseline": None if res.baseline is None else {"key": res.baseline[0], "value": res.baseline[1]},
            "tuned": res.tuned_keys}
    if _judged(res):
        part["margin"] = margin_json(res)
    return part
