"""The machine this process runs on: its CPU (read from /proc/cpuinfo without importing torch),
and how its C library keeps freed memory.

A float32 result on CPU depends on the CPU model (it picks oneMKL's code branches) and on the
number of torch threads (docs/reproducibility.md), so run summaries, checkpoints, the compile
store and reports name the CPU through this one reader.
"""

from __future__ import annotations

import ctypes
import functools
import platform


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


def keep_freed_memory(mmap_threshold: int, trim_threshold: int) -> None:
    """Have glibc serve blocks below `mmap_threshold` bytes from its heap and keep up to
    `trim_threshold` bytes of freed heap (mallopt M_MMAP_THRESHOLD, M_TRIM_THRESHOLD). A training
    step that allocates and frees megabyte tensors every call otherwise gets them as fresh mappings
    and page-faults them in again each time. Without glibc (another C library, not Linux) nothing
    changes."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    mallopt(m_mmap_threshold, mmap_threshold)
    mallopt(m_trim_threshold, trim_threshold)
