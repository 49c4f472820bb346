"""Typer sub-app `study` (registered in cli/main.py): a whole study from one YAML file.

`study run` plans every sweep, trains (or resumes) what is missing, then writes the tables, figures
and report.html; `study tables` only renders, from finished sweeps. The study layer does the work;
training goes through the `sweep` command's own runner, so a study's sweep is exactly the sweep its
command line would make.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from activation_bench.errors import UsageError, reported
from activation_bench.host import torch_threads

if TYPE_CHECKING:
    from activation_bench.study.plan import PlannedSweep
    from activation_bench.study.spec import Study

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="A whole study from one YAML file: its sweeps, tuned comparisons, combined tables, "
                  "rankings, figures and report.html (docs/studies.md).")

FileArg = Annotated[Path, typer.Argument(help="The study file (YAML).", show_default=False)]
RunsDirOpt = Annotated[Path | None, typer.Option(
    "--runs-dir", help="Where the sweeps go (default: the file's runs_dir, relative to the working directory).",
    show_default=False)]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", help="The folder for tables, figures and report.html (default: the file's output, "
    "relative to the study file's folder).", show_default=False)]


@app.command("run")
def run(
    study_file: FileArg,
    hydra_overrides: Annotated[list[str] | None, typer.Argument(
        help="hydra.launcher.* settings for --launcher.", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan (sweeps, members to train, "
                                          "members done, files to write); train and write nothing.")] = False,
    runs_dir: RunsDirOpt = None,
    output: OutputOpt = None,
    launcher: Annotated[str | None, typer.Option(
        help="Send each sweep's members to a Hydra launcher, as `sweep --launcher` does: basic, joblib, "
        "submitit_local, submitit_slurm (the [cluster] extra).", show_default=False)] = None,
    jobs: Annotated[int, typer.Option(min=1, help="Groups (Hydra jobs) per sweep with --launcher.")] = max(
        1, os.cpu_count() or 1),
    memory_mb: Annotated[float, typer.Option(min=0.001, help="Memory budget of one training stack (MB), "
                                             "as in sweep.")] = 1024.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    """Run (or resume) every sweep of a study file, then write every table (markdown, CSV, JSON),
    figure and report.html. Finished members are never trained again: re-running a finished study
    trains nothing and writes the same bytes.

    Examples:

      actbench study run docs/studies/gelu-vs-relu/study.yaml --dry-run

      actbench study run my-study.yaml

      actbench study run my-study.yaml --launcher joblib hydra.launcher.n_jobs=2
    """
    with reported():
        from activation_bench.config.grid import hydra_settings, refuse_hydra_settings
        from activation_bench.runs import launching, memory, orchestrate
        from activation_bench.study import loading, plan

        extra = list(hydra_overrides or [])
        settings = hydra_settings(extra)
        if settings != extra:
            bad = next(o for o in extra if o not in settings)
            raise UsageError(f"'{bad}': a study's sweeps are set in its file; only hydra.launcher.* settings "
                             "go on the command line")
        if not launcher:
            refuse_hydra_settings(settings)
        else:
            launching.check_launcher(launcher)
        study = loading.load(study_file, runs_dir, output)
        if dry_run:
            code = plan.imports(study)
            if code:  # said before planning, which imports them and runs the models' constructors
                typer.echo("imports (runs the code of): " + ", ".join(f"{m} ({k})" for m, k in code))
        sweeps = plan.plan(study)
        if dry_run:
            _print_plan(study, sweeps)
            return
        for s in sweeps:
            memory.check_memory([s.plan.cfgs[i] for i in s.todo], memory_mb, local=launcher != "submitit_slurm")
        from activation_bench.cli.run import _run_sweep

        tuned = plan.staged_sweeps(study, sweeps)
        with _threads(study.spec.threads):
            for k, s in enumerate(sweeps):
                if k in tuned or (not s.todo and (s.plan.directory / "results.csv").is_file()):
                    continue  # finished: its results.csv is already the one the sweep writes
                if not quiet:
                    typer.echo(f"sweep {s.name}: {len(s.todo)} of {len(s.plan.members)} members to train", err=True)
                orchestrate.write_sweep_file(s.plan)
                _run_sweep(s.plan, s.todo, launcher, jobs, settings, memory_mb, False, quiet, study.spec.threads or 0)
            if tuned:
                _run_tuned(study, sweeps, tuned, launcher, jobs, settings, memory_mb, quiet)
        _render(study)


def _run_tuned(study: Study, sweeps: list[PlannedSweep], tuned: set[int], launcher: str | None, jobs: int,
               settings: list[str], memory_mb: float, quiet: bool) -> None:
    """The tuned sweeps (tune, then judge): their tuning stages, the choices, their judging stages."""
    import dataclasses

    from activation_bench.cli import judging
    from activation_bench.cli import tuned as staged_cli
    from activation_bench.cli.run import _run_sweep
    from activation_bench.runs import launching, orchestrate
    from activation_bench.study import plan

    plans = [s.plan for s in sweeps]
    rules = plan.tunings(study, sweeps)
    staged_cli.tunings_record(plans, rules, tuned)
    for k in sorted(tuned):
        orchestrate.write_sweep_file(plans[k])

    def run_stage(k: int, todo: list[int], needed: list[int], stage: str) -> None:
        if not quiet:
            typer.echo(f"sweep {sweeps[k].name}, {stage}: {len(todo)} of {len(needed)} members to train", err=True)
        _run_sweep(plans[k], todo, launcher, jobs, settings, memory_mb, False, quiet, study.spec.threads or 0,
                   needed=needed, stage=stage)

    def say(line: str) -> None:
        typer.echo(line, err=True)

    last: dict[int, list[int]] = {}
    launch = launching.Launch(launcher, jobs, tuple(settings), study.spec.threads or 0) if launcher else None
    for j, t in enumerate(rules):  # a sweep's own halving: its rungs before the last (cli/tuned.py)
        if t.halving:
            last[t.sweeps[0]] = staged_cli.run_halving(plans[t.sweeps[0]], t, t.halving, memory_mb, say, launch)
            rules[j] = dataclasses.replace(t, spec=dataclasses.replace(t.spec, grid="own"))
    judge = judging.study_judges(study, [s.name for s in sweeps], plans, rules, run_stage, say)
    staged_cli.run_staged(plans, rules, tuned, False, run_stage, say, last, judge)


@contextlib.contextmanager
def _threads(threads: int | None) -> Iterator[None]:
    """Train at the study's torch thread count (a launcher's jobs get it too), then restore this
    process's count."""
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@app.command("tables")
def tables(
    study_file: FileArg,
    runs_dir: RunsDirOpt = None,
    output: OutputOpt = None,
) -> None:
    """Write a study's tables, figures and report.html from its finished sweeps, training nothing;
    names the sweeps that are not finished.

    Examples:

      actbench study tables my-study.yaml

      actbench study tables my-study.yaml --output tables-copy
    """
    with reported():
        from activation_bench.study import loading, plan

        study = loading.load(study_file, runs_dir, output)
        sweeps = plan.plan(study)
        left = {k: len(s.todo) for k, s in enumerate(sweeps)} | _tuned_left(study, sweeps)[1]
        missing = [f"{s.name} ({left[k]} of {len(s.plan.members)} members in {s.plan.directory})"
                   for k, s in enumerate(sweeps) if left[k] or not (s.plan.directory / "results.csv").is_file()]
        if missing:
            raise UsageError(f"not finished: {'; '.join(missing)}: run `actbench study run {study_file}`")
        _render(study)


def _render(study: Study) -> None:
    from activation_bench.study import outputs

    built = outputs.build(study)
    for line in built.warnings:
        typer.echo(f"warning: {line}", err=True)
    paths = outputs.write(study, built)
    typer.echo(f"wrote {len(paths)} files to {study.output}", err=True)


def _tuned_left(study: Study, sweeps: list[PlannedSweep]) -> tuple[list[str], dict[int, int]]:
    """The dry run's line of each tuned sweep, and its members left to train: the tuning stage's and,
    once it has chosen, the judging stage's (before, the judging stage's estimate)."""
    from activation_bench.cli import judging
    from activation_bench.cli import tuned as staged_cli
    from activation_bench.study import plan

    tuned = plan.staged_sweeps(study, sweeps)
    if not tuned:
        return [], {}
    plans = [s.plan for s in sweeps]
    rules = plan.tunings(study, sweeps)
    sequential = judging.study_settings(study, [s.name for s in sweeps], rules)
    st = staged_cli.settled(plans, staged_cli.stages(plans, rules, tuned), sequential)
    lines = [staged_cli.plan_line(plans[k], s, False) for k, s in st.items()]
    lines += [staged_cli.halving_line(plans[t.sweeps[0]], t) for t in rules if t.halving]
    left = {k: staged_cli.to_run(plans[k], s, False) for k, s in st.items()}
    if any(s.judging is None for s in st.values()):  # the sweeps' bounds overlap where a grid is split
        low, high = staged_cli.judging_range(plans, rules)
        lines.append(f"judging stages together: {low:,} to {high:,} members, once the tuning stages have chosen "
                     "(each sweep's row counts its own most)")
    return lines, left


def _print_plan(study: Study, sweeps: list[PlannedSweep]) -> None:
    from rich.table import Table

    from activation_bench import terminal

    lines, tuned_left = _tuned_left(study, sweeps)
    left = {k: len(s.todo) for k, s in enumerate(sweeps)} | tuned_left
    table = Table(title=f"study {study.path}")
    for header in ("sweep", "directory", "members", "done", "to train"):
        table.add_column(header, no_wrap=True)
    for k, s in enumerate(sweeps):
        n = len(s.plan.members)  # a tuned sweep's members: its full grid's (the line below: its stages)
        table.add_row(s.name, str(s.plan.directory), str(n), str(n - len(s.todo)), str(left[k]))
    terminal.print_table(table)
    for line in lines:
        typer.echo(line)
    total = sum(left.values())
    n = study.spec.threads
    at = f" at {torch_threads(n)} (the file's threads)" if n else ""
    typer.echo(f"{total} members to train{at}; then {len(study.files())} files in {study.output}: "
               f"{', '.join(study.files())}")
