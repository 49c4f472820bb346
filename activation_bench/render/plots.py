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
from activation_bench.analysis.loading import Loaded
from activation_bench.analysis.metrics import FLOOR, Metric, run_values
from activation_bench.errors import UsageError
from activation_bench.runs.store import atomic_file, check_folder

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


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


def curve_stats(loaded: Loaded, panels: Sequence[str], lines: Sequence[str], loss: str,
                floor: float = FLOOR) -> tuple[Any, int]:
    """Median and quartiles of the loss over runs per (panel, line, epoch), diverged runs left out.
    Returns (DataFrame with columns panel, line, epoch, q25, q50, q75, n), number of diverged runs."""
    status = run_values(loaded, Metric("final"), loss, floor)["status"].to_numpy()
    runs = loaded.runs
    panel = _labels(runs, panels)
    line = _labels(runs, lines)
    idx = loaded.run_index()
    keep = status[idx] != "diverged"
    import pandas as pd

    df = pd.DataFrame({"panel": panel[idx][keep], "line": line[idx][keep], "epoch": loaded.epoch[keep],
                       "loss": np.maximum(loaded.losses[loss][keep], floor), "run": idx[keep]})
    g = df.groupby(["panel", "line", "epoch"], sort=False)["loss"]
    out = g.quantile([0.25, 0.5, 0.75]).unstack()
    out.columns = ["q25", "q50", "q75"]
    out["n"] = g.size()
    return out.reset_index(), int((status == "diverged").sum())


def _labels(runs: Any, cols: Sequence[str]) -> np.ndarray:
    if not cols:
        return np.full(len(runs), "all", dtype=object)
    parts = [runs[c].fillna("(none)").astype(str) for c in cols]
    if len(cols) == 1:
        return parts[0].to_numpy(object)
    text = parts[0].radd(f"{cols[0]}=")
    for c, p in zip(cols[1:], parts[1:]):
        text = text + f", {c}=" + p
    return text.to_numpy(object)


def plot_curves(loaded: Loaded, output: Path, by: Sequence[str] | None = None, loss: str = "train_loss",
                floor: float = FLOOR) -> Path:
    """One panel per data distribution (or --by value), median loss per group over epochs on a log
    y-axis, with the interquartile range over seeds as a band."""
    check_output(output)
    return save_figure(curves_figure(loaded, by, loss, floor), output)


def curves_figure(loaded: Loaded, by: Sequence[str] | None = None, loss: str = "train_loss",
                  floor: float = FLOOR) -> Any:
    """The figure of `plot_curves` (a matplotlib Figure, not saved)."""
    if loss not in loaded.losses:
        raise UsageError(f"no input has a {loss} column")
    panels, lines = curve_layout(loaded, by)
    stats_df, n_div = curve_stats(loaded, panels, lines, loss, floor)
    if not len(stats_df):
        raise UsageError("nothing to plot: every run diverged")
    from matplotlib.figure import Figure

    panel_names = list(dict.fromkeys(_labels(loaded.runs, panels)))  # panels whose runs all diverged stay
    line_names = list(dict.fromkeys(stats_df["line"]))
    colors = dict(zip(line_names, _colors(len(line_names))))
    ncols = 2 if len(panel_names) == 4 else min(len(panel_names), 3)  # 2x2 rather than 3 + 1
    nrows = math.ceil(len(panel_names) / ncols)
    fig = Figure(figsize=(5.2 * ncols + 1.8, 4.0 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    for ax, name in zip(axes.flat, panel_names):
        sub = stats_df[stats_df["panel"] == name]
        _curve_panel(ax, sub, line_names, colors, floor)
        if not len(sub):
            ax.text(0.5, 0.5, "every run diverged", transform=ax.transAxes, ha="center", va="center", color="0.4")
        title = f"{panels[0]}={name}" if len(panels) == 1 else ("all runs" if not panels else str(name))
        if len(sub):
            per_line = sub.groupby("line")["n"].max()
            lo, hi = int(per_line.min()), int(per_line.max())
            title += f"  (n={lo} runs per curve)" if lo == hi else f"  (n={lo}-{hi} runs per curve)"
        ax.set_title(title)
        ax.set_xlabel("epoch")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{loss} (log scale)")
    for ax in list(axes.flat)[len(panel_names):]:
        ax.set_visible(False)
    seen: dict[str, Any] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    labels = [lab for lab in line_names if lab in seen]
    handles = [seen[lab] for lab in labels]
    legend_title = ", ".join(lines) if len(lines) == 1 else ("group" if lines else None)
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 5) or 1, title=legend_title,
               frameon=False)
    note = f"\n({n_div} diverged runs left out)" if n_div else ""
    fig.suptitle(f"{loss}: median over seeds, band = interquartile range{note}")
    return fig


def _curve_panel(ax: Any, df: Any, line_names: Sequence[str], colors: dict, floor: float) -> None:
    for name in line_names:
        d = df[df["line"] == name].sort_values("epoch")
        if not len(d):
            continue
        ax.plot(d["epoch"], d["q50"], color=colors[name], lw=1.6, label=name)
        ax.fill_between(d["epoch"], d["q25"], d["q75"], color=colors[name], alpha=0.18, lw=0)
    ax.set_yscale("log")
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

    from activation_bench.engine.activations import check_config, create, create_from_config, get_spec

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
    ax_f.legend(loc="upper left", fontsize=9, framealpha=0.9)
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
