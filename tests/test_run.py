"""`actbench run`: files written, reproducibility, the shape guard, startup cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from activation_bench.cli.main import app
from activation_bench.config.compose import compose, compose_many
from activation_bench.config.files import group_options
from activation_bench.config.schema import NOT_GLOBBED
from activation_bench.engine import train
from activation_bench.engine.models.losses import member_mse
from tests.conftest import TINY


def _run(runner, runs_dir: Path, *args: str):
    return runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", *args])


def test_run_writes_config_losses_and_summary(runner, runs_dir):
    result = _run(runner, runs_dir, "activation=relu", "data=uniform", "seed=3", "lr=0.01", *TINY)
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in runs_dir.iterdir()]
    assert run_dir.name.endswith("_relu_uniform_s3")
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "losses.csv", "summary.json"]
    lines = (run_dir / "losses.csv").read_text().splitlines()
    assert lines[0] == "epoch,train_loss"
    assert [int(row.split(",")[0]) for row in lines[1:]] == [1, 2, 3, 4]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert summary["epochs"] == summary["epochs_run"] == 4
    assert summary["seed"] == 3
    assert summary["final_loss"] == float(lines[-1].split(",")[1])
    assert summary["best_loss"] == min(float(r.split(",")[1]) for r in lines[1:])
    assert set(summary["versions"]) == {"python", "torch", "activation_bench"}
    assert summary["n_params"] == 3 * 5 + 5 + 5 + 1
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["activation"]["name"] == "relu" and saved["data"]["name"] == "uniform"
    assert saved["lr"] == 0.01 and saved["epochs"] == 4 and saved["seed"] == 3
    assert str(run_dir) in result.output


def test_losses_are_full_precision_and_reproducible_from_saved_config(runner, runs_dir):
    assert _run(runner, runs_dir, "--name", "a", "seed=7", *TINY).exit_code == 0
    run_dir = runs_dir / "a"
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    # rebuild the config from the saved file alone and train again: bit-identical losses
    overrides = [f"{k}={v}" for k, v in _flatten(saved).items() if v is not None]
    again = train.train([compose(overrides)])[0].train_loss
    written = [float(r.split(",")[1]) for r in (run_dir / "losses.csv").read_text().splitlines()[1:]]
    assert written == again


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_same_config_and_seed_is_bit_identical():
    cfg = compose(["seed=5", *TINY, "epochs=30"])
    a = train.train([cfg])[0].train_loss
    b = train.train([cfg])[0].train_loss
    assert a == b
    other = train.train([compose(["seed=6", *TINY, "epochs=30"])])[0].train_loss
    assert a != other


def test_activations_share_data_and_initial_weights():
    """Paired comparisons: at the same seed, gelu and relu start from the same data and weights."""
    from activation_bench.data.synthetic import generator
    from activation_bench.engine.models.base import linear_init
    from activation_bench.engine.teacher import make_dataset

    gelu, relu = compose_many([["activation=gelu", *TINY], ["activation=relu", *TINY]])
    assert torch.equal(make_dataset(gelu).x, make_dataset(relu).x)
    assert torch.equal(make_dataset(gelu).y, make_dataset(relu).y)
    w_a, _ = linear_init(3, 5, generator(gelu.seed, "init"), torch.float32)
    w_b, _ = linear_init(3, 5, generator(relu.seed, "init"), torch.float32)
    assert torch.equal(w_a, w_b)


def test_default_setup_matches_the_seed_notebook():
    cfg = compose([])
    assert (cfg.data.n_samples, cfg.data.input_dim, cfg.model.hidden_dim) == (10, 64, 64)
    assert (cfg.epochs, cfg.lr, cfg.optimizer, cfg.batch_size) == (1000, 0.001, "adam", None)
    assert (cfg.data.name, cfg.data.mean, cfg.data.std) == ("normal", 0.0, 1.0)
    uni = compose(["data=uniform"])
    assert (uni.data.low, uni.data.high) == (-1.0, 1.0)


def test_shape_guard_refuses_broadcasting():
    """The seed's bug: 64 outputs against a 1-column target, silently broadcast by MSELoss."""
    pred = torch.zeros(2, 10, 64)
    target = torch.zeros(2, 10, 1)
    with pytest.raises(ValueError, match="refusing to broadcast"):
        member_mse(pred, target)
    assert member_mse(torch.ones(2, 10, 1), target).tolist() == [1.0, 1.0]


def test_model_output_has_one_column():
    from activation_bench.data.synthetic import generator
    from activation_bench.engine.models.base import Slice, linear_init
    from activation_bench.engine.models.stacked_mlp import StackedMLP
    from activation_bench.engine.teacher import make_dataset

    cfg = compose(TINY)
    ds = make_dataset(cfg)
    gen = generator(cfg.seed, "init")
    w1, b1 = linear_init(3, 5, gen, torch.float32)
    w2, b2 = linear_init(5, 1, gen, torch.float32)
    model = StackedMLP(w1[None], b1[None, None], w2.T[None], b2[None, None], [Slice(0, 1, torch.nn.GELU())])
    out = model(ds.x[None])
    assert out.shape == (1, 6, 1) == ds.y[None].shape  # one output per sample, like the target
    res = train.train([cfg])[0]
    assert len(res.train_loss) == 4 and all(v == v for v in res.train_loss)


def test_minibatches_train_and_match_stacked():
    cfgs = compose_many([["batch_size=4", *TINY], ["batch_size=4", "seed=1", *TINY]])
    stacked = train.train(cfgs)
    for cfg, res in zip(cfgs, stacked):
        assert train.train([cfg])[0].train_loss == res.train_loss


def test_shuffled_minibatches_are_seeded_and_match_stacked():
    base = ["batch_size=2", "shuffle=true", *TINY, "epochs=6"]
    cfgs = compose_many([[*base, "seed=0"], [*base, "seed=1"], [*base, "seed=0", "activation=relu"]])
    stacked = train.train(cfgs)
    for cfg, res in zip(cfgs, stacked):
        assert train.train([cfg])[0].train_loss == pytest.approx(res.train_loss, rel=1e-5)
    ordered = train.train([compose(["batch_size=2", *TINY, "epochs=6", "seed=0"])])[0].train_loss
    assert stacked[0].train_loss != ordered  # the order matters, and shuffle changes it
    assert train.train([cfgs[0]])[0].train_loss == train.train([cfgs[0]])[0].train_loss  # seeded


def test_cli_import_does_not_import_torch():
    code = (
        "import sys, activation_bench.cli.main, activation_bench.errors;"
        "bad = [m for m in ('torch', 'pandas', 'hydra', 'matplotlib') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_script_exit_flushes_output_and_keeps_exit_codes(tmp_path):
    """The entry point skips torch's teardown (os._exit): piped output, files and codes survive."""
    cmd = [sys.executable, "-m", "activation_bench.cli", "run", "--runs-dir", str(tmp_path), "-q"]
    done = subprocess.run([*cmd, *TINY], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run_dir = Path(done.stdout.strip().splitlines()[-1])  # printed last, through a pipe
    assert run_dir.parent == tmp_path
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "complete"
    assert len((run_dir / "losses.csv").read_text().splitlines()) == 1 + 4
    # an error after torch is loaded still exits 2 with its one line. The process loads torch as main()
    # does for the commands that train, with the collector paused then frozen, and prints what that
    # left (test_training_commands_import_torch_with_the_collector_paused_then_frozen's check: one
    # process that imports torch for both)
    code = ("import gc, sys; from activation_bench.cli import main as m; m._import_torch_frozen(); "
            "print('torch' in sys.modules, gc.isenabled(), gc.get_freeze_count() > 50_000, flush=True); "
            f"sys.argv = ['actbench', 'run', '--runs-dir', {str(tmp_path)!r}, 'activation=nosuch']; "
            "m.main()")
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: ") and "gelu" in bad.stderr and len(bad.stderr.splitlines()) == 1
    assert bad.stdout.split() == ["True", "True", "True"]  # torch loaded, the collector on, its objects frozen


def test_training_commands_import_torch_with_the_collector_paused_then_frozen():
    """main() imports torch for the commands that train, then freezes it out of later collections
    (checked in a fresh process by test_script_exit_flushes_output_and_keeps_exit_codes, whose error
    process loads torch so); --help, compare and `study tables` stay torch-free."""
    from activation_bench.cli.main import _trains

    for args in (["run", "activation=gelu"], ["sweep", "seed=range(2)"], ["search"], ["study", "run", "s.yaml"]):
        assert _trains(args), args
    for args in (["--help"], ["run", "--help"], ["compare", "runs/x"], ["study", "tables", "s.yaml"], []):
        assert not _trains(args), args


def test_help_lists_commands_and_examples(runner):
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for word in ("run", "sweep", "actbench run activation=gelu data=normal"):
        assert word in result.output
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    for word in ("epochs", "lr", "seed", "batch_size", "model.hidden_dim", "data.n_samples", "gelu", "uniform"):
        assert word in result.output


def test_configs_found_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert compose(["activation=relu"]).activation.name == "relu"


@pytest.mark.parametrize("group", ["activation", "data"])
def test_every_config_in_every_group_composes(group):
    options = [o for o in group_options(group) if o not in NOT_GLOBBED]
    assert options
    cfgs = compose_many([[f"{group}={o}"] for o in options])
    assert [cfg[group]["name"] for cfg in cfgs] == options  # each option composes to itself
