"""The first line of every benchmark's output: when, on which commit and on which machine it ran;
and the `actbench` command the benchmarks time.

Recorded measurements (docs/performance.md, benchmarks/results_*.txt) are identified by these three.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path


def actbench() -> list[str]:
    """The command a user of this interpreter runs: the `actbench` script installed beside it, else
    `python -m activation_bench.cli`. Not the first `actbench` on PATH: a version manager's shim
    there (pyenv's) starts a shell and the manager first, 0.06 s a process on the 2-core VM, which
    the peers, started as `python script.py`, do not pay."""
    beside = Path(sys.executable).with_name("actbench")
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "activation_bench.cli"]


def compile_bytecode() -> None:
    """Compile actbench's modules to bytecode (`python -m compileall`), as pip does when it installs
    a package and as Python does at a package's first import by default: an environment with
    PYTHONDONTWRITEBYTECODE set (this VM's) never writes the cache, and then every timed actbench
    process compiles its ~60 modules again, about 0.1 s of a whole process on the 2-core VM
    (2026-11-27: a one-epoch 480-member sweep 1.98 s without the cache, 1.85-1.89 s with it). The
    peers' own libraries come compiled from their wheels."""
    root = Path(__file__).resolve().parent.parent / "activation_bench"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root)], check=True)


def header() -> str:
    """'# 2026-11-23 14:05 UTC, commit 26c9478, 2-core AMD EPYC 7B13, Linux x86_64'."""
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"# {when}, commit {_commit()}, {os.cpu_count()}-core {_cpu()}, {platform.system()} {platform.machine()}"


def _commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{head} with uncommitted changes" if dirty else head


def _cpu() -> str:
    from activation_bench.host import cpu_model

    return cpu_model()
