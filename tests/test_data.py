"""Data sets: seeded, paired across activations, teacher targets, noise, validation sets, dtype."""

from __future__ import annotations

import math

import pytest
import torch

from activation_bench.cfg import Cfg
from activation_bench.config.compose import compose_many
from activation_bench.config.files import config_dir
from activation_bench.data import synthetic
from activation_bench.data.synthetic import derived_seed
from activation_bench.engine.teacher import make_dataset, teacher_targets

TINY = ["data.n_samples=6", "data.input_dim=3", "model.hidden_dim=5", "epochs=3"]
TEACHER = ["data.target=teacher", "data.n_val=4", "data.teacher_hidden_dim=7"]


@pytest.fixture(scope="module")
def cfgs() -> dict[str, Cfg]:
    """Compose every config these tests use in one call (composing costs ~0.1 s each)."""
    wanted = {
        "gelu": ["activation=gelu"],
        "relu": ["activation=relu"],
        "prelu": ["activation=prelu"],
        "gelu_s1": ["activation=gelu", "seed=1"],
        "t_gelu": ["activation=gelu", *TEACHER],
        "t_swiglu": ["activation=swiglu", *TEACHER],
        "t_s1": ["activation=gelu", "seed=1", *TEACHER],
        "t_tanh": ["activation=gelu", "data.teacher_activation=tanh", *TEACHER],
        "t_noise": ["activation=gelu", "data.noise=0.1", *TEACHER],
        "t_noise_big": ["data.target=teacher", "data.noise=0.1", "data.n_samples=4000", "data.n_val=10"],
        "t_nval0": ["data.target=teacher", "data.n_val=0"],
        "t_nval9": ["data.target=teacher", "data.n_val=9"],
        "random_nval5": ["data.n_val=5"],
        "f64": ["dtype=float64", *TEACHER],
        "f64_random": ["dtype=float64", "data.n_val=2"],
        "f64_t_prelu": ["dtype=float64", "data.teacher_activation=prelu", *TEACHER],
        "f64_t_glu": ["dtype=float64", "data.teacher_activation=glu", *TEACHER],
        "t_stoch": ["data.teacher_activation=stochastic_gelu", *TEACHER],
        "normal_big": ["data=normal", "data.mean=5.0", "data.std=0.1", "data.n_samples=2000"],
        "uniform_big": ["data=uniform", "data.low=2.0", "data.high=3.0", "data.n_samples=2000"],
        "uniform_default": ["data=uniform"],
    }
    # later overrides of the same key win (data.n_samples=4000 after TINY's 6)
    return dict(zip(wanted, compose_many([[*TINY, *ov] for ov in wanted.values()])))


def _same(a: synthetic.Dataset, b: synthetic.Dataset) -> bool:
    return all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("x", "y", "x_val", "y_val"))


def test_derived_seeds_differ_by_purpose_and_seed() -> None:
    seeds = {derived_seed(s, p) for s in range(3) for p in ("data", "init", "teacher", "activation")}
    assert len(seeds) == 12
    assert derived_seed(0, "data") == derived_seed(0, "data")


@pytest.mark.parametrize("target", ["random", "teacher"])
def test_same_seed_same_data_for_every_activation(cfgs, target: str) -> None:
    if target == "random":
        sets = [make_dataset(cfgs[k]) for k in ("gelu", "relu", "prelu")]
    else:
        sets = [make_dataset(cfgs[k]) for k in ("t_gelu", "t_swiglu")]
    assert all(_same(sets[0], s) for s in sets[1:])


def test_data_is_deterministic_and_depends_on_seed(cfgs) -> None:
    assert _same(make_dataset(cfgs["gelu"]), make_dataset(cfgs["gelu"]))
    assert not torch.equal(make_dataset(cfgs["gelu"]).x, make_dataset(cfgs["gelu_s1"]).x)


def test_shapes(cfgs) -> None:
    d = make_dataset(cfgs["t_gelu"])
    assert d.x.shape == (6, 3) and d.y.shape == (6, 1)
    assert d.x_val.shape == (4, 3) and d.y_val.shape == (4, 1)


def test_teacher_targets_deterministic_and_depend_on_seed(cfgs) -> None:
    cfg, other_seed = cfgs["t_gelu"], cfgs["t_s1"]
    x = make_dataset(cfg).x
    assert torch.equal(teacher_targets(cfg, x), teacher_targets(cfg, x))
    assert not torch.allclose(teacher_targets(cfg, x), teacher_targets(other_seed, x))
    assert not torch.allclose(teacher_targets(cfg, x), teacher_targets(cfgs["t_tanh"], x))
    # without noise the targets are the teacher's function of the inputs, on both sets
    d = make_dataset(cfg)
    assert torch.equal(d.y, teacher_targets(cfg, d.x))
    assert torch.equal(d.y_val, teacher_targets(cfg, d.x_val))


def test_teacher_targets_do_not_use_the_students_init_stream(cfgs) -> None:
    """Teacher weights come from their own stream: the student never starts at the teacher."""
    assert derived_seed(0, "teacher") != derived_seed(0, "init")
    d = make_dataset(cfgs["t_gelu"])
    assert d.y.std() > 0 and torch.isfinite(d.y).all()


def test_teacher_is_a_two_layer_network(cfgs) -> None:
    """teacher(x) = act(x W1 + b1) W2 + b2 with torch.nn.Linear's init from the teacher stream."""
    from activation_bench.engine.models.base import linear_init

    cfg = cfgs["t_tanh"]
    gen = synthetic.generator(cfg.seed, "teacher")
    w1, b1 = linear_init(3, 7, gen, torch.float32)
    w2, b2 = linear_init(7, 1, gen, torch.float32)
    x = make_dataset(cfg).x
    torch.testing.assert_close(teacher_targets(cfg, x), torch.tanh(x @ w1 + b1) @ w2 + b2)


def test_noise(cfgs) -> None:
    clean, noisy = make_dataset(cfgs["t_gelu"]), make_dataset(cfgs["t_noise"])
    assert torch.equal(clean.x, noisy.x) and torch.equal(clean.x_val, noisy.x_val)
    assert not torch.allclose(clean.y, noisy.y) and not torch.allclose(clean.y_val, noisy.y_val)
    assert _same(noisy, make_dataset(cfgs["t_noise"]))  # the noise is seeded too
    big = make_dataset(cfgs["t_noise_big"])
    residual = big.y - teacher_targets(cfgs["t_noise_big"], big.x)
    assert residual.std().item() == pytest.approx(0.1, rel=0.1)
    assert abs(residual.mean().item()) < 0.01


def test_n_val_gives_a_validation_set_of_that_size(cfgs) -> None:
    none, nine = make_dataset(cfgs["t_nval0"]), make_dataset(cfgs["t_nval9"])
    assert none.x_val.shape == (0, 3) and none.y_val.shape == (0, 1)
    assert nine.x_val.shape == (9, 3) and nine.y_val.shape == (9, 1)
    # the training set does not depend on the size of the validation set
    assert torch.equal(none.x, nine.x) and torch.equal(none.y, nine.y)
    random = make_dataset(cfgs["random_nval5"])
    assert random.x_val.shape == (5, 3) and random.y_val.shape == (5, 1)
    assert not torch.allclose(random.x_val, random.x[:5])


@pytest.mark.parametrize("key", ["f64", "f64_random", "f64_t_prelu", "f64_t_glu"])
def test_float64_dtype_yields_float64_tensors(cfgs, key: str) -> None:
    d = make_dataset(cfgs[key])
    for t in (d.x, d.y, d.x_val, d.y_val):
        assert t.dtype == torch.float64
        assert torch.isfinite(t).all()
    assert make_dataset(cfgs["t_gelu"]).x.dtype == torch.float32


def test_float64_sees_the_same_data_as_float32(cfgs) -> None:
    """Inputs and teacher weights are drawn in float32 and cast, so dtype=float64 changes the
    arithmetic, not the data set."""
    d32, d64 = make_dataset(cfgs["t_gelu"]), make_dataset(cfgs["f64"])
    assert torch.equal(d64.x.float(), d32.x) and torch.equal(d64.x_val.float(), d32.x_val)
    torch.testing.assert_close(d64.y.float(), d32.y, rtol=1e-5, atol=1e-6)


def test_stochastic_teacher_is_deterministic(cfgs) -> None:
    assert _same(make_dataset(cfgs["t_stoch"]), make_dataset(cfgs["t_stoch"]))


def test_gated_teacher_activation_gets_a_2h_wide_first_layer(cfgs) -> None:
    """glu teacher: Linear(3, 2 x 7) -> sigmoid(a) * b on the halves -> Linear(7, 1)."""
    from activation_bench.engine.models.base import linear_init

    cfg = cfgs["f64_t_glu"]
    gen = synthetic.generator(cfg.seed, "teacher")
    w1, b1 = (t.double() for t in linear_init(3, 14, gen, torch.float32))
    w2, b2 = (t.double() for t in linear_init(7, 1, gen, torch.float32))
    x = make_dataset(cfg).x
    a, b = (x @ w1 + b1).chunk(2, dim=-1)
    torch.testing.assert_close(teacher_targets(cfg, x), (torch.sigmoid(a) * b) @ w2 + b2)
    assert make_dataset(cfg).y.shape == (6, 1)


def test_normal_and_uniform_ranges(cfgs) -> None:
    normal = make_dataset(cfgs["normal_big"])
    for t in (normal.x, normal.y):
        assert t.mean().item() == pytest.approx(5.0, abs=0.01)
        assert t.std().item() == pytest.approx(0.1, rel=0.05)
    uniform = make_dataset(cfgs["uniform_big"])
    for t in (uniform.x, uniform.y):
        assert t.min().item() >= 2.0 and t.max().item() < 3.0
        assert t.mean().item() == pytest.approx(2.5, abs=0.02)
        assert t.std().item() == pytest.approx(1 / math.sqrt(12), rel=0.05)
    default = make_dataset(cfgs["uniform_default"])
    assert default.x.min().item() >= -1.0 and default.x.max().item() < 1.0
    seed_normal = make_dataset(cfgs["gelu"])
    assert seed_normal.x.shape == (6, 3)


def test_teacher_training_reports_val_loss(cfgs) -> None:
    from activation_bench.engine import train

    result = train.train([cfgs["t_gelu"]])[0]
    assert result.val_loss is not None and len(result.val_loss) == 3
    assert all(math.isfinite(v) for v in result.train_loss + result.val_loss)
    assert train.train([cfgs["gelu"]])[0].val_loss is None


def test_float64_training(cfgs) -> None:
    from activation_bench.engine import train

    result = train.train([cfgs["f64_t_prelu"]])[0]
    assert result.status == "complete" and len(result.train_loss) == 3


def _experiment(name: str) -> str:
    """`experiment=NAME` once config.yaml's defaults list has the experiment group, else `+experiment=NAME`."""
    import yaml

    defaults = yaml.safe_load((config_dir() / "config.yaml").read_text())["defaults"]
    in_defaults = any(isinstance(d, dict) and any("experiment" in k for k in d) for d in defaults)
    return f"experiment={name}" if in_defaults else f"+experiment={name}"


def test_experiment_presets() -> None:
    seed, seed_relu, study = compose_many([
        [_experiment("seed_notebook")],
        [_experiment("seed_notebook"), "activation=relu", "data=uniform", "epochs=3"],
        [_experiment("gelu_vs_relu"), "activation=relu", "data.target=teacher"],
    ])
    assert seed.activation == {"name": "gelu"}
    assert (seed.data.name, seed.data.mean, seed.data.std) == ("normal", 0.0, 1.0)
    assert (seed.data.n_samples, seed.data.input_dim, seed.model.hidden_dim) == (10, 64, 64)
    assert (seed.data.target, seed.data.n_val, seed.data.noise) == ("random", 0, 0.0)
    assert (seed.lr, seed.epochs, seed.batch_size, seed.optimizer) == (0.001, 1000, None, "adam")
    # command-line choices win over the preset's
    assert seed_relu.activation == {"name": "relu"} and seed_relu.data.name == "uniform"
    assert (seed_relu.data.low, seed_relu.data.high, seed_relu.epochs) == (-1.0, 1.0, 3)
    assert study.activation == {"name": "relu"} and study.data.target == "teacher"
    assert study.epochs == 1000 and study.data.n_val == 100
