"""model.depth, model.init, the gradient-norm log and the dead/saturated unit shares."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch
import yaml

from activation_bench.cli.main import app
from activation_bench.config.compose import compose, compose_many
from activation_bench.config.grid import expand
from activation_bench.config.hashing import config_hash
from activation_bench.data.synthetic import generator
from activation_bench.engine import plan, train
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.diagnostics import unit_shares
from activation_bench.engine.models.base import Slice, init_layer, linear_init
from activation_bench.engine.models.stacked_mlp import StackedMLP, member_weights
from activation_bench.engine.teacher import make_dataset
from tests.conftest import TINY, files_under
from tests.engine_helpers import stacked_and_alone

DEEP_GRID = ["activation=gelu,relu,prelu,stochastic_gelu,swiglu,tanh", "model.depth=2,3",
             "model.init=torch_default,auto", "seed=3", "epochs=6", "lr=0.01"]




# --------------------------------------------------------------------------------------------
# the stacked engine with depth


def test_deep_stacked_members_equal_single_runs_bitwise_at_default_sizes():
    """Deep members (depth 2 and 3, every init, plain, per-member, stochastic and gated
    activations) follow exactly the trajectory of the same run alone, as depth 1 does."""
    for labels, alone, stacked in stacked_and_alone(DEEP_GRID):
        assert alone.train_loss == stacked.train_loss, labels
        assert alone.n_params == stacked.n_params, labels
        assert alone.dead_units == stacked.dead_units, labels


def test_depth_groups_separate_stacks_and_one_stack_per_depth():
    cfgs = compose_many(expand(["model.depth=1,2,4", "activation=gelu,relu", "seed=0,1"]).members)
    stacks = plan.plan_stacks(cfgs)
    assert len(stacks) == 3
    for stack in stacks:
        assert len({cfgs[i].model.depth for i in stack}) == 1 and len(stack) == 4


def test_deep_engine_matches_plain_torch_module_and_optimizer():
    """Reference for depth 3: nn.Sequential of Linear/activation layers + torch.optim.Adam from the
    same initial weights (rtol 1e-5 over 15 epochs, different kernels round differently)."""
    cfg = compose(["activation=silu", "model.depth=3", "model.init=he", "epochs=15", "lr=0.01"])
    ds = make_dataset(cfg)
    layers = member_weights("he", 64, 64, 64, 3, generator(cfg.seed, "init"), torch.float32)
    mods: list[torch.nn.Module] = []
    for k, (w, b) in enumerate(layers):
        lin = torch.nn.Linear(*w.shape)
        with torch.no_grad():
            lin.weight.copy_(w.T), lin.bias.copy_(b)
        mods += [lin] if k == len(layers) - 1 else [lin, torch.nn.SiLU()]
    net = torch.nn.Sequential(*mods)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    ref = []
    for _ in range(cfg.epochs):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(ds.x), ds.y)
        loss.backward()
        opt.step()
        ref.append(loss.item())
    assert train.train([cfg])[0].train_loss == pytest.approx(ref, rel=1e-5)


def test_depth_one_draws_the_two_layer_weights_and_deeper_models_share_the_first_layer():
    gen = generator(0, "init")
    w1, b1 = linear_init(64, 64, gen, torch.float32)
    w2, b2 = linear_init(64, 1, gen, torch.float32)
    one = member_weights("torch_default", 64, 64, 64, 1, generator(0, "init"), torch.float32)
    assert all(torch.equal(a, b) for a, b in zip([t for layer in one for t in layer], [w1, b1, w2, b2]))
    four = member_weights("torch_default", 64, 64, 64, 4, generator(0, "init"), torch.float32)
    assert len(four) == 5 and torch.equal(four[0][0], w1) and torch.equal(four[0][1], b1)
    assert [tuple(w.shape) for w, _ in four] == [(64, 64)] * 4 + [(64, 1)]


def test_depth_one_default_config_is_unchanged():
    cfg = compose([])
    assert (cfg.model.depth, cfg.model.init, cfg.model.init_resolved) == (1, "torch_default", "torch_default")
    assert (cfg.log.grad_norms, cfg.log.every) == (False, 10)
    explicit = compose(["model.depth=1", "model.init=torch_default", *TINY])
    assert train.train([explicit])[0].train_loss == train.train([compose(TINY)])[0].train_loss


# --------------------------------------------------------------------------------------------
# parameter counts


def _expected_params(input_dim: int, h1: int, h2: int, depth: int, extra: int = 0) -> int:
    return input_dim * h1 + h1 + (depth - 1) * (h2 * h1 + h1) + h2 + 1 + extra


@pytest.mark.parametrize(("act", "widths", "extra_per_layer"), [
    (["activation=relu"], (5, 5), 0),
    (["activation=prelu"], (5, 5), 1),
    (["activation=swiglu"], (10, 5), 0),
    (["activation=geglu", "activation.param_matched=true"], (6, 3), 0),
])
@pytest.mark.parametrize("depth", [1, 2, 5])
def test_parameter_counts_for_depth_and_gated_activations(act, widths, extra_per_layer, depth):
    cfg = compose([*act, f"model.depth={depth}", *TINY])
    h1, h2 = widths
    assert activations.hidden_width(dict(cfg.activation), 5) == (h1, h2)
    res = train.train([cfg])[0]
    assert res.n_params == _expected_params(3, h1, h2, depth, extra_per_layer * depth)
    # the same as counting an equivalent nn.Sequential's parameters
    mods: list[torch.nn.Module] = [torch.nn.Linear(3, h1)]
    for _ in range(depth - 1):
        mods += [torch.nn.Linear(h2, h1)]
    mods += [torch.nn.Linear(h2, 1)]
    assert res.n_params == sum(p.numel() for m in mods for p in m.parameters()) + extra_per_layer * depth


def test_parameter_counts_in_summary_and_results(runner, runs_dir):
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", "--name", "p",
                                 "model.depth=1,3", "activation=relu,swiglu", *TINY])
    assert result.exit_code == 0, result.output
    with open(runs_dir / "p" / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    got = {(r["model.depth"], r["activation"]): int(r["n_params"]) for r in rows}
    for (depth, act), n in got.items():
        widths = (5, 5) if act == "relu" else (10, 5)
        assert n == _expected_params(3, *widths, int(depth)), (depth, act)
    for summary in (runs_dir / "p").glob("*/summary.json"):
        s = json.loads(summary.read_text())
        assert s["n_params"] == got[(s["labels"]["model.depth"], s["labels"]["activation"])]
        assert s["depth"] == int(s["labels"]["model.depth"]) and len(s["dead_units"]) == s["depth"]


# --------------------------------------------------------------------------------------------
# initialisation schemes


FAN_IN, FAN_OUT = 400, 300


def _draw(scheme: str) -> tuple[torch.Tensor, torch.Tensor]:
    return init_layer(scheme, FAN_IN, FAN_OUT, torch.Generator().manual_seed(1), torch.float64)


@pytest.mark.parametrize(("scheme", "variance"), [("he", 2 / FAN_IN), ("lecun", 1 / FAN_IN)])
def test_normal_schemes_have_their_variance_and_zero_bias(scheme, variance):
    w, b = _draw(scheme)
    assert w.shape == (FAN_IN, FAN_OUT)
    assert abs(float(w.mean())) < 4 * math.sqrt(variance / w.numel())
    # 120,000 draws: the sample variance is within 2% of the target (sd of the estimate ~0.4%)
    assert float(w.var()) == pytest.approx(variance, rel=0.02)
    assert float(((w / math.sqrt(variance)) ** 4).mean()) == pytest.approx(3.0, rel=0.05)  # normal: kurtosis 3
    assert torch.count_nonzero(b) == 0


def test_xavier_is_glorot_uniform():
    w, b = _draw("xavier")
    bound = math.sqrt(6 / (FAN_IN + FAN_OUT))
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.999 * bound
    assert float(w.var()) == pytest.approx(bound**2 / 3, rel=0.02)  # = 2 / (fan_in + fan_out)
    assert torch.count_nonzero(b) == 0


def test_torch_default_is_nn_linear_init():
    w, b = _draw("torch_default")
    bound = 1 / math.sqrt(FAN_IN)
    assert float(w.abs().max()) <= bound and float(b.abs().max()) <= bound
    assert float(w.var()) == pytest.approx(bound**2 / 3, rel=0.02)
    ref = torch.nn.Linear(FAN_IN, FAN_OUT, dtype=torch.float64)
    assert torch.nn.init._calculate_fan_in_and_fan_out(ref.weight) == (FAN_IN, FAN_OUT)


def test_he_matches_torch_kaiming_normal_statistics():
    ref = torch.empty(FAN_OUT, FAN_IN, dtype=torch.float64)
    torch.nn.init.kaiming_normal_(ref, mode="fan_in", nonlinearity="relu", generator=torch.Generator().manual_seed(2))
    assert float(_draw("he")[0].var()) == pytest.approx(float(ref.var()), rel=0.03)


@pytest.mark.parametrize(("act", "scheme"), [
    ("relu", "he"), ("leaky_relu", "he"), ("gelu", "he"), ("silu", "he"), ("selu", "lecun"),
    ("tanh", "xavier"), ("sigmoid", "xavier"), ("glu", "xavier"), ("swiglu", "he"),
])
def test_auto_resolves_to_the_registry_recommendation(act, scheme):
    assert activations.get_spec(act).init == scheme
    cfg = compose([f"activation={act}", "model.init=auto"])
    assert (cfg.model.init, cfg.model.init_resolved) == ("auto", scheme)


def test_every_registered_activation_recommends_a_known_scheme():
    assert {s.init for s in activations.REGISTRY.values()} <= {"he", "lecun", "xavier"}
    assert {r["name"]: r["init"] for r in activations.describe()}["selu"] == "lecun"


def test_auto_trains_exactly_as_the_resolved_scheme():
    auto, lecun = compose_many([["activation=selu", "model.init=auto", "model.depth=2", *TINY],
                                       ["activation=selu", "model.init=lecun", "model.depth=2", *TINY]])
    default = compose(["activation=selu", "model.depth=2", *TINY])
    assert train.train([auto])[0].train_loss == train.train([lecun])[0].train_loss
    assert train.train([auto])[0].train_loss != train.train([default])[0].train_loss


def test_auto_is_recorded_in_config_yaml_and_reproduces_with_the_same_hash(runner, runs_dir):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "--name", "a", "activation=tanh",
                                 "model.init=auto", "model.depth=2", *TINY])
    assert result.exit_code == 0, result.output
    saved = yaml.safe_load((runs_dir / "a" / "config.yaml").read_text())
    assert saved["model"] == {"name": "mlp", "hidden_dim": 5, "depth": 2, "init": "auto", "init_resolved": "xavier",
                              "dropout": 0.0, "norm": "none", "residual": False}
    summary = json.loads((runs_dir / "a" / "summary.json").read_text())
    assert summary["init"] == "xavier"
    overrides = [f"{k}={v}" for k, v in _flatten(saved).items() if v is not None]
    again = compose(overrides)
    assert config_hash(again) == summary["config_hash"]
    written = [float(r.split(",")[1]) for r in (runs_dir / "a" / "losses.csv").read_text().splitlines()[1:]]
    assert train.train([again])[0].train_loss == written


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


# --------------------------------------------------------------------------------------------
# bad input


BAD = [
    (["model.depth=0"], "model.depth must be a positive integer"),
    (["model.depth=-2"], "model.depth must be a positive integer"),
    (["model.depth=1.5"], "model.depth"),
    (["model.depth=abc"], "model.depth"),
    (["model.init=orthogonal"], "unknown model.init 'orthogonal'; valid: torch_default, he, lecun, xavier, auto"),
    (["activation=relu", "model.init=auto", "model.init_resolved=lecun"], "model.init_resolved is derived"),
    (["log.every=0"], "log.every must be a positive integer"),
    (["log.grad_norms=maybe"], "log.grad_norms"),
    (["activation=custom", "activation._target_=torch.nn.ReLU", "model.init=auto"], "model.init=auto needs"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD)
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_bad_depth_init_and_log_values(runner, runs_dir, command, overrides, message):
    extra = ["seed=0,1"] if command == "sweep" else []
    result = runner.invoke(app, [command, "--runs-dir", str(runs_dir), "-q", *overrides, *extra, *TINY])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert message in err
    assert files_under(runs_dir) == []


def test_member_bytes_counts_every_layer():
    base = compose(TINY)
    deep = compose([*TINY, "model.depth=8"])
    wide = compose(["model.depth=8", "model.hidden_dim=512"])
    assert plan.member_bytes(deep) > plan.member_bytes(base)
    # 8 layers of 512x512 weights: params, grads and two Adam moments at least
    assert plan.member_bytes(wide) > 4 * 4 * 7 * 512 * 512


def test_a_depth_whose_stack_cannot_fit_is_refused(runner, runs_dir):
    """The memory refusal counts every layer: the same member fits at depth 1 and not at depth 8."""
    shallow, deep = (compose(["epochs=4", f"model.depth={d}"]) for d in (1, 8))
    budget = (plan.member_bytes(shallow) + plan.member_bytes(deep)) / 2 / 2**20
    args = ["sweep", "--runs-dir", str(runs_dir), "-q", "--memory-mb", str(budget), "epochs=4", "seed=0,1"]
    result = runner.invoke(app, [*args, "model.depth=8"])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "model.depth=8" in err, err
    assert files_under(runs_dir) == []
    assert runner.invoke(app, [*args, "model.depth=1"]).exit_code == 0


# --------------------------------------------------------------------------------------------
# diagnostics


def test_grads_csv_long_format_and_values_against_autograd(runner, runs_dir):
    args = ["--name", "g", "activation=tanh", "model.depth=2", "log.grad_norms=true", "log.every=2", "epochs=5",
            "data.n_samples=6", "data.input_dim=3", "model.hidden_dim=5"]
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", *args])
    assert result.exit_code == 0, result.output
    run = runs_dir / "g"
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "grads.csv", "losses.csv", "summary.json"]
    with open(run / "grads.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["epoch", "layer", "weight_grad_norm", "act_norm"]
    assert [(int(r["epoch"]), int(r["layer"])) for r in rows] == [(e, k) for e in (1, 2, 4, 5) for k in (1, 2)]
    # epoch 1: the gradient at the initial weights, by plain autograd
    cfg = compose(args[2:])
    ds = make_dataset(cfg)
    (w1, b1), (w2, b2), (w3, b3) = [(w.requires_grad_(), b.requires_grad_()) for w, b in member_weights(
        "torch_default", 3, 5, 5, 2, generator(cfg.seed, "init"), torch.float32)]
    a1 = torch.tanh(ds.x @ w1 + b1)
    a2 = torch.tanh(a1 @ w2 + b2)
    loss = ((a2 @ w3 + b3 - ds.y) ** 2).mean()
    g1, g2 = torch.autograd.grad(loss, [w1, w2])
    expected = [float(t.detach().norm()) for t in (g1, a1, g2, a2)]
    got = [float(r[c]) for r in rows[:2] for c in ("weight_grad_norm", "act_norm")]
    assert got == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("depth", [1, 3])  # depth 1: the hand-written gradient (models/hand_gradient.py); 3: autograd
def test_grad_log_changes_no_loss_and_matches_in_a_stack(depth):
    base = [f"model.depth={depth}", "activation=gelu,relu,prelu", "seed=0,1", *TINY, "epochs=7"]
    on = stacked_and_alone([*base, "log.grad_norms=true", "log.every=3"])
    off = stacked_and_alone(base)
    for (labels, alone, stacked), (_, plain, _) in zip(on, off):
        assert alone.train_loss == stacked.train_loss == plain.train_loss, labels
        flat = [v for row in alone.grads for v in row]
        assert flat == pytest.approx([v for row in stacked.grads for v in row], rel=1e-6), labels
        assert [r[:2] for r in alone.grads] == [(e, k) for e in (1, 3, 6, 7) for k in range(1, depth + 1)]
    assert off[0][1].grads is None


def test_grad_log_at_depth_one_against_autograd():
    """Depth 1 trains through the hand-written gradient: its logged norms at epoch 1 are autograd's."""
    cfg = compose(["activation=gelu", "log.grad_norms=true", *TINY])
    row = train.train([cfg])[0].grads[0]
    ds = make_dataset(cfg)
    (w1, b1), (w2, b2) = [(w.requires_grad_(), b) for w, b in member_weights(
        "torch_default", 3, 5, 5, 1, generator(cfg.seed, "init"), torch.float32)]
    a1 = torch.nn.functional.gelu(ds.x @ w1 + b1)
    (g1,) = torch.autograd.grad(((a1 @ w2 + b2 - ds.y) ** 2).mean(), [w1])
    assert row[:2] == (1, 1)
    assert list(row[2:]) == pytest.approx([float(g1.norm()), float(a1.detach().norm())], rel=1e-5)


def test_grads_with_minibatches_log_the_last_batch():
    cfg = compose(["batch_size=2", "log.grad_norms=true", "log.every=1", *TINY])
    res = train.train([cfg])[0]
    assert [r[0] for r in res.grads] == [1, 2, 3, 4] and all(r[2] > 0 and r[3] > 0 for r in res.grads)


def _model(act: str, w: torch.Tensor, b: torch.Tensor) -> StackedMLP:
    """One member, one hidden layer of the given weights [in, h] and bias [h]."""
    h = w.shape[1]
    return StackedMLP([w[None]], [b[None, None]], torch.zeros(1, 1, h), torch.zeros(1, 1, 1),
                      [Slice(0, 1, [activations.create(act)])]).eval()


def test_dead_and_saturated_units_exactly():
    x = torch.linspace(-1, 1, 8).reshape(1, 8, 1)  # one input feature, 8 samples in [-1, 1]
    w = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    b = torch.tensor([-5.0, -0.5, 0.0, 5.0])  # unit 0: pre-activation in [-6, -4] for every sample
    dead, saturated = unit_shares(_model("relu", w, b), x)
    assert dead.tolist() == [[0.25]] and saturated.tolist() == [[0.25]]
    # tanh: |tanh'(h)| < 1e-3 needs |h| > 4.15; units with bias +-10 saturate, the others do not
    dead, saturated = unit_shares(_model("tanh", w, torch.tensor([-10.0, 0.0, 0.5, 10.0])), x)
    assert dead.tolist() == [[0.0]] and saturated.tolist() == [[0.5]]
    # a gated unit's saturation is not defined: NaN in the tensor, null in summary.json
    gated = StackedMLP([torch.ones(1, 1, 4)], [torch.zeros(1, 1, 4)], torch.zeros(1, 1, 2), torch.zeros(1, 1, 1),
                       [Slice(0, 1, [activations.create("reglu")])]).eval()
    dead, saturated = unit_shares(gated, x)
    assert dead.shape == (1, 1) and math.isnan(float(saturated[0, 0]))


def test_the_unit_masks_are_the_all_rows_definition_with_nans_zeros_and_the_threshold():
    """dead: every row exactly 0 (-0.0 too); saturated: every row's |slope| below the threshold;
    a NaN or an infinity in a unit's rows makes it neither (the definition: count_nonzero of the
    failing rows is 0)."""
    from activation_bench.engine.diagnostics import SATURATED_SLOPE, _within

    g = torch.Generator().manual_seed(0)
    edge = SATURATED_SLOPE
    pool = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), edge, -edge, edge / 2,
                         -edge / 2, torch.nextafter(torch.tensor(edge), torch.tensor(0.0)).item(), 1.0, -2.0])
    for rows in (1, 3, 50):
        t = pool[torch.randint(len(pool), (4, rows, 300), generator=g)]
        t[:, :, :40] = 0.0  # some units all zero
        t[:, :, 40:80] = edge / 4  # some all below the threshold
        dead = torch.count_nonzero(t, dim=1) == 0
        saturated = torch.count_nonzero(~(t.abs() < SATURATED_SLOPE), dim=1) == 0
        assert torch.equal(_within(t, 0.0, 0.0), dead) and dead.any()
        assert torch.equal(_within(t, -SATURATED_SLOPE, SATURATED_SLOPE, strict=True), saturated) and saturated.any()


def test_summary_has_dead_units_per_layer(runner, runs_dir):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "--name", "d", "activation=swiglu",
                                 "model.depth=3", *TINY])
    assert result.exit_code == 0, result.output
    s = json.loads((runs_dir / "d" / "summary.json").read_text())
    assert len(s["dead_units"]) == 3 and all(0 <= v <= 1 for v in s["dead_units"])
    assert s["saturated_units"] == [None, None, None]


def test_plot_grads_of_a_sweep_and_of_a_run(runner, runs_dir, tmp_path):
    args = ["--name", "s", "model.depth=3", "activation=relu,tanh", "seed=0,1", "log.grad_norms=true", *TINY]
    assert runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", *args]).exit_code == 0
    out = tmp_path / "grads.png"
    result = runner.invoke(app, ["plot", "--grads", str(runs_dir / "s"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from activation_bench.render import grad_plots

    table, varying = grad_plots.load_grads([runs_dir / "s"])
    assert varying == ["activation", "seed"]
    assert len(table) == 4 * 2 * 3  # runs x logged epochs (1 and the last, 4) x layers
    assert (table.groupby("run")["layer"].max() == 3).all()
    one = next(p for p in (runs_dir / "s").iterdir() if p.is_dir())
    result = runner.invoke(app, ["plot", "--grads", str(one), "-o", str(tmp_path / "one.svg"), "--loss", "act_norm"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["plot", "--grads", str(one), "-o", str(tmp_path / "x.png"), "--loss", "val_loss"])
    assert result.exit_code == 2 and "weight_grad_norm, act_norm" in result.stderr


def test_plot_grads_without_grads_csv_is_one_line(runner, runs_dir, tmp_path):
    assert runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "--name", "n", *TINY]).exit_code == 0
    out = tmp_path / "x.png"
    result = runner.invoke(app, ["plot", "--grads", str(runs_dir / "n"), "-o", str(out)])
    assert result.exit_code == 2 and "log.grad_norms=true" in result.stderr and not out.exists()
