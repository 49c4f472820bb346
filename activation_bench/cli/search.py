"""`actbench search`: screen candidate activations by successive halving and judge the survivors
against relu, gelu, silu and tanh on fresh seeds. Thin: parse, call activation_bench.search, render."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from activation_bench.cli.options import OverridesArg, RunsDirOpt
from activation_bench.errors import reported

if TYPE_CHECKING:
    from activation_bench.search.driver import Search

SEARCH_HELP = (
    "Search for activations: draw candidates from a space, train each distinct one (candidates "
    "that behave the same on the probe points are trained once), keep the best --keep of each rung "
    "for a longer rung on more seeds, and judge the survivors with relu, gelu, silu and tanh on "
    "--final-seeds fresh seeds. The overrides choose the task and the first rung's budget. A rung "
    "selects on the geometric mean of the final validation loss over the seeds (lowest), or with "
    "--select-on val_acc (classification tasks) the mean final validation accuracy (highest).\n\n"
    "Writes DIR/NAME/candidates.csv (fn, same_as, status, reason, rung, score; mean_val_acc in "
    "place of score with --select-on val_acc) and one sweep directory per rung (rung1, rung2, ...) "
    "that compare, rank and report read. Run the same command again to resume.\n\n"
    "Examples:\n\n"
    "  actbench search data=function data.fn=exp_sin epochs=30 batch_size=64 --candidates 500\n\n"
    "  actbench search data=diabetes epochs=50 --space my_space.yaml --rungs 2\n\n"
    "  actbench search data=digits epochs=20 --select-on val_acc --candidates 200\n\n"
    "  actbench compare runs/<search>/rung3 --loss test_loss --metric final --baseline activation=relu\n\n"
    "  actbench compare runs/<search>/rung3 --loss test_acc --metric final --baseline activation=relu"
)


def search(
    overrides: OverridesArg = None,
    space: Annotated[str, typer.Option(
        help="core (Ramachandran et al. 2017's b(u1(x), u2(x))) or a YAML file with lists 'unary' (in x) "
        "and 'binary' (in x1, x2).")] = "core",
    candidates: Annotated[int | None, typer.Option(
        help="Draw this many candidates (seeded by --draw-seed); default: the whole space.")] = None,
    draw_seed: Annotated[int, typer.Option(help="Seed of the candidate draw.")] = 0,
    seeds: Annotated[int, typer.Option(help="Seeds per candidate in rung 1 (doubled each rung).")] = 2,
    rungs: Annotated[int, typer.Option(help="Rungs, the last being the fresh-seed judgement (at least 2).")] = 3,
    keep: Annotated[float, typer.Option(help="Fraction of a rung's candidates that go on to the next.")] = 0.25,
    final_seeds: Annotated[int, typer.Option(help="Fresh seeds of the final rung.")] = 10,
    select_on: Annotated[str, typer.Option(
        "--select-on", help="Select each rung on val_loss (geometric mean over the seeds, lowest) or val_acc "
        "(classification tasks: mean accuracy over the seeds, highest).")] = "val_loss",
    name: Annotated[str | None, typer.Option(
        help="Search directory name (default: derived from the settings).")] = None,
    runs_dir: RunsDirOpt = Path("runs"),
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Count the candidates and show the rungs; train nothing.")] = False,
    launcher: Annotated[str | None, typer.Option(
        help="Hand each rung's members to a Hydra launcher, as `actbench sweep --launcher` does.")] = None,
    jobs: Annotated[int, typer.Option(min=1, help="Groups (Hydra jobs) with --launcher.")] = max(
        1, os.cpu_count() or 1),
    memory_mb: Annotated[float, typer.Option(
        min=0.001, help="Memory budget of one training stack (MB), as for a sweep.")] = 1024.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    from activation_bench.cli.run import _run_sweep
    from activation_bench.config.grid import hydra_settings, refuse_hydra_settings
    from activation_bench.runs import memory, orchestrate
    from activation_bench.search import driver

    keep_freed_memory()
    all_overrides = list(overrides or [])
    hydra_overrides = hydra_settings(all_overrides)
    settings = driver.Settings(tuple(o for o in all_overrides if o not in hydra_overrides), space, candidates,
                               draw_seed, seeds, rungs, keep, final_seeds, select_on)
    with reported():
        if launcher:
            orchestrate.check_launcher(launcher)
        else:
            refuse_hydra_settings(hydra_overrides)
        s = driver.prepare(settings, runs_dir, name)
        first = driver.plan_rung(s, s.rungs[0])  # composes and checks every rung-1 member
        _describe(s)
        if dry_run:
            return
        memory.check_memory(first.cfgs, memory_mb, local=launcher != "submitit_slurm")
        driver.write_settings(s)
    for rung in s.rungs:
        with reported():
            p = first if rung.number == 1 else driver.plan_rung(s, rung)
            todo = orchestrate.pending(p, False)
            orchestrate.write_sweep_file(p)
        what = "judgement on fresh seeds" if rung.final else "screen"
        typer.echo(f"rung {rung.number}/{len(s.rungs)} ({what}): {len(p.members)} members, "
                   f"{rung.epochs} epochs, seeds {_seeds(rung.seeds)} -> {p.directory}", err=True)
        _run_sweep(p, todo, launcher, jobs, hydra_overrides, memory_mb, False, quiet)
        with reported():
            driver.record(s, rung)
    _summary(s)


def keep_freed_memory() -> None:
    """Keep freed memory in the process's heap (glibc): a rung's stacks allocate and free tensors of
    tens of MB every step, and glibc otherwise returns each one to the system and page-faults it
    back in, which cost a third of a screen's time here. Elsewhere (no glibc) nothing changes."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "mallopt"):
            libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: large blocks from the heap, not mmap
            libc.mallopt(-1, 1 << 31)  # M_TRIM_THRESHOLD: do not hand freed heap back
    except OSError:
        pass


def _seeds(seeds: tuple[int, ...]) -> str:
    return f"{seeds[0]}..{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])


def _describe(s: Search) -> None:
    from collections import Counter

    counts = Counter(v.status for v in s.verdicts)
    typer.echo(f"{s.directory}: {len(s.verdicts)} candidates drawn, {counts['unique']} distinct, "
               f"{counts['duplicate']} duplicates, {counts['rejected']} rejected by the probe", err=True)


def _summary(s: Search) -> None:
    """The final rung's table: the survivors and the baselines by their fresh-seed score."""
    from rich.table import Table

    from activation_bench import terminal
    from activation_bench.search import driver, halving

    on = s.settings.select_on
    final = s.rungs[-1]
    scores = {fn: sc for fn, (r, sc) in s.reached.items() if r == final.number}
    scores.update(driver.baseline_scores(s))
    better = "higher" if halving.higher_is_better(on) else "lower"
    table = Table(title=f"rung {final.number}: {halving.SCORE_TEXT[on]} over "
                  f"{len(final.seeds)} fresh seeds ({better} is better)")
    for header in ("#", "activation", "score"):
        table.add_column(header, no_wrap=True)
    for i, fn in enumerate(halving.ranked(scores, sorted(scores), on), 1):
        table.add_row(str(i), fn, _score_text(scores[fn], on))
    terminal.print_table(table)
    held_out = "test_acc" if on == "val_acc" else "test_loss"
    typer.echo(f"candidates: {s.directory / 'candidates.csv'}; paired statistics: actbench compare "
               f"{driver.rung_dir(s, final)} --loss {held_out} --baseline activation=relu")


def _score_text(score: float, on: str) -> str:
    """A score as the table shows it: a loss to 4 significant digits, an accuracy in percent."""
    import math

    if math.isinf(score):
        return "failed" if on == "val_acc" else "inf"
    return f"{100 * score:.2f}%" if on == "val_acc" else f"{score:.4g}"
