"""Sequential judging for `sweep --tune` (`--judge-seeds-max N --look-every K --margin X`): the judging
seeds at the chosen values are added K at a time; after each batch the statistics decide every
comparison with the baseline anytime-validly (analysis/decisions.decisions, a confidence sequence
whose level holds at every look), and the groups whose comparison is decided train no more seeds.
Judging stops when every comparison is decided or N judging seeds are used. The judging record
(sequential.RECORD_FILE) in the sweep's folder makes `compare` read the verdicts the same way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from activation_bench.errors import UsageError

if TYPE_CHECKING:
    from activation_bench.analysis.staged import Choice, Tuning
    from activation_bench.runs.orchestrate import SweepPlan


@dataclass(frozen=True)
class Sequential:
    max_seeds: int
    look_every: int
    margin: str
    baseline: str | None = None
    alpha: float = 0.05


def parse(max_seeds: int | None, look_every: int | None, margin: str | None, baseline: str | None,
          tuned: bool) -> Sequential | None:
    """The options checked before anything is read; None without them."""
    if max_seeds is None and look_every is None and margin is None:
        if baseline is not None:
            raise UsageError("--baseline on sweep is the sequential judging's: give --judge-seeds-max, --look-every "
                             "and --margin too")
        return None
    if margin is None:
        raise UsageError("--judge-seeds-max and --look-every stop judging once each verdict is decided: give "
                         "--margin X too (the region of practical equivalence, e.g. 1.05 on a loss)")
    if max_seeds is None or look_every is None:
        raise UsageError("--margin on sweep sets up sequential judging: give --judge-seeds-max N and --look-every K")
    from activation_bench.analysis.verdicts import parse_margin

    parse_margin(margin)  # the judged column is a loss (_margin): a ratio, checked before anything trains
    if not tuned:
        raise UsageError("sequential judging adds judging seeds to a tuned sweep: give --tune KEY too")
    if look_every < 1 or max_seeds < 2:
        raise UsageError(f"--look-every {look_every} --judge-seeds-max {max_seeds}: at least 1 seed a look and 2 "
                         "judging seeds in all")
    return Sequential(max_seeds, look_every, margin, baseline)


def check(seq: Sequential, judge_seeds: Sequence[str]) -> None:
    """Against the grid's judging seeds (all but the tuning seeds)."""
    n = len(judge_seeds)
    if seq.look_every > n:
        raise UsageError(f"--look-every {seq.look_every}: larger than the {n} judging seeds of the seed range")
    if seq.max_seeds > n:
        raise UsageError(f"--judge-seeds-max {seq.max_seeds}: the seed range has {n} judging seeds; widen it")


def judge(p: SweepPlan, t: Tuning, seq: Sequential, stage1: list[int], choice: Choice,
          run_stage: Callable[[list[int], list[int], str], None], say: Callable[[str], None]) -> None:
    """The judging stage a batch of seeds at a time (module docstring). Each look reads only the
    seeds up to its batch, so a resumed sweep makes the same decisions."""
    import numpy as np

    from activation_bench.analysis import decisions, sequential, staged
    from activation_bench.analysis.loading import load
    from activation_bench.analysis.metrics import default_loss, parse_metric
    from activation_bench.runs import orchestrate, store

    seeds = choice.judge_seeds[:seq.max_seeds]
    chosen = choice.judging.get(0, [])
    spec = t.spec if t.spec.tune_seeds is not None else \
        type(t.spec)(t.spec.keys, len(choice.tune_seeds), t.spec.on, t.spec.grid)
    trained = set(stage1)
    open_groups: list[dict[str, str]] | None = None
    base_key = None
    for start in range(0, len(seeds), seq.look_every):
        batch = set(seeds[start:start + seq.look_every])
        todo = [i for i in chosen if staged.member_seed(p, i) in batch and _wanted(p, i, open_groups, base_key)]
        trained.update(todo)
        pending = set(orchestrate.pending(p, False))
        run_stage([i for i in todo if i in pending], sorted(trained),
                  f"judging seeds {', '.join(sorted(batch, key=float))}")
        orchestrate.build_results(p, sorted(trained))
        metric = parse_metric(t.metric)
        loaded = load([str(p.directory)])
        used = set(choice.tune_seeds) | set(seeds[:start + seq.look_every])
        loaded = staged.subset(loaded, np.array([str(s) in used for s in loaded.runs["seed"]]))
        loss = default_loss(loaded, metric, None)
        ds = decisions.decisions(loaded, metric, t.by, seq.baseline, loss, spec, seq.margin, seq.alpha,
                                  seq.max_seeds)
        still = [d for d in ds if not d.done]
        say(f"look after {start + len(batch)} judging seeds: " + "; ".join(
            f"{_name(d.group)} {d.verdict} ({d.n} pairs, {d.stopped})" for d in ds))
        if not still:
            break
        open_groups = [d.group for d in still]
        base_key = ds[0].baseline if ds else None
        if any(not any(_wanted(p, i, [g], None) for i in chosen) for g in open_groups):
            open_groups = None  # a group the members' labels do not spell so: judge every group on
    store.atomic_write(p.directory / sequential.RECORD_FILE, sequential.record_text(
        _margin(seq, loss), seq.alpha, seq.max_seeds, seq.look_every))
    say(f"sequential judging: {len(trained) - len(stage1)} judging members trained, of the "
        f"{sum(1 for i in chosen if staged.member_seed(p, i) in set(seeds))} at the chosen values up to "
        f"--judge-seeds-max {seq.max_seeds}")


def _margin(seq: Sequential, loss: str):  # noqa: ANN202 - a verdicts.Margin
    from activation_bench.analysis.loading import is_accuracy
    from activation_bench.analysis.verdicts import parse_margin

    return parse_margin(seq.margin, accuracy=is_accuracy(loss))


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
