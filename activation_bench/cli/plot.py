"""Typer command `plot` (registered in cli/main.py): loss curves, the metric against a swept key
(--x), gradient norms (--grads), tuned curves (--tune).

matplotlib and pandas are imported inside the command. The options are declared in cli/options.py.
"""

from __future__ import annotations

from pathlib import Path

import typer

from activation_bench.cli.options import (
    ByOpt,
    GradsOpt,
    ImageOpt,
    PathsArg,
    PlotLossOpt,
    PlotMetricOpt,
    TuneGridOpt,
    TuneOnOpt,
    TuneOpt,
    TuneSeedsOpt,
    XOpt,
)
from activation_bench.cli.output import warn
from activation_bench.errors import UsageError, reported


def plot(
    paths: PathsArg,
    output: ImageOpt,
    by: ByOpt = None,
    loss: PlotLossOpt = "",
    grads: GradsOpt = False,
    x: XOpt = None,
    metric: PlotMetricOpt = None,
    tune: TuneOpt = None,
    tune_seeds: TuneSeedsOpt = None,
    tune_on: TuneOnOpt = None,
    tune_grid: TuneGridOpt = None,
) -> None:
    """Loss curves: one panel per data distribution (or per --by value), the median loss of each group
    over epochs on a log scale, with the interquartile range over seeds as a band. For classification
    runs, each panel has the accuracy beside it (val_acc beside val_loss, else test_acc; in %, on a
    linear axis). With --tune, each group's curve at its own tuned value, chosen as compare --tune
    chooses it, over the judging seeds only; the legend names the value. With --grads, each hidden
    layer's weight-gradient norm instead.

    Examples:

      actbench plot runs/my-sweep --output curves.png

      actbench plot runs/my-sweep --by lr --loss val_loss --output curves.svg

      actbench plot --grads runs/my-deep-sweep --output grads.png

      actbench plot runs/my-lr-sweep --x lr --metric early_stop --output lr.svg

      actbench plot runs/my-lr-sweep --tune lr --loss val_loss --output tuned.png
    """
    with reported():
        from activation_bench.analysis.tune import parse_tune
        from activation_bench.render import plots

        plots.check_output(output)
        tuning = parse_tune(tune, tune_seeds, by, tune_on, tune_grid)
        if tuning is not None and metric is not None:
            from activation_bench.analysis.metrics import parse_metric

            parse_metric(metric)  # before any file is read
        if metric is not None and x is None and tuning is None:
            raise UsageError("--metric is what --x draws or what --tune chooses by: give --x KEY too, e.g. --x lr, "
                             "or --tune KEY (curves show every epoch)")
        if tuning is not None and (x is not None or grads):
            raise UsageError(f"--tune and {'--x' if x is not None else '--grads'} draw different figures: give one of "
                             "them (report --tune stars the chosen values on the --x figure)")
        if x is not None:
            if grads:
                raise UsageError("--x and --grads draw different figures: give one of them")
            _plot_x(paths, output, x, metric, loss or None, by)
            return
        if grads:
            from activation_bench.render import grad_plots

            grad_plots.plot_grads(paths, output, by, loss or "weight_grad_norm")
            typer.echo(f"wrote {output}", err=True)
            return
        from activation_bench.analysis import compare as cmp

        loss = loss or "train_loss"
        loaded = cmp.load(paths, loss)
        warn(loaded.warnings)
        if tuning is not None:
            from activation_bench.render.tuned_curves import plot_tuned_curves

            warn(plot_tuned_curves(loaded, output, tuning, metric, by, loss).notes)
        else:
            plots.plot_curves(loaded, output, by, loss)
        typer.echo(f"wrote {output}", err=True)


def _plot_x(paths: list[Path], output: Path, x: str, metric: str | None, loss: str | None,
            by: list[str] | None) -> None:
    """`plot --x KEY`: the sensitivity figure (render/sensitivity.py)."""
    from activation_bench.analysis import compare as cmp
    from activation_bench.render import sensitivity

    m = cmp.parse_metric(metric) if metric is not None else None
    loaded = cmp.load(paths, loss or "train_loss")
    warn(loaded.warnings)
    if m is None:
        has_val = "val_loss" in loaded.losses
        m = cmp.parse_metric("early_stop" if has_val else "final")
    sensitivity.plot_sensitivity(loaded, output, x, m, cmp.default_loss(loaded, m, loss), by)
    typer.echo(f"wrote {output}", err=True)
