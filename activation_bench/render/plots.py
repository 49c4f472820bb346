"""`actbench plot` and `actbench plot-activations`: matplotlib figures without a display.

Figures are built with `matplotlib.figure.Figure` (no pyplot state, Agg rendering) and written
atomically: a temporary file beside the output, then renamed, so a failure never leaves half a file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from activation_bench.analysis.compare import resolve_groups
from activation_bench.analysis.loading import (  # accuracies: in %, on a linear axis
    Loaded,
    is_accuracy,
    judged_only,
)
from activation_bench.analysis.metrics import FLOOR, Metric, run_values
from activation_bench.errors import UsageError
from activation_bench.render import labels as fit
from activation_bench.render.labels import group_labels as _labels
from activation_bench.runs.store import atomic_file, check_folder

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
NO_ACCURACY = "no accuracy (not a classification task)"  # a regression task's panel of an accuracy


def check_output(output: Path) -> str:
    """The image format from the extension; the folder must exist."""
    fmt = FORMATS.get(output.suffix.lower())
    if fmt is None:
        raise UsageError(f"{output}: unknown image type '{output.suffix or '(none)'}'; use .png, .svg or .pdf")
    check_folder(output)
    return fmt


def save_figure(fig: Any, output: Path) -> Path:
    """Write the figure atomically (a temporary file in the same folder, then renamed into place)."""
    fmt = check_output(output)
    with atomic_file(output) as tmp:
        fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight")
    return output


# a log axis whose values span more decades than this draws no minor ticks (see log_scale)
MINOR_TICK_DECADES = 3.0


def log_scale(ax: Any, which: str, values: Any) -> None:
    """Put `ax`'s `which` axis ("x" or "y") on a log scale for these values. Where the positive
    ones span more than MINOR_TICK_DECADES decades, the gridlines at the decades are the scale and
    matplotlib's minor ticks (eight a decade on every panel: half the time of drawing a 12-panel
    figure, savefig 5.8 s -> 2.3 s on a 2-core VM, 2026-12-02) are left out; over a narrower span
    they stay, as they carry the axis's labels there."""
    from matplotlib.ticker import NullLocator

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    if len(v) and np.log10(v.max() / v.min()) > MINOR_TICK_DECADES:
        axis.set_minor_locator(NullLocator())


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


# ---------------------------------------------------------------------------------------------
# loss curves


def curve_layout(loaded: Loaded, by: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """(panel columns, line columns): panels per data distribution (or --by), a line per group."""
    groups = resolve_groups(loaded, None)
    if by:
        panels = resolve_groups(loaded, by)
    else:
        panels = ["data"] if "data" in groups else []
    lines = [c for c in groups if c not in panels]
    return panels, lines


def has_values(loaded: Loaded, column: str) -> bool:
    """Whether any run has a curve of the column: a finite value in it (accuracy: a classification run),
    and not only at the epochs a whole test split was judged at (loading.judged_only)."""
    return (column in loaded.losses and bool(np.isfinite(loaded.losses[column]).any())
            and not judged_only(loaded, column).any())


def companion_accuracy(loaded: Loaded, loss: str) -> str | None:
    """The accuracy drawn beside a loss for classification runs: the same split's (val_loss:
    val_acc, test_loss: test_acc), test_acc beside a training loss; None for regression runs or
    when `loss` is itself an accuracy."""
    if is_accuracy(loss):
        return None
    acc = {"val_loss": "val_acc"}.get(loss, "test_acc")
    return acc if has_values(loaded, acc) else None


def curve_stats(loaded: Loaded, panels: Sequence[str], lines: Sequence[str], loss: str,
                floor: float = FLOOR, drawn: np.ndarray | None = None) -> tuple[Any, int]:
    """Median and quartiles of the loss over runs per (panel, line, epoch), diverged runs left out.
    An accuracy column is in percent (not clipped); a run is diverged by its train_loss then.
    `drawn`: per run, whether it counts (default: every run).
    Returns (DataFrame with columns panel, line, epoch, q25, q50, q75, n), number of diverged runs."""
    acc = is_accuracy(loss)
    status = run_values(loaded, Metric("final"), "train_loss" if acc else loss, floor)["status"].to_numpy()
    if drawn is not None:
        status = np.where(drawn, status, "left out")
    runs = loaded.runs
    panel = _labels(runs, panels)
    line = _labels(runs, lines)
    idx = loaded.run_index()
    y = loaded.losses[loss]
    keep = (status[idx] != "diverged") & (status[idx] != "left out")
    if acc:
        keep &= np.isfinite(y)  # regression runs mixed in have no accuracy
    import pandas as pd

    values = 100.0 * y[keep] if acc else np.maximum(y[keep], floor)
    df = pd.DataFrame({"panel": panel[idx][keep], "line": line[idx][keep], "epoch": loaded.epoch[keep],
                       "loss": values, "run": idx[keep]})
    g = df.groupby(["panel", "line", "epoch"], sort=False)["loss"]
    out = g.quantile([0.25, 0.5, 0.75]).unstack()
    out = out.reindex(columns=[0.25, 0.5, 0.75])
    out.columns = ["q25", "q50", "q75"]
    out["n"] = g.size()
    return out.reset_index(), int((status == "diverged").sum())


def plot_curves(loaded: Loaded, output: Path, by: Sequence[str] | None = None, loss: str = "train_loss",
                floor: float = FLOOR, with_accuracy: bool = True) -> Path:
    """One panel per data distribution (or --by value), median loss per group over epochs on a log
    y-axis, with the interquartile range over seeds as a band. For classification runs (and
    `with_accuracy`), each panel has the accuracy (`companion_accuracy`) below it (beside it for
    one task). More than labels.MAX_CURVES groups: the baseline's and the best (labels.few_lines).
    Each group at its own tuned values: render/tuned_curves.plot_tuned_curves."""
    check_output(output)
    accuracy = companion_accuracy(loaded, loss) if with_accuracy else None
    return save_figure(curves_figure(loaded, by, loss, floor, accuracy), output)


def curves_figure(loaded: Loaded, by: Sequence[str] | None = None, loss: str = "train_loss",
                  floor: float = FLOOR, accuracy: str | None = None, lines: Sequence[str] | None = None,
                  drawn: np.ndarray | None = None, baseline: tuple[str, str] | None = None,
                  legend: dict[str, str] | None = None, panel_legends: dict[str, dict[str, str]] | None = None,
                  over: str = "seeds") -> Any:
    """The figure of `plot_curves` (a matplotlib Figure, not saved). `accuracy`: an accuracy column
    drawn in a panel below each loss panel (to its right for one task; in %, linear axis). `loss`
    may itself be an accuracy column (val_acc, test_acc): then drawn alone, in %, on a linear axis.
    `lines`: the columns a curve stands for (default: every group column that is not a panel's);
    `drawn`: per run, whether it is drawn (a tuned report: the evaluated runs at the chosen values);
    `baseline`: the group kept when a panel would hold too many curves (default: compare's rule);
    `legend`: a line's legend text (default: its name); `panel_legends`: panel -> line -> text, a
    legend inside that panel's loss axes; `over`: what the title says the median is over."""
    if loss not in loaded.losses:
        raise UsageError(f"no input has a {loss} column")
    if judged_only(loaded, loss).any():
        raise UsageError(f"{loss} has no curve: the whole test split is judged at each run's epoch of lowest "
                         "val_loss and at its last only (a text's data.eval_windows null); plot val_loss")
    if is_accuracy(loss) and not has_values(loaded, loss):
        raise UsageError(f"no run has {loss} values: accuracy needs classification runs (data.task=classification)")
    if accuracy is not None and not has_values(loaded, accuracy):
        raise UsageError(f"no run has {accuracy} values: accuracy needs classification runs")
    panels, default_lines = curve_layout(loaded, by)
    lines = default_lines if lines is None else list(lines)
    stats_df, n_div = curve_stats(loaded, panels, lines, loss, floor, drawn)
    if not len(stats_df):
        raise UsageError("nothing to plot: every run diverged")
    acc_df = curve_stats(loaded, panels, lines, accuracy, floor, drawn)[0] if accuracy else None
    from matplotlib.figure import Figure

    panel_labels = _labels(loaded.runs, panels)  # panels whose runs all diverged stay
    panel_names = list(dict.fromkeys(panel_labels if drawn is None else panel_labels[drawn]))
    line_names = list(dict.fromkeys(stats_df["line"]))
    if acc_df is not None:
        line_names += [n for n in dict.fromkeys(acc_df["line"]) if n not in line_names]
    last = stats_df.sort_values("epoch").groupby(["panel", "line"], sort=False).tail(1)
    line_names, few = fit.few_lines(loaded.runs, last.rename(columns={"q50": "score"}), line_names, lines,
                                    is_accuracy(loss), baseline, f"median {loss} at the last epoch")
    stats_df = stats_df[stats_df["line"].isin(line_names)]
    acc_df = None if acc_df is None else acc_df[acc_df["line"].isin(line_names)]
    colors = dict(zip(line_names, _colors(len(line_names))))
    fig, loss_axes, acc_axes = _curve_axes(Figure, len(panel_names), accuracy is not None)
    beside = len(panel_names) == 1  # one task: the accuracy to the right, else below each loss panel
    for i, name in enumerate(panel_names):
        sub = stats_df[stats_df["panel"] == name]
        first_column = not loss_axes[i].get_subplotspec().colspan.start
        _draw_panel(loss_axes[i], sub, line_names, colors, floor, loss, _panel_title(panels, name, sub),
                    xlabel=acc_df is None or beside, ylabel=first_column,
                    empty=NO_ACCURACY if is_accuracy(loss) else "every run diverged")
        inside = (panel_legends or {}).get(name)
        if inside:  # the values chosen in this panel
            pairs = [(h, inside[lab]) for h, lab in zip(*loss_axes[i].get_legend_handles_labels()) if lab in inside]
            loss_axes[i].legend(*zip(*pairs), fontsize="x-small", frameon=False)
        if acc_df is not None:
            _draw_panel(acc_axes[i], acc_df[acc_df["panel"] == name], line_names, colors, floor, str(accuracy),
                        _panel_title(panels, name, None) if beside else None, ylabel=first_column or beside,
                        empty=NO_ACCURACY)
    seen: dict[str, Any] = {}
    for ax in loss_axes + acc_axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    labels = [lab for lab in line_names if lab in seen]
    handles = [seen[lab] for lab in labels]
    legend_title = ", ".join(lines) if len(lines) == 1 else ("group" if lines else None)
    fit.figure_legend(fig, handles, [(legend or {}).get(lab, lab) for lab in labels], legend_title)
    note = f"\n({n_div} diverged runs left out)" if n_div else ""
    where = "(left) and {} in % (right)" if beside else "(top) and {} in % (below each)"
    what = _column_label(loss) if accuracy is None else f"{loss} {where.format(accuracy)}"
    fit.suptitle(fig, f"{what}: median over {over}, band = interquartile range{note}" + (f"\n{few}" if few else ""))
    return fig


def _column_label(column: str) -> str:
    return f"{column} (%)" if is_accuracy(column) else column


def _curve_axes(figure: Any, n: int, paired: bool) -> tuple[Any, list[Any], list[Any]]:
    """The figure and its axes: a panel per task (2x2 rather than 3 + 1). With `paired`, each
    task's accuracy panel below its loss panel (to its right for one task); loss panels share their
    y axis, accuracy panels theirs. The unused axes are hidden."""
    if paired and n == 1:
        fig = figure(figsize=(11.0, 4.6), layout="constrained")
        loss_ax, acc_ax = fig.subplots(1, 2, sharex=True)
        return fig, [loss_ax], [acc_ax]
    ncols = 2 if n == 4 else min(n, 3)
    nrows = math.ceil(n / ncols)
    if paired:
        fig = figure(figsize=(5.2 * ncols + 1.8, 5.8 * nrows + 0.9), layout="constrained")
        axes = fig.subplots(2 * nrows, ncols, squeeze=False, sharex=True, height_ratios=[3.2, 2.4] * nrows)
        loss_axes, acc_axes = list(axes[0::2].flat), list(axes[1::2].flat)
        for group in (loss_axes, acc_axes):
            for ax in group[1:]:
                ax.sharey(group[0])
    else:
        fig = figure(figsize=(5.2 * ncols + 1.8, 4.0 * nrows + 0.6), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
        loss_axes, acc_axes = list(axes.flat), []
    for ax in loss_axes[n:] + acc_axes[n:]:
        ax.set_visible(False)
    return fig, loss_axes[:n], acc_axes[:n]


def _panel_title(panels: Sequence[str], name: str, sub: Any) -> str:
    """The task's name, with the runs per curve when `sub` (the panel's statistics) is given."""
    title = f"{panels[0]}={name}" if len(panels) == 1 else ("all runs" if not panels else str(name))
    if sub is not None and len(sub):
        per_line = sub.groupby("line")["n"].max()
        lo, hi = int(per_line.min()), int(per_line.max())
        title += f"  (n={lo} runs per curve)" if lo == hi else f"  (n={lo}-{hi} runs per curve)"
    return title


def _draw_panel(ax: Any, df: Any, line_names: Sequence[str], colors: dict, floor: float, column: str,
                title: str | None, xlabel: bool = True, ylabel: bool = True, empty: str = "every run diverged") -> None:
    _curve_panel(ax, df, line_names, colors, floor, log=not is_accuracy(column))
    if not len(df):
        ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center", va="center", color="0.4")
    if title:
        fit.panel_title(ax, title)
    if xlabel:
        ax.set_xlabel("epoch")
    if ylabel:
        ax.set_ylabel(_column_label(column) if is_accuracy(column) else f"{column} (log scale)")


def _curve_panel(ax: Any, df: Any, line_names: Sequence[str], colors: dict, floor: float, log: bool = True) -> None:
    for name in line_names:
        d = df[df["line"] == name].sort_values("epoch")
        if not len(d):
            continue
        ax.plot(d["epoch"], d["q50"], color=colors[name], lw=1.6, label=name)
        ax.fill_between(d["epoch"], d["q25"], d["q75"], color=colors[name], alpha=0.18, lw=0)
    if log:
        log_scale(ax, "y", df[["q25", "q75"]].to_numpy() if len(df) else [])
        if len(df) and float(df["q25"].min()) <= floor:
            ax.axhline(floor, color="0.4", ls=":", lw=1)
            ax.annotate("float floor", (0.01, floor), xycoords=("axes fraction", "data"), va="bottom",
                        fontsize=8, color="0.4")
    ax.grid(True, which="major", alpha=0.3)


# ---------------------------------------------------------------------------------------------
# activation functions


def parse_activation(text: str) -> tuple[str, dict[str, Any]]:
    """'leaky_relu' or 'leaky_relu:negative_slope=0.2' (several as 'softplus:beta=2,threshold=10')
    -> (name, parameters). Values are read as YAML scalars, as in config overrides."""
    import yaml

    name, sep, rest = text.partition(":")
    params: dict[str, Any] = {}
    for item in rest.split(",") if sep else []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise UsageError(f"'{text}': parameters are key=value, e.g. leaky_relu:negative_slope=0.2")
        try:
            params[key.strip()] = yaml.safe_load(value.strip())
        except yaml.YAMLError:
            raise UsageError(f"'{text}': cannot read the value of {key.strip()}") from None
    return name.strip(), params


def activation_curves(names: Sequence[str], xmin: float, xmax: float, points: int = 801) -> tuple[np.ndarray, dict]:
    """x and {label: (f(x), f'(x))}, computed in float64 with autograd (modules in eval mode).

    A name may carry parameters, 'leaky_relu:negative_slope=0.2' (see `parse_activation`); its
    label is then 'leaky_relu (negative_slope=0.2)'. A name that is an expression of x
    ('x*sigmoid(beta*x):beta=1.5') is drawn as activation=expr would train it.
    """
    import torch

    from activation_bench.engine.activations.registry import check_config, create, create_from_config, get_spec

    if not (math.isfinite(xmin) and math.isfinite(xmax) and xmin < xmax):
        raise UsageError(f"invalid range {xmin:g}..{xmax:g}: need finite xmin < xmax")
    parsed = [parse_activation(n) for n in names]
    specs = [None if _is_expression(name) else get_spec(name) for name, _ in parsed]
    gated = [s.name for s in specs if s is not None and s.gated]
    if gated:
        raise UsageError(f"{', '.join(gated)}: gated activations (act(a) * b on two halves) are not elementwise "
                         "and cannot be plotted as a curve")
    x = torch.linspace(xmin, xmax, points, dtype=torch.float64)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for spec, (name, params) in zip(specs, parsed):
        if spec is None:  # an expression of x (activation=expr)
            check_config({"fn": name, **params}, "", "float64")  # parsed and probed
            module = create_from_config({"fn": name, **params}).double().eval()
            label = name
        else:
            module = create(spec.name, **params).double().eval()
            label = spec.name
        xg = x.clone().requires_grad_(True)
        y = module(xg)
        (dy,) = torch.autograd.grad(y.sum(), xg)
        label += f" ({', '.join(f'{k}={v}' for k, v in params.items())})" if params else ""
        out[label] = (y.detach().numpy().copy(), dy.numpy().copy())
    return x.numpy().copy(), out


def _is_expression(name: str) -> bool:
    """Not a plain name (`gelu`, `leaky-relu`): an expression of x, such as `x*sigmoid(x)`."""
    return name == "x" or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", name)


def plot_activations(names: Sequence[str], output: Path, x_range: tuple[float, float] = (-4.0, 4.0),
                     with_pdf: bool = False) -> Path:
    """Each activation (left) and its derivative (right) over x_range; optionally the N(0,1) pdf."""
    check_output(output)
    return save_figure(activations_figure(names, x_range, with_pdf), output)


def activations_figure(names: Sequence[str], x_range: tuple[float, float] = (-4.0, 4.0),
                       with_pdf: bool = False) -> Any:
    """The figure of `plot_activations` (a matplotlib Figure, not saved). Imports torch."""
    if not names:
        raise UsageError("give at least one activation name, e.g. gelu relu")
    x, curves = activation_curves(list(dict.fromkeys(names)), *x_range)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax_f, ax_d = fig.subplots(1, 2)
    colors = _colors(len(curves))
    styles = ["-", "--", "-.", (0, (5, 1.5, 1, 1.5, 1, 1.5))]  # overlapping curves (gelu, gelu_tanh) stay visible
    for i, (color, (name, (y, dy))) in enumerate(zip(colors, curves.items())):
        ls = styles[i % len(styles)]
        ax_f.plot(x, y, color=color, lw=1.8, ls=ls, label=name)
        ax_d.plot(x, dy, color=color, lw=1.8, ls=ls, label=name)
    if with_pdf:
        pdf = np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)
        for ax in (ax_f, ax_d):
            ax.plot(x, pdf, color="0.3", ls=":", lw=1.6, label="N(0,1) pdf")
    for ax, title, ylabel in ((ax_f, "activation f(x)", "f(x)"), (ax_d, "derivative f'(x)", "f'(x)")):
        ax.axhline(0, color="0.6", lw=0.8)
        ax.axvline(0, color="0.6", lw=0.8)
        ax.set_title(title)
        ax.set_xlabel("x")
        ax.set_ylabel(ylabel)
        ax.set_xlim(x[0], x[-1])
        ax.grid(True, alpha=0.3)
    _clip_y(ax_f, curves, 0, x_range)
    _clip_y(ax_d, curves, 1, x_range)
    handles, names = ax_f.get_legend_handles_labels()
    fit.figure_legend(fig, handles, names, max_cols=6, reserve_in=0.0)  # long expressions: wrapped, below
    return fig


def _clip_y(ax: Any, curves: dict, which: int, x_range: tuple[float, float]) -> None:
    """Keep steep curves (relu2, selu) from flattening the rest: cap the y-range at a sensible span."""
    values = np.concatenate([c[which] for c in curves.values()])
    values = values[np.isfinite(values)]
    if not len(values):
        return
    lo, hi = float(values.min()), float(values.max())
    reach = max(abs(x_range[0]), abs(x_range[1]), 1.0)
    cap_hi = min(hi, 1.25 * reach if which == 0 else 2.5)
    cap_lo = max(lo, -1.25 * reach if which == 0 else -1.5)
    pad = 0.06 * (cap_hi - cap_lo or 1.0)
    ax.set_ylim(cap_lo - pad, cap_hi + pad)
