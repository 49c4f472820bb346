"""The machine this process runs on: its CPU (read from /proc/cpuinfo without importing torch),
and how its C library keeps freed memory; and how run summaries and reports name what a run ran on
(the CPU, the thread count, a user's model code).

A float32 result on CPU depends on the CPU model (it picks oneMKL's code branches) and on the
number of torch threads (docs/reproducibility.md), so run summaries, checkpoints, the compile
store and reports name the CPU through this one reader.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from typing import Any


@functools.cache
def cpu_info() -> tuple[str, str]:
    """(model name, sorted feature flags) of this machine's first CPU; where /proc/cpuinfo is
    missing (not Linux), (platform.processor() or the architecture, "")."""
    model = flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key = line.split(":", 1)[0].strip()
                if key == "model name" and not model:
                    model = line.split(":", 1)[1].strip()
                elif key in ("flags", "Features") and not flags:
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or platform.machine(), flags


def cpu_model() -> str:
    """The CPU's model name, e.g. "AMD EPYC 9B14"."""
    return cpu_info()[0]


def torch_threads(n: int) -> str:
    """'1 torch thread', '2 torch threads': how summaries, checkpoints and reports name a count."""
    return f"{n} torch thread{'s' * (n != 1)}"


def describe_code(code: dict[str, Any]) -> str:
    """A user's model code as a run recorded it (summary.json's `code`, the engine's
    user_code.code_record) in words: 'mymodels/net.py and 2 more files, SHA-256 0f3a5b6c7d8e', with an
    installed distribution's version ('(timm 1.0.9)'): the run summary's row and reports' provenance."""
    more = len(code.get("files") or {}) - 1
    files = f" and {more} more file{'s' if more > 1 else ''}" if more > 0 else ""
    version = f" ({code['distribution']} {code['version']})" if code.get("version") else ""
    return f"{code.get('file')}{files}{version}, SHA-256 {str(code['sha256'])[:12]}"


# glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD for a training process (keep_freed_memory)
MMAP_THRESHOLD = 1 << 30
TRIM_THRESHOLD = (1 << 31) - 1


@functools.cache
def keep_freed_memory() -> None:
    """Have glibc serve blocks below MMAP_THRESHOLD bytes (1 GiB) from its heap and keep up to
    TRIM_THRESHOLD bytes of freed heap (mallopt M_MMAP_THRESHOLD, M_TRIM_THRESHOLD). A training
    step allocates and frees megabyte tensors every call (a GPT's feed-forward activations, a
    compiled step's buffers, a search rung's stacks); by default glibc gives such blocks back to
    the system and the next step page-faults them in again: 4 GPTs of nanoGPT's size, 60 steps and
    their evaluations, took 2.6 s of system time against 0.8 s and 1.09x the wall time; at 250
    steps 2.6 s against 1.1 s, the wall time within noise. A process that trains keeps its peak
    memory mapped instead. Without glibc (another C library, not Linux) nothing changes. Once per
    process."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    mallopt(m_mmap_threshold, MMAP_THRESHOLD)
    mallopt(m_trim_threshold, TRIM_THRESHOLD)
