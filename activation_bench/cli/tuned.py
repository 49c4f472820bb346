"""`sweep --tune` and a study's tuned sweeps: the tuning stage (the tuning seeds over the whole grid),
the choice (analysis/staged.py, by compare --tune's own code), then the judging stage (the judging
seeds at the chosen values only). Each stage trains through the sweep command's own runner."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from activation_bench.errors import UsageError

if TYPE_CHECKING:
    from activation_bench.analysis.staged import Choice, Tuning
    from activation_bench.cli.judging import Sequential, Settings
    from activation_bench.runs.launching import Launch
    from activation_bench.runs.orchestrate import SweepPlan

# trains members of one plan: (plan index, members to train, members this stage needs, stage name)
RunStage = Callable[[int, list[int], list[int], str], None]


@dataclass
class Stages:
    """A tuned plan's stages: the tuning members, and the judging members once every plan its
    tunings read has finished its tuning seeds (None before: `estimate` then says how many, in
    members and member-epochs, with how it was estimated)."""

    tuning: list[int]
    judging: list[int] | None
    estimate: tuple[int, int, str]

    @property
    def needed(self) -> list[int] | None:
        return None if self.judging is None else sorted({*self.tuning, *self.judging})


def tunings_record(plans: Sequence[SweepPlan], tunings: Sequence[Tuning], tuned: Collection[int]) -> None:
    """Each tuned plan's sweep.yaml records the rules that tune it."""
    for k in tuned:
        plans[k].tuned = [t.record() for t in tunings if k in t.sweeps]


def stages(plans: Sequence[SweepPlan], tunings: Sequence[Tuning], tuned: Collection[int]) -> dict[int, Stages]:
    """Per tuned plan its stages; the choice is made (read-only) where the tuning seeds are done."""
    from activation_bench.analysis import staged

    stage1 = staged.tuning_members(plans, tunings)
    ready = [t for t in tunings if all(not _todo(plans[k], stage1[k], False) for k in t.sweeps)]
    judging = staged.union([staged.choose(plans, t) for t in ready]) if len(ready) == len(tunings) else None
    out = {}
    for k in tuned:
        if judging is not None:
            j = judging.get(k, [])
            out[k] = Stages(stage1[k], j, (len(j), staged.epochs(plans[k], j), "at the chosen values"))
        else:
            out[k] = Stages(stage1[k], None, _estimate(plans, k, [t for t in tunings if k in t.sweeps]))
    return out


def run_staged(plans: Sequence[SweepPlan], tunings: Sequence[Tuning], tuned: Collection[int], force: bool,
               run_stage: RunStage, say: Callable[[str], None],
               last_rung: dict[int, list[int]] | None = None,
               judge: dict[int, Callable[[list[int], Choice], None]] | None = None) -> list[Choice]:
    """Stage 1 on every tuned plan, the choices, then stage 2 (the union of the choices per plan).
    Plans a tuning reads that are not tuned must be finished before (a study trains them first).
    `last_rung`: under halving, the tuning members that train to the end (run_halving's). `judge`:
    per plan, its judging stage instead (cli/judging.py's sequential judging), given its stage 1
    members and the choice of its own rule."""
    from activation_bench.analysis import staged
    from activation_bench.runs import orchestrate

    stage1 = {k: m for k, m in staged.tuning_members(plans, tunings).items() if k in tuned}
    stage1.update(last_rung or {})
    for k, members in stage1.items():
        run_stage(k, _todo(plans[k], members, force), members, "tuning stage")
    for k, members in stage1.items():
        orchestrate.build_results(plans[k], members)
    choices = [staged.choose(plans, t) for t in tunings]
    judging = staged.union(choices)
    for k in stage1:
        if staged.write_choice(plans[k].directory, [c for c in choices if k in c.tuning.sweeps]):
            say(f"{plans[k].directory}: the grid or seeds changed since the last choice: chosen again "
                f"({staged.CHOICE_FILE}); {len(_todo(plans[k], judging.get(k, []), False))} judging members "
                "to train for the new choice")
    for c in choices:
        say(describe(c))
        for note in c.selection.notes:  # a choice at its grid's end, groups left out: as compare says them
            say(f"warning: {note}")
    for k, members in stage1.items():
        if judge and k in judge:
            judge[k](members, next(c for c in choices if c.tuning.sweeps == (k,)))
            continue
        chosen = judging.get(k, [])
        run_stage(k, _todo(plans[k], chosen, force), sorted({*members, *chosen}), "judging stage")
    return choices


def _todo(p: SweepPlan, members: Sequence[int], force: bool) -> list[int]:
    from activation_bench.runs import orchestrate

    want = set(members)
    return [i for i in orchestrate.pending(p, force) if i in want]


def describe(c: Choice) -> str:
    """One line: what was chosen, on which seeds, and what the judging stage trains."""
    sel = c.selection
    values = ", ".join(f"{'/'.join(str(r[g]) for g in sel.group_cols) or 'all'}: "
                       + " ".join(f"{k} {r[k]}" for k in sel.keys) for r in sel.chosen.to_dict("records"))
    n = sum(len(v) for v in c.judging.values())
    name = "" if c.tuning.name == "sweep" else f"{c.tuning.name}: "
    return (f"{name}chose {values} (by {c.tuning.metric} of {sel.selected_on} on seeds "
            f"{', '.join(c.tune_seeds)}); judging seeds {', '.join(c.judge_seeds)} at the chosen values: {n} members")


def plan_line(p: SweepPlan, s: Stages, force: bool) -> str:
    """A tuned plan's dry run in one line: each stage's members and member-epochs against the full grid's."""
    from activation_bench.analysis import staged

    full, full_e = len(p.members), staged.epochs(p, range(len(p.members)))
    n1, e1 = len(s.tuning), staged.epochs(p, s.tuning)
    n2, e2, how = s.estimate
    return (f"{p.directory}: tuned sweep: tuning stage {n1:,} members ({e1:,} member-epochs), judging stage {n2:,} "
            f"members ({e2:,} member-epochs, {how}): {n1 + n2:,} of the full grid's {full:,} members, {e1 + e2:,} "
            f"of its {full_e:,} member-epochs ({(e1 + e2) / max(full_e, 1):.0%}); {to_run(p, s, force):,} to run")


def to_run(p: SweepPlan, s: Stages, force: bool) -> int:
    """Members left to train (the judging stage estimated before the choice)."""
    if s.judging is not None:
        return len(_todo(p, s.needed or [], force))
    return len(_todo(p, s.tuning, force)) + s.estimate[0]


def _estimate(plans: Sequence[SweepPlan], k: int, tunings: Sequence[Tuning]) -> tuple[int, int, str]:
    """The judging stage of plan k before the choice: for each tuning, its judging members in plan k
    at one of the plan's own values of the tuned keys per group (a plan holding one value of a grid
    split between sweeps may have all of its judging members chosen, or none); with several tunings,
    at most their sum, and at most every judging member of the plan."""
    from activation_bench.analysis import staged

    p = plans[k]
    total = epochs = 0
    judge_here: set[int] = set()
    for t in tunings:
        judge_s = set(staged.seeds(plans, t)[1])
        judge = [i for i in range(len(p.members)) if staged.member_seed(p, i) in judge_s]
        judge_here.update(judge)
        values = len({tuple(p.labels[i].get(key) for key in t.spec.keys) for i in judge}) or 1
        total += len(judge) // values
        epochs += staged.epochs(p, judge) // values
    n, e = min(total, len(judge_here)), min(epochs, staged.epochs(p, sorted(judge_here)))
    if len(tunings) == 1 and all(key in p.keys for key in tunings[0].spec.keys):
        return n, e, "expected: one value per group, once the tuning stage has chosen"
    return n, e, f"at most: {len(tunings)} tuning(s) choose"


def judging_range(plans: Sequence[SweepPlan], tunings: Sequence[Tuning]) -> tuple[int, int]:
    """Before the choice: the fewest and the most judging members the tunings can need together.
    Tunings whose sweeps overlap (directly or through others) form a family: at least its largest
    tuning's one value per group (the union holds each tuning's choice), at most the sum of its
    tunings' (capped by every judging member of its plans)."""
    from activation_bench.analysis import staged
    from activation_bench.analysis.loading import fixed_values

    fixed = [fixed_values(p.overrides) for p in plans]
    counts: list[tuple[set[int], int, set[tuple[int, int]]]] = []
    for t in tunings:
        judge_s = set(staged.seeds(plans, t)[1])
        members = [(j, i) for j in t.sweeps for i in range(len(plans[j].members))
                   if staged.member_seed(plans[j], i) in judge_s]
        per_value = len({tuple(plans[j].labels[i].get(key, fixed[j].get(key)) for key in t.spec.keys)
                         for j, i in members}) or 1
        counts.append((set(t.sweeps), len(members) // per_value, set(members)))
    families: list[tuple[set[int], list[int], set[tuple[int, int]]]] = []
    for sweeps, n, members in counts:  # merge every family this tuning's sweeps meet
        met = [f for f in families if f[0] & sweeps]
        families = [f for f in families if not f[0] & sweeps]
        families.append((sweeps.union(*(f[0] for f in met)), [n, *(m for f in met for m in f[1])],
                         members.union(*(f[2] for f in met))))
    low = sum(max(n) for _, n, _ in families)
    high = sum(min(sum(n), len(members)) for _, n, members in families)
    return low, high


def settled(plans: Sequence[SweepPlan], st: dict[int, Stages],
            sequential: Mapping[int, Settings]) -> dict[int, Stages]:
    """A dry run's stages with each sequentially judged plan's judging stage as its finished judging
    trained it (its record's members), where they are all at the current choice's values and, given
    the plan's Settings (cli/judging.py), the record was written with them; a judging not finished,
    chosen again since, or finished with other settings (said in one line on stderr: the real run
    judges again) keeps the stage at every judging seed, the most it may train."""
    from activation_bench.analysis import staged
    from activation_bench.analysis.sequential import recorded_members

    out = dict(st)
    for k, s in st.items():
        if k not in sequential:
            continue
        names = recorded_members(plans[k].directory) if s.judging is not None else None
        index = {plans[k].names[i]: i for i in s.judging or []}
        finished = names is not None and set(names) <= set(index)
        if finished and (change := sequential[k].change(plans[k])):
            typer.echo(change, err=True)
            finished = False
        if not finished:
            n, e, how = s.estimate
            out[k] = Stages(s.tuning, s.judging, (n, e, f"{how}; sequential judging may stop sooner"))
            continue
        j = sorted(index[n] for n in names)
        out[k] = Stages(s.tuning, j, (len(j), staged.epochs(plans[k], j), "trained by sequential judging"))
    return out


def print_plan(plans: Sequence[SweepPlan], tunings: Sequence[Tuning], force: bool,
               sequential: Mapping[int, Settings] | None = None) -> None:
    """--dry-run of sweep --tune (and of its halving: the tuning stage's member-epochs under it; of
    its finished sequential judging: the members it trained, settled)."""
    for k, s in settled(plans, stages(plans, tunings, range(len(plans))), sequential or {}).items():
        typer.echo(plan_line(plans[k], s, force))
    for t in tunings:
        if t.halving:
            typer.echo(halving_line(plans[t.sweeps[0]], t))


def halving_line(p: SweepPlan, t: Tuning) -> str:
    """The dry run's line of a tuning stage under halving: its rungs and member-epochs."""
    from activation_bench.analysis import staged

    eta = t.halving or 2
    epochs = staged.halving_rungs(p, t, eta)
    last, total = staged.halving_epochs(p, t, eta)
    full = staged.epochs(p, staged.tuning_members([p], [t])[0])
    return (f"halving (ETA {eta}): rungs at {', '.join(map(str, epochs))} epochs; the tuning stage takes {total:,} "
            f"member-epochs instead of {full:,} ({total / max(full, 1):.0%}), {last} of its members train to the end")


# ---------------------------------------------------------------------------------------------
# successive halving in the tuning stage


def run_halving(p: SweepPlan, t: Tuning, eta: int, memory_mb: float, say: Callable[[str], None],
                launch: Launch | None = None) -> list[int]:
    """The rungs before the last: every setting's tuning members to the first rung's epochs, then per
    group the best 1/eta of its settings (staged.promote) on to the next, from their checkpoints.
    Each rung trains here, or under `launch` in the launcher's jobs (rungs.launch_to).
    Returns the tuning members of the settings left for the last rung (their full runs)."""
    import contextlib

    from activation_bench.analysis import staged
    from activation_bench.runs import checkpoint_files as checkpoint
    from activation_bench.runs import rungs

    epochs = staged.halving_rungs(p, t, eta)
    live = staged.settings(p, staged.tuning_members([p], [t])[0])
    with checkpoint.handling_signals() if launch is None else contextlib.nullcontext():
        for r, upto in enumerate(epochs[:-1], 1):
            if launch is not None:  # the launcher's signals are its jobs' (runs/launcher.py)
                rungs.launch_to(p, list(live.values()), upto, launch, memory_mb)
            else:
                for members in live.values():
                    rungs.train_to(p, members, upto, memory_mb)
            table = rungs.write_table(p, r, rungs.partial_table(p, [i for m in live.values() for i in m], upto))
            going = staged.promote([p], t, table, eta)
            kept = {sig: m for sig, m in live.items() if p.names[m[0]] in going}
            say(f"halving rung {r}/{len(epochs)} ({upto} of {epochs[-1]} epochs): {len(kept)} of {len(live)} "
                "settings go on")
            live = kept
    return [i for m in live.values() for i in m]


# ---------------------------------------------------------------------------------------------
# the sweep command's side


def parse(tune: list[str] | None, tune_seeds: str | None, tune_on: str | None, metric: str | None,
            halving: int | None = None, force: bool = False) -> Tuning | None:
    """--tune, --tune-seeds, --tune-on, --metric checked by compare's own parser, and --halving; None
    without --tune."""
    from activation_bench.analysis.metrics import parse_metric
    from activation_bench.analysis.staged import Tuning
    from activation_bench.analysis.tune import parse_tune

    spec = parse_tune(tune, tune_seeds, None, tune_on)
    if spec is None:
        if metric is not None or halving is not None:
            flag = "--metric" if metric is not None else "--halving"
            raise UsageError(f"{flag} sets up --tune (the choice and its tuning stage): give --tune KEY too, e.g. "
                             "--tune lr")
        return None
    parse_metric(metric or "final")
    if halving is not None:
        from activation_bench.runs.rungs import schedule

        schedule(1, 1, halving)  # ETA below 2 refused here; the first rung's epochs once planned
        if force:
            raise UsageError("--halving with --force: a rung's checkpoints are what its settings continue from; "
                             "train them again in a new sweep (--name)")
    return Tuning(spec, metric or "final", halving=halving)


def sweep(p: SweepPlan, tuning: Tuning, dry_run: bool, force: bool, launch: Launch | None, memory_mb: float,
          run: Callable[[SweepPlan, list[int], list[int], str], None], seq: Sequential | None = None) -> None:
    """sweep --tune: the tuning stage (under --halving, its rungs), the choice, the judging stage; the
    stages train through `run`, the rungs before the last here or through `launch` (--launcher's)."""
    import dataclasses

    from activation_bench.analysis import staged
    from activation_bench.runs import memory, orchestrate

    staged.check([p], tuning)
    if tuning.halving:
        staged.halving_rungs(p, tuning, tuning.halving)  # a first rung under one epoch: refused here
    judge = None
    if seq is not None:
        from activation_bench.cli import judging

        judging.check(seq, staged.seeds([p], tuning)[1], p, tuning.metric)

        def sequential(stage1: list[int], choice: Choice) -> None:
            judging.judge(p, choice.tuning, seq, stage1, choice,
                          lambda todo, needed, stage: run(p, todo, needed, stage), say)

        judge = {0: sequential}
    if dry_run:
        print_plan([p], [tuning], force, {0: judging.sweep_settings(seq, tuning)} if seq is not None else None)
        return
    memory.check_memory(p.cfgs, memory_mb, local=launch is None or launch.launcher != "submitit_slurm")
    tunings_record([p], [tuning], [0])
    orchestrate.write_sweep_file(p)

    def run_stage(_k: int, todo: list[int], needed: list[int], stage: str) -> None:
        run(p, todo, needed, stage)

    def say(line: str) -> None:
        typer.echo(line, err=True)

    if tuning.halving:  # the rungs before the last, then the last rung as the tuning stage
        from activation_bench.engine.resume import Preempted
        from activation_bench.runs import checkpoint_files as checkpoint

        try:
            last = run_halving(p, tuning, tuning.halving, memory_mb, say, launch)
        except Preempted as stop:
            say(f"interrupted in a halving rung (stopped by {checkpoint.signal_name(stop.signum)}; checkpoint written "
                f"at epoch {stop.epoch}/{stop.epochs}); run the same command again to resume")
            raise typer.Exit(checkpoint.exit_code(stop.signum)) from None
        except KeyboardInterrupt:
            if launch is None:
                raise
            say("interrupted in a halving rung (its jobs stopped); run the same command again to resume")
            raise typer.Exit(130) from None
        own = dataclasses.replace(tuning, spec=dataclasses.replace(tuning.spec, grid="own"))
        run_staged([p], [own], [0], force, run_stage, say, {0: last}, judge)
        return
    run_staged([p], [tuning], [0], force, run_stage, say, None, judge)
