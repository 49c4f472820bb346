"""Sequential judging for `sweep --tune` (`--judge-seeds-max N --look-every K --margin X [--loss COL]`):
the judging seeds at the chosen values are added K at a time; after each batch the statistics decide every
comparison with the baseline anytime-validly (analysis/decisions.decisions, a confidence sequence
whose level holds at every look), and the groups whose comparison is decided train no more seeds.
Judging stops when every comparison is decided or N judging seeds are used. The verdicts judge one
column, --loss as compare takes it (default compare's: train_loss, test_loss for early_stop); on an
accuracy the margin is in percentage points. The judging record (sequential.RECORD_FILE) in the
sweep's folder names the column and makes `compare` read the verdicts the same way.

A study's `judge: chosen` sweep is judged by every comparison that tunes it (`judge_many`): a group's
judging seeds stop only once every comparison reading the group has decided it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from activation_bench.errors import UsageError

if TYPE_CHECKING:
    from activation_bench.analysis.staged import Choice, Tuning
    from activation_bench.runs.orchestrate import SweepPlan
    from activation_bench.study.spec import Study


@dataclass(frozen=True)
class Sequential:
    max_seeds: int
    look_every: int
    margin: str
    baseline: str | None = None
    alpha: float = 0.05
    loss: str | None = None  # the judged column (None: compare's default for the metric)


def parse(max_seeds: int | None, look_every: int | None, margin: str | None, baseline: str | None,
          tuned: bool, loss: str | None = None) -> Sequential | None:
    """The options checked before anything is read; None without them."""
    if max_seeds is None and look_every is None and margin is None:
        for flag, value in (("--baseline", baseline), ("--loss", loss)):
            if value is not None:
                raise UsageError(f"{flag} on sweep is the sequential judging's: give --judge-seeds-max, --look-every "
                                 "and --margin too")
        return None
    if margin is None:
        raise UsageError("--judge-seeds-max and --look-every stop judging once each verdict is decided: give "
                         "--margin X too (the region of practical equivalence, e.g. 1.05 on a loss, 1 percentage "
                         "point on an accuracy)")
    if max_seeds is None or look_every is None:
        raise UsageError("--margin on sweep sets up sequential judging: give --judge-seeds-max N and --look-every K")
    from activation_bench.analysis.loading import is_accuracy
    from activation_bench.analysis.verdicts import parse_margin

    check_column(loss, "--loss")
    # a ratio on a loss, percentage points on an accuracy (_margin): checked before anything trains
    parse_margin(margin, accuracy=is_accuracy(loss or ""))
    if not tuned:
        raise UsageError("sequential judging adds judging seeds to a tuned sweep: give --tune KEY too")
    if look_every < 1 or max_seeds < 2:
        raise UsageError(f"--look-every {look_every} --judge-seeds-max {max_seeds}: at least 1 seed a look and 2 "
                         "judging seeds in all")
    return Sequential(max_seeds, look_every, margin, baseline, loss=loss)


def check_column(loss: str | None, flag: str) -> None:
    """A column the verdicts may judge (compare --loss's): one line naming the valid ones."""
    from activation_bench.analysis.loading import COLUMNS

    if loss is not None and loss not in COLUMNS:
        raise UsageError(f"{flag} {loss}: not a per-epoch column; valid: {', '.join(COLUMNS)}")


def check(seq: Sequential, judge_seeds: Sequence[str], p: SweepPlan | None = None, metric: str = "final") -> None:
    """Against the grid's judging seeds (all but the tuning seeds), the metric (a value of the column,
    not to=EPS's epoch count) and, given the plan, the judged column against what its members log
    (an accuracy on a regression task, say)."""
    from activation_bench.analysis.metrics import parse_metric

    if not parse_metric(metric).is_loss:
        raise UsageError(f"--metric {metric}: sequential judging reads a loss or an accuracy against its margin, "
                         "not an epoch count")
    n = len(judge_seeds)
    if seq.look_every > n:
        raise UsageError(f"--look-every {seq.look_every}: larger than the {n} judging seeds of the seed range")
    if seq.max_seeds > n:
        raise UsageError(f"--judge-seeds-max {seq.max_seeds}: the seed range has {n} judging seeds; widen it")
    if p is not None and seq.loss is not None:
        missing = logs_column(p, seq.loss)
        if missing:
            raise UsageError(f"--loss {seq.loss}: {missing}")


def logs_column(p: SweepPlan, column: str) -> str:
    """'' where every member of the plan logs `column`, else why not (one look per distinct data)."""
    from activation_bench.engine.plan import logged_columns

    seen: dict[tuple, set[str]] = {}
    for cfg in p.cfgs:
        key = (repr(cfg.data.plain() if hasattr(cfg.data, "plain") else cfg.data), bool(cfg.log.get("train_eval")))
        if key not in seen:
            seen[key] = logged_columns(cfg)
            if column not in seen[key]:
                have = ", ".join(sorted(seen[key]))
                return f"the sweep's runs do not log it (they log {have})"
    return ""


@dataclass(frozen=True)
class Judged:
    """One comparison a sweep's judging seeds are judged by: its rule and choice, and the margin,
    column (None: compare's default for the metric) and baseline its verdicts read."""

    tuning: Tuning
    choice: Choice
    margin: str
    loss: str | None = None
    baseline: str | None = None


def judge(p: SweepPlan, t: Tuning, seq: Sequential, stage1: list[int], choice: Choice,
          run_stage: Callable[[list[int], list[int], str], None], say: Callable[[str], None], k: int = 0) -> None:
    """sweep --tune's judging stage a batch of seeds at a time (module docstring): plan k's own rule."""
    judge_all(p, seq, stage1, [Judged(t, choice, seq.margin, seq.loss, seq.baseline)], run_stage, say, k)


def judge_all(p: SweepPlan, seq: Sequential, stage1: list[int], rules: Sequence[Judged],
              run_stage: Callable[[list[int], list[int], str], None], say: Callable[[str], None], k: int = 0) -> None:
    """The judging stage of plan k (index k of the rules' plans) a look at a time, judged by every
    rule: a member at a rule's chosen values trains while that rule's comparison of its group is
    open (its baseline's while any is open), so a group stops once every comparison reading it is
    decided. Each look reads only the seeds up to its batch, so a resumed sweep makes the same
    decisions. Writes the judging record (sequential.RECORD_FILE) with each rule's margin and column."""
    from activation_bench.analysis import sequential, staged
    from activation_bench.analysis.loading import load
    from activation_bench.runs import orchestrate, store

    if not rules:
        return
    seeds = [r.choice.judge_seeds[:seq.max_seeds] for r in rules]
    chosen = [r.choice.judging.get(k, []) for r in rules]
    trained = set(stage1)
    state: list[tuple[list[dict[str, str]] | None, str | None] | None] = [(None, None)] * len(rules)
    columns: list[str] = [r.loss or "" for r in rules]
    for start in range(0, max(len(s) for s in seeds), seq.look_every):
        batches = [set(s[start:start + seq.look_every]) for s in seeds]
        todo = sorted({i for r, st in enumerate(state) if st is not None for i in chosen[r]
                       if staged.member_seed(p, i) in batches[r] and _wanted(p, i, *st)})
        trained.update(todo)
        pending = set(orchestrate.pending(p, False))
        run_stage([i for i in todo if i in pending], sorted(trained),
                  f"judging seeds {', '.join(sorted(set().union(*batches), key=float))}")
        orchestrate.build_results(p, sorted(trained))
        loaded = load([str(p.directory)])
        for r, rule in enumerate(rules):
            if state[r] is None:
                continue
            ds, columns[r] = _look(p, loaded, rule, seq, seeds[r][:start + seq.look_every])
            said = min(len(seeds[r]), start + seq.look_every)
            say(("" if len(rules) == 1 else f"{rule.tuning.name}: ") + f"look after {said} judging seeds: "
                + "; ".join(f"{_name(d.group)} {d.verdict} ({d.n} pairs, {d.stopped})" for d in ds))
            still = [d.group for d in ds if not d.done]
            if not still or said >= len(seeds[r]):
                state[r] = None
            elif any(not any(_wanted(p, i, [g], None) for i in chosen[r]) for g in still):
                state[r] = (None, None)  # a group the members' labels do not spell so: judge every group on
            else:
                state[r] = (still, ds[0].baseline if ds else None)
        if all(st is None for st in state):
            break
    margins = [(_margin(r.margin, c), c) for r, c in zip(rules, columns)]
    store.atomic_write(p.directory / sequential.RECORD_FILE, sequential.record_text(
        margins[0][0], seq.alpha, seq.max_seeds, seq.look_every, margins[0][1], margins[1:],
        [p.names[i] for i in sorted(trained - set(stage1))]))
    every = {i for c, s in zip(chosen, seeds) for i in c if staged.member_seed(p, i) in set(s)}
    say(f"sequential judging: {len(trained - set(stage1))} judging members trained, of the {len(every)} at the "
        f"chosen values up to --judge-seeds-max {seq.max_seeds}")


def _look(p: SweepPlan, loaded: object, rule: Judged, seq: Sequential, upto: Sequence[str]) -> tuple[list, str]:
    """One rule's Decisions on the runs of its tuning seeds and judging seeds `upto`, and the column."""
    import dataclasses

    import numpy as np

    from activation_bench.analysis import decisions, staged
    from activation_bench.analysis.metrics import default_loss, parse_metric

    t, choice = rule.tuning, rule.choice
    spec = t.spec if t.spec.tune_seeds is not None else dataclasses.replace(t.spec, tune_seeds=len(choice.tune_seeds))
    used = {*choice.tune_seeds, *upto}
    sub = staged.subset(loaded, np.array([str(s) in used for s in loaded.runs["seed"]]))  # type: ignore[attr-defined]
    metric = parse_metric(t.metric)
    loss = default_loss(sub, metric, rule.loss)
    return decisions.decisions(sub, metric, t.by, rule.baseline, loss, spec, rule.margin, seq.alpha,
                               seq.max_seeds), loss


def _margin(margin: str, loss: str):  # noqa: ANN202 - a verdicts.Margin
    from activation_bench.analysis.loading import is_accuracy
    from activation_bench.analysis.verdicts import parse_margin

    return parse_margin(margin, accuracy=is_accuracy(loss))


def _name(group: dict[str, str]) -> str:
    return "/".join(group.values()) or "all"


def _wanted(p: SweepPlan, i: int, open_groups: list[dict[str, str]] | None, baseline: str | None) -> bool:
    """Whether member i's group still needs judging seeds: every group before the first look; then
    the open ones and, while any is open, the baseline's."""
    if open_groups is None:
        return True
    labels = p.labels[i]
    if baseline:
        key, _, value = baseline.partition("=")
        if labels.get(key) == value:
            return True
    return any(all(labels.get(k) == v for k, v in g.items()) for g in open_groups)


def study_judges(study: Study, names: Sequence[str], plans: Sequence[SweepPlan], rules: Sequence[Tuning],
                 run_stage: Callable[[int, list[int], list[int], str], None],
                 say: Callable[[str], None]) -> dict[int, Callable[[list[int], Choice], None]]:
    """A study's sequentially judged sweeps (judge_seeds_max and look_every; study/checks.py checked
    them): per plan index, its judging stage for cli/tuned.run_staged. A sweep with its own tune is
    judged by its own rule, margin, loss and baseline, as sweep --judge-seeds-max ... judges it; a
    `judge: chosen` sweep by every comparison that tunes it (each reads it alone), each with its own."""
    out = {}
    for k, name in enumerate(names):
        sw = study.spec.sweeps[name]
        if sw.look_every is None or sw.judge_seeds_max is None:
            continue
        if sw.tune:
            seq = Sequential(sw.judge_seeds_max, sw.look_every, f"{sw.margin:g}", sw.baseline, loss=sw.loss)
            own = [t for t in rules if t.name == f"sweeps.{name}"]
        else:
            seq = Sequential(sw.judge_seeds_max, sw.look_every, "")
            own = [t for t in rules if t.sweeps == (k,) and t.name.startswith("comparisons.")]
        out[k] = _study_judge(study, plans, k, seq, own, run_stage, say)
    return out


def _study_judge(study: Study, plans: Sequence[SweepPlan], k: int, seq: Sequential, own: Sequence[Tuning],
                 run_stage: Callable[[int, list[int], list[int], str], None],
                 say: Callable[[str], None]) -> Callable[[list[int], Choice], None]:
    """Plan k's judging stage: each rule's choice made again (staged.choose: deterministic, from the
    finished tuning seeds, as run_staged made it) and judged with its comparison's margin."""
    def judged(t: Tuning) -> Judged:
        from activation_bench.analysis import staged

        choice = staged.choose(plans, t)
        if t.name.startswith("sweeps."):
            return Judged(t, choice, seq.margin, seq.loss, seq.baseline)
        c = study.spec.comparisons[t.name.removeprefix("comparisons.")]
        return Judged(t, choice, str(c.margin), c.loss, c.baseline)

    def judge(stage1: list[int], _choice: Choice) -> None:
        judge_all(plans[k], seq, stage1, [judged(t) for t in own],
                  lambda todo, needed, stage: run_stage(k, todo, needed, stage), say, k)

    return judge
