"""What every benchmark says about where it ran: the first line of its output (date, commit,
machine) and the same facts in its record (records.py); and the `actbench` command it times.

Nothing here imports torch: the provenance of a benchmark that never imports it (compare's) must not
pay for it. Versions are read from the installed distributions' metadata.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the distributions a record names the versions of, where installed
VERSIONED = ("activation-bench", "torch", "numpy", "pandas", "scipy", "jax", "jaxlib", "optax", "mlflow-skinny")


def actbench() -> list[str]:
    """The command a user of this interpreter runs: the `actbench` script installed beside it, else
    `python -m activation_bench.cli`. Not the first `actbench` on PATH: a version manager's shim
    there (pyenv's) starts a shell and the manager first, 0.06 s a process on the 2-core VM, which
    the peers, started as `python -m ...`, do not pay."""
    beside = Path(sys.executable).with_name("actbench")
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "activation_bench.cli"]


def module(name: str) -> list[str]:
    """The command of a module of this checkout in a fresh interpreter, `python -m NAME`; run it with
    `cwd=ROOT` (harness.run does), where `-m` finds the benchmarks package."""
    return [sys.executable, "-m", name]


def compile_bytecode() -> None:
    """Compile actbench's modules to bytecode (`python -m compileall`), as pip does when it installs
    a package and as Python does at a package's first import by default: an environment with
    PYTHONDONTWRITEBYTECODE set (this VM's) never writes the cache, and then every timed actbench
    process compiles its ~60 modules again, about 0.1 s of a whole process on the 2-core VM
    (2026-11-27: a one-epoch 480-member sweep 1.98 s without the cache, 1.85-1.89 s with it). The
    peers' own libraries come compiled from their wheels."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "activation_bench")], check=True)


def now() -> str:
    """'2026-11-23 14:05 UTC'."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def header() -> str:
    """'# 2026-11-23 14:05 UTC, commit 26c9478, 2-core AMD EPYC 7B13, Linux x86_64'."""
    head, dirty = commit()
    text = f"{head} with uncommitted changes" if dirty else head
    return f"# {now()}, commit {text}, {machine()['name']}, {platform.system()} {platform.machine()}"


@functools.cache
def commit() -> tuple[str, bool]:
    """(the checkout's short commit, whether tracked files have uncommitted changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)", False
    return head, bool(dirty)


def machine() -> dict[str, object]:
    """The CPU's model, the cores, the system, the GPU where this process has initialised CUDA, a
    display name and the slug naming the machine's records file."""
    from activation_bench.host import cpu_model

    cpu, cores = cpu_model(), os.cpu_count() or 0
    gpu = None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        gpu = f"{torch.cuda.device_count()}x {torch.cuda.get_device_name()}"
    name = f"{cores}-core {cpu}" + (f", {gpu}" if gpu else "")
    return {"name": name, "cpu": cpu, "cores": cores, "gpu": gpu, "system": f"{platform.system()} {platform.machine()}",
            "slug": slug(name)}


def slug(name: str) -> str:
    """'2-core AMD EPYC 7B13' -> '2-core-amd-epyc-7b13' (the records file's name)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def versions() -> dict[str, str]:
    """Python's version and each installed distribution of VERSIONED's."""
    out = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def threads() -> dict[str, object]:
    """torch's intra-op threads where this process imported torch, and the thread variables set."""
    torch = sys.modules.get("torch")
    out: dict[str, object] = {"torch": torch.get_num_threads() if torch is not None else None}
    out.update({k: v for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if (v := os.environ.get(k))})
    return out
