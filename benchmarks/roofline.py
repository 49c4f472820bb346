"""A training benchmark against the machine itself: its counted FLOPs over its marginal time, as a
fraction of `torch.bmm`'s rate at the benchmark's own shapes, measured in the same run.

How FLOPs are counted (the usual convention for training, as model-FLOP utilisation counts them):
- W is a member's multiply-add weights: the sum over its Linear layers of inputs x outputs (the
  output layer at its real width, 1 or K classes, not the engine's padding to 16 columns).
- A training step on B rows costs 6 x B x W per member: 2 B W forward, 2 B W for the gradient of
  each layer's input and 2 B W for the gradient of its weights.
- An evaluated row (validation, test, the training split with log.train_eval) costs 2 x W.
- Left out: biases, activations and their derivatives, normalization, dropout, the loss, the
  optimiser, shuffling and evaluation's loss and accuracy. That elementwise work, O(B x units) or
  O(W) per step, is exactly the overhead between the matmuls this measures. The first layer's
  input gradient is counted although no engine computes it (no one needs the gradient of the
  data): the count is high by 2 B x inputs x width per step (12% for MNIST-1D at depth 2 x 64, 4%
  at depth 8 x 64 on 64 inputs), so the fraction is that much flattering.

The ceiling: `torch.bmm` over the stack's own products (M: the members of the largest stack the
grid is trained in), each layer's forward [M, B, in] x [M, in,
out], weight gradient [M, in, B] x [M, B, out] and input gradient [M, B, out] x [M, out, in], at
the widths the engine runs (the padded output), timed best of a few rounds in this process: the
rate the products alone reach, with no elementwise work between them. Marginal time: the wall
time of E epochs less that of fewer, so start-up, imports, compilation and writing results drop
out (each benchmark says which two runs it subtracts).

A second roof adds what the products leave out and no training step can skip: the optimiser's
update. Adam reads every parameter, its gradient and both moments and writes back the parameter and
the moments (28 bytes a float32 parameter a step, however it is fused): `update_seconds` times
torch's own fused Adam (`torch.optim.Adam(fused=True)`) over the largest stack's weights and
biases, best of a few rounds. The products + Adam roof of a benchmark is its FLOPs at bmm's rate
plus that update once per step per stack. Where a step has few rows per member (10 in the default
data) the update is a large part of it: its memory traffic (28 bytes a parameter) is several times
the products' (a weight read twice and its gradient written once, for 6 x rows FLOPs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


def weights(widths: Sequence[int]) -> int:
    """A member's multiply-add weights W for layer widths [inputs, hidden..., outputs]."""
    return sum(a * b for a, b in zip(widths[:-1], widths[1:]))


def training_flops(members: int, widths: Sequence[int], batch: int, steps: int, eval_rows: int = 0,
                   evals: int = 0) -> float:
    """FLOPs of `steps` optimiser steps of `members` members on `batch` rows each, plus `evals`
    evaluations of `eval_rows` rows per member: 6 B W per step, 2 W per evaluated row."""
    return mlp(widths, batch).flops(members, steps, eval_rows * evals)


@dataclass(frozen=True)
class Roof:
    """What one member's training must do, for an architecture: its FLOPs per optimiser step and
    per evaluated row, one step's products as (rows, inner, cols, layout) (each a bmm over the
    stack's members; layout "nn", "tn" or "nt": which operand is a transposed view, as the engines
    pass a weight gradient's input and an input gradient's weight) and its parameters' shapes (the
    update's work)."""

    step_flops: float
    row_flops: float
    products: tuple[tuple[int, int, int, str], ...]
    params: tuple[tuple[int, ...], ...]

    def flops(self, members: int, steps: int, evaluated_rows: int = 0) -> float:
        """FLOPs of `members` members' `steps` optimiser steps and `evaluated_rows` rows evaluated each."""
        return float(members) * (steps * self.step_flops + evaluated_rows * self.row_flops)


def mlp(widths: Sequence[int], batch: int, out: int | None = None) -> Roof:
    """The Roof of an MLP of layer widths [inputs, hidden..., outputs as the engine runs them]
    (the padded classifier output: its products run at that width) on `batch` rows; `out`: the
    real output width, for the FLOPs and parameters (default: the last width)."""
    real = [*widths[:-1], out if out is not None else widths[-1]]
    products = tuple(p for a, b in zip(widths[:-1], widths[1:])
                     for p in ((batch, a, b, "nn"), (a, batch, b, "tn"), (batch, b, a, "nt")))
    params = tuple(shape for a, b in zip(real[:-1], real[1:]) for shape in ((a, b), (1, b)))
    w = weights(real)
    return Roof(6.0 * batch * w, 2.0 * w, products, params)


def products_rate(members: int, products: Sequence[tuple[int, int, int, str]], rounds: int = 5,
                  min_s: float = 0.2) -> float:
    """torch.bmm's rate in GFLOP/s over one step's products (rows, inner, cols, layout), each
    batched over `members`: their FLOPs over the best of `rounds` timings of at least `min_s`
    seconds each."""
    import torch

    gen = torch.Generator().manual_seed(0)

    def operand(rows: int, cols: int, transposed: bool) -> torch.Tensor:
        if transposed:  # a transposed view, as the engines pass it
            return torch.randn(members, cols, rows, generator=gen).transpose(1, 2)
        return torch.randn(members, rows, cols, generator=gen)

    calls = [(operand(r, k, layout[0] == "t"), operand(k, n, layout[1] == "t")) for r, k, n, layout in products]
    flops = sum(2.0 * members * r * k * n for r, k, n, _ in products)

    def step() -> None:
        for p, q in calls:
            torch.bmm(p, q)

    step()  # warm-up: MKL's first call per shape
    return flops / best_seconds(step, rounds, min_s) / 1e9


def best_seconds(fn: Callable[[], None], rounds: int, min_s: float) -> float:
    """Seconds of one fn() call: the best of `rounds` timings, each repeating fn for at least min_s."""
    best = float("inf")
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_s:
                break
        best = min(best, elapsed / n)
    return best


def bmm_rate(members: int, widths: Sequence[int], batch: int, rounds: int = 5, min_s: float = 0.2) -> float:
    """torch.bmm's rate in GFLOP/s over an MLP's training-step products at these shapes (forward,
    weight gradient and input gradient of every layer)."""
    return products_rate(members, mlp(widths, batch).products, rounds, min_s)


def largest_stack(overrides: list[str]) -> int:
    """The members of the largest stack actbench trains this grid in (plan.plan_stacks: its memory
    budget splits large grids), the member count the ceiling is measured at."""
    from activation_bench.config.compose import compose_many
    from activation_bench.config.grid import expand
    from activation_bench.engine import plan

    return max(len(s) for s in plan.plan_stacks(compose_many(expand(overrides).members)))


def adam_seconds(members: int, shapes: Sequence[tuple[int, ...]], rounds: int = 5, min_s: float = 0.2) -> float:
    """Seconds of one step of torch's fused Adam over `members` members' parameters of these shapes
    (one member's), best of `rounds` timings of at least `min_s` seconds each."""
    import torch

    gen = torch.Generator().manual_seed(0)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter(torch.randn(members, *shape, generator=gen) * 0.1)
        p.grad = torch.randn(members, *shape, generator=gen)
        params.append(p)
    try:
        opt = torch.optim.Adam(params, lr=1e-3, fused=True)
    except RuntimeError:  # a torch without the CPU fused kernel (before 2.4): its foreach Adam
        opt = torch.optim.Adam(params, lr=1e-3, foreach=True)
    opt.step()  # the moments allocated, the first step's work out of the timing
    return best_seconds(opt.step, rounds, min_s)


def update_seconds(members: int, widths: Sequence[int]) -> float:
    """adam_seconds over an MLP's weights [in, out] and biases [1, out], widths [inputs, hidden...,
    outputs] at the real output width."""
    return adam_seconds(members, mlp(widths, 1).params)


def line(flops: float, seconds: float, ceiling: float, update_s: float | None = None) -> str:
    """'training at X GFLOP/s marginal = Y of bmm's rate at these shapes (Z GFLOP/s)', and with
    `update_s` (the seconds torch's fused Adam takes for all the marginal steps' updates) the
    fraction of the products + Adam roof: the FLOPs at bmm's rate plus those updates."""
    rate = flops / seconds / 1e9
    text = f"training at {rate:.1f} GFLOP/s marginal = {rate / ceiling:.2f} of bmm's rate at these shapes " \
           f"({ceiling:.0f} GFLOP/s)"
    if update_s is not None:
        roof = flops / ceiling / 1e9 + update_s
        text += f"; {roof / seconds:.2f} of the products + Adam roof ({roof:.2f} s, of which Adam {update_s:.2f} s)"
    return text


def update_total(members: int, stack: int, widths: Sequence[int], steps: int) -> float:
    """The seconds torch's fused Adam takes for `steps` steps of `members` members trained in stacks
    of at most `stack` (timed on one stack, scaled by members / stack)."""
    return update_seconds(stack, widths) * steps * members / stack
