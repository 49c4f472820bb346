"""Typer command `report` (registered in cli/main.py): one self-contained HTML page of a study's
compare tables, ranking, curves, shapes and provenance.

The page's libraries (pandas, scipy, matplotlib, jinja2; torch for the shapes only) are imported
inside the command. The options are declared in cli/options.py.
"""

from __future__ import annotations

import typer

from activation_bench.cli.options import (
    CompareLossOpt,
    PathsArg,
    ReportBaselineOpt,
    ReportMarginOpt,
    ReportMetricOpt,
    ReportOutputOpt,
    ShapesOpt,
    TitleOpt,
    TuneGridOpt,
    TuneOnOpt,
    TuneOpt,
    TuneSeedsOpt,
)
from activation_bench.errors import reported


def report(
    paths: PathsArg,
    output: ReportOutputOpt = None,
    metric: ReportMetricOpt = None,
    baseline: ReportBaselineOpt = None,
    title: TitleOpt = None,
    loss: CompareLossOpt = None,
    shapes: ShapesOpt = True,
    tune: TuneOpt = None,
    tune_seeds: TuneSeedsOpt = None,
    tune_on: TuneOnOpt = None,
    tune_grid: TuneGridOpt = None,
    margin: ReportMarginOpt = None,
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
