"""The activation registry against closed forms (float64), its parameters, configs and errors."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

from activation_bench.config.compose import compose, compose_many
from activation_bench.config.grid import expand
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.activations.registry import REGISTRY, create, hidden_width
from activation_bench.errors import UsageError

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "activation"
SQRT2PI = math.sqrt(2 * math.pi)
SELU_SCALE = 1.0507009873554804934193349852946
SELU_ALPHA = 1.6732632423543772848170429916717

# 141 points in [-7, 7], none on a kink (0, +-1, +-3, 6)
X = torch.linspace(-7.0, 7.0, 141, dtype=torch.float64) + 0.003


def Phi(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


def phi(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(-0.5 * x * x) / SQRT2PI


def sig(x: torch.Tensor) -> torch.Tensor:
    return 1 / (1 + torch.exp(-x))


def softplus(x: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    return torch.log1p(torch.exp(beta * x)) / beta


def _gelu_tanh(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    c = math.sqrt(2 / math.pi)
    t = torch.tanh(c * (x + 0.044715 * x**3))
    return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


def _mish(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.tanh(softplus(x))
    return x * t, t + x * (1 - t * t) * sig(x)


def _leaky(a: float) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    return lambda x: (torch.where(x >= 0, x, a * x), torch.where(x >= 0, torch.ones_like(x), torch.full_like(x, a)))


def _elu(a: float, scale: float = 1.0) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    return lambda x: (scale * torch.where(x > 0, x, a * (torch.exp(x) - 1)),
                      scale * torch.where(x > 0, torch.ones_like(x), a * torch.exp(x)))


def _celu(a: float) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    return lambda x: (torch.where(x > 0, x, a * (torch.exp(x / a) - 1)),
                      torch.where(x > 0, torch.ones_like(x), torch.exp(x / a)))


def _ind(cond: torch.Tensor) -> torch.Tensor:
    return cond.to(torch.float64)


# name, params, closed form x -> (value, derivative)
CLOSED_FORMS: list[tuple[str, dict, Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]]] = [
    ("gelu", {}, lambda x: (x * Phi(x), Phi(x) + x * phi(x))),
    ("gelu_tanh", {}, _gelu_tanh),
    ("gelu_sigmoid", {}, lambda x: (x * sig(1.702 * x), sig(1.702 * x) * (1 + 1.702 * x * (1 - sig(1.702 * x))))),
    ("stochastic_gelu", {}, lambda x: (x * Phi(x), Phi(x) + x * phi(x))),  # eval mode
    ("relu", {}, lambda x: (x.clamp(min=0), _ind(x > 0))),
    ("relu6", {}, lambda x: (x.clamp(0, 6), _ind((x > 0) & (x < 6)))),
    ("leaky_relu", {}, _leaky(0.01)),
    ("leaky_relu", {"negative_slope": 0.2}, _leaky(0.2)),
    ("prelu", {}, _leaky(0.25)),
    ("prelu", {"init": -0.5}, _leaky(-0.5)),
    ("rrelu", {}, _leaky((1 / 8 + 1 / 3) / 2)),  # eval mode: the mean slope
    ("rrelu", {"lower": 0.1, "upper": 0.3}, _leaky(0.2)),
    ("elu", {}, _elu(1.0)),
    ("elu", {"alpha": 0.5}, _elu(0.5)),
    ("selu", {}, _elu(SELU_ALPHA, SELU_SCALE)),
    ("celu", {}, _celu(1.0)),
    ("celu", {"alpha": 0.5}, _celu(0.5)),
    ("silu", {}, lambda x: (x * sig(x), sig(x) * (1 + x * (1 - sig(x))))),
    ("mish", {}, _mish),
    ("softplus", {}, lambda x: (softplus(x), sig(x))),
    ("softplus", {"beta": 2.0}, lambda x: (softplus(x, 2.0), sig(2 * x))),
    ("tanh", {}, lambda x: (torch.tanh(x), 1 - torch.tanh(x) ** 2)),
    ("sigmoid", {}, lambda x: (sig(x), sig(x) * (1 - sig(x)))),
    ("hardswish", {}, lambda x: (torch.where(x <= -3, 0.0, torch.where(x >= 3, x, x * (x + 3) / 6)),
                                 torch.where(x <= -3, 0.0, torch.where(x >= 3, 1.0, (2 * x + 3) / 6)))),
    ("hardsigmoid", {}, lambda x: (((x + 3) / 6).clamp(0, 1), _ind((x > -3) & (x < 3)) / 6)),
    ("hardtanh", {}, lambda x: (x.clamp(-1, 1), _ind((x > -1) & (x < 1)))),
    ("hardtanh", {"min_val": -2.0, "max_val": 0.5}, lambda x: (x.clamp(-2, 0.5), _ind((x > -2) & (x < 0.5)))),
    ("softsign", {}, lambda x: (x / (1 + x.abs()), 1 / (1 + x.abs()) ** 2)),
    ("tanhshrink", {}, lambda x: (x - torch.tanh(x), torch.tanh(x) ** 2)),
    ("relu2", {}, lambda x: (x.clamp(min=0) ** 2, 2 * x.clamp(min=0))),
]

GATE_FORMS = {
    "glu": lambda x: (sig(x), sig(x) * (1 - sig(x))),
    "reglu": lambda x: (x.clamp(min=0), _ind(x > 0)),
    "geglu": lambda x: (x * Phi(x), Phi(x) + x * phi(x)),
    "swiglu": lambda x: (x * sig(x), sig(x) * (1 + x * (1 - sig(x)))),
    "bilinear": lambda x: (x, torch.ones_like(x)),
}


def _value_and_grad(module: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    y = module(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), g


def test_every_elementwise_activation_has_a_closed_form_test() -> None:
    tested = {name for name, _, _ in CLOSED_FORMS} | set(GATE_FORMS)
    assert tested == set(REGISTRY)


@pytest.mark.parametrize(("name", "params", "form"), CLOSED_FORMS,
                         ids=[f"{n}{p or ''}" for n, p, _ in CLOSED_FORMS])
def test_value_and_gradient_match_closed_form_float64(name: str, params: dict, form: Callable) -> None:
    module = create(name, **params).to(torch.float64).eval()
    y, g = _value_and_grad(module, X)
    want_y, want_g = form(X)
    torch.testing.assert_close(y, want_y, rtol=1e-10, atol=1e-12)
    # torch's hardsigmoid backward multiplies by a float32 1/6 even in float64 (rel. error 3e-8)
    rtol = 1e-7 if name == "hardsigmoid" else 1e-10
    torch.testing.assert_close(g, want_g.to(torch.float64), rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("name", sorted(GATE_FORMS))
def test_gated_value_and_gradients(name: str) -> None:
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 8, generator=gen, dtype=torch.float64) * 3).requires_grad_(True)
    y = create(name)(x)
    a, b = x.detach()[:, :4], x.detach()[:, 4:]
    act, dact = GATE_FORMS[name](a)
    assert y.shape == (5, 4)
    torch.testing.assert_close(y.detach(), act * b, rtol=1e-10, atol=1e-12)
    (g,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(g[:, :4], dact * b, rtol=1e-10, atol=1e-12)  # d/da = act'(a) b
    torch.testing.assert_close(g[:, 4:], act, rtol=1e-10, atol=1e-12)  # d/db = act(a)


# --------------------------------------------------------------------------------------------
# GELU reference numbers (docs/notes: activations.md)


def test_gelu_reference_values_and_gradients() -> None:
    x = torch.tensor([-1.0, 0.0, 1.0, 2.0], dtype=torch.float64)
    y, g = _value_and_grad(create("gelu"), x)
    torch.testing.assert_close(y, torch.tensor([-0.158655, 0.0, 0.841345, 1.954500], dtype=torch.float64),
                               rtol=0, atol=5e-7)
    torch.testing.assert_close(g, torch.tensor([-0.083315, 0.5, 1.083315, 1.085232], dtype=torch.float64),
                               rtol=0, atol=5e-7)


def test_regression_seed_api_doc_gelu_gradient_is_wrong() -> None:
    """A GELU API page that came with the seed notebook claims GELU'(-1) = 0.1588 (and 0.8413, 1.0
    at 1, 2); the truth is Phi(-1) - phi(-1) = -0.083315. Its value -0.1588 at -1 is the tanh
    approximation's."""
    x = torch.tensor([-1.0, 1.0, 2.0], dtype=torch.float64)
    _, g = _value_and_grad(create("gelu"), x)
    assert g[0].item() == pytest.approx(-0.083315, abs=5e-7)
    assert abs(g[0].item() - 0.1588) > 0.2
    assert abs(g[1].item() - 0.8413) > 0.2 and abs(g[2].item() - 1.0) > 0.05
    exact = create("gelu")(x[:1]).item()
    approx = create("gelu_tanh")(x[:1].clone()).item()
    assert exact == pytest.approx(-0.158655, abs=5e-7)
    assert approx == pytest.approx(-0.158808, abs=5e-7)


def test_gelu_minimum() -> None:
    x = torch.linspace(-1.5, 0.0, 150001, dtype=torch.float64)
    y = create("gelu")(x)
    i = int(y.argmin())
    assert y[i].item() == pytest.approx(-0.169971, abs=1e-6)
    assert x[i].item() == pytest.approx(-0.751792, abs=1e-4)


def _max_error(name: str) -> tuple[float, float]:
    x = torch.linspace(-8, 8, 160001, dtype=torch.float64)
    err = (create(name)(x) - create("gelu")(x)).abs()
    i = int(err.argmax())
    return err[i].item(), x[i].item()


def test_gelu_tanh_max_error_against_exact() -> None:
    err, at = _max_error("gelu_tanh")
    assert err == pytest.approx(4.73e-4, rel=0.01)
    assert abs(at) == pytest.approx(2.70, abs=0.05)


def test_gelu_sigmoid_max_error_against_exact() -> None:
    err, at = _max_error("gelu_sigmoid")
    assert err == pytest.approx(2.03e-2, rel=0.01)
    assert at == pytest.approx(-2.27, abs=0.05)


# --------------------------------------------------------------------------------------------
# stochastic activations


def test_stochastic_gelu_training_mean_approaches_gelu() -> None:
    x = torch.tensor([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], dtype=torch.float64)
    n = 200_000
    module = create("stochastic_gelu").train()
    module.generator = torch.Generator().manual_seed(1)
    out = module(x.expand(n, -1))
    assert bool(((out == 0) | (out == x)).all())  # x * m with m in {0, 1}
    p = Phi(x)
    se = x.abs() * torch.sqrt(p * (1 - p) / n)
    assert bool(((out.mean(0) - x * p).abs() < 5 * se).all())
    assert out.mean(0)[4].item() == pytest.approx(0.841345, abs=0.005)  # Phi(1)
    # the eval-mode expectation is exact GELU
    module.eval()
    torch.testing.assert_close(module(x), torch.nn.functional.gelu(x), rtol=1e-12, atol=1e-15)


def test_stochastic_gelu_is_reproducible_with_a_seeded_generator() -> None:
    x = torch.linspace(-2, 2, 50, dtype=torch.float64)
    outs = []
    for _ in range(2):
        m = create("stochastic_gelu").train()
        m.generator = torch.Generator().manual_seed(7)
        outs.append(m(x))
    assert torch.equal(outs[0], outs[1])


def test_stochastic_gelu_training_gradient_is_the_mask() -> None:
    m = create("stochastic_gelu").train()
    m.generator = torch.Generator().manual_seed(3)
    x = torch.linspace(-2, 2, 41, dtype=torch.float64).add(0.01)
    y, g = _value_and_grad(m, x)
    torch.testing.assert_close(g, (y != 0).to(torch.float64))


@pytest.mark.parametrize(("lower", "upper"), [(1 / 8, 1 / 3), (0.05, 0.5)])
def test_rrelu_training_slopes_within_bounds_and_eval_mean(lower: float, upper: float) -> None:
    module = create("rrelu", lower=lower, upper=upper).train()
    module.generator = torch.Generator().manual_seed(0)
    x = -torch.rand(100_000, dtype=torch.float64) - 0.1
    slopes = module(x) / x
    assert slopes.min().item() >= lower and slopes.max().item() <= upper
    assert slopes.mean().item() == pytest.approx((lower + upper) / 2, abs=2e-3)
    assert slopes.std().item() > 0.01  # actually random
    pos = torch.rand(100, dtype=torch.float64)
    assert torch.equal(module(pos), pos)
    module.eval()
    torch.testing.assert_close(module(x) / x, torch.full_like(x, (lower + upper) / 2))


def test_prelu_learns_its_slope() -> None:
    module = create("prelu").to(torch.float64)
    (weight,) = module.parameters()
    assert weight.numel() == 1 and weight.item() == 0.25
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    target = torch.where(x >= 0, x, 0.7 * x)
    for _ in range(100):  # plain gradient descent (torch.optim imports torch._dynamo: seconds)
        module.zero_grad()
        (module(x) - target).square().mean().backward()
        with torch.no_grad():
            weight -= 0.5 * weight.grad
    assert weight.item() == pytest.approx(0.7, abs=1e-3)


# --------------------------------------------------------------------------------------------
# gated widths and parameter counts


@pytest.mark.parametrize("name", ["glu", "reglu", "geglu", "swiglu"])
def test_gated_widths(name: str) -> None:
    assert activations.is_gated({"name": name})
    assert hidden_width({"name": name}, 64) == (128, 64)
    assert hidden_width({"name": name, "param_matched": False}, 64) == (128, 64)
    assert hidden_width({"name": name, "param_matched": True}, 64) == (86, 43)  # round(64 * 2/3)
    assert hidden_width({"name": name, "param_matched": True}, 1) == (2, 1)


def test_plain_widths() -> None:
    assert hidden_width({"name": "relu"}, 64) == (64, 64)
    assert hidden_width({"name": "swish"}, 7) == (7, 7)
    assert hidden_width({"_target_": "act_helpers.ScaledTanh"}, 5) == (5, 5)
    assert not activations.is_gated({"name": "gelu"})


def _train_tiny(overrides: list[str]):
    from activation_bench.engine import train

    cfg = compose(["epochs=3", "data.n_samples=4", "data.input_dim=3", "model.hidden_dim=6", *overrides])
    return train.train([cfg])[0]


def test_parameter_count_param_matched() -> None:
    # (plain, prelu and 2h-wide gated counts are checked for every activation at the end)
    result = _train_tiny(["activation=swiglu", "activation.param_matched=true"])
    assert result.n_params == 3 * 8 + 8 + 4 + 1  # h = round(6 * 2/3) = 4, first layer 2h = 8
    assert all(math.isfinite(v) for v in result.train_loss)


# --------------------------------------------------------------------------------------------
# names, aliases, parameters


def test_aliases_resolve() -> None:
    assert isinstance(create("swish"), torch.nn.SiLU)
    assert activations.resolve_name("Swish") == "silu"
    assert activations.resolve_name("gelu-new") == "gelu_tanh"
    assert activations.get_spec("quick_gelu").name == "gelu_sigmoid"
    for alias, target in activations.ALIASES.items():
        assert alias not in REGISTRY and target in REGISTRY
    assert activations.names() == list(REGISTRY)
    assert all(n == n.lower() for n in REGISTRY)


def test_unknown_name_lists_what_exists() -> None:
    with pytest.raises(UsageError) as exc:
        create("nosuch")
    msg = str(exc.value)
    assert "nosuch" in msg and "\n" not in msg
    for name in REGISTRY:
        assert name in msg


@pytest.mark.parametrize(("name", "params", "match"), [
    ("leaky_relu", {"slope": 0.2}, "unknown parameter 'slope'.*valid: negative_slope"),
    ("relu", {"inplace": True}, "unknown parameter 'inplace'.*valid: none"),
    ("leaky_relu", {"negative_slope": "abc"}, "must be a float"),
    ("elu", {"alpha": True}, "must be a float"),
    ("elu", {"alpha": float("nan")}, "must be a float"),
    ("glu", {"param_matched": 1}, "must be a bool"),
    ("rrelu", {"lower": 0.5, "upper": 0.2}, "lower <= upper"),
    ("rrelu", {"lower": -0.1}, "lower <= upper"),
    ("softplus", {"beta": 0.0}, "beta must be > 0"),
    ("hardtanh", {"min_val": 1.0, "max_val": 1.0}, "min_val < max_val"),
    ("celu", {"alpha": 0.0}, "non-zero"),
])
def test_bad_parameters_raise_usage_error(name: str, params: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        create(name, **params)
    with pytest.raises(UsageError, match=match):
        activations.check_config({"name": name, **params})


def test_integer_for_float_parameter_is_accepted() -> None:
    assert create("leaky_relu", negative_slope=1).negative_slope == 1


@pytest.mark.parametrize("overrides", [
    ["activation.nosuch=1"],
    ["activation=leaky_relu", "+activation.nosuch=1"],
    ["activation=leaky_relu", "activation.negative_slope=abc"],
    ["activation=leaky_relu", "activation.negative_slope=inf"],
    ["activation=rrelu", "activation.lower=0.9"],
    ["activation=glu", "activation.param_matched=maybe"],
    ["activation.name=nosuch"],
])
def test_bad_activation_overrides_raise_usage_error(overrides: list[str]) -> None:
    with pytest.raises(UsageError) as exc:
        compose(overrides)
    assert "\n" not in str(exc.value)


def test_parameter_override_from_the_command_line() -> None:
    cfg = compose(["activation=leaky_relu", "activation.negative_slope=0.2"])
    assert cfg.activation == {"name": "leaky_relu", "negative_slope": 0.2}
    assert activations.create_from_config(cfg.activation).negative_slope == 0.2


# --------------------------------------------------------------------------------------------
# user modules through _target_


def test_target_to_a_user_module_works() -> None:
    module = activations.create_from_config({"_target_": "act_helpers.ScaledTanh", "scale": 2.0})
    x = torch.linspace(-2, 2, 9)
    torch.testing.assert_close(module(x), 2 * torch.tanh(x))
    assert activations.is_per_member({"_target_": "act_helpers.ScaledTanh"})


def test_target_through_config_and_training() -> None:
    overrides = ["activation=custom", "activation._target_=act_helpers.ScaledTanh", "+activation.scale=2.0"]
    cfg = compose(overrides)
    assert cfg.activation == {"name": "custom", "_target_": "act_helpers.ScaledTanh", "scale": 2.0}
    result = _train_tiny(overrides)
    assert len(result.train_loss) == 3 and all(math.isfinite(v) for v in result.train_loss)


@pytest.mark.parametrize(("target", "match"), [
    ("no_such_package_xyz.Act", "does not import"),
    ("act_helpers.Missing", "does not import"),
    ("ScaledTanh", "not a dotted path"),
    ("act_helpers.not_a_module", "not a torch.nn.Module class"),
    ("act_helpers.NOT_A_CLASS", "not a torch.nn.Module class"),
    ("math.sqrt", "not a torch.nn.Module class"),
    ("torch.nn", "not a torch.nn.Module class"),
])
def test_bad_target_raises_usage_error(target: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        activations.check_config({"name": "custom", "_target_": target})
    with pytest.raises(UsageError, match=match):
        activations.create_from_config({"name": "custom", "_target_": target})


@pytest.mark.parametrize(("target", "match"), [
    ("no_such_package_xyz.Act", "does not import"),
    ("act_helpers.not_a_module", "not a torch.nn.Module class"),
])
def test_bad_target_through_config_raises_usage_error(target: str, match: str) -> None:
    with pytest.raises(UsageError, match=match) as exc:
        compose(["activation=custom", f"activation._target_={target}"])
    assert "\n" not in str(exc.value)


def test_target_that_fails_to_build_raises_usage_error() -> None:
    with pytest.raises(UsageError, match="failed to build: scale must be > 0"):
        compose(["activation=custom", "activation._target_=act_helpers.ScaledTanh", "+activation.scale=-1.0"])
    with pytest.raises(UsageError, match="failed to build"):
        activations.check_config({"_target_": "act_helpers.ScaledTanh", "nosuch": 1})


def test_custom_without_target_says_what_to_do() -> None:
    with pytest.raises(UsageError, match=r"activation=custom needs activation\._target_"):
        compose(["activation=custom"])


# --------------------------------------------------------------------------------------------
# configs and the listing


def _load(name: str) -> dict:
    return yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_config_file_matches_registry(name: str) -> None:
    data = _load(name)
    assert data.pop("name") == name
    assert data == REGISTRY[name].params
    assert all(type(data[k]) is type(v) for k, v in REGISTRY[name].params.items())


def test_no_config_file_without_registry_entry() -> None:
    files = {p.stem for p in CONFIGS.glob("*.yaml")}
    assert files == set(REGISTRY) | {"custom", "expr"}
    assert _load("custom") == {"name": "custom", "_target_": "???"}


def test_describe_lists_every_activation() -> None:
    rows = activations.describe()
    assert [r["name"] for r in rows] == list(REGISTRY)
    by = {r["name"]: r for r in rows}
    for r in rows:
        assert {"name", "aliases", "formula", "params", "param_effect"} <= set(r)
        assert r["formula"] and r["param_effect"]
        assert r["params"] == REGISTRY[r["name"]].params
    assert by["silu"]["aliases"] == ["swish"]
    assert by["relu"]["param_effect"] == "none"
    assert "+1" in by["prelu"]["param_effect"]
    assert "2h" in by["swiglu"]["param_effect"] and "2/3" in by["swiglu"]["param_effect"]
    assert by["leaky_relu"]["params"] == {"negative_slope": 0.01}


# --------------------------------------------------------------------------------------------
# every activation composes with its defaults and trains
# (what `actbench sweep 'activation=glob(*)' epochs=3` does)


def test_every_activation_trains_three_epochs_with_finite_losses() -> None:
    from activation_bench.engine import plan, train

    grid = expand(["activation=glob(*)", "epochs=3", "data.n_samples=4", "data.input_dim=3",
                          "model.hidden_dim=5"])
    members = [m for m, lab in zip(grid.members, grid.labels) if lab["activation"] != "custom"]
    cfgs = compose_many(members)
    assert sorted(c.activation["name"] for c in cfgs) == sorted(REGISTRY)
    for cfg in cfgs:  # the composed config of every activation carries the registry defaults
        name = cfg.activation["name"]
        assert cfg.activation == {"name": name, **REGISTRY[name].params}
    results = {}
    for stack in plan.plan_stacks(cfgs):
        for i, r in zip(stack, train.train([cfgs[i] for i in stack])):
            results[cfgs[i].activation["name"]] = r
    assert set(results) == set(REGISTRY)
    for name, r in results.items():
        spec = REGISTRY[name]
        h1 = 10 if spec.gated else 5  # gated: first layer 2h wide
        extra = 1 if name == "prelu" else 0  # one learned slope
        assert r.n_params == 3 * h1 + h1 + 5 + 1 + extra, name
        assert r.status == "complete", name
        assert len(r.train_loss) == 3, name
        assert all(math.isfinite(v) for v in r.train_loss), name
