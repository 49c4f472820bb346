"""What the probe says about an expression activation, for `actbench activations --fn`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np
import torch
from torch import nn

from activation_bench.engine.activations import registry as activations
from activation_bench.engine.activations.expr import Expr, probe, probe_points


def summarize(expr: Expr, params: Mapping[str, float]) -> dict[str, Any]:
    """Facts about the function, computed in float64 (the keys `actbench activations --fn` prints):

    - probe: None, or the one-line reason `run` refuses the function;
    - monotonic: "increasing", "decreasing" or "no" (non-strict, on a grid of step 1e-3 over [-10, 10]);
    - bounded: "both", "below", "above" or "no": a side is bounded when its extreme over
      1e3 <= |x| <= 1e4 exceeds the one over |x| <= 1e3 by at most 1 % (growth, not proof);
    - smooth: True when the slope (autograd) is continuous on [-10, 10] (its largest jump between
      neighbouring grid points shrinks as the grid is refined 10x); kink: where it jumps, if not;
    - value_at_0, slope_at_0 (autograd; at a kink, torch's convention);
    - equals: the registry activations (default parameters, not gated or random) that are `same`
      as it on the probe points: the search's duplicate rule.
    """
    f = expr.module(expr.bind(params)).double()
    result = probe(expr, params, torch.float64)
    grid = torch.arange(-10_000, 10_001, dtype=torch.float64) / 1000.0
    with torch.no_grad():
        steps = f(grid).diff()
    zero = torch.zeros(1, dtype=torch.float64)
    value, slope = f(zero).detach(), _slopes(f, zero)
    smooth, kink = _smoothness(f)
    return {
        "fn": expr.canonical,
        "params": dict(params),
        "probe": result.problem,
        "monotonic": "increasing" if bool((steps >= 0).all()) else "decreasing" if bool((steps <= 0).all()) else "no",
        "bounded": _bounded(f),
        "smooth": smooth,
        "kink": kink,
        "value_at_0": value.item(),
        "slope_at_0": slope.item(),
        "equals": _equals(result) if result.finite else [],
    }


def _slopes(f: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """f's derivative at each x (autograd); zero where f does not depend on x (`1`, `beta`)."""
    x = x.clone().requires_grad_()
    y = f(x)
    if not y.requires_grad:  # no graph from x to the output: a constant function
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(y.sum(), x, allow_unused=True)
    return torch.zeros_like(x) if g is None else g


def _smoothness(f: nn.Module) -> tuple[bool, float | None]:
    jumps = []
    for step in (1000, 10_000):  # grid steps 1e-3 and 1e-4
        x = torch.arange(-10 * step, 10 * step + 1, dtype=torch.float64) / step
        d = _slopes(f, x)
        if not bool(torch.isfinite(d).all()):
            return False, x[~torch.isfinite(d)][0].item() + 0.0
        jumps.append((d.diff().abs(), x))
    (coarse, _), (fine, x) = jumps
    if fine.max() <= 1e-9 or fine.max() <= 0.5 * coarse.max():
        return True, None
    return False, round(x[int(fine.argmax())].item(), 3) + 0.0  # + 0.0: no "-0.0"


def _bounded(f: nn.Module) -> str:
    near = torch.cat([torch.arange(0, 1001, dtype=torch.float64) / 100, torch.logspace(1, 3, 500, dtype=torch.float64)])
    far = torch.logspace(3, 4, 500, dtype=torch.float64)
    with torch.no_grad():
        inner = torch.cat([f(near), f(-near)])
        outer = torch.cat([f(far), f(-far)])
    if bool(inner.isnan().any() or outer.isnan().any()):
        return "no"
    hi, lo = inner.max().item(), inner.min().item()  # overflow to +-inf counts against that side only
    above = math.isfinite(hi) and outer.max().item() <= hi + 0.01 * (1 + abs(hi))
    below = math.isfinite(lo) and outer.min().item() >= lo - 0.01 * (1 + abs(lo))
    return {(True, True): "both", (False, True): "below", (True, False): "above"}.get((above, below), "no")


def _equals(result: Any) -> list[str]:
    return builtins_equal_to(result.outputs.numpy())


RTOL = 1e-6  # relative, about 8 float32 ulps
ATOL = 1e-6  # absolute: outputs below 1 in size are compared as if they were 1


def same(a: np.ndarray, b: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> np.ndarray:
    """Whether the outputs a and b (probe points on the last axis, broadcast otherwise) are the same
    function: |a - b| <= atol + rtol * max(|a|, |b|) at every point. Symmetric in a and b."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (np.abs(a - b) <= atol + rtol * np.maximum(np.abs(a), np.abs(b))).all(axis=-1)


def builtins_equal_to(outputs: np.ndarray) -> list[str]:
    """The registered activations (default parameters; not gated, not random) that are `same` as a
    function whose float64 outputs on the probe points are `outputs`: the "equals" of
    `actbench activations --fn`."""
    outputs = np.asarray(outputs, dtype=np.float64)
    return [name for name, theirs in _builtin_outputs() if bool(same(outputs, theirs))]


@cache
def _builtin_outputs() -> tuple[tuple[str, np.ndarray], ...]:
    points = probe_points(torch.float64)
    found = []
    for row in activations.describe():
        if row["gated"] or row["stochastic"]:
            continue
        module = activations.create(row["name"]).double().eval()
        with torch.no_grad():
            found.append((row["name"], module(points).numpy()))
    return tuple(found)
