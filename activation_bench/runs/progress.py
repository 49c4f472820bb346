"""A sweep's progress as the command line shows it: `SweepProgress`, and the `Tally` that keeps it
while one stack trains, or two at once (runs/beside.py: their callbacks come from two threads)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class SweepProgress:
    """Where a sweep stands; reported after every epoch of a stack (counts, no formatting)."""

    finished: int  # members finished so far
    members: float  # the same, fractional while a stack trains (its members count by epochs done)
    steps: int  # model-steps taken so far: members x optimiser steps
    epoch: int = 0  # epochs done by the stack training now (0 with a launcher)
    epochs: int = 0
    stack: int = 0  # that stack's number (1-based), of `stacks`
    stacks: int = 0
    beside: int = 0  # the number of a second stack training at once (runs/beside.py), else 0


Progress = Callable[[SweepProgress], None]


class Tally:
    """A sweep's progress for `on_progress`: the stacks finished, and the epochs done of each stack
    training now."""

    def __init__(self, on_progress: Progress | None, stacks: int) -> None:
        self.on_progress, self.stacks = on_progress, stacks
        self.finished = self.steps = 0
        self.now: dict[int, list[int]] = {}  # stack index -> [members, model-steps an epoch, epochs done, epochs]
        self.lock = threading.Lock()

    def start(self, j: int, members: int, per_epoch: int, epochs: int) -> None:
        with self.lock:
            self.now[j] = [members, per_epoch, 0, epochs]

    def epoch(self, j: int, done: int, total: int) -> None:
        with self.lock:
            self.now[j][2:] = [done, total]
            self._report()

    def finish(self, j: int, epochs: int) -> None:
        with self.lock:
            members, per_epoch, _, _ = self.now.pop(j)
            self.finished += members
            self.steps += per_epoch * epochs
            self._report(j)

    def _report(self, ended: int = 0) -> None:
        if self.on_progress is None:
            return
        if not self.now:  # between stacks: `ended` the one just written
            self.on_progress(SweepProgress(self.finished, self.finished, self.steps, stack=ended + 1,
                                           stacks=self.stacks))
            return
        members = self.finished + sum(m * done / total for m, _, done, total in self.now.values())
        steps = self.steps + sum(per * done for _, per, done, _ in self.now.values())
        behind = min(self.now, key=lambda j: self.now[j][2] / self.now[j][3])  # the stack furthest from its end
        first, last = min(self.now), max(self.now)
        self.on_progress(SweepProgress(self.finished, members, steps, self.now[behind][2], self.now[behind][3],
                                       first + 1, self.stacks, last + 1 if last != first else 0))
