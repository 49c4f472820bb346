"""Rendering a `RankResult`: rich table, csv | markdown | json, and the critical-difference diagram.

rich, matplotlib and scikit-posthocs are imported inside the functions that draw.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from activation_bench.analysis.rank import RANK_COLS, RankResult, letter
from activation_bench.render.tables import _md_escape, _plain, fmt_p

FORMATS = ("table", "csv", "markdown", "json")


def _title(res: RankResult) -> str:
    best = " (highest first)" if res.higher_is_better else ""
    return (f"{res.by} ranked by {res.metric.label} {res.loss}{best} over {len(res.scores)} tasks "
            f"({', '.join(res.task_cols)})")


def summary_lines(res: RankResult) -> list[str]:
    """Friedman, critical difference and the groups, one line each."""
    if res.friedman_p == res.friedman_p:  # not NaN
        verdict = "the ranks differ" if res.friedman_p < res.alpha else "no evidence that the ranks differ"
        p = fmt_p(res.friedman_p)
        p = p.replace("<", "< ") if p.startswith("<") else f"= {p}"
        lines = [f"Friedman: chi2 = {res.friedman_stat:.4g}, p {p} ({verdict} "
                 f"at alpha {res.alpha:g})."]
    else:
        lines = ["Friedman: not defined here (needs 3 or more groups that do not all tie)."]
    lines.append(f"Critical difference (Nemenyi, alpha {res.alpha:g}): {res.critical_difference:.3g} mean ranks.")
    lines.append(f"Cannot be told apart ({res.posthoc}):")
    for i, group in enumerate(res.groups):
        lines.append(f"  {letter(i)}: {', '.join(group)}")
    return lines


def budget_lines(res: RankResult) -> list[str]:
    """The budget check's line per ranked value (analysis/budget.py); none without one."""
    return [res.budget.line()] if res.budget is not None else []


def _columns(res: RankResult) -> list[tuple[str, Any, bool]]:
    best = res.best

    def vs_best(fn: Any) -> Any:
        return lambda r: "best" if r[res.by] == best else fn(r)

    return [
        (res.by, lambda r: str(r[res.by]), False),
        ("mean rank", lambda r: f"{r['mean_rank']:.2f}", True),
        ("tasks", lambda r: str(int(r["n_tasks"])), True),
        ("W/T/L vs best", vs_best(lambda r: f"{int(r['wins'])}/{int(r['ties'])}/{int(r['losses'])}"), True),
        ("p Nemenyi", vs_best(lambda r: fmt_p(r["p_nemenyi"])), True),
        ("p Wilcoxon-Holm", vs_best(lambda r: fmt_p(r["p_wilcoxon_holm"])), True),
        ("group", lambda r: str(r["group"]), False),
    ] + ([(f"within {res.margin.label} of best", vs_best(lambda r: str(int(r["within_margin"]))), True)]
         if res.margin is not None else [])


def cells(res: RankResult) -> tuple[list[str], list[bool], list[list[str]]]:
    """The human table as text: headers, which columns are right-aligned, and the rows' cells (for
    the HTML pages)."""
    cols = _columns(res)
    rows = [[fn(r) for _, fn, _ in cols] for _, r in res.table.iterrows()]
    return [h for h, _, _ in cols], [right for _, _, right in cols], rows


def rich_table(res: RankResult) -> Any:
    from rich import box
    from rich.table import Table

    caption = [*summary_lines(res), *res.methods, *([res.budget.short()] if res.budget is not None else [])]
    table = Table(title=_title(res), caption="\n".join(caption), caption_justify="left", box=box.SIMPLE_HEAD)
    cols = _columns(res)
    for header, _, right in cols:
        table.add_column(header, justify="right" if right else "left", overflow="fold")
    for _, row in res.table.iterrows():
        table.add_row(*[fn(row) for _, fn, _ in cols])
    return table


def print_table(res: RankResult) -> None:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 140))
    console.print(rich_table(res))


def table_text(res: RankResult, width: int = 140) -> str:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(rich_table(res))
    return console.export_text()


def to_markdown(res: RankResult) -> str:
    cols = _columns(res)
    lines = [f"**{_md_escape(_title(res))}**", "", "| " + " | ".join(h for h, _, _ in cols) + " |",
             "|" + "|".join("---:" if right else ":---" for _, _, right in cols) + "|"]
    for _, row in res.table.iterrows():
        lines.append("| " + " | ".join(_md_escape(fn(row)) for _, fn, _ in cols) + " |")
    lines.append("")
    lines += [f"- {_md_escape(m.strip())}" for m in [*summary_lines(res), *res.methods, *budget_lines(res)]]
    lines += [f"- warning: {_md_escape(w)}" for w in res.all_warnings]
    return "\n".join(lines) + "\n"


def to_csv(res: RankResult) -> str:
    """One row per group, best first: the --by column, mean_rank, n_tasks, wins, ties, losses,
    p_nemenyi, p_wilcoxon_holm (each against the best), group. Raw numbers."""
    extra = ["within_margin"] if res.margin is not None else []
    return res.table[[res.by, *RANK_COLS, *extra]].to_csv(index=False, lineterminator="\n")


def _matrix(p: Any) -> dict:
    return {str(a): {str(b): _plain(v) for b, v in row.items()} for a, row in p.iterrows()}


def to_json(res: RankResult) -> str:
    doc = {
        "by": res.by, "metric": res.metric.label, "loss": res.loss, "higher_is_better": res.higher_is_better,
        "task_columns": res.task_cols,
        "tasks": [str(t) for t in res.scores.index], "alpha": res.alpha, "posthoc": res.posthoc,
        "friedman": {"statistic": _plain(res.friedman_stat), "p": _plain(res.friedman_p)},
        "critical_difference": _plain(res.critical_difference), "groups": res.groups,
        "rows": [{c: _plain(v) for c, v in r.items()} for r in res.table.to_dict("records")],
        "p_nemenyi": _matrix(res.p_nemenyi),
        "p_wilcoxon_holm_all_pairs": None if res.p_wilcoxon is None else _matrix(res.p_wilcoxon),
        "scores": {str(t): {str(g): _plain(v) for g, v in row.items()} for t, row in res.scores.iterrows()},
        "methods": res.methods, "warnings": res.all_warnings,
    }
    if res.budget is not None:
        doc["budget_check"] = res.budget.to_dict()
    if res.margin is not None:
        doc["margin"] = res.margin.to_dict()
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def render(res: RankResult, fmt: str) -> str:
    return {"csv": to_csv, "markdown": to_markdown, "json": to_json, "table": table_text}[fmt](res)


# ---------------------------------------------------------------------------------------------
# the critical-difference diagram


def draw_cd(res: RankResult, fig: Any = None) -> Any:
    """The critical-difference diagram (scikit-posthocs) on a matplotlib Figure (a new one sized for
    the number of groups when fig is None): mean ranks on the axis (1 = best, on the left), a bar over
    groups that cannot be told apart, the Nemenyi CD above. Returns the Figure."""
    import scikit_posthocs as sp
    from matplotlib.figure import Figure

    k = len(res.table)
    ranks = res.table.set_index(res.by)["mean_rank"].rename(index=str)
    n_bars = sum(len(g) > 1 for g in res.groups)
    if fig is None:
        height = 1.2 + 0.22 * ((k + 1) // 2 + n_bars)
        width = max(7.0, 4.0 + 0.09 * max(len(str(g)) for g in ranks.index) * 2)
        fig = Figure(figsize=(width, height))
    ax = fig.add_subplot(1, 1, 1)
    p = res.p_posthoc.rename(index=str, columns=str)
    sp.critical_difference_diagram(
        ranks, p, alpha=res.alpha, ax=ax, label_fmt_left="{label} ({rank:.2f})",
        label_fmt_right="({rank:.2f}) {label}", label_props={"fontsize": 8},
        text_h_margin=0.02 * max(k - 1, 1), crossbar_props={"color": "k", "linewidth": 2.5, "alpha": 0.8})
    _sorted_crossbars(ax)
    _cd_bar(ax, res.critical_difference, k)
    ax.set_title(f"{res.by}: mean rank over {len(res.scores)} tasks, 1 = best ({res.metric.label} {res.loss}; "
                 f"bars: cannot be told apart, {res.posthoc} at alpha {res.alpha:g})", fontsize=9)
    return fig


def _sorted_crossbars(ax: Any) -> None:
    """scikit-posthocs draws each crossbar through a set of ranks, in an order that changes from
    process to process (string hashing), a bar over two ranks too: sort each horizontal line's
    points, the same picture, so a figure is the same bytes every time."""
    for line in ax.get_lines():
        x, y = line.get_data()
        if len(x) >= 2 and len(set(map(float, y))) == 1:
            line.set_data(sorted(x), y)


def _cd_bar(ax: Any, cd: float, k: int) -> None:
    """Nemenyi's critical difference as a bar from rank 1, above the tick labels."""
    bottom, _ = ax.get_ylim()
    ax.plot([1, 1 + cd], [1.6, 1.6], color="k", linewidth=1.5, clip_on=False)
    ax.plot([1, 1], [1.35, 1.85], color="k", linewidth=1.5, clip_on=False)
    ax.plot([1 + cd, 1 + cd], [1.35, 1.85], color="k", linewidth=1.5, clip_on=False)
    ax.text(1 + cd / 2, 2.0, f"CD = {cd:.3g} (Nemenyi)", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(bottom, 2.9)
    ax.set_xlim(min(ax.get_xlim()[0], 0.8), max(ax.get_xlim()[1], 1 + cd + 0.2, k + 0.2))
    ax.set_xticks(range(1, k + 1) if k <= 12 else sorted({1, *range(5, k + 1, 5), k}))


def write_cd(res: RankResult, output: Path) -> Path:
    """draw_cd written atomically to output (.png, .svg or .pdf)."""
    from activation_bench.render.plots import save_figure

    return save_figure(draw_cd(res), output)
