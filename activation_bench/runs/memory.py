"""Memory: refuse what cannot fit before anything is allocated, and the budget of one stack."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from activation_bench.engine.models import registry
from activation_bench.errors import UsageError

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


def available_mb(device: str = "cpu") -> float | None:
    """Memory this machine can give now (MB): MemAvailable on Linux, free GPU memory for cuda,
    else physical memory; None where unknown."""
    if device == "cuda":
        import torch

        return torch.cuda.mem_get_info()[0] / 2**20 if torch.cuda.is_available() else None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (AttributeError, ValueError, OSError):
        return None


def stack_budget_mb(memory_mb: float | None, device: str = "cpu") -> float:
    """The memory one stack may use: --memory-mb, and never more than the machine has available."""
    limits = [x for x in (memory_mb, available_mb(device)) if x is not None]
    return min(limits) if limits else 1024.0


def check_memory(cfgs: Sequence[Cfg], memory_mb: float | None, local: bool = True) -> None:
    """Raise UsageError (one line: estimate and budget) if a member cannot fit in the budget of one
    stack, --memory-mb (None: no limit) and, when it trains on this machine (`local`), the memory
    available now; and, when it trains here, if a member asks for device=cuda and torch sees no GPU
    (a sweep sent to SLURM's GPU nodes is planned on a login node that has none). Plan-level
    arithmetic on configs (plan.member_bytes): nothing is allocated."""
    from activation_bench.engine import plan

    if not cfgs:
        return
    if local and any(c.device == "cuda" for c in cfgs):
        import torch

        if not torch.cuda.is_available():
            raise UsageError("device=cuda but torch sees no GPU (use device=cpu or device=auto)")
    sizes = [plan.member_bytes(c) / 2**20 for c in cfgs]
    worst = max(range(len(cfgs)), key=sizes.__getitem__)
    device = plan.resolve_device(cfgs[worst].device)
    avail = available_mb(device) if local else None
    limits = [x for x in (memory_mb, avail) if x is not None]
    if not limits or sizes[worst] <= min(limits):
        return
    cfg = cfgs[worst]
    n, _, _, dim = plan.data_shapes(cfg)
    model = registry.of(cfg).sizes(cfg.model)
    shape = f"{model}, data.input_dim={dim}, data.n_samples={n}, epochs={cfg.epochs}"
    budget = "; ".join(
        ([f"--memory-mb {memory_mb:g}"] if memory_mb is not None else [])
        + ([f"{_mb(avail)} available on this machine{' (GPU)' if device == 'cuda' else ''}"]
           if avail is not None else [])
    )
    raise UsageError(f"a member needs about {_mb(sizes[worst])} of memory ({shape}), more than the budget "
                     f"({budget}); nothing was trained or written")


def _mb(mb: float) -> str:
    return f"{mb / 1024:,.1f} GB" if mb >= 1024 else f"{mb:,.1f} MB"
