"""`actbench plot RUNS --x KEY`: a metric against a swept setting (e.g. the learning rate).

One panel per task (the varying config values other than the lines, the x key and the seed), one
line per activation (or --by), the median over seeds with the interquartile range as a band, on a
log x-axis where every x value is positive. It shows whether a verdict holds across the setting.
Loss metrics are drawn on a log y-axis; an accuracy (val_acc, test_acc) in percent on a linear one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from activation_bench.analysis.loading import Loaded, varying_columns
from activation_bench.analysis.metrics import ACCURACY, FLOOR, LOG10, Metric, run_values, scale
from activation_bench.errors import UsageError
from activation_bench.render import labels as fit
from activation_bench.render.labels import group_labels as _labels
from activation_bench.render.plots import _colors, check_output, log_scale, save_figure


def layout(loaded: Loaded, x: str, by: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """(panel columns, line columns) for the x key: lines = --by, else activation (else the first
    varying column); panels = every other varying column except the seed."""
    varying = [c for c in varying_columns(loaded) if c not in ("seed", x)]
    if by:
        lines = list(dict.fromkeys(c.strip() for item in by for c in str(item).split(",") if c.strip()))
        bad = [c for c in lines if c not in loaded.config_cols or c in ("seed", x)]
        if bad:
            raise UsageError(f"--by {bad[0]}: not a config column to draw lines by (with --x {x})")
    else:
        lines = ["activation"] if "activation" in varying else varying[:1]
    return [c for c in varying if c not in lines], lines


def check_x(loaded: Loaded, x: str) -> np.ndarray:
    """The x key's value of every run as a float: a swept numeric config column."""
    if x == "seed":
        raise UsageError("--x seed: the seeds are what the band summarises; give a swept setting such as lr")
    if x not in loaded.config_cols or loaded.runs[x].nunique() < 2:
        have = ", ".join(c for c in varying_columns(loaded) if c != "seed") or "none"
        raise UsageError(f"--x {x}: '{x}' was not swept (swept keys: {have})")
    values = pd.to_numeric(loaded.runs[x], errors="coerce").to_numpy(float)
    bad = loaded.runs[x][np.isnan(values) & loaded.runs[x].notna().to_numpy()]
    if len(bad):
        raise UsageError(f"--x {x}: value '{bad.iloc[0]}' is not a number")
    return values


def sensitivity_stats(loaded: Loaded, x: str, metric: Metric, loss: str, by: Sequence[str] | None = None,
                      floor: float = FLOOR) -> tuple[pd.DataFrame, list[str], list[str], int]:
    """Per (panel, line, x): the median and quartiles of the metric over seeds (losses clipped at
    the floor), n runs; diverged and missing runs left out. Returns (frame, panels, lines, n_diverged)."""
    xs = check_x(loaded, x)
    panels, lines = layout(loaded, x, by)
    values = run_values(loaded, metric, loss, floor)
    if _percent(metric, loss):
        y = 100.0 * values["value"].to_numpy(float)
    elif _log_y(metric, loss):
        y = 10 ** values["log10"].to_numpy(float)
    else:
        y = values["value"].to_numpy(float)
    ok = (values["status"] == "ok").to_numpy() & ~np.isnan(xs)
    df = pd.DataFrame({"panel": _labels(loaded.runs, panels)[ok], "line": _labels(loaded.runs, lines)[ok],
                       "x": xs[ok], "y": y[ok]})
    g = df.groupby(["panel", "line", "x"], sort=False)["y"]
    out = g.quantile([0.25, 0.5, 0.75]).unstack()
    out.columns = ["q25", "q50", "q75"]
    out["n"] = g.size()
    return out.reset_index(), panels, lines, int((values["status"] == "diverged").sum())


def _percent(metric: Metric, column: str) -> bool:
    """An accuracy metric (not an epoch count): drawn in percent."""
    return scale(metric, column) == ACCURACY


def _log_y(metric: Metric, column: str) -> bool:
    """A loss value (not an accuracy, an epoch count or auc's mean log10): a log y-axis."""
    return scale(metric, column) == LOG10 and metric.kind != "auc"


def y_label(metric: Metric, column: str) -> str:
    """The y axis's label: the column and the metric (auc of a loss is already a mean log10)."""
    if _percent(metric, column):
        return f"{column} % ({metric.label})"
    return f"{column} ({metric.label})" if metric.kind != "auc" else f"mean log10 {column}"


def sensitivity_figure(loaded: Loaded, x: str, metric: Metric, loss: str, by: Sequence[str] | None = None,
                       floor: float = FLOOR, chosen: pd.DataFrame | None = None,
                       baseline: tuple[str, str] | None = None) -> Any:
    """The figure (not saved). `chosen`: optional rows (panel, line, x) marked as the tuned choice.
    More than labels.MAX_CURVES lines: the baseline's (default: compare's rule) and those with the
    best median at their best x."""
    stats_df, panels, lines, n_div = sensitivity_stats(loaded, x, metric, loss, by, floor)
    if not len(stats_df):
        raise UsageError("nothing to plot: no run has a value of the metric")
    from matplotlib.figure import Figure

    panel_names = list(dict.fromkeys(stats_df["panel"]))
    higher = _percent(metric, loss)
    best = stats_df.groupby(["panel", "line"], sort=False)["q50"].agg("max" if higher else "min")
    line_names, few = fit.few_lines(loaded.runs, best.rename("score").reset_index(),
                                    sorted(dict.fromkeys(stats_df["line"])), lines, higher, baseline,
                                    f"median at its best {x}")
    colors = dict(zip(line_names, _colors(len(line_names))))
    ncols = 2 if len(panel_names) == 4 else min(len(panel_names), 3)
    nrows = math.ceil(len(panel_names) / ncols)
    fig = Figure(figsize=(4.6 * ncols + 1.4, 3.5 * nrows + 0.8), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True)
    logx = bool((stats_df["x"] > 0).all())
    for ax, name in zip(axes.flat, panel_names):
        sub = stats_df[stats_df["panel"] == name]
        for line in line_names:
            d = sub[sub["line"] == line].sort_values("x")
            if not len(d):
                continue
            ax.plot(d["x"], d["q50"], color=colors[line], lw=1.6, marker="o", ms=3, label=line)
            ax.fill_between(d["x"], d["q25"], d["q75"], color=colors[line], alpha=0.18, lw=0)
            if chosen is not None:
                c = chosen[(chosen["panel"] == name) & (chosen["line"] == line)]
                pick = d[d["x"].isin(c["x"])]
                ax.plot(pick["x"], pick["q50"], ls="none", marker="*", ms=11, color=colors[line], mec="k", mew=0.6)
        if _log_y(metric, loss):
            log_scale(ax, "y", sub[["q25", "q75"]].to_numpy())
        if logx:
            log_scale(ax, "x", stats_df["x"])
        fit.panel_title(ax, f"{panels[0]}={name}" if len(panels) == 1 else ("all runs" if not panels else str(name)),
                        fontsize=10)
        ax.set_xlabel(x)
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel(y_label(metric, loss))
    for ax in list(axes.flat)[len(panel_names):]:
        ax.set_visible(False)
    handles = {lab: h for ax in axes.flat for h, lab in zip(*ax.get_legend_handles_labels())}
    fit.figure_legend(fig, list(handles.values()), list(handles), ", ".join(lines) or None, max_cols=6)
    star = "; * = tuned choice" if chosen is not None else ""
    note = f"; {n_div} diverged runs left out" if n_div else ""
    pct = " (%)" if _percent(metric, loss) else ""
    fit.suptitle(fig, f"{metric.label} of {loss}{pct} against {x}: median over seeds, band = interquartile range"
                 f"{star}{note}" + (f"\n{few}" if few else ""))
    return fig


def plot_sensitivity(loaded: Loaded, output: Path, x: str, metric: Metric, loss: str,
                     by: Sequence[str] | None = None, floor: float = FLOOR) -> Path:
    check_output(output)
    return save_figure(sensitivity_figure(loaded, x, metric, loss, by, floor), output)
