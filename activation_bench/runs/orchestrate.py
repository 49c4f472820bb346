"""Between the CLI and the core: expand the grid, skip what is done, group members, train, write.

`actbench sweep`, a study's sweeps and the Hydra launcher entry (`activation_bench.runs.launcher`)
call into this module, `actbench run` into single.py (a stack of one); none of them trains or writes
files any other way.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from activation_bench.errors import UsageError
from activation_bench.runs import store
from activation_bench.runs.contents import COLUMNS
from activation_bench.runs.labels import sweep_labels
from activation_bench.runs.memory import stack_budget_mb
from activation_bench.runs.progress import Progress, Tally

if TYPE_CHECKING:
    from threading import Event

    from activation_bench.cfg import Cfg
    from activation_bench.engine.train import RunResult

Notice = Callable[[str], None]


def stderr_line(line: str) -> None:
    """A notice where the caller gives none (a single run, a launcher's job): one line on stderr."""
    print(line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# sweeps


@dataclass
class SweepPlan:
    directory: Path
    overrides: list[str]
    keys: list[str]
    members: list[list[str]]
    labels: list[dict[str, str]]
    names: list[str]
    cfgs: list[Cfg] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)
    # a tuned sweep (analysis/staged.py): its tuning rule(s), written into sweep.yaml; its grid may
    # change between runs in one folder (the choice is made again)
    tuned: list[dict] | None = None


def sweep_name(overrides: Sequence[str]) -> str:
    """Deterministic default name: the same command finds the same directory."""
    text = " ".join(overrides)
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return store.slug("sweep_" + "_".join(overrides), 60) + "-" + digest


def member_name(index: int, labels: dict[str, str]) -> str:
    body = "_".join(f"{k}={v}" for k, v in labels.items()) or "member"
    return f"{index:04d}_" + store.slug(body, 100)


def plan(overrides: Sequence[str], runs_dir: Path, name: str | None, tuned: bool = False) -> SweepPlan:
    """Expand and validate every member (nothing is written); exit-2 errors name the member. A
    `tuned` sweep may replace a tuned sweep of other overrides in its folder (check_same_sweep)."""
    from activation_bench.config.grid import expand
    from activation_bench.config.hashing import config_hash

    grid = expand(overrides)
    cfgs = compose_members(grid.members, grid.labels)
    directory = runs_dir / (store.check_name(name) if name else sweep_name(overrides))
    keys, labels = sweep_labels(grid.keys, grid.labels, cfgs)
    names = [member_name(i, lab) for i, lab in enumerate(labels)]
    check_same_sweep(directory, list(overrides), tuned)  # refused here: a study's later sweep before its first trains
    hashes = [config_hash(c) for c in cfgs]
    if tuned:
        _grid_kept(directory, hashes)
    return SweepPlan(directory, list(overrides), keys, grid.members, labels, names, cfgs, hashes)


def _grid_kept(directory: Path, hashes: list[str]) -> None:
    """A tuned sweep whose grid changed in its folder may add values and seeds (the choice is made
    again), not drop members that finished there: their runs would still be read with the new grid's."""
    dropped = set(done_hashes(directory)) - set(hashes)
    if dropped:
        raise UsageError(f"{directory} holds {len(dropped)} finished member(s) this grid leaves out (a tuned sweep's "
                         "grid may grow, not shrink, in its folder); choose another --name")


def compose_members(members: Sequence[Sequence[str]], labels: Sequence[dict[str, str]]) -> list[Cfg]:
    from activation_bench.config.compose import compose_many
    from activation_bench.config.grid import describe

    try:
        return compose_many(members)
    except UsageError as exc:
        # compose_many stops at the first bad member; say which one it was
        for mem, lab in zip(members, labels):
            try:
                compose_many([mem])
            except UsageError:
                raise UsageError(f"sweep member [{describe(lab.items())}]: {exc}") from None
        raise


def check_same_sweep(directory: Path, overrides: list[str], tuned: bool = False) -> None:
    """UsageError where `directory` holds the sweep.yaml of a sweep with other overrides (resuming it
    would mix two grids); a missing or damaged sweep.yaml passes (write_sweep_file rewrites it). A
    tuned sweep replacing a tuned sweep passes: its results hold its own grid's members only, and its
    choice is made again from them (analysis/staged.py)."""
    import yaml

    from activation_bench.cfg import load_yaml

    existing = directory / "sweep.yaml"
    if not existing.is_file():
        return
    try:
        old = load_yaml(existing.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return
    if isinstance(old, dict) and tuned and old.get("tuned"):
        return
    if isinstance(old, dict) and list(old.get("overrides") or []) != overrides:
        raise UsageError(f"{directory} holds a different sweep ({' '.join(map(str, old['overrides']))}); "
                         "choose another --name")


def write_sweep_file(p: SweepPlan) -> None:
    from activation_bench.cfg import dump_yaml

    store.ensure_root(p.directory.parent)
    store.inside(p.directory.parent, p.directory)
    check_same_sweep(p.directory, p.overrides, bool(p.tuned))
    p.directory.mkdir(parents=True, exist_ok=True)
    doc = {
        "overrides": p.overrides,
        **({"tuned": p.tuned} if p.tuned else {}),
        "keys": p.keys,
        "members": [
            {"name": n, "overrides": m, "labels": lab, "config_hash": h}
            for n, m, lab, h in zip(p.names, p.members, p.labels, p.hashes)
        ],
    }
    store.atomic_write(p.directory / "sweep.yaml", dump_yaml(doc))


def done_hashes(directory: Path) -> dict[str, tuple[Path, dict]]:
    """config hash -> (run directory, its summary), for every finished run under a sweep directory."""
    out: dict[str, tuple[Path, dict]] = {}
    if not directory.is_dir():
        return out
    for child in directory.iterdir():
        if child.is_dir() and not child.name.startswith("."):
            s = store.finished_summary(child)
            if s and s.get("config_hash"):
                out[s["config_hash"]] = (child, s)
    return out


def pending(p: SweepPlan, force: bool) -> list[int]:
    if force:
        return list(range(len(p.members)))
    done = done_hashes(p.directory)
    todo = [i for i, h in enumerate(p.hashes) if h not in done]
    if todo and done:
        _same_code(p, done)
    return todo


def _same_code(p: SweepPlan, done: dict[str, tuple[Path, dict]]) -> None:
    """model=module, members left to train: UsageError where finished members ran other code of
    their model.target than this process would (a file of it edited since, another version of its
    distribution: summary.json's `code`, user_code.code_change), so that one sweep never holds two
    versions of a user's model. Runs that recorded no code are not checked."""
    targets = {h: str(c.model.get("target")) for h, c in zip(p.hashes, p.cfgs) if c.model.get("name") == "module"}
    ran = [(targets[h], s["code"]) for h, (_, s) in done.items() if h in targets and s.get("code")]
    if not ran:
        return
    from activation_bench.engine.models.user_code import code_change, code_record

    for target in sorted({t for t, _ in ran}):
        now = code_record(target)
        changes = [change for t, c in ran if t == target and (change := code_change(c, now))]
        if changes:
            raise UsageError(
                f"{p.directory}: {len(changes)} finished member(s) ran other code of model.target '{target}' "
                f"({changes[0]} since): training the rest would mix two versions of the model in one sweep; "
                "restore the code, train them all again (--force) or elsewhere (--name)")


def train_members(p: SweepPlan, indices: Sequence[int], memory_mb: float, force: bool,
                  on_progress: Progress | None = None, notice: Notice | None = None, beside: bool = False,
                  wrap_hooks: Callable[[Any], Any] | None = None) -> int:
    """Train the given members in stacks and write one run directory each. Returns count written.
    A stack with a checkpoint in the sweep's directory resumes from it, as the same stack; each
    stack writes checkpoints when due, and stops with checkpoint.Preempted at a signal. With
    `beside`, two consecutive stacks that may (runs/beside.py) train at once, in two threads, and a
    stack that would train alone trains as two halves at once (beside.halves). `wrap_hooks`
    wraps each stack's checkpoint hooks (a halving rung's runs/rungs.RungStop: save the checkpoint
    after that many epochs of the full run and stop there)."""
    from activation_bench.runs import beside as two
    from activation_bench.runs import checkpoint_files as checkpoint

    store.clean_stale_temps(p.directory)
    checkpoint.clean_stale(p.directory)
    say = notice or stderr_line
    stacks, budget, resumed = _stacks(p, indices, memory_mb, force)
    engines = _auto_engines(p, force)
    pairs = beside and bool(stacks) and two.pays()
    if pairs:  # a stack that would train alone goes as two halves at once

        def can_pair(two_stacks: list[list[int]]) -> bool:
            return two.pair([[p.cfgs[i] for i in s] for s in two_stacks], budget, "eager" not in engines)

        stacks = two.halves(stacks, resumed, can_pair)
    tally = Tally(on_progress, len(stacks))
    k = 0
    while k < len(stacks):
        checkpoint.SIGNAL_STATE.check()  # a signal between stacks: stop before the next one
        saved = "eager" not in engines  # engine=auto may look for a saved compiled step
        two_at_once = pairs and two.pair([[p.cfgs[i] for i in s] for s in stacks[k:k + 2]], budget, saved)
        wave = [k, k + 1] if two_at_once else [k]
        hooks = {j: checkpoint.StackCheckpoints(p.directory, [p.hashes[i] for i in stacks[j]],
                                                p.cfgs[stacks[j][0]].get("checkpoint"), say,
                                                f"stack {j + 1}/{len(stacks)} ({len(stacks[j])} members)")
                 for j in wave}
        if wrap_hooks is not None:
            hooks = {j: wrap_hooks(h) for j, h in hooks.items()}
        tasks = [functools.partial(_train_stack, p, stacks[j], j, hooks[j], tally, say, saved) for j in wave]
        outcomes = two.train_both(*tasks) if len(tasks) == 2 else (two.Outcome(tasks[0](None)),)
        for j, outcome in zip(wave, outcomes):
            if outcome.results is not None:
                _finish(p, stacks[j], outcome.results, j, len(stacks), engines, force, notice, hooks[j])
                tally.finish(j, p.cfgs[stacks[j][0]].epochs)
        if (error := two.first_error(outcomes)) is not None:
            raise error
        k += len(wave)
    return tally.finished


def _train_stack(p: SweepPlan, members: list[int], j: int, hooks: Any, tally: Tally, say: Notice, saved: bool,
                 cancel: Event | None) -> list[RunResult]:
    """Train stack number j (0-based); its progress goes to `tally`, and it stops with
    beside.Cancelled at an epoch's end once `cancel` is set (the stack beside it failed)."""
    from activation_bench.engine import train
    from activation_bench.runs.beside import Cancelled

    first = p.cfgs[members[0]]
    tally.start(j, len(members), len(members) * steps_per_epoch(first), first.epochs)

    def progress(done: int, total: int, _loss: Any) -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled
        tally.epoch(j, done, total)

    return train.train([p.cfgs[i] for i in members], progress, say, hooks, store=saved)


def _finish(p: SweepPlan, members: list[int], results: list[RunResult], j: int, stacks: int, engines: set[str],
            force: bool, notice: Notice | None, hooks: Any) -> None:
    """Write one trained stack's run directories (forked writers: no second thread trains now) and
    drop its checkpoint; engine=auto's engines and the diverged members are said."""
    from torch import get_num_threads

    if p.cfgs[members[0]].engine == "auto" and results:
        if results[0].engine == "eager" and "compiled" in engines:
            (notice or stderr_line)(f"engine eager for stack {j + 1}/{stacks} (auto: its compiled step is not "
                                    "saved on this machine, while this sweep's earlier members trained compiled)")
        engines.add(results[0].engine)
    store.write_runs([(p.directory / p.names[i], p.cfgs[i], r, p.hashes[i], p.labels[i])
                     for i, r in zip(members, results)], replace=force, processes=get_num_threads())
    hooks.remove()
    for i, result in zip(members, results):
        if result.status == "diverged" and notice is not None:
            notice(f"diverged: {p.names[i]} (loss not finite or exploded at epoch {result.diverged_epoch})")


def _auto_engines(p: SweepPlan, force: bool) -> set[str]:
    """The engines this sweep's finished engine=auto members trained with. Once one trained eager,
    auto's other stacks in the sweep train eager too (train(store=False)), so that a compiled step
    saved meanwhile (by another command) does not split one sweep's members between the engines."""
    if force:
        return set()
    auto = {h for h, c in zip(p.hashes, p.cfgs) if c.engine == "auto"}
    if not auto:  # a sweep that pins its engine (every shipped study): no summaries to read
        return set()
    return {s.get("engine", "eager") for h, (_, s) in done_hashes(p.directory).items() if h in auto}


def _stacks(p: SweepPlan, indices: Sequence[int], memory_mb: float,
            force: bool) -> tuple[list[list[int]], float, int]:
    """The members' stacks (plan indices), the memory budget of one stack and how many stacks lead
    the list as checkpoints hold them: first each stack a checkpoint holds whose members are all to
    train here (it resumes as the same stack), then the rest as plan_stacks groups them. A
    checkpoint whose members have all finished is removed (never with --force)."""
    from activation_bench.engine import plan
    from activation_bench.runs import checkpoint_files as checkpoint

    resumed: list[list[int]] = []
    saved = checkpoint.saved_stacks(p.directory) if not force else {}
    if saved:
        todo = {p.hashes[i]: i for i in indices}
        finished = set(done_hashes(p.directory))
        for path, hashes in saved.items():
            taken = {i for s in resumed for i in s}
            if len(set(hashes)) == len(hashes) and all(h in todo and todo[h] not in taken for h in hashes):
                resumed.append([todo[h] for h in hashes])
            elif all(h in finished for h in hashes):
                checkpoint.remove(path)
    taken = {i for s in resumed for i in s}
    rest = [i for i in indices if i not in taken]
    cfgs = [p.cfgs[i] for i in rest]
    budget = stack_budget_mb(memory_mb, plan.resolve_device(p.cfgs[indices[0]].device)) if indices else memory_mb
    return resumed + [[rest[j] for j in s] for s in plan.plan_stacks(cfgs, budget)], budget, len(resumed)


def steps_per_epoch(cfg: Cfg) -> int:
    """Optimiser steps in one epoch: one per minibatch."""
    from activation_bench.engine import plan

    n = plan.data_shapes(cfg)[0]
    return -(-n // (cfg.batch_size or n))


def build_results(p: SweepPlan, needed: Sequence[int] | None = None) -> tuple[Path, int, int]:
    """Rebuild results.csv from the run directories (so it never holds duplicates): every finished
    member of the plan.

    Returns (path, members included, members missing): missing among `needed` (a tuned sweep's
    stages), or among all members.
    """
    done = done_hashes(p.directory)
    members = []
    wanted = set(range(len(p.hashes)) if needed is None else needed)
    missing = sum(1 for i in wanted if p.hashes[i] not in done)
    for h, lab in zip(p.hashes, p.labels):
        if h not in done:
            continue
        run_dir, summary = done[h]
        n_params = summary.get("n_params", "")
        header, _, body = (run_dir / "losses.csv").read_text(encoding="utf-8").partition("\n")
        members.append((run_dir.name, n_params, lab, header.split(","), body))
    loss_cols = ["train_loss", *(c for c in COLUMNS[1:] if any(c in m[3] for m in members))]
    path = p.directory / "results.csv"
    with store.locked(p.directory / ".results.lock"):
        # streamed member by member: the whole table (tens of MB for a large sweep) is never
        # built in memory
        store.atomic_write(path, _results_rows(p.keys, loss_cols, members))
    return path, len(wanted) - missing, missing


def _results_rows(keys: list[str], loss_cols: list[str], members: list[tuple]) -> Iterator[str]:
    """results.csv's text in pieces: the header, then one piece per member."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([*keys, "run", "n_params", "epoch", *loss_cols])
    yield buf.getvalue()
    for run_name, n_params, lab, header, body in members:
        prefix_buf = io.StringIO()
        csv.writer(prefix_buf, lineterminator="").writerow([lab.get(k, "") for k in keys] + [run_name, n_params, ""])
        prefix = prefix_buf.getvalue()  # the trailing empty field leaves the separator before epoch
        if header == ["epoch", *loss_cols] and body.endswith("\n") and "\r" not in body:
            # the member's rows are already epoch,losses: prefix each line (fast path)
            yield prefix + body[:-1].replace("\n", "\n" + prefix) + "\n"
        else:
            pos = [header.index(c) if c in header else None for c in ["epoch", *loss_cols]]
            yield "".join(prefix + ",".join(row[j] if j is not None else "" for j in pos) + "\n"
                          for row in (line.split(",") for line in body.splitlines()))


def load_plan(sweep_dir: Path) -> SweepPlan:
    """Rebuild a SweepPlan from sweep.yaml (used by launcher jobs)."""
    from activation_bench.cfg import load_yaml
    from activation_bench.config.compose import compose_many
    from activation_bench.config.hashing import config_hash

    doc = load_yaml((sweep_dir / "sweep.yaml").read_text(encoding="utf-8"))
    members = [list(m["overrides"]) for m in doc["members"]]
    labels = [dict(m["labels"]) for m in doc["members"]]
    cfgs = compose_many(members)
    return SweepPlan(sweep_dir, list(doc["overrides"]), list(doc["keys"]), members, labels,
                     [m["name"] for m in doc["members"]], cfgs, [config_hash(c) for c in cfgs])
