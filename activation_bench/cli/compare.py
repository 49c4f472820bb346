"""Typer commands `compare`, `plot`, `plot-activations` and `report` (registered in cli.py).

Heavy imports (pandas, scipy, matplotlib, torch) happen inside the functions. Bad input raises
UsageError; cli.main()/the command wrapper turns it into one line on stderr and exit code 2.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from activation_bench.cli.options import JudgeSeedsMaxOpt, MarginOpt, SequentialOpt
from activation_bench.errors import UsageError, reported

PathsArg = Annotated[
    list[Path],
    typer.Argument(help="Sweep directories, run directories, results.csv / losses.csv files or any long-format "
                   "CSV (epoch, train_loss, config columns).", show_default=False),
]
ByOpt = Annotated[
    list[str] | None,
    typer.Option("--by", help="Group by these config columns (repeat or comma list). Default: every config "
                 "column that varies across the inputs, except seed.", show_default=False),
]
TuneOpt = Annotated[
    list[str] | None,
    typer.Option("--tune", help="Tune this swept key (repeat: lr, batch_size, model.init, ...): each group at its "
                 "own best value, chosen by the metric of val_loss (mean log10; --tune-on val_acc: of val_acc, "
                 "highest) on the tuning seeds; every statistic on the other seeds only.", show_default=False),
]
TuneSeedsOpt = Annotated[
    int | None,
    typer.Option("--tune-seeds", help="With --tune: the K smallest seeds tune, the rest are judged. Default: where "
                 "some seeds hold the grid and the others one value per group (a search's judgement), the seeds with "
                 "the grid; else a third of the seeds, rounded up, at least 2.", show_default=False),
]
TuneOnOpt = Annotated[
    str | None,
    typer.Option("--tune-on", help="With --tune: select on val_loss (default: lowest mean log10) or val_acc "
                 "(classification runs: highest mean accuracy).", show_default=False),
]
TuneGridOpt = Annotated[
    str | None,
    typer.Option("--tune-grid", help="With --tune: shared (default: every group over the same values; a group "
                 "lacking one is left out) or own (each group over the values its own runs have, e.g. a longer "
                 "budget re-training each group's earlier choice and its neighbours).", show_default=False),
]
LossOpt = Annotated[str, typer.Option("--loss", help="Loss column: train_loss, val_loss or test_loss.")]
CompareLossOpt = Annotated[str | None, typer.Option(
    "--loss", help="The compared column: a loss (train_loss, train_eval_loss, val_loss, test_loss; lower is "
    "better, log10 scale) or an accuracy of classification runs (val_acc, test_acc; higher is better, "
    "differences in percentage points). Default: train_loss; for --metric early_stop test_loss where the "
    "inputs have it.", show_default=False)]


def _warn(lines: list[str]) -> None:
    for line in lines:
        typer.echo(f"warning: {line}", err=True)


def emit(output: Path | None, fmt: str, text: Callable[[], str], table: Callable[[], None]) -> None:
    """A command's result: written atomically to --output, printed as a rich table, or printed as
    text (csv, markdown, json)."""
    from activation_bench.runs import store

    if output is not None:
        store.atomic_write(output, text())
        typer.echo(f"wrote {output}", err=True)
    elif fmt == "table":
        table()
    else:
        typer.echo(text(), nl=False)


def compare(
    paths: PathsArg,
    metric: Annotated[str, typer.Option(
        "--metric", "-m", help="final (last epoch), best, epoch=K (loss at epoch K), "
        "to=EPS (first epoch with loss <= EPS), auc (mean log10 loss over epochs), early_stop (the loss at "
        "each run's epoch of lowest val_loss, earliest on ties: held-out test loss after early stopping).")] = "final",
    by: ByOpt = None,
    baseline: Annotated[str | None, typer.Option("--baseline", help="KEY=VALUE of the group the others are compared "
                                                 "to, paired by seed. Default: activation=relu where the runs have "
                                                 "it, else the first value of the first group column.",
                                                 show_default=False)] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv, markdown or json.")] = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.",
                                                show_default=False)] = None,
    loss: CompareLossOpt = None,
    power: Annotated[str | None, typer.Option(
        "--power", help="RATIO, e.g. 1.05: per comparison, the seeds needed to detect a geometric-mean ratio of "
        "RATIO (paired t-test, from the observed spread) and the smallest ratio detectable with the current seeds. "
        "On an accuracy column (--loss val_acc/test_acc) a difference in percentage points, e.g. 1.",
        show_default=False)] = None,
    power_level: Annotated[str, typer.Option("--power-level", help="Power for --power.")] = "0.8",
    alpha: Annotated[str, typer.Option("--alpha", help="Two-sided significance level for --power; with --margin "
                                       "the error rate of all verdicts together.")] = "0.05",
    tune: TuneOpt = None,
    tune_seeds: TuneSeedsOpt = None,
    tune_on: TuneOnOpt = None,
    tune_grid: TuneGridOpt = None,
    pair_by: Annotated[list[str] | None, typer.Option(
        "--pair-by", help="Pair each run with the baseline run that shares these columns (repeat or comma list; "
        "default: seed and every other varying column). --pair-by seed where each group trains at its own "
        "recipe (learning rate, warmup) chosen elsewhere.", show_default=False)] = None,
    margin: MarginOpt = None,
    sequential: SequentialOpt = False,
    judge_seeds_max: JudgeSeedsMaxOpt = None,
) -> None:
    """Paired statistics on loss tables: per group n, mean, std, median, geometric mean with a 95% CI;
    against a baseline paired by seed: geometric-mean ratio, win rate, paired t-test and Wilcoxon
    p-values (Holm-corrected) and Cohen's d_z. Loss metrics are compared on a log10 scale; accuracies
    (--loss val_acc or test_acc) as mean accuracy and paired differences in percentage points.
    With --power: how many seeds a comparison needs.

    Examples:

      actbench compare runs/my-sweep

      actbench compare runs/a runs/b results.csv --metric final --baseline activation=relu

      actbench compare runs/my-sweep --metric epoch=10 --format markdown --output table.md

      actbench compare runs/my-sweep --metric to=1e-6

      actbench compare runs/my-real-data-sweep --metric early_stop

      actbench compare runs/my-sweep --power 1.05

      actbench compare runs/my-lr-sweep --metric early_stop --tune lr --baseline activation=relu

      actbench compare runs/my-digits-sweep --metric early_stop --loss test_acc --tune lr --tune-on val_acc

      actbench compare runs/my-lr-sweep --metric early_stop --by activation --pair-by seed

      actbench compare runs/my-sweep --margin 1.05

      actbench compare runs/my-digits-sweep --loss test_acc --metric early_stop --margin 1 --sequential
    """
    # Long only on paper: the Typer options and the docstring (the --help text) take 40 of its lines.
    with reported():
        from activation_bench.analysis import compare as cmp
        from activation_bench.render import tables
        from activation_bench.runs import store

        if fmt not in tables.FORMATS:
            raise UsageError(f"unknown format '{fmt}'; valid: {', '.join(tables.FORMATS)}")
        if output is not None:
            store.check_folder(output)  # before any work
        m = cmp.parse_metric(metric)
        tuning = cmp.parse_tune(tune, tune_seeds, by, tune_on, tune_grid)
        spec = None
        if power is None and margin is None and (power_level, alpha) != ("0.8", "0.05"):
            raise UsageError("--power-level and --alpha set up --power: give --power RATIO too, e.g. --power 1.05")
        if power is None and power_level != "0.8":
            raise UsageError("--power-level sets up --power: give --power RATIO too, e.g. --power 1.05")
        verdicts = _verdict_options(margin, sequential, judge_seeds_max, alpha, loss)
        if power is not None:
            from activation_bench.analysis.loading import is_accuracy
            from activation_bench.analysis.power import parse_power

            spec = parse_power(power, power_level, alpha, accuracy=is_accuracy(loss or ""))
            if not m.is_loss:
                raise UsageError(f"--power works on loss metrics (log10 ratios) and accuracies (percentage "
                                 f"points), not --metric {m.label}")
        loaded = cmp.load(paths, loss or "train_loss")
        result = cmp.compare(loaded, m, by, baseline, cmp.default_loss(loaded, m, loss), power=spec, tune=tuning,
                             pair_by=pair_by, **verdicts)
        _warn(result.all_warnings)
        emit(output, fmt, lambda: tables.render(result, fmt), lambda: tables.print_table(result))


def _verdict_options(margin: str | None, sequential: bool, judge_seeds_max: int | None, alpha: str,
                     loss: str | None) -> dict:
    """compare's keyword arguments for --margin, --sequential, --judge-seeds-max and --alpha, checked."""
    from activation_bench.analysis.loading import is_accuracy
    from activation_bench.analysis.rank import parse_alpha

    if margin is None:
        if sequential or judge_seeds_max is not None:
            raise UsageError(f"{'--sequential' if sequential else '--judge-seeds-max'} judges against a margin: "
                             "give --margin too, e.g. --margin 1.05")
        return {}
    from activation_bench.analysis.sequential import SequentialSpec
    from activation_bench.analysis.verdicts import parse_margin

    if judge_seeds_max is not None and (not sequential or judge_seeds_max < 2):
        raise UsageError(f"--judge-seeds-max {judge_seeds_max}: " + ("needs at least 2 seeds" if sequential else
                         "says when sequential judging stops: give --sequential too"))
    return {"margin": parse_margin(margin, accuracy=is_accuracy(loss or "")), "alpha": parse_alpha(alpha),
            "sequential": SequentialSpec(judge_seeds_max) if sequential else None}


def plot(
    paths: PathsArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Image file: .png, .svg or .pdf.",
                                         show_default=False)],
    by: ByOpt = None,
    loss: Annotated[str, typer.Option("--loss", help="Column: train_loss, val_loss or test_loss; for "
                                      "classification runs val_acc or test_acc (in %, linear axis); with --grads "
                                      "weight_grad_norm (default) or act_norm.", show_default=False)] = "",
    grads: Annotated[bool, typer.Option("--grads", help="Per-layer gradient norms (grads.csv, from "
                                        "log.grad_norms=true) of run or sweep directories instead of losses: "
                                        "a panel per group, a line per hidden layer, median over seeds.")] = False,
    x: Annotated[str | None, typer.Option("--x", help="Sensitivity: the metric against this swept key (e.g. lr) on "
                                          "a log axis, a line per activation (or --by), a panel per task.",
                                          show_default=False)] = None,
    metric: Annotated[str | None, typer.Option(
        "--metric", "-m", help="With --x: the metric drawn; with --tune: the metric the values are chosen by (as "
        "in compare). Default: early_stop where the runs have val_loss, else final.", show_default=False)] = None,
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
        _warn(loaded.warnings)
        if tuning is not None:
            from activation_bench.render.tuned_curves import plot_tuned_curves

            _warn(plot_tuned_curves(loaded, output, tuning, metric, by, loss).notes)
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
    _warn(loaded.warnings)
    if m is None:
        has_val = "val_loss" in loaded.losses
        m = cmp.parse_metric("early_stop" if has_val else "final")
    sensitivity.plot_sensitivity(loaded, output, x, m, cmp.default_loss(loaded, m, loss), by)
    typer.echo(f"wrote {output}", err=True)


def plot_activations(
    names: Annotated[list[str], typer.Argument(help="Activation names (see `actbench activations`), each with "
                                               "optional parameters: leaky_relu:negative_slope=0.2 or "
                                               "softplus:beta=2,threshold=10, or expressions of x as "
                                               "activation=expr takes them: 'x*sigmoid(beta*x):beta=1.5'. Gated "
                                               "ones (glu, swiglu, ...) are not elementwise.", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Image file: .png, .svg or .pdf.",
                                         show_default=False)],
    xmin: Annotated[float, typer.Option("--xmin", help="Left end of the x range.")] = -4.0,
    xmax: Annotated[float, typer.Option("--xmax", help="Right end of the x range.")] = 4.0,
    pdf: Annotated[bool, typer.Option("--pdf/--no-pdf", help="Also draw the standard normal pdf.")] = False,
) -> None:
    """Each activation and its derivative (autograd, float64) over a range, in two panels.

    Examples:

      actbench plot-activations gelu relu gelu_tanh --output acts.png

      actbench plot-activations gelu silu mish --xmin -6 --xmax 3 --pdf --output acts.svg

      actbench plot-activations leaky_relu leaky_relu:negative_slope=0.2 elu:alpha=0.5 -o acts.png

      actbench plot-activations silu "x*sigmoid(1.702*x)" "x*sigmoid(beta*x):beta=2" -o acts.png
    """
    with reported():
        from activation_bench.render import plots

        plots.plot_activations(names, output, (xmin, xmax), pdf)
        typer.echo(f"wrote {output}", err=True)


def report(
    paths: PathsArg,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="The HTML file. Default: report.html inside "
                                                "the first input directory.", show_default=False)] = None,
    metric: Annotated[list[str] | None, typer.Option(
        "--metric", "-m", help="A compare table per metric (repeat): final, best, epoch=K, to=EPS, auc. "
        "Default: final (and early_stop where validation losses exist and compare has it).",
        show_default=False)] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", help="KEY=VALUE of the group the others are compared "
                                                 "to, as in compare.", show_default=False)] = None,
    title: Annotated[str | None, typer.Option("--title", help="The page's title.", show_default=False)] = None,
    loss: CompareLossOpt = None,
    shapes: Annotated[bool, typer.Option("--shapes/--no-shapes", help="Draw the activations and their "
                                         "derivatives (the only section that imports torch).")] = True,
    tune: TuneOpt = None,
    tune_seeds: TuneSeedsOpt = None,
    tune_on: TuneOnOpt = None,
    tune_grid: TuneGridOpt = None,
    margin: Annotated[list[str] | None, typer.Option(
        "--margin", help="A region of practical equivalence (repeat for both kinds of table): a ratio for the loss "
        "tables (1.05), percentage points with 'pp' for the accuracy tables (1pp); each comparison then reads "
        "better, worse, equivalent or undecided, as compare --margin.", show_default=False)] = None,
) -> None:
    """One self-contained HTML page per study: a summary in words, the compare table of each metric
    (the numbers of `compare --format json`), loss curves with seed bands per task, the activations'
    shapes, diverged and incomplete runs, method notes and provenance. Opens offline: CSS and
    figures (SVG) are inline. For classification runs, accuracy tables (test_acc) follow the loss
    tables, and the accuracy curves are drawn beside the validation and test loss curves.

    Examples:

      actbench report runs/my-sweep

      actbench report runs/my-sweep --metric epoch=10 --metric final --baseline activation=relu -o study.html

      actbench report runs/my-lr-sweep --tune lr --baseline activation=relu

      actbench report runs/my-digits-sweep --margin 1.05 --margin 1pp
    """
    import shlex

    with reported():
        from activation_bench.analysis.tune import parse_tune
        from activation_bench.render import report as rep

        tuning = parse_tune(tune, tune_seeds, on=tune_on, grid=tune_grid)
        margins = rep.parse_margins(margin, loss)
        argv = ["actbench", "report", *map(str, paths)]
        argv += [a for m in metric or [] for a in ("--metric", m)]
        for flag, value in (("--baseline", baseline), ("--title", title), ("--output", output)):
            argv += [flag, str(value)] if value is not None else []
        argv += ["--loss", loss] if loss is not None else []
        argv += [] if shapes else ["--no-shapes"]
        argv += [a for k in tuning.keys for a in ("--tune", k)] if tuning else []
        argv += ["--tune-seeds", str(tune_seeds)] if tune_seeds is not None else []
        argv += ["--tune-on", tune_on] if tune_on is not None else []
        argv += ["--tune-grid", tune_grid] if tune_grid is not None else []
        argv += [a for m in margin or [] for a in ("--margin", m)]
        out = rep.write_report(paths, output, metric or None, baseline, title, loss, shapes, shlex.join(argv), tuning,
                               margins)
        typer.echo(f"wrote {out}", err=True)
