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

    Rule = tuple[Tuning, str, str | None, str | None]  # a comparison's tuning, margin, column, baseline


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


@dataclass(frozen=True)
class Settings:
    """A plan's sequential judging as the command (or study file) now sets it: per comparison its
    metric, margin, column (None: compare's default for the metric) and baseline; `study`: named by
    the study file's keys, not sweep's options. The dry run (cli/tuned.settled) counts a finished
    judging as this command's only where its record was written with these settings (`change`)."""

    seq: Sequential
    rules: tuple[tuple[str, str, str | None, str | None], ...]
    study: bool = False

    def change(self, p: SweepPlan) -> str | None:
        """None where p's judging record (if any) was written with these settings; else one line
        saying what differs (sequential.record_change)."""
        if not self.rules:
            return None
        columns = _columns(p, [(metric, loss) for metric, _, loss, _ in self.rules])
        return _change(p, self.seq, [(m, c, b) for (_, m, _, b), c in zip(self.rules, columns)], self.study)


def sweep_settings(seq: Sequential, t: Tuning) -> Settings:
    """sweep --tune's sequential judging, for its dry run."""
    return Settings(seq, ((t.metric, seq.margin, seq.loss, seq.baseline),))


def judge(p: SweepPlan, t: Tuning, seq: Sequential, stage1: list[int], choice: Choice,
          run_stage: Callable[[list[int], list[int], str], None], say: Callable[[str], None], k: int = 0) -> None:
    """sweep --tune's judging stage a batch of seeds at a time (module docstring): plan k's own rule."""
    judge_all(p, seq, stage1, [Judged(t, choice, seq.margin, seq.loss, seq.baseline)], run_stage, say, k)


def judge_all(p: SweepPlan, seq: Sequential, stage1: list[int], rules: Sequence[Judged],
              run_stage: Callable[[list[int], list[int], str], None], say: Callable[[str], None], k: int = 0,
              study: bool = False) -> None:
    """The judging stage of plan k (index k of the rules' plans) a look at a time, judged by every
    rule: a member at a rule's chosen values trains while that rule's comparison of its group is
    open (its baseline's while any is open), so a group stops once every comparison reading it is
    decided. Each look reads only the seeds up to its batch, and at the judging seeds only the
    members this judging trains, so a resumed sweep, or one judged before with other settings, makes
    a fresh judging's decisions (a member on disk is never trained again). Writes the judging record
    (sequential.RECORD_FILE) with each rule's margin, column and baseline; where the record there was
    written with other settings, says so first (`study`: in the study file's keys)."""
    import dataclasses

    from activation_bench.analysis import sequential, staged
    from activation_bench.analysis.loading import load
    from activation_bench.runs import orchestrate, store

    if not rules:
        return
    columns = _columns(p, [(r.tuning.metric, r.loss) for r in rules])
    rules = [dataclasses.replace(r, loss=c) for r, c in zip(rules, columns)]
    entries = [(r.margin, c, r.baseline) for r, c in zip(rules, columns)]
    change = _change(p, seq, entries, study)
    if change:
        say(change)
    seeds = [r.choice.judge_seeds[:seq.max_seeds] for r in rules]
    chosen = [r.choice.judging.get(k, []) for r in rules]
    trained = set(stage1)
    state: list[tuple[list[dict[str, str]] | None, str | None] | None] = [(None, None)] * len(rules)
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
        names = {p.names[i] for i in trained}
        for r, rule in enumerate(rules):
            if state[r] is None:
                continue
            ds = _look(loaded, rule, seq, seeds[r][:start + seq.look_every], names)
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
    store.atomic_write(p.directory / sequential.RECORD_FILE,
                       _record(seq, entries, [p.names[i] for i in sorted(trained - set(stage1))]))
    every = {i for c, s in zip(chosen, seeds) for i in c if staged.member_seed(p, i) in set(s)}
    say(f"sequential judging: {len(trained - set(stage1))} judging members trained, of the {len(every)} at the "
        f"chosen values up to --judge-seeds-max {seq.max_seeds}")


def _columns(p: SweepPlan, rules: Sequence[tuple[str, str | None]]) -> list[str]:
    """Each (metric, column) judged's column: the given one, else compare's default for the metric on
    the plan's finished runs (the folder is read only then)."""
    from activation_bench.analysis.loading import load
    from activation_bench.analysis.metrics import default_loss, parse_metric

    loaded = None
    out = []
    for metric, loss in rules:
        if loss is None and loaded is None:
            loaded = load([str(p.directory)])
        out.append(loss if loss is not None else default_loss(loaded, parse_metric(metric), None))
    return out


def _record(seq: Sequential, entries: Sequence[tuple[str, str, str | None]], members: Sequence[str] = ()) -> str:
    """The judging record's text: per comparison (margin as given, judged column, baseline)."""
    from activation_bench.analysis import sequential

    margins = [(_margin(m, c), c, b) for m, c, b in entries]
    return sequential.record_text(margins[0][0], seq.alpha, seq.max_seeds, seq.look_every, margins[0][1],
                                  margins[1:], members, baseline=margins[0][2])


def _change(p: SweepPlan, seq: Sequential, entries: Sequence[tuple[str, str, str | None]], study: bool) -> str | None:
    """sequential.record_change of p's judging record against what judging with these entries would
    write, named in sweep's options or (`study`) the study file's keys."""
    from activation_bench.analysis import sequential

    return sequential.record_change(p.directory, _record(seq, entries), sequential.KEYS if study else sequential.FLAGS)


def _look(loaded: object, rule: Judged, seq: Sequential, upto: Sequence[str], names: set[str]) -> list:
    """One rule's Decisions (its column given) on the runs of its tuning seeds and, at the judging
    seeds `upto`, on the members the judging trained (`names`)."""
    import dataclasses

    import numpy as np

    from activation_bench.analysis import decisions, staged
    from activation_bench.analysis.metrics import parse_metric

    t, choice = rule.tuning, rule.choice
    spec = t.spec if t.spec.tune_seeds is not None else dataclasses.replace(t.spec, tune_seeds=len(choice.tune_seeds))
    runs = loaded.runs  # type: ignore[attr-defined]
    seed, tuning = runs["seed"].astype(str), {str(s) for s in choice.tune_seeds}
    keep = seed.isin(tuning) | (seed.isin({str(s) for s in upto}) & runs["run"].astype(str).isin(names))
    sub = staged.subset(loaded, np.asarray(keep))
    return decisions.decisions(sub, parse_metric(t.metric), t.by, rule.baseline, rule.loss, spec, rule.margin,
                               seq.alpha, seq.max_seeds)


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
    them): per plan index, its judging stage for cli/tuned.run_staged (`_study_rules` says by what)."""
    out = {}
    for k, name in enumerate(names):
        found = _study_rules(study, k, name, rules)
        if found is not None:
            out[k] = _study_judge(plans, k, *found, run_stage, say)
    return out


def study_settings(study: Study, names: Sequence[str], rules: Sequence[Tuning]) -> dict[int, Settings]:
    """Per plan index of a study's sequentially judged sweeps, its judging's Settings (the dry run's)."""
    out = {}
    for k, name in enumerate(names):
        found = _study_rules(study, k, name, rules)
        if found is not None:
            seq, own = found
            out[k] = Settings(seq, tuple((t.metric, m, loss, b) for t, m, loss, b in own), study=True)
    return out


def _study_rules(study: Study, k: int, name: str, rules: Sequence[Tuning]) -> tuple[Sequential, list[Rule]] | None:
    """Sweep `name`'s (plan k's) sequential judging, None where it has none: a sweep with its own tune
    is judged by its own rule, margin, loss and baseline, as sweep --judge-seeds-max ... judges it; a
    `judge: chosen` sweep by every comparison that tunes it (each reads it alone), each with its own."""
    sw = study.spec.sweeps[name]
    if sw.look_every is None or sw.judge_seeds_max is None:
        return None
    if sw.tune:
        seq = Sequential(sw.judge_seeds_max, sw.look_every, f"{sw.margin:g}", sw.baseline, loss=sw.loss)
        return seq, [(t, seq.margin, seq.loss, seq.baseline) for t in rules if t.name == f"sweeps.{name}"]
    own = []
    for t in rules:
        if t.sweeps == (k,) and t.name.startswith("comparisons."):
            c = study.spec.comparisons[t.name.removeprefix("comparisons.")]
            own.append((t, str(c.margin), c.loss, c.baseline))
    return Sequential(sw.judge_seeds_max, sw.look_every, ""), own


def _study_judge(plans: Sequence[SweepPlan], k: int, seq: Sequential, own: Sequence[Rule],
                 run_stage: Callable[[int, list[int], list[int], str], None],
                 say: Callable[[str], None]) -> Callable[[list[int], Choice], None]:
    """Plan k's judging stage: each rule's choice made again (staged.choose: deterministic, from the
    finished tuning seeds, as run_staged made it) and judged with its comparison's margin."""
    def judge(stage1: list[int], _choice: Choice) -> None:
        from activation_bench.analysis import staged

        judged = [Judged(t, staged.choose(plans, t), margin, loss, baseline) for t, margin, loss, baseline in own]
        judge_all(plans[k], seq, stage1, judged, lambda todo, needed, stage: run_stage(k, todo, needed, stage), say,
                  k, study=True)

    return judge
