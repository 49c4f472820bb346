"""Activation registry: lower-case name (or alias) -> factory of a torch module.

Modelled on timm's create_act: `create("swish")` gives SiLU; an unknown name raises an error that
lists what exists. Every entry declares its parameters with defaults (their types are checked), a
formula for `actbench activations`, and two facts the training engine needs:

- gated: the first layer feeds 2h values; the unit returns act(a) * b on the two halves.
- per_member: the module has parameters (PReLU) or draws random numbers (RReLU, stochastic GELU),
  so a stacked sweep gives each member its own instance (and its own seeded generator).

Each entry also names the weight initialisation it recommends, which `model.init=auto` uses: he
(Kaiming, fan-in, gain sqrt 2) for the ReLU family and the ReLU-like smooth functions (GELU, SiLU,
Mish, ELU, CELU, softplus, hardswish) and for the gated units with a ReLU-like gate; lecun for
SELU (its self-normalising fixed point assumes variance 1/fan-in weights); xavier (Glorot) for the
bounded, zero-centred or sigmoid-shaped ones (tanh, sigmoid, hardtanh, hardsigmoid, softsign,
tanhshrink) and GLU's sigmoid gate.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from activation_bench.engine.activations import expr
from activation_bench.errors import UsageError, at


@dataclass(frozen=True)
class Spec:
    name: str
    factory: Callable[..., nn.Module]
    formula: str
    params: dict[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    gated: bool = False
    per_member: bool = False
    effect: str = "none"  # effect on the model's parameter count, for `actbench activations`
    stochastic: bool = False  # draws random numbers while training (deterministic in eval)
    init: str = "he"  # the initialisation model.init=auto uses: he, lecun or xavier


# ---------------------------------------------------------------------------------------------
# modules torch does not have


class StochasticGELU(nn.Module):
    """The GELU paper's motivation: x * m, m ~ Bernoulli(Phi(x)) in training; x * Phi(x) in eval."""

    def __init__(self) -> None:
        super().__init__()
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = normal_cdf(x)
        if not self.training:
            return x * p
        mask = torch.bernoulli(p.detach(), generator=self.generator)
        return x * mask


def normal_cdf(x: torch.Tensor) -> torch.Tensor:
    """Phi(x), as StochasticGELU computes it (the compiled step's mask takes these operations too)."""
    return 0.5 * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))


class RReLU(nn.Module):
    """Randomised leaky ReLU with its own generator (torch's uses the global RNG)."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3) -> None:
        super().__init__()
        self.lower, self.upper = lower, upper
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return torch.where(x >= 0, x, x * ((self.lower + self.upper) / 2))
        u = torch.rand(x.shape, generator=self.generator, dtype=x.dtype, device=x.device)
        slope = self.lower + (self.upper - self.lower) * u
        return torch.where(x >= 0, x, x * slope)


class ReLU2(nn.Module):
    """Squared ReLU: relu(x)^2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).square()


class SigmoidGELU(nn.Module):
    """x * sigmoid(1.702 x), the sigmoid approximation of GELU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class Gated(nn.Module):
    """GLU family: split the input in halves a, b along the last axis; return act(a) * b."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return self.act(a) * b


def _gated(act: Callable[[], nn.Module]) -> Callable[..., nn.Module]:
    def factory(param_matched: bool = False) -> nn.Module:  # param_matched: read by hidden_width
        return Gated(act())

    return factory


_GATED_EFFECT = (
    "first layer 2h wide (x2 params in layer 1); param_matched=true: h*2/3 "
    "(layer 1 then x4/3, whole model about x4/3 of the plain MLP)"
)


_SPECS = [
    Spec("gelu", lambda: nn.GELU(), "x * Phi(x)  (exact, Phi = standard normal CDF)"),
    Spec("gelu_tanh", lambda: nn.GELU(approximate="tanh"),
         "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))", aliases=("gelu_new", "approx_gelu")),
    Spec("gelu_sigmoid", SigmoidGELU, "x * sigmoid(1.702 x)", aliases=("quick_gelu",)),
    Spec("stochastic_gelu", StochasticGELU,
         "x * m, m ~ Bernoulli(Phi(x)) in training; x * Phi(x) in eval", per_member=True,
         stochastic=True, effect="none (random mask while training)"),
    Spec("relu", lambda: nn.ReLU(), "max(0, x)"),
    Spec("relu6", lambda: nn.ReLU6(), "min(max(0, x), 6)"),
    Spec("leaky_relu", lambda negative_slope=0.01: nn.LeakyReLU(negative_slope),
         "x if x >= 0 else negative_slope * x", {"negative_slope": 0.01}, aliases=("lrelu",)),
    Spec("prelu", lambda init=0.25: nn.PReLU(num_parameters=1, init=init),
         "x if x >= 0 else a * x, a learned (one per model)", {"init": 0.25}, per_member=True,
         effect="+1 learned slope"),
    Spec("rrelu", RReLU, "x if x >= 0 else a * x, a ~ U(lower, upper) in training, mean in eval",
         {"lower": 1.0 / 8, "upper": 1.0 / 3}, per_member=True,
         stochastic=True, effect="none (random slope while training)"),
    Spec("elu", lambda alpha=1.0: nn.ELU(alpha), "x if x > 0 else alpha (exp(x) - 1)", {"alpha": 1.0}),
    Spec("selu", lambda: nn.SELU(), "scale * elu(x, alpha), scale=1.0507010, alpha=1.6732632", init="lecun"),
    Spec("celu", lambda alpha=1.0: nn.CELU(alpha), "max(0, x) + min(0, alpha (exp(x/alpha) - 1))",
         {"alpha": 1.0}),
    Spec("silu", lambda: nn.SiLU(), "x * sigmoid(x)", aliases=("swish",)),
    Spec("mish", lambda: nn.Mish(), "x * tanh(softplus(x))"),
    Spec("softplus", lambda beta=1.0, threshold=20.0: nn.Softplus(beta, threshold),
         "log(1 + exp(beta x)) / beta", {"beta": 1.0, "threshold": 20.0}),
    Spec("tanh", lambda: nn.Tanh(), "tanh(x)", init="xavier"),
    Spec("sigmoid", lambda: nn.Sigmoid(), "1 / (1 + exp(-x))", init="xavier"),
    Spec("hardswish", lambda: nn.Hardswish(), "x * relu6(x + 3) / 6", aliases=("hard_swish",)),
    Spec("hardsigmoid", lambda: nn.Hardsigmoid(), "relu6(x + 3) / 6", aliases=("hard_sigmoid",), init="xavier"),
    Spec("hardtanh", lambda min_val=-1.0, max_val=1.0: nn.Hardtanh(min_val, max_val),
         "clamp(x, min_val, max_val)", {"min_val": -1.0, "max_val": 1.0}, init="xavier"),
    Spec("softsign", lambda: nn.Softsign(), "x / (1 + |x|)", init="xavier"),
    Spec("tanhshrink", lambda: nn.Tanhshrink(), "x - tanh(x)", init="xavier"),
    Spec("relu2", ReLU2, "relu(x)^2  (squared ReLU)", aliases=("squared_relu", "relu_squared")),
    Spec("glu", _gated(nn.Sigmoid), "sigmoid(a) * b on the two halves of a 2h-wide first layer",
         {"param_matched": False}, gated=True, effect=_GATED_EFFECT, init="xavier"),
    Spec("reglu", _gated(nn.ReLU), "relu(a) * b (gated, 2h-wide first layer)",
         {"param_matched": False}, gated=True, effect=_GATED_EFFECT),
    Spec("geglu", _gated(nn.GELU), "gelu(a) * b (gated, 2h-wide first layer)",
         {"param_matched": False}, gated=True, effect=_GATED_EFFECT),
    Spec("swiglu", _gated(nn.SiLU), "silu(a) * b (gated, 2h-wide first layer)",
         {"param_matched": False}, gated=True, effect=_GATED_EFFECT),
    # Shazeer 2020's Bilinear: the gate without a nonlinearity
    Spec("bilinear", _gated(nn.Identity), "a * b (gated, 2h-wide first layer, no nonlinearity)",
         {"param_matched": False}, gated=True, effect=_GATED_EFFECT, init="xavier"),
]

REGISTRY: dict[str, Spec] = {s.name: s for s in _SPECS}
ALIASES: dict[str, str] = {a: s.name for s in _SPECS for a in s.aliases}


def names() -> list[str]:
    return list(REGISTRY)


def resolve_name(name: str) -> str:
    key = str(name).lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in REGISTRY:
        raise UsageError(f"unknown activation '{name}'; valid: {', '.join(REGISTRY)}")
    return key


def get_spec(name: str) -> Spec:
    return REGISTRY[resolve_name(name)]


def create(name: str, **params: Any) -> nn.Module:
    """Create the activation module registered as `name` (or an alias) with its parameters."""
    spec = get_spec(name)
    _check_params(spec, params, "")
    return spec.factory(**params)


def _params_of(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in ("name", "_target_")}


def create_from_config(cfg: dict[str, Any]) -> nn.Module:
    """Build from a config node: {name: ..., <params>}, {_target_: dotted.path, <kwargs>} or an
    expression {fn: text, learnable: bool, <parameters>} (activation=expr)."""
    if _has_target(cfg):
        return _import_target(cfg["_target_"], "")(**_params_of(cfg))
    if is_expr(cfg):
        e, values, learnable = expr.from_node(cfg)
        return e.module(values, learnable)
    return create(cfg["name"], **_params_of(cfg))


def _has_target(cfg: dict[str, Any]) -> bool:
    return "_target_" in cfg and cfg["_target_"] not in (None, "")


has_target = _has_target  # a user's own module (activation._target_): no registry entry


def is_expr(cfg: dict[str, Any]) -> bool:
    """An activation written as an expression (activation=expr): a node with an `fn`."""
    return not _has_target(cfg) and "fn" in cfg


def _import_target(path: Any, where: str) -> Callable[..., nn.Module]:
    if path == "???":
        raise UsageError(
            "activation=custom needs activation._target_=package.module.Class (an importable "
            f"torch.nn.Module subclass){at(where)}"
        )
    module_name, _, attr = str(path).rpartition(".")
    if not module_name or not attr:
        raise UsageError(
            f"activation._target_ '{path}' is not a dotted path (package.module.Class){at(where)}"
        )
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # noqa: BLE001 - user code may raise anything while importing
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"activation._target_ '{path}' does not import: {msg}{at(where)}") from None
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        raise UsageError(f"activation._target_ '{path}' is not a torch.nn.Module class{at(where)}")
    return obj



def _check_params(spec: Spec, params: dict[str, Any], where: str) -> None:
    for key, value in params.items():
        if key not in spec.params:
            valid = ", ".join(spec.params) or "none"
            raise UsageError(
                f"unknown parameter '{key}' for activation '{spec.name}'; valid: {valid}{at(where)}"
            )
        default = spec.params[key]
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise UsageError(
                f"activation.{key} must be a {type(default).__name__}, got {value!r}{at(where)}"
            )
    if spec.name == "rrelu":
        lower = params.get("lower", spec.params["lower"])
        upper = params.get("upper", spec.params["upper"])
        if not 0 <= lower <= upper:
            raise UsageError(f"rrelu needs 0 <= lower <= upper, got {lower}, {upper}{at(where)}")
    if spec.name == "softplus" and params.get("beta", 1.0) <= 0:
        raise UsageError(f"softplus beta must be > 0{at(where)}")
    if spec.name == "hardtanh" and params.get("min_val", -1.0) >= params.get("max_val", 1.0):
        raise UsageError(f"hardtanh needs min_val < max_val{at(where)}")
    if spec.name == "celu" and params.get("alpha", 1.0) == 0:
        raise UsageError(f"celu alpha must be non-zero{at(where)}")


def check_config(cfg: dict[str, Any], where: str = "", dtype: str = "float32") -> None:
    """Validate an activation config node; raises UsageError with one line. An expression is
    parsed and probed in `dtype` (engine.expr)."""
    if is_expr(cfg):
        _check_expr(cfg, where, dtype)
        return
    if _has_target(cfg):
        cls = _import_target(cfg["_target_"], where)
        try:
            cls(**_params_of(cfg))
        except Exception as exc:  # noqa: BLE001 - user code; report, don't crash
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"activation._target_ '{cfg['_target_']}' failed to build: {msg}{at(where)}") from None
        return
    if "name" not in cfg:
        raise UsageError(f"activation config needs a name or a _target_{at(where)}")
    spec = get_spec(cfg["name"])
    _check_params(spec, _params_of(cfg), where)


def _check_expr(cfg: dict[str, Any], where: str, dtype: str) -> None:
    name = cfg.get("name", "expr")
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"activation.name must be a label (text), got {name!r}{at(where)}")
    key = name.lower().replace("-", "_")
    if name != "expr" and (key in REGISTRY or key in ALIASES):
        raise UsageError(f"activation.fn is for activation=expr, and activation.name '{name}' is a registered "
                         f"activation; label an expression with another name{at(where)}")
    try:
        e, values, _ = expr.from_node(cfg)
        problem = expr.probe_problem(e, values, dtype)
    except UsageError as exc:
        raise UsageError(f"{exc}{at(where)}") from None
    if problem:
        raise UsageError(f"{problem}{at(where)}")


def is_gated(cfg: dict[str, Any]) -> bool:
    return not _has_target(cfg) and not is_expr(cfg) and get_spec(cfg["name"]).gated


def is_per_member(cfg: dict[str, Any]) -> bool:
    if _has_target(cfg):
        return True  # unknown user module: the safe choice is one instance per member
    if is_expr(cfg):  # learnable parameters: each member its own
        return bool(cfg.get("learnable")) and bool(expr.parse(cfg["fn"]).params)
    return get_spec(cfg["name"]).per_member


def hidden_width(cfg: dict[str, Any], hidden_dim: int) -> tuple[int, int]:
    """(first-layer output width, second-layer input width) for this activation."""
    if not is_gated(cfg):
        return hidden_dim, hidden_dim
    h = max(1, round(hidden_dim * 2 / 3)) if cfg.get("param_matched", False) else hidden_dim
    return 2 * h, h


def describe() -> list[dict[str, Any]]:
    """One row per registered activation, for `actbench activations`.

    Keys: name, aliases (list), formula, params (name -> default), param_effect (effect on the
    model's parameter count), gated, stochastic (draws random numbers while training), init (the scheme
    model.init=auto uses).
    """
    rows = []
    for spec in REGISTRY.values():
        rows.append({
            "name": spec.name,
            "aliases": list(spec.aliases),
            "formula": spec.formula,
            "params": dict(spec.params),
            "param_effect": spec.effect,
            "gated": spec.gated,
            "stochastic": spec.stochastic,
            "init": spec.init,
        })
    return rows
