"""`actbench search`: screen candidate activations by successive halving and judge the survivors
against relu, gelu, silu and tanh on fresh seeds. Thin: parse, call activation_bench.search, render."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from activation_bench.cli.options import OverridesArg, RunsDirOpt
from activation_bench.errors import reported
from activation_bench.search.defaults import LRS, SCREEN_LRS

if TYPE_CHECKING:
    from activation_bench.analysis.notes import CompareResult
    from activation_bench.runs import orchestrate
    from activation_bench.search import halving
    from activation_bench.search.driver import Search

SEARCH_HELP = (
    "Search for activations: draw candidates from a space, train each distinct one (candidates "
    "that behave the same on the probe points are trained once) at each of --screen-lrs, keep the best "
    "--keep of each rung for a longer rung on more seeds (at the learning rate each chose in rung 1), "
    "and judge at most --judge survivors with relu, gelu, silu and tanh the way `compare --tune lr` "
    "judges: every function at each of --lrs on --tune-seeds fresh seeds, its learning rate chosen there, "
    "then at that learning rate on --final-seeds other fresh seeds, compared with relu at its own chosen "
    "learning rate, paired by seed (Holm-corrected). The overrides choose the task and the first rung's "
    "budget. Every rung selects on the early-stopped validation loss (geometric mean over the seeds, "
    "lowest), or with --select-on val_acc (classification tasks) the validation accuracy (mean, highest); "
    "the verdict is on the test split.\n\n"
    "Writes DIR/NAME/candidates.csv (fn, same_as, status, reason, rung, score, screen_lr, lr, judged; "
    "mean_val_acc in place of score with --select-on val_acc), search.yaml (the settings and the "
    "screen's agreement with the verdict) and one sweep directory per rung (rung1, rung2, ...) that "
    "compare, rank and report read. Run the same command again to resume.\n\n"
    "Examples:\n\n"
    "  actbench search data=function data.fn=exp_sin epochs=30 batch_size=64 --candidates 500\n\n"
    "  actbench search data=diabetes epochs=50 --space my_space.yaml --rungs 2 --lrs 1e-3,1e-2,1e-1\n\n"
    "  actbench search data=digits epochs=20 --select-on val_acc --candidates 200\n\n"
    "  actbench compare runs/<search>/rung3 --metric early_stop --loss test_loss --tune lr "
    "--baseline activation=relu\n\n"
    "  actbench compare runs/<search>/rung3 --metric early_stop --loss test_acc --tune lr --tune-on val_acc "
    "--baseline activation=relu"
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
    rungs: Annotated[int, typer.Option(help="Rungs, the last being the tuned judgement (at least 2).")] = 3,
    keep: Annotated[float, typer.Option(help="Fraction of a rung's candidates that go on to the next.")] = 0.25,
    judge: Annotated[int, typer.Option(help="Judge at most this many survivors (the best of the screen).")] = 16,
    screen_lrs: Annotated[str, typer.Option(
        "--screen-lrs", help="Learning rates of rung 1 (comma list); each candidate goes on at its best.")] = ",".join(
        f"{x:g}" for x in SCREEN_LRS),
    lrs: Annotated[str, typer.Option(
        help="The judgement's learning-rate grid (comma list, at least 2), tuned per function.")] = ",".join(
        f"{x:g}" for x in LRS),
    tune_seeds: Annotated[int, typer.Option(help="Fresh seeds the judgement tunes the learning rate on.")] = 4,
    final_seeds: Annotated[int, typer.Option(help="Fresh seeds the judgement judges on (at each chosen lr).")] = 10,
    select_on: Annotated[str, typer.Option(
        "--select-on", help="Select on val_loss (early-stopped, geometric mean over the seeds, lowest) or val_acc "
        "(classification tasks: the accuracy at the lowest val_loss, mean over the seeds, highest).")] = "val_loss",
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
    from activation_bench.config.grid import hydra_settings, refuse_hydra_settings
    from activation_bench.runs import launching, memory
    from activation_bench.search import driver

    all_overrides = list(overrides or [])
    hydra_overrides = hydra_settings(all_overrides)
    with reported():
        settings = driver.Settings(tuple(o for o in all_overrides if o not in hydra_overrides), space, candidates,
                                   draw_seed, seeds, rungs, keep, final_seeds, select_on,
                                   driver.parse_lrs(lrs, "--lrs"), driver.parse_lrs(screen_lrs, "--screen-lrs"),
                                   tune_seeds, judge)
        if launcher:
            launching.check_launcher(launcher)
        else:
            refuse_hydra_settings(hydra_overrides)
        s = driver.prepare(settings, runs_dir, name)
        first = driver.plan_rung(s, s.rungs[0])  # composes and checks every rung-1 member
        _describe(s, len(first.members))
        if dry_run:
            return
        memory.check_memory(first.cfgs, memory_mb, local=launcher != "submitit_slurm")
        driver.write_settings(s)
    run = (launcher, jobs, hydra_overrides, memory_mb, quiet)
    for rung in s.rungs[:-1]:
        with reported():
            p = first if rung.number == 1 else driver.plan_rung(s, rung)
        _run_rung(p, f"rung {rung.number}/{len(s.rungs)} (screen)", rung, rung.seeds, run)
        with reported():
            driver.record(s, rung)
    _judge(s, run)


def _run_rung(p: orchestrate.SweepPlan, what: str, rung: halving.Rung, seeds: tuple[int, ...], run: tuple) -> None:
    """Write the rung's sweep.yaml and train its pending members."""
    from activation_bench.cli.run import _run_sweep
    from activation_bench.runs import orchestrate

    launcher, jobs, hydra_overrides, memory_mb, quiet = run
    with reported():
        todo = orchestrate.pending(p, False)
        orchestrate.write_sweep_file(p)
    typer.echo(f"{what}: {len(p.members)} members, {rung.epochs} epochs, seeds {_seeds(seeds)} -> {p.directory}",
               err=True)
    _run_sweep(p, todo, launcher, jobs, hydra_overrides, memory_mb, False, quiet)


def _judge(s: Search, run: tuple) -> None:
    """The last rung: tune every function's learning rate, judge each at its own, print the verdict."""
    from activation_bench.search import judge

    final = s.rungs[-1]
    head = f"rung {final.number}/{len(s.rungs)}"
    with reported():
        p = judge.plan(s, final)
    _run_rung(p, f"{head} (tuning {len(s.settings.lrs)} learning rates)", final, final.tune_seeds, run)
    with reported():
        chosen, chosen_scores, _ = judge.choose(s, final)
        p = judge.plan(s, final, chosen)
    _run_rung(p, f"{head} (judgement at each chosen learning rate)", final, final.seeds, run)
    with reported():
        result = judge.verdict(s)
        agree = judge.record(s, result, chosen_scores)
    _summary(s, result, agree, judge.command(s))


def _seeds(seeds: tuple[int, ...]) -> str:
    return f"{seeds[0]}..{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])


def _describe(s: Search, first: int) -> None:
    from collections import Counter

    counts = Counter(v.status for v in s.verdicts)
    typer.echo(f"{s.directory}: {len(s.verdicts)} candidates drawn, {counts['unique']} distinct, "
               f"{counts['duplicate']} duplicates, {counts['rejected']} rejected by the probe; rung 1: {first} "
               f"members ({len(s.settings.screen_lrs)} learning rates x {len(s.rungs[0].seeds)} seeds each)", err=True)


def _summary(s: Search, result: CompareResult, agree: dict, command: str) -> None:
    """The verdict (the table `command` prints too), its notes, and the screen's agreement with it."""
    from activation_bench.render import tables

    for line in result.all_warnings:
        typer.echo(f"warning: {line}", err=True)
    tables.print_table(result)
    rho, opt = agree["spearman_screen_vs_judged"], agree["optimism"]
    typer.echo(f"screen vs verdict over {agree['judged']} survivors: Spearman {_num(rho)}; selection optimism "
               f"{_num(opt)} ({agree['optimism_unit']}, {agree['optimism_n']} survivors)", err=True)
    typer.echo(f"candidates: {s.directory / 'candidates.csv'}; the same table: {command}", err=True)


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"
