"""model=cnn: stacked == alone bit for bit, agreement with plain PyTorch (nn.Conv1d / nn.Conv2d),
every activation, hashes, re-runs and bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from activation_bench.cli.main import app
from activation_bench.config.compose import compose, compose_many
from activation_bench.config.hashing import config_hash
from activation_bench.data import splits
from activation_bench.data.synthetic import generator
from activation_bench.engine import plan, train
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.models.conv_shapes import blocks
from activation_bench.engine.models.stacked_cnn import conv_init, head_init
from tests.conftest import assert_refused_by_run_and_sweep, files_under
from tests.engine_helpers import stacked_and_alone

# a small 2-D net on digits' 8x8 images and a small 1-D net on MNIST-1D's 40 steps
# (a subsample of the training rows keeps the suite fast)
DIGITS = ["model=cnn", "data=digits", "model.channels=[16,32]", "model.kernel=[3,3]", "model.stride=[1,1]",
          "model.padding=[1,0]", "epochs=2", "lr=0.01", "data.n_train=300"]
SEQ = ["model=cnn", "data=mnist1d", "model.channels=[16,16]", "model.kernel=[5,3]", "model.stride=[2,2]",
       "model.padding=[1,1]", "epochs=2", "lr=0.01", "data.n_train=400"]


def _same(alone: train.RunResult, stacked: train.RunResult, labels: dict) -> None:
    for field in ("train_loss", "val_loss", "test_loss", "val_acc", "test_acc", "dead_units", "saturated_units",
                  "preact", "grads", "n_params", "learned"):
        assert repr(getattr(alone, field)) == repr(getattr(stacked, field)), (field, labels)  # NaN == NaN


# --------------------------------------------------------------------------------------------
# stacked == alone


def test_2d_members_equal_single_runs_bitwise_with_batch_norm_max_pool_and_shuffled_minibatches():
    # 150 training rows in batches of 64: two whole batches and a partial one, reshuffled each epoch
    grid = ["activation=relu,gelu,prelu,glu", "seed=1", "model.norm=batch", "model.pool=max",
            "shuffle=true", "log.preact_stats=2", "log.grad_norms=true", "log.every=2", *DIGITS,
            "data.n_train=150", "batch_size=64"]
    results = stacked_and_alone(grid)
    assert len(results) == 4
    for labels, alone, stacked in results:
        _same(alone, stacked, labels)
        assert alone.stack_size == 1 and stacked.stack_size == (1 if labels["activation"] == "glu" else 3)
        assert all(math.isfinite(v) for v in alone.train_loss)


def test_1d_members_equal_single_runs_bitwise_with_expressions_dropout_avg_and_global_pool():
    grid = ["activation=expr", "activation.fn=\"x*sigmoid(beta*x)\",\"max(x, beta*x)\"", "+activation.beta=0.5",
            "activation.learnable=true",
            "seed=2", "model.pool=avg", "model.global_pool=true", "model.dropout=0.2", "batch_size=150",
            "shuffle=true", *SEQ]
    for labels, alone, stacked in stacked_and_alone(grid):
        _same(alone, stacked, labels)


def test_members_with_odd_channel_counts_equal_single_runs_to_float_rounding():
    """25 channels (MNIST-1D's ConvBase): rows of 25 values are not whole SIMD vectors, so some
    elementwise ops take a scalar path in one stack and a vector path in another (as the MLP's odd
    widths); equality holds to rounding (docs/reproducibility.md)."""
    grid = ["model=cnn", "data=mnist1d", "activation=relu,gelu", "seed=1", "model.norm=batch", "epochs=4",
            "lr=0.01", "batch_size=150", "shuffle=true", "data.n_train=400"]
    for labels, alone, stacked in stacked_and_alone(grid):
        # one-ulp differences, then the growth any perturbation of training has (dead ReLUs flip)
        assert stacked.train_loss[0] == pytest.approx(alone.train_loss[0], rel=1e-6), labels
        assert stacked.train_loss == pytest.approx(alone.train_loss, rel=2e-3), labels
        assert stacked.val_loss == pytest.approx(alone.val_loss, rel=2e-3), labels
        assert stacked.test_acc == pytest.approx(alone.test_acc, abs=5e-3), labels


# --------------------------------------------------------------------------------------------
# plain PyTorch


def _reference(cfg, ds, dims: int) -> tuple[list[float], list[float]]:
    """The same run as a user would write it: nn.Conv1d/2d (bias=False before nn.BatchNorm), the
    activation, nn.MaxPool, flatten, nn.Linear, torch.optim.Adam, fixed-order minibatches; the
    validation loss after each epoch in eval mode. Weights are the engine's draws."""
    shape = (1, 40) if dims == 1 else (1, 8, 8)
    model = cfg.model
    geometry = blocks(shape, model)
    gen = generator(cfg.seed, "init")
    conv = nn.Conv1d if dims == 1 else nn.Conv2d
    layers: list[nn.Module] = []
    for b in geometry:
        w, bias = conv_init(cfg.model.init_resolved, b, b.c_out, gen)
        c = conv(b.c_in, b.c_out, b.kernel, b.stride, b.padding, bias=model.norm != "batch")
        with torch.no_grad():
            c.weight.copy_(w.T.reshape(c.weight.shape))
            if c.bias is not None:
                c.bias.copy_(bias)
        layers.append(c)
        if model.norm == "batch":
            layers.append(nn.BatchNorm1d(b.c_out) if dims == 1 else nn.BatchNorm2d(b.c_out))
        layers.append(activations.create_from_config(dict(cfg.activation)))
        if model.pool == "max":
            layers.append((nn.MaxPool1d if dims == 1 else nn.MaxPool2d)(model.pool_size))
    last = geometry[-1]
    w, bias = head_init(cfg.model.init_resolved, last.c_out, last.positions_out, 10, gen)
    head = nn.Linear(w.shape[0], 10)
    with torch.no_grad():  # the engine's head is channels-last: back to torch's channels-first flatten
        head.weight.copy_(w.T.reshape(10, *last.positions_out, last.c_out).movedim(-1, 1).reshape(10, -1))
        head.bias.copy_(bias)
    net = nn.Sequential(*layers, nn.Flatten(), head)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    x, y = ds.x.reshape(-1, *shape), ds.y
    xv = ds.x_val.reshape(-1, *shape)
    bs = cfg.batch_size or len(x)
    train_losses, val_losses = [], []
    for _ in range(cfg.epochs):
        net.train()
        total = 0.0
        for i in range(0, len(x), bs):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x[i : i + bs]), y[i : i + bs])
            loss.backward()
            opt.step()
            total += loss.item()
        train_losses.append(total / -(-len(x) // bs))
        net.eval()
        with torch.no_grad():
            val_losses.append(nn.functional.cross_entropy(net(xv), ds.y_val).item())
    return train_losses, val_losses


@pytest.mark.parametrize(("base", "dims", "extra"), [
    (["model=cnn", "data=mnist1d", "epochs=3", "lr=0.01", "batch_size=100", "data.n_train=500"], 1, []),  # ConvBase
    (DIGITS, 2, ["model.norm=batch", "model.pool=max", "batch_size=300", "activation=silu", "epochs=4"]),
    (DIGITS, 2, ["activation=tanh", "model.init=he", "model.padding=[0,1]"]),
])
def test_engine_matches_plain_torch_convolutions(base, dims, extra):
    cfg = compose([*base, "activation=relu", *extra] if "activation" not in " ".join(extra) else [*base, *extra])
    ds = splits.make_dataset(cfg)
    ref_train, ref_val = _reference(cfg, ds, dims)
    res = train.train([cfg])[0]
    assert res.train_loss == pytest.approx(ref_train, rel=1e-4)
    assert res.val_loss == pytest.approx(ref_val, rel=1e-4)


def test_the_default_cnn_is_mnist1ds_convbase():
    cfg = compose(["model=cnn", "data=mnist1d", "epochs=1"])
    res = train.train([cfg])[0]
    assert res.n_params == 5210  # the published ConvBase's count
    geometry = blocks((1, 40), cfg.model)
    assert [b.positions_out for b in geometry] == [(19,), (10,), (5,)]


# --------------------------------------------------------------------------------------------
# every activation, gated units


def test_every_registered_activation_trains_in_a_cnn():
    names = [n for n in activations.names() if n not in ("custom", "expr")]
    cfgs = compose_many([[*SEQ, f"activation={n}", "epochs=1", "batch_size=400", "model.channels=[2,2]"]
                         for n in names])
    for stack in plan.plan_stacks(cfgs):
        for i, res in zip(stack, train.train([cfgs[i] for i in stack])):
            assert math.isfinite(res.train_loss[0]) and math.isfinite(res.test_loss[0]), names[i]


def test_gated_units_double_the_convolutions_channels():
    glu, relu = compose_many([[*SEQ, "activation=glu", "epochs=1"], [*SEQ, "activation=relu", "epochs=1"]])
    r_glu, r_relu = train.train([glu])[0], train.train([relu])[0]
    # the convolutions give 2 x channels to the gate; the head reads the gate's channels
    extra = (1 * 5 * 16 + 16) + (16 * 3 * 16 + 16)
    assert r_glu.n_params == r_relu.n_params + extra


# --------------------------------------------------------------------------------------------
# configs: hashes, re-runs, the report's architecture


def test_mlp_hashes_are_unchanged_and_model_mlp_is_the_default():
    default, explicit = compose([]), compose(["model=mlp"])
    assert config_hash(default) == config_hash(explicit)
    assert "name" in default.model and default.model.name == "mlp"
    doc = default.plain()
    doc["model"].pop("name")
    assert config_hash(default) == config_hash(type(default).wrap(doc))
    assert config_hash(compose(["model=cnn", "data=digits"])) != config_hash(compose(["data=digits"]))


def test_a_cnn_run_reruns_bit_for_bit_from_its_config(runner, runs_dir):
    args = [*DIGITS, "model.pool=avg", "activation=gelu", "batch_size=100"]
    first = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", *args])
    assert first.exit_code == 0, first.output
    run_dir = next(p for p in runs_dir.iterdir() if p.is_dir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["model"].startswith("CNN 16-32 k3-3 s1-1 p1-0, avg pool 2") and summary["depth"] == 2
    again = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "--config", str(run_dir / "config.yaml")])
    assert again.exit_code == 0, again.output
    second = next(p for p in runs_dir.iterdir() if p.is_dir() and p != run_dir)
    assert (run_dir / "losses.csv").read_text() == (second / "losses.csv").read_text()
    assert json.loads((second / "summary.json").read_text())["config_hash"] == summary["config_hash"]


# --------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(("args", "message"), [
    (["model=cnn", "data=diabetes"], "model=cnn needs sequence or image data"),
    (["model=cnn", "data=normal"], "model=cnn needs sequence or image data"),
    (["model=cnn", "data=digits", "model.kernel=[11,3,3]"], "block 1's kernel 11 is larger than its input"),
    (["model=cnn", "data=mnist1d", "model.stride=[0,2,2]"], "model.stride must be integers >= 1"),
    (["model=cnn", "data=mnist1d", "model.channels=[25,0,25]"], "model.channels must be integers >= 1"),
    (["model=cnn", "data=mnist1d", "model.kernel=[5,3]"], "need one value per block"),
    (["model=cnn", "data=mnist1d", "model.pool=max", "model.pool_size=4"], "leaves no positions"),
    (["model=cnn", "data=mnist1d", "model.pool=mean"], "unknown model.pool 'mean'"),
    (["model=cnn", "data=mnist1d", "model.norm=layer"], "unknown model.norm 'layer' for model=cnn"),
    (["model=cnn", "data=mnist1d", "model.depth=2"], "Key 'depth' not in 'CNNConfig'"),
    (["data=mnist1d", "model.channels=[4]"], "Key 'channels' not in 'MLPConfig'"),
    (["model=resnet"], "unknown model 'resnet'; valid: cnn, mlp"),
])
def test_bad_cnn_input_is_refused_in_one_line(runner, runs_dir, args, message):
    assert_refused_by_run_and_sweep(runner, runs_dir, [*args, "epochs=1"], message)
    assert files_under(runs_dir) == []


# --------------------------------------------------------------------------------------------
# every command on convnet runs


@pytest.fixture(scope="module")
def cnn_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from typer.testing import CliRunner

    root = tmp_path_factory.mktemp("cnn") / "runs"
    args = ["sweep", "--runs-dir", str(root), "--name", "cnn", "-q", "activation=relu,gelu", "lr=0.003,0.03",
            "seed=range(4)", "model=cnn", "data=digits", "model.channels=[16]", "model.kernel=[3]", "model.stride=[1]",
            "model.padding=[1]", "model.pool=max,avg", "epochs=1", "batch_size=200", "data.n_train=200"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    again = CliRunner().invoke(app, args)  # resumes: nothing left to train
    assert again.exit_code == 0 and "32 finished members skipped, 0 to run" in again.output, again.output
    return root / "cnn"


def test_compare_rank_report_and_export_read_convnet_runs(runner, cnn_sweep, tmp_path, monkeypatch):
    from activation_bench.export.mlflow import collect
    from tests.test_report import leave_figures_undrawn

    leave_figures_undrawn(monkeypatch)  # the page's text is read, not its figures' drawing (test_report.py draws)

    tuned = ["--metric", "early_stop", "--loss", "test_acc", "--tune", "lr", "--tune-seeds", "2",
             "--tune-on", "val_acc"]
    out = runner.invoke(app, ["compare", str(cnn_sweep), *tuned, "--format", "json"])
    assert out.exit_code == 0, out.output
    groups = {row["activation"] for row in json.loads(out.stdout)["rows"]}
    assert groups == {"relu", "gelu"}
    ranked = runner.invoke(app, ["rank", str(cnn_sweep), *tuned, "--task", "model.pool"])
    assert ranked.exit_code == 0, ranked.output
    page = tmp_path / "report.html"
    report = runner.invoke(app, ["report", str(cnn_sweep), *tuned[:-2], "--tune-on", "val_acc", "-o", str(page)])
    assert report.exit_code == 0, report.output
    text = page.read_text()
    assert "CNN 16 k3 s1 p1, max pool 2, flatten head" in text and "CNN 16 k3 s1 p1, avg pool 2" in text
    plan = collect([cnn_sweep])
    assert len(plan.members) == 32
    params = plan.members[0].params
    assert params["model"] == "cnn" and params["model.channels"] == "16"  # a group's name, as data=digits; lists joined


def test_search_composes_and_probes_candidates_inside_a_cnn(runner, runs_dir):
    out = runner.invoke(app, ["search", "--runs-dir", str(runs_dir), "--dry-run", "--candidates", "20",
                              "model=cnn", "data=digits", "model.channels=[16]", "model.kernel=[3]",
                              "model.stride=[1]", "model.padding=[1]", "epochs=2", "batch_size=256",
                              "--select-on", "val_acc"])
    assert out.exit_code == 0, out.output
    assert files_under(runs_dir) == []


def test_evaluation_in_chunks_of_rows_changes_nothing_but_rounding(monkeypatch):
    cfg = compose([*SEQ, "activation=gelu", "model.norm=batch", "batch_size=200", "epochs=2"])
    whole = train.train([cfg])[0]
    from activation_bench.engine.models import registry

    # the validation (800) and test (1,000) splits in chunks
    monkeypatch.setattr(registry.family("cnn"), "eval_rows", 150)
    chunked = train.train([cfg])[0]
    assert chunked.train_loss == whole.train_loss
    assert chunked.val_loss == pytest.approx(whole.val_loss, rel=1e-6)
    assert chunked.test_acc == whole.test_acc
    assert chunked.dead_units == whole.dead_units and chunked.saturated_units == whole.saturated_units


def test_unit_shares_in_chunks_of_rows_are_the_same_shares(monkeypatch):
    from activation_bench.engine import diagnostics

    # a large step size kills some ReLU units, so there are shares to get right
    cfg = compose([*SEQ, "activation=relu", "lr=0.5", "batch_size=200", "epochs=2"])
    monkeypatch.setattr(diagnostics, "SHARE_BYTES", 1 << 40)  # the whole training split at once
    whole = train.train([cfg])[0]
    assert max(whole.dead_units) > 0 and max(whole.saturated_units) > 0
    stack = train._build([cfg])
    monkeypatch.setattr(diagnostics, "SHARE_BYTES", 1)  # one row a chunk
    assert diagnostics.share_rows(stack.model, stack.x) == 1
    chunked = train.train([cfg])[0]
    assert chunked.dead_units == whole.dead_units and chunked.saturated_units == whole.saturated_units
    assert chunked.train_loss == whole.train_loss and chunked.val_loss == whole.val_loss


def test_unit_share_chunks_stay_within_their_budget():
    from activation_bench.engine import diagnostics

    stack = train._build([compose(["model=cnn", "data=mnist1d", "activation=gelu", f"seed={s}"]) for s in range(8)])
    rows = diagnostics.share_rows(stack.model, stack.x)
    largest = max(math.prod(b.conv_positions) * max(b.fan_in, b.c_out) for b in stack.model.geometry)
    assert 1 <= rows < stack.x.shape[1]
    assert rows * 8 * largest * 4 <= diagnostics.SHARE_BYTES < (rows + 1) * 8 * largest * 4


def test_a_convnets_memory_estimate_counts_the_training_batch_not_every_row():
    small, whole = (plan.member_bytes(compose(["model=cnn", "data=mnist1d", f"batch_size={b}"])) for b in (100, 3200))
    assert small < whole / 4
    assert small < 20 * 2**20  # MNIST-1D's CNN: parameters, data, one batch's and one evaluation chunk's values
