"""Typer command `rank` (registered in cli/main.py): rank groups across tasks, Friedman and post-hoc tests.

Heavy imports happen inside the command: scipy and pandas always, scikit-posthocs for the post-hoc
tests, matplotlib only with --plot.
"""

from __future__ import annotations

import typer

from activation_bench.cli.options import (
    CdPlotOpt,
    CompareLossOpt,
    FormatOpt,
    MarginOpt,
    OutputOpt,
    PathsArg,
    PosthocOpt,
    RankAlphaOpt,
    RankByOpt,
    RankMetricOpt,
    TaskOpt,
    TuneGridOpt,
    TuneOnOpt,
    TuneOpt,
    TuneSeedsOpt,
)
from activation_bench.cli.output import emit, warn
from activation_bench.errors import UsageError, reported


def rank(
    paths: PathsArg,
    metric: RankMetricOpt = "final",
    loss: CompareLossOpt = None,
    by: RankByOpt = "activation",
    task: TaskOpt = None,
    posthoc: PosthocOpt = "nemenyi",
    alpha: RankAlphaOpt = "0.05",
    fmt: FormatOpt = "table",
    output: OutputOpt = None,
    plot: CdPlotOpt = None,
    tune: TuneOpt = None,
    tune_seeds: TuneSeedsOpt = None,
    tune_on: TuneOnOpt = None,
    tune_grid: TuneGridOpt = None,
    margin: MarginOpt = None,
) -> None:
    """Which activation is best across many tasks: rank the --by values within each task (mean over
    seeds of the metric; losses on a log10 scale, lowest first; accuracies such as --loss test_acc
    highest first), average the ranks over tasks, and test them
    (Friedman; Nemenyi and Holm-corrected Wilcoxon post-hoc tests), with a critical-difference diagram.

    Examples:

      actbench rank runs/my-sweep

      actbench rank runs/my-sweep --metric epoch=100 --plot cd.png

      actbench rank runs/my-sweep --task data,data.target --format csv --output ranks.csv

      actbench rank runs/my-lr-sweep --metric early_stop --tune lr

      actbench rank runs/my-classification-sweep --metric early_stop --loss test_acc --tune lr --tune-on val_acc

      actbench rank runs/my-sweep --margin 1.05
    """
    with reported():
        from activation_bench.analysis import rank as rk
        from activation_bench.analysis.loading import load
        from activation_bench.analysis.metrics import default_loss, parse_metric
        from activation_bench.analysis.tune import parse_tune
        from activation_bench.render import rank_tables
        from activation_bench.runs import store

        if fmt not in rank_tables.FORMATS:
            raise UsageError(f"unknown format '{fmt}'; valid: {', '.join(rank_tables.FORMATS)}")
        if posthoc not in rk.POSTHOCS:
            raise UsageError(f"unknown --posthoc '{posthoc}'; valid: {', '.join(rk.POSTHOCS)}")
        level = rk.parse_alpha(alpha)
        region = None
        if margin is not None:
            from activation_bench.analysis.loading import is_accuracy
            from activation_bench.analysis.verdicts import parse_margin

            region = parse_margin(margin, accuracy=is_accuracy(loss or ""))
        m = parse_metric(metric)
        tuning = parse_tune(tune, tune_seeds, [by], tune_on, tune_grid)
        if plot is not None:
            from activation_bench.render.plots import check_output

            check_output(plot)
        if output is not None:
            store.check_folder(output)  # before any work
        loaded = load(paths, loss or "train_loss")
        result = rk.rank(loaded, m, by, task, default_loss(loaded, m, loss), level, posthoc, tune=tuning,
                         margin=region)
        warn(result.all_warnings)
        if plot is not None:
            rank_tables.write_cd(result, plot)
            typer.echo(f"wrote {plot}", err=True)
        emit(output, fmt, lambda: rank_tables.render(result, fmt), lambda: rank_tables.print_table(result))
