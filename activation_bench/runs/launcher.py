"""Hydra launcher entry: one multirun job trains one group of a sweep's members, stacked.

`actbench sweep --launcher joblib|submitit_local|submitit_slurm` runs
`python -m activation_bench.runs.launcher --multirun chunk=range(K) sweep_dir=... hydra/launcher=...`,
so Hydra's own launcher plugins place the jobs (local processes or SLURM). Each job calls the same
orchestration as a local sweep (`orchestrate.train_members`): skip what is done, stack, train, write.

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
    chunk: int = 0  # which group of members (see .launch_chunks.json in the sweep directory)
    threads: int = 0  # torch threads per job; 0 leaves torch's default
    memory_mb: float = 1024.0
    force: bool = False


ConfigStore.instance().store(name="actbench_launch", node=LaunchConfig)


def run_chunk(sweep_dir: str, chunk: int, threads: int = 0, memory_mb: float = 1024.0,
              force: bool = False) -> int:
    """Train this job's group of members; returns how many run directories it wrote."""
    import os
    import signal

    import torch

    from activation_bench.engine.resume import Preempted
    from activation_bench.runs import checkpoint_files as checkpoint
    from activation_bench.runs import orchestrate

    if threads > 0:
        torch.set_num_threads(threads)
    directory = Path(sweep_dir)
    plan = orchestrate.load_plan(directory)
    chunks = json.loads((directory / ".launch_chunks.json").read_text())
    todo = set(orchestrate.pending(plan, force))
    indices = [i for i in chunks[chunk] if i in todo]
    submitit = bool(os.environ.get("SUBMITIT_EXECUTOR"))
    try:
        with checkpoint.handling_signals(submitit=submitit):
            return orchestrate.train_members(plan, indices, memory_mb, force)
    except Preempted as stop:
        orchestrate.stderr_line(f"job {chunk} stopped by {checkpoint.signal_name(stop.signum)}: checkpoint written"
                                + (f" at epoch {stop.epoch}/{stop.epochs}" if stop.epochs else ""))
        if submitit and stop.signum == signal.SIGUSR2:
            checkpoint.requeue_under_submitit(stop.signum)  # requeues and exits where submitit handles it
        raise SystemExit(checkpoint.exit_code(stop.signum)) from None


@hydra.main(version_base="1.3", config_path=None, config_name="actbench_launch")
def main(cfg: DictConfig) -> int:
    return run_chunk(cfg.sweep_dir, cfg.chunk, cfg.threads, cfg.memory_mb, cfg.force)


if __name__ == "__main__":
    main()
