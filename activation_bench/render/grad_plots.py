"""`actbench plot --grads`: per-layer gradient norms (grads.csv, written with log.grad_norms=true).

Reads run directories (or sweep directories holding them), groups runs by every config value that
varies across them except the seed (or --by), and draws per group the median over seeds of each
hidden layer's norm over epochs, on a log scale. Pure pandas/matplotlib (no torch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from activation_bench.analysis.configs import flatten_config, read_yaml
from activation_bench.errors import UsageError
from activation_bench.render import labels as fit
from activation_bench.render.plots import _colors, check_output, log_scale, save_figure
from activation_bench.runs.store import finished_summary

VALUES = ("weight_grad_norm", "act_norm")
DERIVED = ("model.init_resolved",)  # follows from model.init and the activation: never its own group
MAX_PANELS = 48


def run_dirs(paths: Sequence[Path]) -> list[Path]:
    """Finished run directories with a grads.csv: the paths themselves, or the runs inside sweeps."""
    out: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise UsageError(f"{path}: not a run or sweep directory")
        candidates = [path] if (path / "grads.csv").is_file() else sorted(
            p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
        found = [d for d in candidates if (d / "grads.csv").is_file() and finished_summary(d)]
        if not found:
            raise UsageError(f"{path}: no finished run with grads.csv (train with log.grad_norms=true)")
        out.extend(found)
    return out


def load_grads(paths: Sequence[Path]) -> tuple[pd.DataFrame, list[str]]:
    """(long table: run, the config columns, epoch, layer, weight_grad_norm, act_norm; config columns)."""
    frames, configs = [], []
    for i, d in enumerate(run_dirs(paths)):
        df = pd.read_csv(d / "grads.csv")
        if list(df.columns) != ["epoch", "layer", *VALUES]:
            raise UsageError(f"{d / 'grads.csv'}: expected columns epoch,layer,{','.join(VALUES)}")
        df.insert(0, "run", i)
        frames.append(df)
        configs.append({k: str(v) for k, v in flatten_config(read_yaml(d / "config.yaml")).items()})
    table = pd.concat(frames, ignore_index=True)
    cfg = pd.DataFrame(configs)
    varying = [c for c in cfg.columns if cfg[c].nunique(dropna=False) > 1]
    return table.merge(cfg[varying].rename_axis("run").reset_index(), on="run"), varying


def plot_grads(paths: Sequence[Path], output: Path, by: Sequence[str] | None = None,
               value: str = "weight_grad_norm") -> Path:
    """One panel per group (config values that vary, except seed; or --by), a line per hidden
    layer: the median over seeds of `value` at each logged epoch, log scale."""
    check_output(output)
    if value not in VALUES:
        raise UsageError(f"--loss with --grads: one of {', '.join(VALUES)}, got '{value}'")
    table, varying = load_grads(paths)
    panels = list(by) if by else [c for c in varying if c != "seed" and c not in DERIVED]
    missing = [c for c in panels if c not in table.columns]
    if missing:
        raise UsageError(f"--by {', '.join(missing)}: not a config value that varies; varying: {', '.join(varying)}")
    table["panel"] = _panel_labels(table, panels)
    names = list(dict.fromkeys(table["panel"]))
    if len(names) > MAX_PANELS:
        raise UsageError(f"{len(names)} groups to draw (more than {MAX_PANELS}); choose fewer with --by")
    med = table.groupby(["panel", "layer", "epoch"], sort=False)[value].median().reset_index()
    n_runs = table.groupby("panel")["run"].nunique()
    return _draw(med, n_runs, names, panels, output, value)


def _panel_labels(table: pd.DataFrame, panels: Sequence[str]) -> pd.Series:
    if not panels:
        return pd.Series("all runs", index=table.index)
    text = table[panels[0]].astype(str).radd(f"{panels[0]}=")
    for c in panels[1:]:
        text = text + f", {c}=" + table[c].astype(str)
    return text


def _draw(med: pd.DataFrame, n_runs: Any, names: list[str], panels: Sequence[str], output: Path,
          value: str) -> Path:
    from matplotlib.figure import Figure

    layers = sorted(med["layer"].unique())
    colors = dict(zip(layers, _viridis(len(layers)) if len(layers) > 1 else _colors(1)))
    ncols = min(len(names), 4)
    nrows = math.ceil(len(names) / ncols)
    fig = Figure(figsize=(3.6 * ncols + 1.2, 2.8 * nrows + 0.8), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    shown = med[value].clip(lower=1e-30)  # a zero norm (a dead layer) at the axis's floor
    for ax, name in zip(axes.flat, names):
        sub = med[med["panel"] == name]
        for layer in layers:
            d = sub[sub["layer"] == layer].sort_values("epoch")
            ax.plot(d["epoch"], shown.loc[d.index], color=colors[layer], lw=1.3, label=f"layer {layer}")
        log_scale(ax, "y", shown)  # the panels share their y axis
        fit.panel_title(ax, f"{name}  (n={n_runs[name]})" if panels else f"n={n_runs[name]}", fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[-1, :]:
        ax.set_xlabel("epoch")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{value} (log)")
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fit.figure_legend(fig, handles, labels, "hidden layer (1 = next to the input)", max_cols=8)
    what = "weight-gradient norm" if value == "weight_grad_norm" else "activation-output norm"
    fit.suptitle(fig, f"{what} per hidden layer: median over seeds")
    return save_figure(fig, output)


def _viridis(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(0.9 * i / max(1, n - 1)) for i in range(n)]
