"""Typer sub-app `export` (registered in cli/main.py): `export mlflow` sends sweeps to MLflow.

mlflow is imported inside the command (through activation_bench.export.mlflow), never at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from activation_bench.errors import reported

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="Send finished sweeps and runs to an experiment tracker (MLflow).")


@app.command("mlflow")
def mlflow(
    paths: Annotated[list[Path], typer.Argument(help="Sweep directories, run directories or both.",
                                                show_default=False)],
    tracking_uri: Annotated[str | None, typer.Option(
        "--tracking-uri", help="Where to log: any URI MLflow takes (sqlite:///FILE, http://host:5000, ...). "
        "Default: MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory.",
        show_default=False)] = None,
    experiment: Annotated[str | None, typer.Option(
        "--experiment", help="The MLflow experiment for everything. Default: each sweep directory's name "
        "(for a run directory outside a sweep, the name of the directory holding it).",
        show_default=False)] = None,
    every: Annotated[int, typer.Option(
        "--every", min=1, help="Keep every K-th epoch of each loss (and accuracy) history, plus the last (for "
        "long runs); the final, best and early-stop metrics still come from every epoch.")] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Send sweeps to MLflow: one parent run per sweep (params: the sweep's overrides; artifacts:
    results.csv, sweep.yaml, report.html), one child run per member (params: its resolved config;
    metrics: train_loss, val_loss, test_loss, and for classification runs val_acc and test_acc, by
    epoch, and final/best/early-stop values; tags: config hash, status, version; artifact:
    config.yaml). Exporting again adds only members whose config hash the experiment lacks;
    incomplete runs are skipped and named. Needs the [mlflow] extra.

    Examples:

      actbench export mlflow runs/my-sweep

      actbench export mlflow runs/a runs/b --experiment activations --tracking-uri http://localhost:5000

      mlflow ui --backend-store-uri sqlite:///mlflow.db
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("export"), BarColumn(bar_width=20), MofNCompleteColumn(), TextColumn("members"),
                   TimeElapsedColumn(), console=Console(stderr=True), disable=quiet)
    task: list = []

    def on_progress(done: int, total: int) -> None:
        if not task:  # shown once the inputs are read and the tracking store answers
            bar.start()
            task.append(bar.add_task("export", total=total))
        bar.update(task[0], completed=done)

    with reported():
        from activation_bench.export import mlflow as ex

        try:
            result = ex.export(paths, tracking_uri, experiment, every, progress=on_progress)
        finally:
            if task:
                bar.stop()
    for line in result.skipped:
        typer.echo(f"warning: {line}", err=True)
    names = ", ".join(result.experiments)
    typer.echo(f"{result.added} members exported, {result.present} already there, {len(result.skipped)} skipped; "
               f"experiment{'s' if len(result.experiments) > 1 else ''} {names} at {result.tracking_uri}")
