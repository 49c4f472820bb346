"""`sweep --tune` and a study's tuned sweeps: the tuning stage (the tuning seeds over the whole grid),
the choice (analysis/staged.py, by compare --tune's own code), then the judging stage (the judging
seeds at the chosen values only). Each stage trains through the sweep command's own runner."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from activation_bench.analysis.staged import Choice, Tuning
    from activation_bench.runs.orchestrate import SweepPlan

# trains members of one plan: (plan index, members to train, members this stage needs, stage name)
RunStage = Callable[[int, list[int], list[int], str], None]


def tunings_record(plans: Sequence[SweepPlan], tunings: Sequence[Tuning]) -> None:
    """Each tuned plan's sweep.yaml records the rules that tune it."""
    for k, p in enumerate(plans):
        rules = [t.record() for t in tunings if k in t.sweeps]
        p.tuned = rules or None


def run_staged(plans: Sequence[SweepPlan], tunings: Sequence[Tuning], force: bool, run_stage: RunStage,
               say: Callable[[str], None]) -> list[Choice]:
    """Stage 1 on every tuned plan, the choices, then stage 2 (the union of the choices per plan)."""
    from activation_bench.analysis import staged
    from activation_bench.runs import orchestrate

    stage1 = staged.tuning_members(plans, tunings)
    for k, members in stage1.items():
        run_stage(k, _todo(plans[k], members, force), members, "tuning stage")
    for k, members in stage1.items():
        orchestrate.build_results(plans[k], members)
    choices = [staged.choose(plans, t) for t in tunings]
    judging = staged.union(choices)
    for k in stage1:
        mine = [c for c in choices if k in c.tuning.sweeps]
        if staged.write_choice(plans[k].directory, mine):
            say(f"{plans[k].directory}: the grid or seeds changed since the last choice: chosen again "
                f"({staged.CHOICE_FILE}); {len(_todo(plans[k], judging.get(k, []), False))} judging members "
                "to train for the new choice")
    for c in choices:
        say(describe(c, plans))
    for k, members in stage1.items():
        judge = judging.get(k, [])
        needed = sorted(set(members) | set(judge))
        run_stage(k, _todo(plans[k], judge, force), needed, "judging stage")
    return choices


def _todo(p: SweepPlan, members: Sequence[int], force: bool) -> list[int]:
    from activation_bench.runs import orchestrate

    want = set(members)
    return [i for i in orchestrate.pending(p, force) if i in want]


def describe(c: Choice, plans: Sequence[SweepPlan]) -> str:
    """One line: what was chosen, on which seeds, and what the judging stage trains."""
    sel = c.selection
    values = ", ".join(f"{'/'.join(str(r[g]) for g in sel.group_cols) or 'all'}: "
                       + " ".join(f"{k} {r[k]}" for k in sel.keys) for r in sel.chosen.to_dict("records"))
    n = sum(len(v) for v in c.judging.values())
    name = "" if c.tuning.name == "sweep" else f"{c.tuning.name}: "
    return (f"{name}chose {values} (by {c.tuning.metric} of {sel.selected_on} on seeds "
            f"{', '.join(c.tune_seeds)}); judging seeds {', '.join(c.judge_seeds)} at the chosen values: {n} members")


def print_plan(plans: Sequence[SweepPlan], tunings: Sequence[Tuning], force: bool) -> None:
    """--dry-run of a tuned sweep: members and member-epochs of each stage against the full grid's;
    the judging stage exactly where the tuning stage has finished, else estimated (one value per
    group for each tuning)."""
    from activation_bench.analysis import staged

    stage1 = staged.tuning_members(plans, tunings)
    done1 = all(not _todo(plans[k], m, False) for k, m in stage1.items())
    if done1:
        judging = staged.union([staged.choose(plans, t) for t in tunings])
    for k, members in stage1.items():
        p = plans[k]
        full, full_e = len(p.members), staged.epochs(p, range(len(p.members)))
        e1 = staged.epochs(p, members)
        if done1:
            judge = judging.get(k, [])
            n2, e2, how = len(judge), staged.epochs(p, judge), "at the chosen values"
        else:
            n2, e2, how = _estimate(p, [t for t in tunings if k in t.sweeps], plans)
        todo = len(_todo(p, members, force)) + (len(_todo(p, judge, force)) if done1 else n2)
        typer.echo(f"{p.directory}: tuned sweep: tuning stage {len(members)} members ({e1:,} member-epochs), "
                   f"judging stage {n2} members ({e2:,} member-epochs, {how}): {len(members) + n2} of the full "
                   f"grid's {full} members, {e1 + e2:,} of its {full_e:,} member-epochs "
                   f"({(e1 + e2) / max(full_e, 1):.0%}); {todo} to run")


def _estimate(p: SweepPlan, tunings: Sequence[Tuning], plans: Sequence[SweepPlan]) -> tuple[int, int, str]:
    """The judging stage before the choice: each tuning's judging members at one value of its tuned
    keys per group; with several tunings, their union is at most their sum (capped by the grid)."""
    from activation_bench.analysis import staged

    k = plans.index(p)
    total = 0
    epochs = 0
    judge_all: set[int] = set()
    for t in tunings:
        _, judge_s = staged.seeds(plans, t)
        judge = [i for i in range(len(p.members)) if staged.member_seed(p, i) in set(judge_s)]
        judge_all.update(judge)
        combos = {tuple(p.labels[i].get(key, "") for key in t.spec.keys) for i in judge} or {()}
        total += len(judge) // len(combos)
        epochs += staged.epochs(p, judge) // len(combos)
    if len(tunings) > 1:
        n = min(total, len(judge_all))
        how = f"expected, at most: {len(tunings)} tunings may choose differently"
    else:
        n, how = total, "expected: one value per group, once the tuning stage has chosen"
    del k
    return n, min(epochs, staged.epochs(p, sorted(judge_all))), how
