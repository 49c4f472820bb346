"""Two eager stacks trained at once: one in the calling thread, one in a second thread
(`orchestrate.train_members` pairs them where `engine.plan.trains_beside` allows and `pays` says so,
and splits a stack that would train alone in two halves: `halves`).

Why: the eager step of a small model is about 160 small operations and the Python between them; one
stack alone leaves the cores idle for part of each step, and a second stack's step fills them.
Measured on the reference grid's two stacks of 240 (docs/performance.md), on two cores: training
1.60-1.68x faster at one torch thread each, 1.05-1.32x at two threads each.

Each member keeps its bits: torch's operations read their inputs and the thread count only (ATen
gives a new thread the process's count at its first parallel operation, so a run records the count
it would alone), every member draws from its own generators, and the families that hold state
elsewhere are not paired (`Family.trains_beside`). Denormals: torch.set_flush_denormal sets the
calling thread's flag, which an OpenMP team's threads inherit when the team is created, at the first
parallel operation of the thread that leads it; in an actbench process both teams are created while
a stack trains, so both flush denormals on every thread, as a run alone does.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


class Cancelled(Exception):  # noqa: N818
    """Raised from a stack's progress callback once the other stack failed: it stops there, at the
    end of an epoch (its checkpoint, where one was written, is kept)."""


@dataclass
class Outcome:
    """What one stack's training gave: its results, or the exception that ended it."""

    results: list[Any] | None = None
    error: BaseException | None = None


Task = Callable[[threading.Event], list[Any]]  # trains one stack; raises Cancelled once the event is set


def pays() -> bool:
    """Whether two stacks at once pay on this machine at torch's thread count: measured at one and two
    threads each on two cores (the gains above; at two, four threads share two cores); where both
    stacks' threads fit the cores they do not compete for them. Beyond that (more threads than the
    cores hold twice, such as torch's default on a larger machine) not measured: one at a time."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = torch.get_num_threads()
    return cores >= 2 and (threads <= 2 or 2 * threads <= cores)


def pair(stacks: Sequence[Sequence[Cfg]], budget_mb: float, store: bool = True) -> bool:
    """Whether two stacks (their members' configs) may train at once: both may
    (engine.plan.trains_beside, with engine=auto's `store`) and together they fit the memory budget
    of one stack."""
    from activation_bench.engine import plan

    if len(stacks) != 2 or not all(plan.trains_beside(s, store) for s in stacks):
        return False
    return sum(plan.member_bytes(c) for s in stacks for c in s) / 2**20 <= budget_mb


def halves(stacks: list[list[int]], fixed: int, can_pair: Callable[[list[list[int]]], bool]) -> list[list[int]]:
    """The stacks, with each that would train alone (no partner next to it: `can_pair` of it and the
    next is false) split into two halves that train at once, where it has at least four members (a
    stack of one may train padded: Family.pads_alone) and `can_pair` its halves. The first `fixed`
    stacks (resumed from checkpoints, as the same stacks) are never split. A member's losses do not
    depend on its stack's size (docs/reproducibility.md)."""
    out = list(stacks)
    i = 0
    while i < len(out):
        if i + 1 < len(out) and can_pair(out[i:i + 2]):
            i += 2
            continue
        half = len(out[i]) // 2
        if i >= fixed and half >= 2 and can_pair([out[i][:half], out[i][half:]]):
            out[i:i + 1] = [out[i][:half], out[i][half:]]
            i += 2
            continue
        i += 1
    return out


def train_both(here: Task, there: Task) -> tuple[Outcome, Outcome]:
    """Run `there` in a second thread while `here` runs in this one; return when both have ended.
    Where one ends with an error other than Preempted (a signal stops both, through the shared
    signal state), the other is cancelled at its next epoch. A KeyboardInterrupt while waiting (a
    second SIGINT) cancels the other and is raised once it has stopped."""
    from activation_bench.engine.resume import Preempted

    cancel = threading.Event()
    outcomes = (Outcome(), Outcome())

    def attempt(task: Task, out: Outcome) -> None:
        try:
            out.results = task(cancel)
        except BaseException as exc:  # handed to the caller, which raises it after both have ended
            out.error = exc
            if not isinstance(exc, (Preempted, Cancelled)):
                cancel.set()

    thread = threading.Thread(target=attempt, args=(there, outcomes[1]), name="actbench-stack", daemon=True)
    thread.start()
    attempt(here, outcomes[0])
    interrupted = False
    while thread.is_alive():
        try:
            thread.join()
        except KeyboardInterrupt:
            cancel.set()
            interrupted = True
    if interrupted:
        raise KeyboardInterrupt
    return outcomes


def first_error(outcomes: tuple[Outcome, ...]) -> BaseException | None:
    """The exception to raise for a pair: an error or an interrupt before a Preempted, and never
    Cancelled (it only follows the other's error)."""
    from activation_bench.engine.resume import Preempted

    errors = [o.error for o in outcomes if o.error is not None and not isinstance(o.error, Cancelled)]
    errors.sort(key=lambda e: isinstance(e, Preempted))
    return errors[0] if errors else None
