"""Kernel-level alternatives for the engine's training step, timed in one process, interleaved.

A 240-member stack as a sweep plans it (8 activations x 30 seeds, 10 samples, 64 inputs, 64 hidden
units; members sharing an activation contiguous). Each direction compares the engine's current
way with an alternative, alternating them call by call (best of --repeat blocks of --calls calls),
and prints microseconds per call and the ratio current / alternative (above 1: the alternative is
faster):

- shared inputs: the 8 members of a seed share X, so the first layer can be one GEMM per seed,
  [10, 64] @ [64, 8 x 64] (batched over the 30 seeds), instead of 240 GEMMs of [10, 64] @ [64, 64];
  forward and weight gradient;
- one-pass activation derivative: each closed-form activation's forward computing its derivative
  too (the backward then one multiply) against torch's forward kernel plus its backward kernel;
- the output layer, the MSE and their backward: the engine's multiply-and-sum ops against
  batched GEMV (`baddbmm`/`bmm`) forms.

Usage:
    python benchmarks/engine_directions.py [--calls 200] [--repeat 5] [--threads N] [--cpu-time]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

aten = torch.ops.aten
M, SEEDS, N, D, H = 240, 30, 10, 64, 64
ACTS = 8


CLOCK = time.perf_counter


def best_us(fns: dict[str, Callable[[], object]], calls: int, repeat: int) -> dict[str, float]:
    """Best-of-repeat microseconds per call of each function, blocks interleaved (CLOCK: wall time,
    or with --cpu-time the process's CPU time, which a busy machine's scheduler does not inflate)."""
    best = {k: float("inf") for k in fns}
    for f in fns.values():
        f()
    for _ in range(repeat):
        for k, f in fns.items():
            t = CLOCK()
            for _ in range(calls):
                f()
            best[k] = min(best[k], (CLOCK() - t) / calls * 1e6)
    return best


def report(title: str, res: dict[str, float]) -> None:
    (base, t0), *rest = res.items()
    print(f"{title}: {base} {t0:.1f} us; " + "; ".join(f"{k} {t:.1f} us ({t0 / t:.2f}x)" for k, t in rest), flush=True)


def shared_inputs(calls: int, repeat: int) -> None:
    g = torch.Generator().manual_seed(0)
    x_seed = torch.randn(SEEDS, N, D, generator=g)
    x = x_seed.repeat_interleave(ACTS, 0)  # [240, N, D], seed-major: what a stack holds
    w = torch.randn(M, D, H, generator=g)
    b = torch.randn(M, 1, H, generator=g)
    w_wide = w.view(SEEDS, ACTS, D, H).permute(0, 2, 1, 3).reshape(SEEDS, D, ACTS * H).contiguous()
    b_wide = b.view(SEEDS, 1, ACTS * H)
    gh = torch.randn(M, N, H, generator=g)
    gh_wide = gh.view(SEEDS, ACTS, N, H).permute(0, 2, 1, 3).reshape(SEEDS, N, ACTS * H).contiguous()
    report("first layer forward", best_us({
        "240 x [10,64]@[64,64]": lambda: torch.baddbmm(b, x, w),
        "30 x [10,64]@[64,512]": lambda: torch.baddbmm(b_wide, x_seed, w_wide),
    }, calls, repeat))
    report("first layer weight gradient", best_us({
        "240 x [64,10]@[10,64]": lambda: torch.bmm(x.transpose(1, 2), gh),
        "30 x [64,10]@[10,512]": lambda: torch.bmm(x_seed.transpose(1, 2), gh_wide),
    }, calls, repeat))
    # the wide layout needs each activation's members contiguous again for the activations
    h_wide = torch.baddbmm(b_wide, x_seed, w_wide)
    report("wide result back to member order", best_us({
        "none": lambda: None,
        "permute + contiguous": lambda: h_wide.view(SEEDS, N, ACTS, H).permute(2, 0, 1, 3).contiguous(),
    }, calls, repeat))


def _one_pass(name: str) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """The activation's value and derivative from one forward."""
    if name == "relu":
        return lambda h: (torch.relu(h), (h > 0).to(h.dtype))
    if name == "tanh":
        def tanh(h):
            a = torch.tanh(h)
            return a, 1 - a * a
        return tanh
    if name == "silu":
        def silu(h):
            s = torch.sigmoid(h)
            return h * s, s * (1 + h * (1 - s))
        return silu
    if name == "elu":
        def elu(h):
            e = torch.exp(h.clamp(max=0)) - 1
            return torch.where(h > 0, h, e), torch.where(h > 0, 1.0, e + 1)
        return elu
    if name == "leaky_relu":
        return lambda h: (F.leaky_relu(h, 0.01), torch.where(h >= 0, 1.0, 0.01))
    if name == "softplus":
        def softplus(h):
            return F.softplus(h), torch.sigmoid(h)
        return softplus
    raise ValueError(name)


_NATIVE = {
    "relu": (torch.relu, lambda g, h, a: aten.threshold_backward(g, a, 0)),
    "tanh": (torch.tanh, lambda g, h, a: aten.tanh_backward(g, a)),
    "silu": (F.silu, lambda g, h, a: aten.silu_backward(g, h)),
    "elu": (F.elu, lambda g, h, a: aten.elu_backward(g, 1.0, 1.0, 1.0, False, h)),
    "leaky_relu": (lambda h: F.leaky_relu(h, 0.01), lambda g, h, a: aten.leaky_relu_backward(g, h, 0.01, False)),
    "softplus": (F.softplus, lambda g, h, a: aten.softplus_backward(g, h, 1.0, 20.0)),
}


def activations(calls: int, repeat: int) -> None:
    g = torch.Generator().manual_seed(1)
    h = torch.randn(SEEDS, N, H, generator=g)  # one activation's slice of the stack
    grad = torch.randn(SEEDS, N, H, generator=g)
    for name, (fwd, bwd) in _NATIVE.items():
        one = _one_pass(name)

        def native(fwd=fwd, bwd=bwd):
            a = fwd(h)
            return bwd(grad, h, a)

        def fused(one=one):
            a, d = one(h)
            return grad * d

        report(f"{name} forward + backward", best_us({"torch kernels": native, "one pass": fused}, calls, repeat))


def output_layer(calls: int, repeat: int) -> None:
    g = torch.Generator().manual_seed(2)
    a = torch.randn(M, N, H, generator=g)
    w2 = torch.randn(M, 1, H, generator=g)
    b2 = torch.randn(M, 1, 16, generator=g)
    y = torch.randn(M, N, 1, generator=g)

    def current():
        r = (a * w2).sum(dim=-1, keepdim=True).add_(b2[..., :1]).sub_(y)
        loss = r.square().mean(dim=(1, 2))
        g_out = r.mul_(2.0 / N)
        return loss, (g_out * a).sum(dim=1, keepdim=True), g_out.sum(dim=1, keepdim=True), g_out * w2

    def gemv():
        r = torch.baddbmm(b2[..., :1], a, w2.transpose(1, 2)).sub_(y)
        loss = r.square().mean(dim=(1, 2))
        g_out = r.mul_(2.0 / N)
        return loss, torch.bmm(g_out.transpose(1, 2), a), g_out.sum(dim=1, keepdim=True), g_out * w2

    report("output layer + MSE + backward", best_us({"multiply and sum": current, "batched GEMV": gemv}, calls, repeat))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the process's CPU time (use with --threads 1 on a shared machine)")
    args = ap.parse_args()
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time
    if args.threads:
        torch.set_num_threads(args.threads)
    import os

    from provenance import header  # benchmarks/ is on sys.path when a script there runs

    print(header())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {'CPU' if args.cpu_time else 'wall'} time, "
          f"load average {os.getloadavg()[0]:.2f}")
    torch.set_flush_denormal(True)
    shared_inputs(args.calls, args.repeat)
    activations(args.calls, args.repeat)
    output_layer(args.calls, args.repeat)
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
