"""A single run (`actbench run`): composed from overrides or a saved config.yaml, its directory
chosen, then trained as a stack of one and written. Sweeps train in orchestrate.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from activation_bench.errors import UsageError
from activation_bench.runs import store
from activation_bench.runs.memory import check_memory
from activation_bench.runs.orchestrate import stderr_line

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg
    from activation_bench.engine.train import RunResult



def prepare_run(overrides: Sequence[str], runs_dir: Path, name: str | None,
                memory_mb: float | None = None, config_file: Path | None = None) -> tuple[Cfg, Path]:
    """Compose and validate one run (from overrides, or a saved config.yaml with overrides on top),
    check it fits in memory and choose its directory; writes nothing."""
    from activation_bench.config.compose import compose
    from activation_bench.config.saved import compose_saved

    cfg = compose(overrides) if config_file is None else compose_saved(config_file, overrides)
    check_memory([cfg], memory_mb)
    if config_file is not None:
        _rerun_notice(config_file.parent)
    if name is not None:
        store.check_name(name)
    root = store.ensure_root(runs_dir)
    if name is not None:
        final = root / name
        if final.exists():
            raise UsageError(f"run directory {final} already exists; choose another --name")
    else:
        final = store.unique_dir(root, store.default_run_name(cfg))
    store.inside(root, final)
    return cfg, final


def _rerun_notice(saved_dir: Path) -> None:
    """A saved CPU run re-run on another CPU model or thread count, or (model=module) under other code
    of its model.target: one line says its losses need not come back bit for bit
    (docs/reproducibility.md), and how to set the count."""
    from activation_bench.host import torch_threads
    from activation_bench.runs.checkpoint_files import machine

    saved = store.read_summary(saved_dir) or {}
    if saved.get("device", "cpu") != "cpu":
        return
    here, threads = machine(), saved.get("threads")
    differ = []
    if isinstance(threads, int) and threads != here["threads"]:
        differ.append(f"at {torch_threads(threads)} (this process: {here['threads']}; "
                      f"OMP_NUM_THREADS={threads} sets it)")
    if saved.get("cpu") and saved["cpu"] != here["cpu"]:
        differ.append(f"on {saved['cpu']} (this machine: {here['cpu']})")
    code = saved.get("code") or {}
    if code.get("target"):
        from activation_bench.engine.models.user_code import code_change, code_record

        change = code_change(code, code_record(str(code["target"])))
        if change:
            differ.append(f"with other code of model.target ({change} since)")
    if differ:
        stderr_line(f"note: {saved_dir} was trained {' and '.join(differ)}; its losses need not come back "
                    "bit for bit")


def run_one(cfg: Cfg, final: Path,
            on_epoch: Callable[[int, int, float], None] | None = None) -> tuple[Path, RunResult]:
    """Train one run (a stack of one) and write its directory. Returns (directory, RunResult).
    It resumes from its checkpoint in the runs directory, and writes one when due (checkpoint.py)."""
    from activation_bench.config.hashing import config_hash
    from activation_bench.engine import train
    from activation_bench.runs import checkpoint_files as checkpoint

    def progress(done: int, total: int, loss: Any) -> None:
        on_epoch(done, total, float(loss[0]))  # type: ignore[misc]

    cfg_hash = config_hash(cfg)
    checkpoint.clean_stale(final.parent)
    hooks = checkpoint.StackCheckpoints(final.parent, [cfg_hash], cfg.get("checkpoint"), stderr_line, "the run")
    result = train.train([cfg], progress if on_epoch else None, stderr_line, hooks)[0]
    path = store.write_run(final, cfg, result, cfg_hash, labels={}, unique=True)
    hooks.remove()
    return path, result
