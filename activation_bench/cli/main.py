"""The `actbench` command line (Typer): the app, its commands in help order, and the entry point.
Thin: every command parses, calls one function and renders. Heavy libraries (torch, hydra, pandas,
matplotlib) are imported inside the commands, so `actbench --help` starts fast."""

from __future__ import annotations

import gc
import os
import sys
from typing import Annotated

import typer

from activation_bench.cli import compare, describe, export, plot, plot_activations, rank, report, run, search, study

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="activation-bench: reproducible experiments comparing activation functions.\n\n"
    "Trains a two-layer MLP regressor (Linear -> activation -> Linear -> 1 output) from Hydra "
    "configs, sweeps grids of activations x data x seeds, and compares the results with paired "
    "statistics.\n\n"
    "Examples:\n\n"
    "  actbench run activation=gelu data=normal\n\n"
    "  actbench sweep 'activation=gelu,relu' 'data=normal,uniform' 'seed=range(10)'\n\n"
    "  actbench compare runs/<sweep> --metric epoch=10",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"actbench {version()}")
        raise typer.Exit()


@app.callback()
def _options(
    _version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                           help="Print the version and exit.")] = False,
) -> None:
    pass


def version() -> str:
    """The installed package's version (its metadata; the package's own number where not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("activation-bench")
    except PackageNotFoundError:
        from activation_bench import __version__

        return __version__


app.command("run", help=run.RUN_HELP)(run.run)
app.command("sweep", help=run.SWEEP_HELP)(run.sweep)
app.command("activations", help=describe.ACTIVATIONS_HELP)(describe.activations)
app.command("config", help=describe.CONFIG_HELP)(describe.show_config)
app.command("compare")(compare.compare)
app.command("plot")(plot.plot)
app.command("plot-activations")(plot_activations.plot_activations)
app.command("report")(report.report)
app.command("rank")(rank.rank)
app.command("search", help=search.SEARCH_HELP)(search.search)
app.add_typer(study.app, name="study")
app.add_typer(export.app, name="export")


def main() -> None:
    """Entry point of the `actbench` script."""
    if _trains(sys.argv[1:]):
        _import_torch_frozen()
    try:
        app(prog_name="actbench")
    except SystemExit as exc:
        _exit(exc.code)
    _exit(0)


# the commands that train (and so import torch whatever they are given); `study run` only, as
# `study tables` reads CSVs
_TRAINING = (("run",), ("sweep",), ("search",), ("study", "run"))


def _trains(args: list[str]) -> bool:
    return "--help" not in args and any(tuple(args[:len(c)]) == c for c in _TRAINING)


def _import_torch_frozen() -> None:
    """Import torch with the cyclic garbage collector paused, then freeze what is loaded.

    torch leaves some 170,000 objects the collector tracks (190,000 with the modules a sweep
    loads), and every full collection after that walks them all (about 70 ms each on a 2-core
    machine); composing and writing a sweep's configs set off several. 0.30 s of a one-epoch,
    480-member sweep went to the collector, and the import itself ran 0.1 s slower with it on.
    Frozen objects (`gc.freeze`) are left out of later collections; what is frozen here is what
    the import left, which lives as long as the process. Measured in docs/performance.md
    ("Fixed costs of a process").
    """
    gc.disable()
    try:
        import torch  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def _exit(code: int | str | None) -> None:
    """Exit with code; once torch is loaded, skip the interpreter's teardown.

    Tearing down a process that imported torch takes about 0.45 s on a 2-core machine (torch's
    modules and libraries being finalised), a cost paid by every `run` and `sweep`. By the time a
    command returns, every file it wrote is closed and synced and its threads are joined, so only
    the standard streams need flushing before `os._exit`.
    """
    if "torch" not in sys.modules:
        sys.exit(code)
    if isinstance(code, str):  # sys.exit("message"): print it, exit 1
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`actbench ... | head`): nothing to flush to
            pass
    os._exit(code or 0)
