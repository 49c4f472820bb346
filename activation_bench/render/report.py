"""`actbench report`: one self-contained HTML page per study.

The numbers come from `compare.compare` through `render.to_json` (the same path as `actbench
compare --format json`); the page is rendered from the Jinja2 template `templates/report.html.j2`
with autoescaping, figures are inline SVG from matplotlib. torch is imported only to draw the
activations' shapes (`shapes=True`), inside `_shapes`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from activation_bench.analysis import compare as cmp
from activation_bench.analysis.loading import ACCURACIES, LOSSES, Loaded
from activation_bench.analysis.metrics import ACCURACY, LOG10, run_values, scale
from activation_bench.analysis.provenance import provenance
from activation_bench.analysis.stats import group_index, t_half_width
from activation_bench.analysis.tune import TuneSpec
from activation_bench.errors import UsageError
from activation_bench.render import tables
from activation_bench.render.report_tables import compare_table
from activation_bench.render.report_tuning import tuning_section
from activation_bench.render.svg import svg  # report.svg: tests leave the drawing out through this name

SUFFIXES = (".html", ".htm")
DEFAULT_NAME = "report.html"


# ---------------------------------------------------------------------------------------------
# output path


def default_output(paths: Sequence[Path]) -> Path:
    """report.html inside the first input directory (beside the first input file)."""
    first = Path(paths[0])
    return (first if first.is_dir() else first.parent) / DEFAULT_NAME


def check_output(output: Path) -> Path:
    """An .html path in an existing, writable folder (checked before any work is done)."""
    if output.suffix.lower() not in SUFFIXES:
        raise UsageError(f"{output}: a report is an HTML file; use a .html suffix")
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{output}: folder {parent} does not exist")
    if output.is_dir():
        raise UsageError(f"{output}: is a directory")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{output}: folder {parent} is not writable")
    return output


# ---------------------------------------------------------------------------------------------
# the summary in words


def _ci_of_effect(r: dict[str, Any]) -> tuple[float, float] | None:
    """95% t interval of the mean paired difference, from compare's mean_diff, d_z and n_pairs."""
    n, mean, dz = r.get("n_pairs") or 0, r.get("mean_diff"), r.get("d_z")
    if n < 2 or mean is None:
        return None
    if dz is None:
        return (mean, mean) if "tie" in (r.get("note") or "") else None
    half = t_half_width(n, abs(mean / dz) / math.sqrt(n)) if dz else 0.0
    return mean - half, mean + half


def finding(table: dict[str, Any], res: cmp.CompareResult) -> dict[str, Any] | None:
    """The main finding of one compare table: the comparison with the smallest Holm-corrected
    p-value (ties: the largest |d_z|), with the 95% interval of its effect (for accuracies, of the
    difference in percentage points)."""
    rows = [r for r in table["json"]["rows"] if not r.get("is_baseline") and (r.get("n_pairs") or 0) >= 2]
    if not rows or res.baseline is None:
        return None
    best = min(rows, key=lambda r: (r["p_t_holm"] if r["p_t_holm"] is not None else 2.0, -abs(r["d_z"] or 0.0)))
    is_loss, f = res.metric.is_loss, tables.fmt_num
    if res.scale == ACCURACY:  # compare gives the interval of the difference in percentage points
        effect = f"{tables.fmt_pp(best['diff_pp'])} percentage points of {res.loss} against the baseline"
        interval = None if best["diff_lo_pp"] is None else \
            f"{tables.fmt_pp(best['diff_lo_pp'])} to {tables.fmt_pp(best['diff_hi_pp'])} points"
    elif is_loss:
        ci = _ci_of_effect(best)
        effect = f"{f(best['ratio'])}x the baseline's geometric-mean {res.loss}"
        interval = None if ci is None else f"{f(10 ** ci[0])}–{f(10 ** ci[1])}"
    else:
        ci = _ci_of_effect(best)
        effect = f"{best['mean_diff']:+.3g} epochs against the baseline"
        interval = None if ci is None else f"{ci[0]:+.3g} to {ci[1]:+.3g}"
    group = ", ".join(f"{c}={best[c]}" for c in res.group_cols)
    return {"metric": table.get("label", table["metric"]), "group": group,
            "baseline": f"{res.baseline[0]}={res.baseline[1]}",
            "effect": effect, "interval": interval, "n_pairs": best["n_pairs"],
            "win": tables.fmt_pct(best["win_rate"]), "p": tables.fmt_p(best["p_t_holm"]),
            "significant": bool(best.get("significant")), "note": best.get("note") or "",
            "all_tie": all("pairs tie" in (r.get("note") or "") for r in rows),
            "n_significant": sum(bool(r.get("significant")) for r in rows), "n_compared": len(rows),
            "verdicts": _verdict_words(rows, res)}


def _verdict_words(rows: list[dict[str, Any]], res: cmp.CompareResult) -> str:
    """With a margin: how many comparisons read each verdict, e.g. 'margin 1.05x: 2 better, 1 equivalent'."""
    if res.margin is None:
        return ""
    counts = {v: sum(r.get("verdict") == v for r in rows) for v in ("better", "worse", "equivalent", "undecided")}
    how = " (anytime-valid)" if res.sequential is not None else ""
    return f"Verdicts{how} against a margin of {res.margin.label}: " + \
        ", ".join(f"{n} {v}" for v, n in counts.items() if n) + "."


def _values(runs: Any, col: str) -> list[str]:
    return [str(v) for v in dict.fromkeys(runs[col].dropna())] if col in runs.columns else []


def summary(loaded: Loaded, res: cmp.CompareResult, statuses: np.ndarray) -> dict[str, Any]:
    """What was compared, on which tasks, with how many seeds and runs."""
    runs = loaded.runs
    key = res.baseline[0] if res.baseline else None
    task_cols = [c for c in res.group_cols if c != key]
    tasks = [", ".join(f"{c}={v}" for c, v in zip(task_cols, k)) for k, _ in group_index(runs, task_cols)] \
        if task_cols else []
    n = res.table["n"].astype("float").to_numpy()
    return {"factor": key, "levels": _values(runs, key) if key else [], "baseline": res.baseline[1] if key else None,
            "tasks": tasks, "task_cols": task_cols, "n_runs": len(runs), "n_seeds": len(_values(runs, "seed")),
            "n_per_group": (int(np.nanmin(n)), int(np.nanmax(n))) if len(n) else (0, 0),
            "n_groups": len(res.table), "pair_cols": res.pair_cols,
            "n_diverged": int((statuses == "diverged").sum()),
            "n_incomplete": sum(w.startswith("incomplete run") for w in loaded.warnings)}


# ---------------------------------------------------------------------------------------------
# ranking across tasks


def ranking(loaded: Loaded, res: cmp.CompareResult, tune: TuneSpec | None = None) -> dict[str, Any] | None:
    """`actbench rank` of the compared column (the baseline's key) across the tasks, with its
    critical-difference diagram (tuned as the compare tables with `tune`); None with fewer than two tasks."""
    key = res.baseline[0] if res.baseline else None
    tasks = [c for c in res.group_cols if c != key]
    if key is None or not tasks or len(group_index(loaded.runs, tasks)) < 2:
        return None
    from activation_bench.analysis import rank as rk
    from activation_bench.render import rank_tables

    try:
        rr = rk.rank(loaded, res.metric, by=key, task=tasks, loss=res.loss, tune=tune, margin=res.margin)
    except UsageError as exc:
        return {"svg": None, "caption": "", "headers": [], "rows": [], "notes": [f"not ranked: {exc}"]}
    headers, _, rows = rank_tables.cells(rr)
    return {"svg": svg(rank_tables.draw_cd(rr), "ranking", tight=True), "caption": rank_tables._title(rr),
            "headers": headers, "rows": rows,
            "notes": [*rank_tables.summary_lines(rr), *rr.methods, *rank_tables.budget_lines(rr), *rr.all_warnings]}


# ---------------------------------------------------------------------------------------------
# figures


PAIRED = {"val_loss": "val_acc", "test_loss": "test_acc"}  # the accuracy drawn beside a split's loss


def curves(loaded: Loaded, task_cols: Sequence[str], res: cmp.CompareResult) -> list[dict[str, Any]]:
    """Loss curves (median, IQR band over seeds), a panel per task, a curve per group of `res`
    (its baseline kept where a panel would hold too many); val_loss too when recorded. For
    classification runs, val_acc beside val_loss and test_acc beside test_loss (in %). Tuned
    (`res.tuning`): each group's evaluation runs at its chosen values only, as in the tables."""
    from activation_bench.render import plots
    from activation_bench.render.tuned_curves import from_selection, tuned_curves_figure

    sel = res.tuning
    tc = None if sel is None else from_selection(loaded, sel, list(task_cols),
                                                 [c for c in res.group_cols if c not in task_cols])
    tuned = "" if sel is None else (f"each group at its chosen {', '.join(sel.keys)} ({res.metric.label}), on the "
                                    f"evaluation seeds ({', '.join(sel.eval_seeds)}) only; the legend names each value")
    out = []
    for loss in LOSSES:
        if plots.has_values(loaded, loss):
            acc = PAIRED.get(loss)
            acc = acc if acc is not None and plots.has_values(loaded, acc) else None
            fig = plots.curves_figure(loaded, list(task_cols) or None, loss, accuracy=acc, baseline=res.baseline) \
                if tc is None else tuned_curves_figure(loaded, tc, loss, res.metric.label, accuracy=acc,
                                                       baseline=res.baseline)
            out.append({"loss": loss, "accuracy": acc, "svg": svg(fig, f"curves-{loss}"), "tuned": tuned,
                        "accuracy_where": "right" if len(fig.axes) == 2 else "below"})
    return out


def shapes(loaded: Loaded, group_cols: Sequence[str]) -> dict[str, Any] | None:
    """The activations of the runs and their derivatives as inline SVG, or None when the runs have
    no activation column. Imports torch (the only section that does)."""
    if "activation" not in loaded.runs.columns:
        return None
    from activation_bench.engine.activations.registry import get_spec
    from activation_bench.render import plots

    params = [c for c in group_cols if c.startswith("activation.")]
    has_fn = "activation.fn" in loaded.runs.columns
    names, skipped = [], []
    for _, row in loaded.runs[["activation", *params, *(["activation.fn"] if has_fn and "activation.fn" not in params
                                                         else [])]].drop_duplicates().iterrows():
        name = str(row["activation"])
        try:
            gated = get_spec(name).gated
        except UsageError:
            drawn = _expression(name, row, params, has_fn)
            if drawn.startswith("!"):
                skipped.append(drawn[1:])
            else:
                names.append(drawn)
            continue
        if gated:
            skipped.append(f"{name} (gated, act(a) * b on two halves: not elementwise)")
            continue
        extra = ",".join(f"{c.split('.', 1)[1]}={row[c]}" for c in params if row[c] is not None)
        names.append(f"{name}:{extra}" if extra else name)
    names, skipped = list(dict.fromkeys(names)), list(dict.fromkeys(skipped))
    if not names:
        return {"svg": None, "names": [], "skipped": skipped}
    try:
        image = svg(plots.activations_figure(names, (-4.0, 4.0)), "shapes")
    except UsageError as exc:
        return {"svg": None, "names": names, "skipped": [*skipped, f"cannot draw: {exc}"]}
    return {"svg": image, "names": names, "skipped": skipped}


def _expression(name: str, row: Any, params: Sequence[str], has_fn: bool) -> str:
    """An expression activation's name for plots.activations_figure ('fn:p=v,...'), or '!' and why
    it is not drawn (not an expression, or a parameter's value not in the runs' labels)."""
    from activation_bench.engine.activations import expr

    text = str(row["activation.fn"]) if has_fn and row["activation.fn"] is not None else name
    try:
        e = expr.parse(text)
    except UsageError:
        return f"!{name} (not a registered activation)"
    values = {c.split(".", 1)[1]: row[c] for c in params if row[c] is not None}
    missing = [p for p in e.params if p not in values]
    if missing:
        return f"!{name} (the value of {missing[0]} is not among the runs' labels)"
    extra = ",".join(f"{p}={values[p]}" for p in e.params)
    return f"{text}:{extra}" if extra else text


# ---------------------------------------------------------------------------------------------
# diverged and incomplete runs


def problems(loaded: Loaded, statuses: np.ndarray, group_cols: Sequence[str]) -> dict[str, Any]:
    """Diverged runs (group, seed, run, epochs recorded) and the loader's notes (incomplete runs)."""
    cols = [c for c in [*group_cols, "seed"] if c in loaded.runs.columns]
    counts = np.diff(loaded.bounds)
    rows = []
    for i in np.flatnonzero(statuses == "diverged"):
        run = loaded.runs.iloc[i]
        rows.append({"labels": [str(run[c]) for c in cols], "run": str(run.get("run") or ""),
                     "epochs": int(counts[i])})
    return {"columns": cols, "diverged": rows, "notes": list(loaded.warnings)}


# ---------------------------------------------------------------------------------------------
# the page


def default_metrics(loaded: Loaded) -> list[str]:
    """`final`, and `early_stop` where the runs have validation losses and compare knows that metric."""
    metrics = ["final"]
    if "val_loss" in loaded.losses and np.isfinite(loaded.losses["val_loss"]).any():
        try:
            cmp.parse_metric("early_stop")
            metrics.append("early_stop")
        except UsageError:
            pass
    return metrics


def table_specs(loaded: Loaded, metrics: Sequence[cmp.Metric], loss: str | None) -> list[tuple[cmp.Metric, str]]:
    """(metric, column) of every compare table: each metric on its loss (compare's default or
    --loss), then, where every run is a classification run and --loss is not an accuracy, each
    metric but to=EPS on test_acc (the held-out accuracy)."""
    specs = [(m, cmp.default_loss(loaded, m, loss)) for m in metrics]
    if (loss is None or loss not in ACCURACIES) and "test_acc" in loaded.losses and loaded.has_accuracy().all():
        specs += [(m, "test_acc") for m in metrics if m.kind != "to"]
    return specs


def build(paths: Sequence[Path], metrics: Sequence[str] | None = None, baseline: str | None = None,
          title: str | None = None, loss: str | None = None, draw_shapes: bool = True,
          command: str = "", tune: TuneSpec | None = None, margins: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the template shows. Each table is `compare.compare` on the same loaded runs,
    through `tables.to_json`, so its numbers equal `actbench compare --format json` (with the same
    --loss and --tune); classification runs get accuracy tables too (`table_specs`). `margins`
    (`parse_margins`): a verdicts.Margin per scale (log10, accuracy), given to the tables of that scale."""
    for m in metrics or []:
        cmp.parse_metric(m)
    loaded = cmp.load(paths, loss or "train_loss")
    kinds = loaded.has_accuracy()
    if kinds.any() and not kinds.all() and (loss is None or loss not in ACCURACIES):
        loaded.warnings.append(f"no accuracy tables: {int(kinds.sum())} of {len(kinds)} runs are classification "
                               "runs, and accuracy is tabled only when every run is one (report them apart)")
    parsed = [cmp.parse_metric(m) for m in dict.fromkeys(metrics or default_metrics(loaded))]
    margins, judging, recorded = _judging(paths, margins or {})
    results = [cmp.compare(loaded, m, None, baseline or recorded.get(scale(m, col)), col, tune=tune,
                           **_verdict_args(margins.get(scale(m, col)), judging))
               for m, col in table_specs(loaded, parsed, loss)]
    tables = [compare_table(r) for r in results]
    first = results[0]
    statuses = run_values(loaded, cmp.Metric("final"), loss or "train_loss")["status"].to_numpy(object)
    about = summary(loaded, first, statuses)
    for t in tables:  # "early_stop", or "early_stop of test_acc" where a metric has tables of two columns
        t["label"] = t["metric"] if [u["metric"] for u in tables].count(t["metric"]) == 1 else \
            f"{t['metric']} of {t['loss']}"
    common = [line for line in tables[0]["methods"] if all(line in t["methods"] for t in tables)]
    methods = [("Every table" if len(tables) > 1 else tables[0]["label"], common)]
    held_out = next((r for r in results if r.metric.kind == "early_stop"), first)
    methods += [(t["label"], [line for line in t["methods"] if line not in common]) for t in tables if len(tables) > 1]
    return {
        "title": title or f"actbench report: {', '.join(str(p) for p in paths)}",
        "summary": about,
        "findings": [f for f in (finding(t, r) for t, r in zip(tables, results)) if f],
        "tables": tables,
        "accuracy_tables": any(r.scale == ACCURACY for r in results),
        # ranked by early_stop (held-out loss) when it is shown, else by the first metric
        "ranking": ranking(loaded, held_out, tune),
        "tuning": tuning_section(loaded, held_out, svg),
        "curves": curves(loaded, about["task_cols"], held_out),
        "shapes": shapes(loaded, first.group_cols) if draw_shapes else None,
        "shapes_off": not draw_shapes,
        "problems": problems(loaded, statuses, first.group_cols),
        "methods": methods,
        "provenance": provenance(loaded, command),
    }


def _judging(paths: Sequence[Path], margins: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any],
                                                                      dict[str, str]]:
    """Inputs whose judging was sequential (sequential.RECORD_FILE): their margin for its kind of table
    (unless --margin gave one), compare's anytime-valid arguments and the baseline the sweep judged
    that kind against where it was given one (used unless --baseline); else the margins as given."""
    from activation_bench.analysis.sequential import SequentialSpec, read_record

    record = read_record(paths)
    if record is None:
        return margins, {}, {}
    found, baselines = {}, {}  # a record of several comparisons (a study's judge: chosen sweep) may hold both kinds
    for kind, column in ((LOG10, "train_loss"), (ACCURACY, "test_acc")):
        entry = read_record(paths, column) or {}  # found above
        if (entry["margin"].unit == "pp") == (kind == ACCURACY):
            found[kind] = entry["margin"]
            if entry["baseline"]:
                baselines[kind] = entry["baseline"]
    return {**found, **margins}, {"sequential": SequentialSpec(record["max_seeds"]), "alpha": record["alpha"]}, \
        baselines


def _verdict_args(margin: Any, judging: dict[str, Any]) -> dict[str, Any]:
    """compare's verdict arguments for one table: none where it has no margin."""
    return {"margin": margin, **judging} if margin is not None else {}


def parse_margins(texts: Sequence[str] | None, loss: str | None) -> dict[str, Any]:
    """report's --margin values: 'D pp' or 'Dpp' for the accuracy tables, a bare number for the tables of
    --loss's kind (a ratio on losses, percentage points where --loss is an accuracy); one per kind."""
    from activation_bench.analysis.verdicts import parse_margin

    out: dict[str, Any] = {}
    for text in texts or []:
        raw = str(text).strip()
        pp = raw.lower().endswith("pp")
        acc = pp or (loss is not None and loss in ACCURACIES)
        kind = ACCURACY if acc else LOG10
        if kind in out:
            raise UsageError(f"--margin {text}: a second margin for the {'accuracy' if acc else 'loss'} tables")
        out[kind] = parse_margin(raw[:-2].strip() if pp else raw, accuracy=acc)
    return out


def render_html(context: dict[str, Any]) -> str:
    """The page from the package's template; every value is escaped except the SVG figures."""
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(loader=jinja2.PackageLoader("activation_bench.render", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["svg"] = Markup  # matplotlib's own SVG output (its text is XML-escaped by matplotlib)
    return env.get_template("report.html.j2").render(**context)


def write_report(paths: Sequence[Path], output: Path | None = None, metrics: Sequence[str] | None = None,
                 baseline: str | None = None, title: str | None = None, loss: str | None = None,
                 draw_shapes: bool = True, command: str = "", tune: TuneSpec | None = None,
                 margins: dict[str, Any] | None = None) -> Path:
    """Check the output, build, render and write the page atomically. Returns its path."""
    from activation_bench.runs.store import atomic_write

    if not paths:
        raise UsageError("no input: give sweep directories, run directories or CSV files")
    output = check_output(output if output is not None else default_output(paths))
    for m in metrics or []:
        cmp.parse_metric(m)
    page = render_html(build(paths, metrics, baseline, title, loss, draw_shapes, command, tune, margins))
    atomic_write(output, page)
    return output
