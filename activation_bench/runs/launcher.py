"""Hydra launcher entry: one multirun job trains one group of a sweep's members, stacked.

`actbench sweep --launcher joblib|submitit_local|submitit_slurm` runs
`python -m activation_bench.runs.launcher --multirun chunk=range(K) sweep_dir=... hydra/launcher=...`,
so Hydra's own launcher plugins place the jobs (local processes or SLURM). Each job calls the same
orchestration as a local sweep (`orchestrate.train_members`): skip what is done, stack, train, write.
A halving rung (`sweep --tune --halving`) goes out the same way with `upto=E`: each job trains its
settings to epoch E of their full runs and stops them there with their checkpoints (runs/rungs.py).

A job resumes its unfinished stacks from their checkpoints. Under submitit, its preemption and
timeout signal (SIGUSR2) makes the job write a checkpoint, then submitit's own handler requeues it
(Hydra's submitit launcher is checkpointable: the same job runs again, and resumes); a SIGTERM
there writes a checkpoint and training goes on (runs/checkpoint_files.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig


@dataclass
class LaunchConfig:
    sweep_dir: str = "???"
    chunk: int = 0  # which job's groups of members (see .launch_chunks.json in the sweep directory)
    threads: int = 0  # torch threads per job; 0 leaves torch's default
    memory_mb: float = 1024.0
    force: bool = False
    upto: int = 0  # a halving rung: each group trains to this epoch of its full run and stops (runs/rungs.py)


ConfigStore.instance().store(name="actbench_launch", node=LaunchConfig)


def run_chunk(sweep_dir: str, chunk: int, threads: int = 0, memory_mb: float = 1024.0,
              force: bool = False, upto: int = 0) -> int:
    """Train this job's group of members; returns how many run directories it wrote. With `upto`
    (a halving rung), each of its groups (a setting's members) trains to that epoch of its full run
    as a stack of its own, stopping there with its checkpoint (rungs.train_to), and none finishes."""
    import os
    import signal

    import torch

    from activation_bench.engine.resume import Preempted
    from activation_bench.runs import checkpoint_files as checkpoint
    from activation_bench.runs import orchestrate, rungs

    if threads > 0:
        torch.set_num_threads(threads)
    directory = Path(sweep_dir)
    plan = orchestrate.load_plan(directory)
    groups = json.loads((directory / ".launch_chunks.json").read_text())[chunk]
    submitit = bool(os.environ.get("SUBMITIT_EXECUTOR"))
    try:
        with checkpoint.handling_signals(submitit=submitit):
            if upto:
                for members in groups:
                    rungs.train_to(plan, members, upto, memory_mb, force)
                return 0
            todo = set(orchestrate.pending(plan, force))
            return orchestrate.train_members(plan, [i for g in groups for i in g if i in todo], memory_mb, force)
    except Preempted as stop:
        orchestrate.stderr_line(f"job {chunk} stopped by {checkpoint.signal_name(stop.signum)}: checkpoint written"
                                + (f" at epoch {stop.epoch}/{stop.epochs}" if stop.epochs else ""))
        if submitit and stop.signum == signal.SIGUSR2:
            checkpoint.requeue_under_submitit(stop.signum)  # requeues and exits where submitit handles it
        raise SystemExit(checkpoint.exit_code(stop.signum)) from None


@hydra.main(version_base="1.3", config_path=None, config_name="actbench_launch")
def main(cfg: DictConfig) -> int:
    return run_chunk(cfg.sweep_dir, cfg.chunk, cfg.threads, cfg.memory_mb, cfg.force, cfg.upto)


if __name__ == "__main__":
    main()
