"""activation_bench.host: the CPU's name and glibc's freed-memory settings."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from activation_bench.host import cpu_info, cpu_model

ROOT = Path(__file__).resolve().parents[1]


def test_cpu_model_is_proc_cpuinfos_first_model_name():
    model, flags = cpu_info()
    assert cpu_model() == model and model
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        lines = cpuinfo.read_text(errors="replace").splitlines()
        first = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), None)
        assert model == (first or platform.processor() or platform.machine())
        assert flags == " ".join(sorted(flags.split()))


# Allocates a 100 MB block before and after the call: glibc serves it by mmap by default, and from
# its heap once the mmap threshold is above it (mallinfo2's hblks counts live mmapped blocks). The
# call is the helper itself, or training a small stack (train.train sets it for every engine).
PROBE = """
import ctypes, sys
libc = ctypes.CDLL("libc.so.6")
class Info(ctypes.Structure):
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(n, ctypes.c_size_t) for n in names.split()]
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
def mapped():
    before = libc.mallinfo2().hblks
    block = libc.malloc(100 << 20)
    grew = libc.mallinfo2().hblks - before
    libc.free(block)
    return grew
first = mapped()
if sys.argv[1] == "helper":
    from activation_bench.host import keep_freed_memory
    keep_freed_memory()
else:
    from activation_bench.config.compose import compose
    from activation_bench.engine.train import train
    train([compose(["epochs=2", "data.n_samples=4", "data.input_dim=3", "model.hidden_dim=4"])])
print(first, mapped())
"""


@pytest.mark.skipif(sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
@pytest.mark.parametrize("call", ["helper", "train"])
def test_keep_freed_memory_serves_large_blocks_from_the_heap(call):
    done = subprocess.run([sys.executable, "-c", PROBE, call], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.split() == ["1", "0"]
