"""Resolving oneMKL's vector-math kernels before the engine uses them from several threads.

torch's CPU wheels (oneMKL 2024.2) compute the contiguous float unary ops listed in VML_OPS with
MKL's vector-math library (VML), each intra-op thread calling it on its own chunk. oneMKL picks
each VML function's kernel lazily, on that function's first call in the process; when the first
call runs on two threads at once, one thread's chunk can be computed by a low-accuracy kernel
(hundreds to thousands of ulps off) although high accuracy is requested
(pytorch/pytorch#188792). The next call is right again, so one sweep member in a few dozen fresh
processes trained from a corrupted first epoch. It shows on CPUs where MKL's kernels of different
accuracy round differently (Intel Xeon with AVX-512); on CPUs where they agree the race is
invisible.

`resolve_vml_kernels` calls every such function once, for float32 and float64, on one element
(one element is never split across threads), so every kernel is chosen before any parallel call.
Results of later calls are unchanged; it costs about 2 ms of CPU time once per process (the
first calls of 32 functions; measured 1.6-2.1 ms).
"""

from __future__ import annotations

import threading

import torch

# the torch functions ATen sends to MKL VML (vm[sd]* calls, checked with a debugger on torch 2.13);
# nn.Tanhshrink goes through tanh; nn.GELU, SiLU, ELU, Softplus, Mish and Sigmoid have ATen's own kernels
VML_OPS = ("erf", "erfc", "erfinv", "exp", "log", "log2", "log10", "sqrt", "sin", "cos", "tan",
           "asin", "acos", "atan", "tanh", "trunc")

_lock = threading.Lock()
_resolved = False


def resolve_vml_kernels() -> None:
    """Call each VML-backed torch function once on one element per float dtype (once per process)."""
    global _resolved
    with _lock:
        if _resolved:
            return
        for dtype in (torch.float32, torch.float64):
            x = torch.full((1,), 0.5, dtype=dtype)
            for name in VML_OPS:
                getattr(torch, name)(x)
        _resolved = True
