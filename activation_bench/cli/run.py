"""The commands that make runs: `run`, `sweep` (describe.py: `activations`, `config`).

Thin: parse, call the runs layer, render. Heavy libraries are imported inside the commands."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from activation_bench.cli.options import KEYS_HELP, OverridesArg, RunsDirOpt
from activation_bench.errors import UsageError, reported

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg
    from activation_bench.engine.train import RunResult
    from activation_bench.runs.orchestrate import SweepPlan


RUN_HELP = (
    "Train one model from the composed config and write runs/<name>/ "
    "(config.yaml, losses.csv, summary.json).\n\n"
    "Examples:\n\n"
    "  actbench run activation=gelu data=normal\n\n"
    "  actbench run activation=relu data=uniform epochs=30 lr=0.01 seed=3\n\n"
    "  actbench run activation=leaky_relu activation.negative_slope=0.2 --name lrelu-test\n\n"
    "  actbench run --config runs/<run>/config.yaml epochs=2000   (re-run a saved run, overrides on top)\n"
    + KEYS_HELP
)


def run(
    overrides: OverridesArg = None,
    name: Annotated[str | None, typer.Option(
        help="Run directory name (default: <date>_<time>_<activation>_<data>_s<seed>).")] = None,
    runs_dir: RunsDirOpt = Path("runs"),
    memory_mb: Annotated[float | None, typer.Option(
        min=0.001, help="Memory budget of the run (MB); default: the memory available on this machine.",
        show_default=False)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    config_file: Annotated[Path | None, typer.Option(
        "--config", help="A saved run's config.yaml to re-run (overrides apply on top of it).",
        show_default=False)] = None,
) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from activation_bench.engine.resume import Preempted
    from activation_bench.runs import checkpoint_files as checkpoint
    from activation_bench.runs import single

    with reported():
        cfg, path = single.prepare_run(overrides or [], runs_dir, name, memory_mb, config_file)
        progress = Progress(
            TextColumn("training"), BarColumn(), TextColumn("epoch {task.completed:.0f}/{task.total:.0f}"),
            TextColumn("loss {task.fields[loss]:.4g}"), TimeElapsedColumn(), TimeRemainingColumn(),
            console=Console(stderr=True), disable=quiet,
        )
        task = progress.add_task("train", total=cfg.epochs, loss=float("nan"))

        def on_epoch(done: int, total: int, loss: float) -> None:
            progress.update(task, completed=done, loss=loss)

        try:
            with checkpoint.handling_signals(), progress:
                path, result = single.run_one(cfg, path, on_epoch)
        except Preempted as stop:
            typer.echo(f"stopped by {checkpoint.signal_name(stop.signum)}: checkpoint written at epoch "
                       f"{stop.epoch}/{stop.epochs}; run the same command again to resume", err=True)
            raise typer.Exit(checkpoint.exit_code(stop.signum)) from None
        except KeyboardInterrupt:
            typer.echo("interrupted at once: no run directory written (a checkpoint written earlier is kept)", err=True)
            raise typer.Exit(130) from None
    _print_run_summary(path, cfg, result)


def _print_run_summary(path: Path, cfg: Cfg, result: RunResult) -> None:
    from rich.table import Table

    from activation_bench import terminal
    from activation_bench.cfg import activation_label
    from activation_bench.engine.models import registry
    from activation_bench.runs.contents import held_out

    table = Table(title="run summary", show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)  # values are names and paths
    act = activation_label(cfg.activation)
    tl = result.train_loss
    best = min((v for v in tl if v == v), default=float("nan"))
    info = result.data_info or {}
    data = (f"function {cfg.data.fn}" if cfg.data.name == "function" else
            f"{cfg.data.name} ({info['characters']:,} characters, {info['vocab_size']} distinct)"
            if "vocab_size" in info else f"{cfg.data.name} (target {cfg.data.target})")
    rows = [
        ("activation", str(act)), ("data", data),
        ("seed", str(cfg.seed)), ("epochs", f"{len(tl)}/{cfg.epochs}"), ("lr", f"{cfg.lr:g}"),
        ("final train_loss", f"{tl[-1]:.6g}"), ("best train_loss", f"{best:.6g}"),
    ]
    if result.val_loss:
        rows.append(("final val_loss", f"{result.val_loss[-1]:.6g}"))
    family = registry.of(cfg)
    model = family.run_row(cfg.model)
    if model is not None:
        rows.append(("model", model))
    rows += family.info_rows(result.model_info)
    held = held_out(result)
    if held:
        def g(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.6g}"

        if "final_test_acc" in held:  # a classifier
            def pct(v: float | None) -> str:
                return "n/a" if v is None else f"{100 * v:.2f}%"

            classes = held["data"].get("n_classes") or held["data"].get("vocab_size")
            rows.append(("final test_loss", f"{g(held['final_test_loss'])} (accuracy {pct(held['final_test_acc'])}, "
                         f"{classes} classes)"))
            if held["early_stop_epoch"]:
                rows.append(("early stop", f"epoch {held['early_stop_epoch']}: test_loss "
                             f"{g(held['early_stop_test_loss'])} (accuracy {pct(held['early_stop_test_acc'])})"))
        else:
            rows.append(("final test_loss", f"{g(held['final_test_loss'])} (RMSE {g(held['final_test_rmse'])} "
                         f"in {held['data']['target']}'s units)"))
        if held["early_stop_epoch"] and "final_test_acc" not in held:
            rows.append(("early stop", f"epoch {held['early_stop_epoch']}: test_loss "
                         f"{g(held['early_stop_test_loss'])} (RMSE {g(held['early_stop_test_rmse'])})"))
    if result.learned:  # activation=expr, activation.learnable=true: the values at the end, per hidden layer
        rows.append(("learned", ", ".join(f"{k}={'/'.join(f'{v:.6g}' for v in vals)}"
                                          for k, vals in result.learned.items())))
    rows += [("parameters", str(result.n_params)), ("status", result.status),
             ("wall time", f"{result.wall_time_s:.2f} s"), ("run directory", str(path))]
    if result.engine != "eager" or cfg.get("engine") == "compiled":  # what ran, where compiled was used or asked for
        rows.insert(-2, ("engine", result.engine))
    for k, v in rows:
        table.add_row(k, v)
    terminal.print_table(table)
    if result.status == "diverged":
        typer.echo(f"diverged at epoch {result.diverged_epoch} (loss NaN, infinite or 1e8 x epoch 1's); stopped early",
                   err=True)
    typer.echo(str(path))


SWEEP_HELP = (
    "Run a grid of configs: Hydra's sweep syntax (comma lists, range(), choice(), glob()), "
    "expanded to the cartesian product. Members sharing shapes and optimiser settings train together "
    "as one stacked batch. Re-running the same command resumes: finished members are skipped.\n\n"
    "Quote sweep values in the shell.\n\n"
    "Examples:\n\n"
    "  actbench sweep 'activation=gelu,relu' 'data=normal,uniform' 'seed=range(30)' epochs=1000\n\n"
    "  actbench sweep 'activation=glob(*)' 'lr=1e-3,1e-2' 'seed=range(10)'\n\n"
    "  actbench sweep 'activation=relu,gelu,expr' 'activation.fn=\"x*sigmoid(x)\",\"sin(x)*x\"' 'seed=range(5)'\n\n"
    "  actbench sweep 'activation=gelu,relu' 'seed=range(30)' --launcher joblib --jobs 2\n\n"
    "  actbench sweep ... --launcher submitit_slurm hydra.launcher.partition=gpu\n\n"
    "  actbench sweep 'activation=gelu,relu' 'lr=1e-3,1e-2' 'seed=0,1,2,3' data=digits --tune lr --tune-seeds 2 "
    "--metric early_stop   (tune, then judge: docs/tuning.md)\n"
    + KEYS_HELP
)


def sweep(
    overrides: OverridesArg = None,
    name: Annotated[str | None, typer.Option(
        help="Sweep directory name (default: derived from the overrides).")] = None,
    runs_dir: RunsDirOpt = Path("runs"),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the grid; train nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Re-run members that already finished.")] = False,
    launcher: Annotated[str | None, typer.Option(
        help="Hand groups of members to a Hydra launcher: basic, joblib, submitit_local, submitit_slurm "
        "(needs the [cluster] extra). hydra.launcher.* overrides configure it.")] = None,
    jobs: Annotated[int, typer.Option(min=1, help="Groups (Hydra jobs) with --launcher.")] = max(
        1, os.cpu_count() or 1),
    memory_mb: Annotated[float, typer.Option(
        min=0.001, help="Memory budget of one training stack (MB; never more than the machine has "
        "available); larger sweeps are chunked, a member larger than the budget is refused.")] = 1024.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    tune: Annotated[list[str] | None, typer.Option(
        "--tune", help="Tune, then judge: train the tuning seeds over the whole grid, choose each group's value "
        "of this swept key as `compare --tune` does (same options, same code), then train the judging seeds "
        "at the chosen values only. Repeatable.", show_default=False)] = None,
    tune_seeds: Annotated[str | None, typer.Option(
        "--tune-seeds", help="With --tune: the K smallest seeds tune (default: a third, at least 2).",
        show_default=False)] = None,
    tune_on: Annotated[str | None, typer.Option(
        "--tune-on", help="With --tune: choose on val_loss (default) or val_acc.", show_default=False)] = None,
    metric: Annotated[str | None, typer.Option(
        "--metric", "-m", help="With --tune: the metric the choice applies to the validation column, as compare's "
        "--metric (default: final).", show_default=False)] = None,
    halving: Annotated[int | None, typer.Option(
        "--halving", help="With --tune: successive halving in the tuning stage: every setting trains to a first "
        "rung of epochs, the best 1/ETA of each group's settings go on from their checkpoints, up to the full "
        "run (compare such a sweep with --tune-grid own; docs/tuning.md).", show_default=False)] = None,
    judge_seeds_max: Annotated[int | None, typer.Option(
        "--judge-seeds-max", help="With --tune and --margin: sequential judging, at most N judging seeds.",
        show_default=False)] = None,
    look_every: Annotated[int | None, typer.Option(
        "--look-every", help="Sequential judging: judging seeds added K at a time; after each batch the groups "
        "whose comparison with the baseline is decided (anytime-valid) stop.", show_default=False)] = None,
    margin: Annotated[str | None, typer.Option(
        "--margin", help="Sequential judging: the region of practical equivalence, as compare's --margin.",
        show_default=False)] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", help="Sequential judging: the baseline group, as compare's (default: its default).",
        show_default=False)] = None,
    loss: Annotated[str | None, typer.Option(
        "--loss", help="Sequential judging: the column the verdicts judge, as compare's --loss: a loss (ratio "
        "margin) or val_acc/test_acc (margin in percentage points). Default: compare's (train_loss; test_loss "
        "for --metric early_stop).", show_default=False)] = None,
) -> None:
    from activation_bench.cli import judging, tuned
    from activation_bench.config.grid import hydra_settings, refuse_hydra_settings
    from activation_bench.runs import launching, memory, orchestrate

    all_overrides = list(overrides or [])
    hydra_overrides = hydra_settings(all_overrides)
    grid_overrides = [o for o in all_overrides if o not in hydra_overrides]
    with reported():
        if not launcher:
            refuse_hydra_settings(hydra_overrides)
        if launcher:
            launching.check_launcher(launcher)
        if not grid_overrides:
            raise UsageError("nothing to sweep: give overrides such as 'seed=range(10)'")
        tuning = tuned.parse(tune, tune_seeds, tune_on, metric, halving, force)
        seq = judging.parse(judge_seeds_max, look_every, margin, baseline, tuning is not None, loss)
        p = orchestrate.plan(grid_overrides, runs_dir, name, tuned=tuning is not None)
        if tuning is not None:
            launch = launching.Launch(launcher, jobs, tuple(hydra_overrides)) if launcher else None
            tuned.sweep(p, tuning, dry_run, force, launch, memory_mb, _run_sweep_with(
                launcher, jobs, hydra_overrides, memory_mb, force, quiet), seq)
            return
        todo = orchestrate.pending(p, force)
        if dry_run:
            _print_grid(p, todo)
            return
        # SLURM jobs run on other machines: only --memory-mb applies there
        memory.check_memory([p.cfgs[i] for i in todo], memory_mb, local=launcher != "submitit_slurm")
        orchestrate.write_sweep_file(p)
        _run_sweep(p, todo, launcher, jobs, hydra_overrides, memory_mb, force, quiet)


def _run_sweep_with(launcher: str | None, jobs: int, hydra_overrides: list[str], memory_mb: float, force: bool,
                    quiet: bool) -> Callable[[SweepPlan, list[int], list[int], str], None]:
    """A tuned sweep's stage runner: _run_sweep with this command's settings."""
    def run_stage(p: SweepPlan, todo: list[int], needed: list[int], stage: str) -> None:
        _run_sweep(p, todo, launcher, jobs, hydra_overrides, memory_mb, force, quiet, needed=needed, stage=stage)

    return run_stage


def _print_grid(p: SweepPlan, todo: list[int]) -> None:
    from rich.table import Table

    from activation_bench import terminal
    from activation_bench.data.shapes import filled_keys, value_at

    typer.echo(f"{p.directory}: {len(p.members)} members, {len(todo)} to run")
    table = Table()
    filled = [k for k in filled_keys(p.overrides) if k not in p.keys]  # ${data:NAME}: each member's value
    for header in ("#", *p.keys, *filled, "state"):
        table.add_column(header, no_wrap=True)
    todo_set = set(todo)
    for i, lab in enumerate(p.labels[:20]):
        table.add_row(str(i), *[lab.get(k, "") for k in p.keys], *[value_at(p.cfgs[i], k) for k in filled],
                      "to run" if i in todo_set else "done")
    terminal.print_table(table)
    if len(p.members) > 20:
        typer.echo(f"... and {len(p.members) - 20} more")


def _run_sweep(p: SweepPlan, todo: list[int], launcher: str | None, jobs: int, hydra_overrides: list[str],
               memory_mb: float, force: bool, quiet: bool, threads: int = 0, needed: list[int] | None = None,
               stage: str = "sweep") -> None:
    """Train a sweep's members here or through a launcher (whose jobs get `threads` torch threads
    where given, else a share of the cores). `needed`: the members this stage of a tuned sweep
    needs (default: all; `todo` is among them), counted in the progress and the last line."""
    import time

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from activation_bench.engine.resume import Preempted
    from activation_bench.runs import checkpoint_files as checkpoint
    from activation_bench.runs import launching, orchestrate
    from activation_bench.runs.progress import SweepProgress

    console = Console(stderr=True)
    total = len(p.members) if needed is None else len(needed)
    skipped = total - len(todo)
    if skipped:
        typer.echo(f"resuming {p.directory}: {skipped} finished members skipped, {len(todo)} to run", err=True)
    progress = Progress(
        TextColumn(stage), BarColumn(bar_width=20), TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=quiet,
    )
    task = progress.add_task("sweep", total=total, completed=skipped, status=f"{skipped}/{total} members")
    start = time.perf_counter()

    def on_progress(now: SweepProgress) -> None:
        parts = [f"{skipped + now.finished}/{total} members"]
        if now.epochs:  # a stack is training: where it is
            stack = f"stacks {now.stack}+{now.beside}" if now.beside else f"stack {now.stack}"
            parts.append(f"{stack}/{now.stacks} epoch {now.epoch}/{now.epochs}")
        seconds = time.perf_counter() - start
        if now.steps and seconds > 0:
            parts.append(f"{now.steps / seconds:,.0f} model-steps/s")
        progress.update(task, completed=skipped + now.members, status=", ".join(parts))

    def notice(line: str) -> None:
        progress.console.print(line, soft_wrap=True, markup=False, highlight=False)

    try:
        with progress:
            if todo and launcher:
                launching.launch(p, todo, launcher, jobs, hydra_overrides, memory_mb, force, on_progress, notice,
                                   threads)
            elif todo:
                with checkpoint.handling_signals():
                    orchestrate.train_members(p, todo, memory_mb, force, on_progress, notice, beside=True)
    except Preempted as stop:
        path, have, missing = orchestrate.build_results(p, needed)
        where = f"; checkpoint written at epoch {stop.epoch}/{stop.epochs}" if stop.epochs else ""
        typer.echo(f"interrupted: {have}/{total} members done; run the same command again to resume "
                   f"(stopped by {checkpoint.signal_name(stop.signum)}{where})", err=True)
        raise typer.Exit(checkpoint.exit_code(stop.signum)) from None
    except KeyboardInterrupt:
        path, have, missing = orchestrate.build_results(p, needed)
        typer.echo(f"interrupted: {have}/{total} members done; run the same command again to resume", err=True)
        raise typer.Exit(130) from None
    with reported():
        path, have, missing = orchestrate.build_results(p, needed)
    typer.echo(f"{have}/{total} members done{'' if needed is None else f' ({stage})'}; results: {path}")
    if missing:
        typer.echo(f"{missing} members missing; run the same command again to resume", err=True)
        raise typer.Exit(1)
