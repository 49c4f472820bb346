"""Hydra launcher entry: one multirun job trains one group of a sweep's members, stacked.

`actbench sweep --launcher joblib|submitit_local|submitit_slurm` runs
`python -m activation_bench.runs.launcher --multirun chunk=range(K) sweep_dir=... hydra/launcher=...`,
so Hydra's own launcher plugins place the jobs (local processes or SLURM). Each job calls the same
orchestration as a local sweep (`orchestrate.train_members`): skip what is done, stack, train, write.
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
    import torch

    from activation_bench.runs import orchestrate

    if threads > 0:
        torch.set_num_threads(threads)
    directory = Path(sweep_dir)
    plan = orchestrate.load_plan(directory)
    chunks = json.loads((directory / ".launch_chunks.json").read_text())
    todo = set(orchestrate.pending(plan, force))
    indices = [i for i in chunks[chunk] if i in todo]
    return orchestrate.train_members(plan, indices, memory_mb, force)


@hydra.main(version_base="1.3", config_path=None, config_name="actbench_launch")
def main(cfg: DictConfig) -> int:
    return run_chunk(cfg.sweep_dir, cfg.chunk, cfg.threads, cfg.memory_mb, cfg.force)


if __name__ == "__main__":
    main()
