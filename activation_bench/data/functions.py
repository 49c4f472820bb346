"""Function-fitting tasks (`data=function data.fn=NAME`): smooth scientific functions of the kind
used to compare KANs and MLPs (Liu et al. 2024, arXiv 2404.19756; Yu et al. 2024, arXiv 2407.16674).

Inputs are drawn uniformly on [-1, 1]^dim from the run's data stream; each function maps them to its
own domain (stated in `formula`). Targets are computed in float64 with numpy and scipy.special.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from activation_bench.errors import UsageError


@dataclass(frozen=True)
class Function:
    dim: int
    formula: str
    fn: Callable[[np.ndarray], np.ndarray]  # [n, dim] -> [n]


def _unit(u: np.ndarray) -> np.ndarray:
    """[-1, 1] -> [0, 1]."""
    return (u + 1) / 2


def _special(name: str) -> Any:
    from scipy import special

    return getattr(special, name)


FUNCTIONS: dict[str, Function] = {
    "exp_sin": Function(2, "exp(sin(pi x1) + x2^2)", lambda x: np.exp(np.sin(np.pi * x[:, 0]) + x[:, 1] ** 2)),
    "xy": Function(2, "x1 x2", lambda x: x[:, 0] * x[:, 1]),
    "bessel_j0": Function(1, "J0(20 x1), the Bessel function of the first kind",
                          lambda x: _special("j0")(20 * x[:, 0])),
    "exp_sin4": Function(4, "exp((sin(pi (x1^2 + x2^2)) + sin(pi (x3^2 + x4^2))) / 2)",
                         lambda x: np.exp((np.sin(np.pi * (x[:, 0] ** 2 + x[:, 1] ** 2))
                                           + np.sin(np.pi * (x[:, 2] ** 2 + x[:, 3] ** 2))) / 2)),
    "ellipkinc": Function(2, "F(phi | m), incomplete elliptic integral of the first kind, phi = (x1+1)/2 "
                          "radians, m = (x2+1)/2", lambda x: _special("ellipkinc")(_unit(x[:, 0]), _unit(x[:, 1]))),
    "ellipeinc": Function(2, "E(phi | m), incomplete elliptic integral of the second kind, phi = (x1+1)/2 "
                          "radians, m = (x2+1)/2", lambda x: _special("ellipeinc")(_unit(x[:, 0]), _unit(x[:, 1]))),
    "jv": Function(2, "J_v(z), Bessel function of the first kind of real order v = x1+1, z = 5 (x2+1)",
                   lambda x: _special("jv")(x[:, 0] + 1, 5 * (x[:, 1] + 1))),
    "iv": Function(2, "I_v(z), modified Bessel function of the first kind, v = x1+1, z = 1.5 (x2+1)",
                   lambda x: _special("iv")(x[:, 0] + 1, 1.5 * (x[:, 1] + 1))),
    "lpmv": Function(2, "P_v^1(z), associated Legendre function of order 1, degree v = 1 + 3 (x1+1)/2, "
                     "z = 0.98 x2", lambda x: _special("lpmv")(1, 1 + 3 * _unit(x[:, 0]), 0.98 * x[:, 1])),
}
DEFAULT = "exp_sin"


def get(name: str | None) -> Function:
    if name not in FUNCTIONS:
        raise UsageError(f"unknown data.fn '{name}'; valid: {', '.join(FUNCTIONS)}")
    return FUNCTIONS[name]


def sample(name: str, n: int, gen: Any, noise: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """n points uniform on [-1, 1]^dim drawn from the torch generator gen, and f at them (float64),
    plus Gaussian noise of std `noise` from the same stream when noise > 0."""
    import torch

    f = get(name)
    x = (torch.rand((n, f.dim), generator=gen, dtype=torch.float64) * 2 - 1).numpy()
    y = np.asarray(f.fn(x), dtype=np.float64)
    if noise > 0:
        y = y + noise * torch.randn(n, generator=gen, dtype=torch.float64).numpy()
    return x, y
