"""Successive halving's rungs for a tuned sweep's tuning stage (`sweep --tune --halving ETA`): train
members to an epoch of their full run and stop there, with the schedule of the full run (a cosine
or warmup schedule sized to all its epochs), the state saved as a checkpoint; a promoted member
later resumes from it, so it ends bit for bit as its full run. The engine's own checkpoint hooks do
the stopping (a `RungStop` around runs/checkpoint_files.StackCheckpoints); nothing in training changes.

Each setting's members (one grid value of one group, on the tuning seeds) train as stacks of their
own, so a setting is promoted or pruned with its whole stack and a promoted stack resumes as the
same stack. The rung's scores are read from the checkpoints' losses (`partial_table`). Under a
launcher the same happens in its jobs (`launch_to`; runs/launcher.py's `upto`).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from activation_bench.errors import UsageError
from activation_bench.runs import store

if TYPE_CHECKING:
    from activation_bench.runs.launching import Launch

RUNG = -2  # the `signum` of a stack stopped at its rung (no signal: runs/checkpoint_files.signal_name's "rung")
COLUMNS = {"train": "train_loss", "val": "val_loss", "val_acc": "val_acc"}  # the losses a choice reads


class RungStop:
    """Checkpoint hooks that also save and stop once `epoch` epochs are done (step 0: an epoch's end)."""

    def __init__(self, inner: Any, epoch: int) -> None:
        self.inner, self.epoch, self.reached = inner, epoch, False

    def load(self) -> dict[str, Any] | None:
        return self.inner.load()

    def reject(self, why: str) -> None:
        self.inner.reject(why)

    def due(self, epoch: int, step: int) -> bool:
        self.reached = not step and epoch >= self.epoch
        return self.inner.due(epoch, step) or self.reached

    def save(self, state: dict[str, Any]) -> None:
        self.inner.save(state)

    def stop(self) -> int | None:
        signum = self.inner.stop()
        return signum if signum is not None or not self.reached else RUNG

    def remove(self) -> None:
        self.inner.remove()


def schedule(epochs: int, values: int, eta: int) -> list[int]:
    """The rungs' epochs for `values` settings per group: ceil(log_eta(values)) promotions, each
    rung eta times the one before, the last the full run. UsageError where the first is under one
    epoch or eta is below 2."""
    if eta < 2:
        raise UsageError(f"--halving {eta}: keeps the best 1/ETA of each group's settings at each rung; ETA is 2 "
                         "or more")
    promotions = 0
    while eta ** promotions < values:
        promotions += 1
    out = [epochs // eta ** (promotions - r) for r in range(promotions + 1)]
    if out[0] < 1:
        raise UsageError(f"--halving {eta}: {values} values per group need {promotions + 1} rungs, the first at "
                         f"{epochs}/{eta ** promotions} epochs: under one epoch (more epochs, or a larger ETA)")
    return out


def survivors(n: int, eta: int) -> int:
    """How many of n settings go on to the next rung: ceil(n / eta), at least one."""
    return max(1, math.ceil(n / eta))


def stopped_at(directory: Path) -> dict[str, int]:
    """Config hash -> the epoch its stack's checkpoint holds, for every stack with a checkpoint."""
    from activation_bench.runs import checkpoint_files as checkpoint

    out = {}
    for path, hashes in checkpoint.saved_stacks(directory).items():
        try:
            epoch = int(checkpoint.read_header(path).get("epoch", 0))
        except checkpoint.Damaged:
            continue
        out.update({h: epoch for h in hashes})
    return out


def short_of(p: Any, members: Sequence[int], epoch: int) -> list[int]:
    """These members that have neither finished nor a checkpoint at `epoch` epochs or more."""
    from activation_bench.runs import orchestrate

    done = orchestrate.done_hashes(p.directory)
    at = stopped_at(p.directory)
    return [i for i in members if p.hashes[i] not in done and at.get(p.hashes[i], 0) < epoch]


def train_to(p: Any, members: Sequence[int], epoch: int, memory_mb: float, force: bool = False) -> None:
    """Train these members (a setting's) to `epoch` epochs of their full run, each stack stopping
    there with its checkpoint; members already there (or finished) are left alone. A real signal's
    Preempted goes on up."""
    from activation_bench.engine.resume import Preempted
    from activation_bench.runs import orchestrate

    while True:
        todo = short_of(p, members, epoch)
        if not todo:
            return
        try:
            orchestrate.train_members(p, todo, memory_mb, force, wrap_hooks=lambda h: RungStop(h, epoch))
            return
        except Preempted as stop:
            if stop.signum != RUNG:
                raise


def launch_to(p: Any, settings: Sequence[Sequence[int]], epoch: int, how: Launch, memory_mb: float) -> None:
    """train_to through a Hydra launcher (`how`): the settings short of
    `epoch` go out in its jobs, each job training each of its settings as train_to does (the
    epoch reaches it as runs/launcher.py's `upto`)."""
    from activation_bench.runs import launching

    left = [list(m) for m in settings if short_of(p, m, epoch)]
    if left:
        launching.launch(p, [i for m in left for i in m], how.launcher, how.jobs, list(how.hydra_overrides),
                         memory_mb, False, threads=how.threads, upto=epoch, groups=left)


def partial_table(p: Any, members: Sequence[int], upto: int) -> str:
    """A long CSV (the sweep's label columns, run, epoch, train_loss, val_loss, val_acc where logged)
    of these members' first `upto` epochs, read from their stacks' checkpoints (each must be there)."""
    from activation_bench.runs import checkpoint_files as checkpoint
    from activation_bench.runs import orchestrate

    want = {p.hashes[i]: i for i in members}
    rows: dict[int, dict[str, list[float]]] = {}
    for h, (run_dir, _) in orchestrate.done_hashes(p.directory).items():  # promoted and finished since
        if h in want:
            with open(run_dir / "losses.csv", encoding="utf-8") as fh:
                table = list(csv.DictReader(fh))[:upto]
            rows[want[h]] = {c: [float(r[c]) for r in table] for c in COLUMNS.values() if table and c in table[0]}
    for path, hashes in checkpoint.saved_stacks(p.directory).items():
        if not any(h in want for h in hashes):
            continue
        if all(want.get(h) in rows for h in hashes if h in want):
            continue
        _, state = checkpoint.read(path)
        losses = state["losses"]
        for pos, h in enumerate(hashes):
            if h in want and want[h] not in rows:
                rows[want[h]] = {name: losses[key][:upto, pos].tolist() for key, name in COLUMNS.items()
                                 if losses.get(key) is not None}
    missing = [p.names[i] for i in members if i not in rows]
    if missing:
        raise UsageError(f"{p.directory}: no checkpoint holds {missing[0]} at its rung; run the same command again")
    cols = [c for c in COLUMNS.values() if all(c in r for r in rows.values())]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*p.keys, "run", "epoch", *cols])
    for i in members:
        for e in range(upto):
            writer.writerow([*(p.labels[i].get(k, "") for k in p.keys), p.names[i], e + 1,
                             *(repr(rows[i][c][e]) for c in cols)])
    return buf.getvalue()


def write_table(p: Any, rung: int, text: str) -> Path:
    """The rung's table in the sweep's folder (.rungs/rungN.csv), what its scores are read from."""
    folder = p.directory / ".rungs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rung{rung}.csv"
    store.atomic_write(path, text)
    return path
