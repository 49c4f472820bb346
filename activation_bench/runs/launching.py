"""Scale-out: handing a sweep's members to one of Hydra's launcher plugins (joblib, submitit for
SLURM) in Hydra's multirun mode. Each job runs `activation_bench.runs.launcher`, which trains its
group through `orchestrate.train_members` like a local sweep; this side writes the groups, starts
the multirun and reads progress from the run directories as they appear."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from activation_bench.errors import UsageError
from activation_bench.runs import store
from activation_bench.runs.orchestrate import Notice, SweepPlan, done_hashes, steps_per_epoch
from activation_bench.runs.progress import Progress, SweepProgress

LAUNCHERS = {
    "basic": None,
    "joblib": "hydra_plugins.hydra_joblib_launcher",
    "submitit_local": "hydra_plugins.hydra_submitit_launcher",
    "submitit_slurm": "hydra_plugins.hydra_submitit_launcher",
}


def check_launcher(launcher: str) -> None:
    import importlib.util

    if launcher not in LAUNCHERS:
        raise UsageError(f"unknown launcher '{launcher}'; valid: {', '.join(LAUNCHERS)}")
    module = LAUNCHERS[launcher]
    if module and importlib.util.find_spec(module) is None:
        raise UsageError(f"launcher '{launcher}' needs its Hydra plugin, in the [cluster] extra: "
                         "pip install 'activation-bench[cluster]'")


@dataclass(frozen=True)
class Launch:
    """How a sweep's members go out: the launcher plugin, its number of jobs, Hydra's overrides for
    it and the torch threads per job (0: local jobs share the cores, a cluster's use its default)."""

    launcher: str
    jobs: int
    hydra_overrides: tuple[str, ...] = ()
    threads: int = 0


def launch(p: SweepPlan, indices: Sequence[int], launcher: str, jobs: int, hydra_overrides: Sequence[str],
           memory_mb: float, force: bool, on_progress: Progress | None = None,
           notice: Notice | None = None, threads: int = 0, upto: int = 0,
           groups: Sequence[Sequence[int]] | None = None) -> int:
    """Hand groups of members to a Hydra launcher plugin, in Hydra's multirun mode.

    Each job runs `activation_bench.runs.launcher`, which trains its group of members stacked, through
    `train_members` like a local sweep, at `threads` torch threads where given (else local jobs share
    the cores as `--jobs` asks, however many members are left: a checkpoint continues only at the
    thread count that wrote it; a cluster's jobs use its default). Progress is read from the run
    directories as they appear.
    Members a checkpoint holds as one stack go to one job (it resumes them as that stack). `upto`: a
    halving rung (runs/rungs.py): each of `groups` (a setting's members) trains as rungs.train_to
    trains it, to `upto` epochs of its full run, in one job.
    """
    if not threads and launcher in ("joblib", "submitit_local"):
        threads = max(1, (os.cpu_count() or 1) // max(1, jobs))
    together = [list(g) for g in groups] if groups is not None else _together(p, indices)
    jobs = max(1, min(jobs, len(together)))
    chunks = [together[k::jobs] for k in range(jobs)]
    chunk_file = p.directory / ".launch_chunks.json"
    store.atomic_write(chunk_file, json.dumps(chunks))
    cmd = [
        sys.executable, "-m", "activation_bench.runs.launcher", "--multirun",
        f"hydra/launcher={launcher}",
        f"sweep_dir={_quoted(p.directory.resolve())}",
        f"chunk=range({jobs})",
        f"threads={threads}",
        f"memory_mb={memory_mb}",
        f"force={str(force).lower()}",
        f"hydra.sweep.dir={_quoted((p.directory / '.hydra').resolve())}",
        "hydra.job.chdir=false",
    ]
    if upto:
        cmd.append(f"upto={upto}")
    if launcher == "joblib":
        cmd.append(f"hydra.launcher.n_jobs={jobs}")
    cmd.extend(hydra_overrides)
    log = p.directory / ".hydra_launch.log"
    before = set(done_hashes(p.directory))
    targets = {p.hashes[i] for i in indices}
    member_steps = {p.hashes[i]: p.cfgs[i].epochs * steps_per_epoch(p.cfgs[i]) for i in indices}

    def report() -> int:
        finished = (set(done_hashes(p.directory)) - before) & targets
        if on_progress is not None:
            on_progress(SweepProgress(len(finished), len(finished), sum(member_steps[h] for h in finished)))
        return len(finished)

    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        try:
            while True:  # progress every half second, and on as soon as the launcher exits
                try:
                    proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    report()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
    if proc.returncode != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines()
                 if ln.strip() and "HYDRA_FULL_ERROR" not in ln and not ln.startswith("See https")]
        tail = lines[-1] if lines else "(no output)"
        raise UsageError(f"launcher '{launcher}' failed (exit {proc.returncode}): {tail} (see {log})")
    return report()


def _together(p: SweepPlan, indices: Sequence[int]) -> list[list[int]]:
    """The members in groups that go to one job each: a stack a checkpoint holds (all of its members
    to train here), else a member alone; in the order of the members."""
    from activation_bench.runs import checkpoint_files as checkpoint

    want = {p.hashes[i]: i for i in indices}
    stack_of: dict[int, list[int]] = {}
    for hashes in checkpoint.saved_stacks(p.directory).values():
        if len(set(hashes)) == len(hashes) and all(h in want and want[h] not in stack_of for h in hashes):
            stack_of.update({want[h]: [want[h] for h in hashes] for h in hashes})
    out, placed = [], set()
    for i in indices:
        if i not in placed:
            group = stack_of.get(i, [i])
            out.append(group)
            placed.update(group)
    return out


def _quoted(path: Path) -> str:
    """A path as a quoted value in Hydra's override grammar (sweep names hold '=' and ',')."""
    text = str(path).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"
