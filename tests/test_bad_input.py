"""Bad input: one clear line on stderr, exit code 2, no traceback, nothing written."""

from __future__ import annotations

import pytest
import torch

from activation_bench.cli.main import app
from tests.conftest import TINY, files_under

RUN_CASES = [
    (["activation=nosuch"], "unknown activation 'nosuch'; valid: "),
    (["data=nosuch"], "unknown data 'nosuch'; valid: breast_cancer, cifar10, csv, diabetes, digits, fashion_mnist, "
                      "function, iris, mnist, mnist1d, normal, python_docs, randhie, shakespeare, star98, text, "
                      "uniform, wine"),
    (["nosuch=1"], "unknown config key"),
    (["epochs=abc"], "epochs"),
    (["epochs=0"], "epochs must be a positive integer"),
    (["epochs=-3"], "epochs must be a positive integer"),
    (["lr=-1"], "lr must be a positive number"),
    (["lr=abc"], "lr"),
    (["lr=nan"], "lr must be a positive number"),
    (["batch_size=11"], "batch_size must be between 1 and data.n_samples=10"),
    (["seed=-1"], "seed must be >= 0"),
    (["seed=99999999999999999999"], "seed must be at most 2**63-1 = 9223372036854775807"),
    (["seed=9223372036854775808"], "got 9223372036854775808"),
    (["optimizer=lbfgs"], "unknown optimizer"),
    (["data.std=0"], "data.std must be > 0"),
    (["data=uniform", "data.low=2", "data.high=1"], "data.low must be < data.high"),
    (["activation.nosuch=1"], "nosuch"),
    (["activation=leaky_relu", "activation.negative_slope=abc"], "negative_slope"),
    (["epochs"], "malformed override"),
    (["seed=range(3)"], "use `actbench sweep`"),
    (["activation=custom"], "_target_"),
    (["activation=custom", "activation._target_=os.path.join"], "not a torch.nn.Module"),
    (["activation=custom", "activation._target_=nosuch_module_xyz.Act"], "does not import"),
]
if not torch.cuda.is_available():
    RUN_CASES.append((["device=cuda"], "torch sees no GPU"))


@pytest.mark.parametrize(("overrides", "message"), RUN_CASES)
def test_run_bad_overrides(runner, runs_dir, overrides, message):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", *overrides])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert message in err
    assert "Traceback" not in result.output
    assert files_under(runs_dir) == []


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ".hidden", "/abs"])
def test_run_name_outside_runs_dir_refused(runner, runs_dir, tmp_path, name):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "--name", name, *TINY])
    assert result.exit_code == 2
    assert "invalid name" in result.stderr
    assert files_under(tmp_path) == []


def test_existing_run_name_refused(runner, runs_dir):
    assert runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "--name", "x", *TINY]).exit_code == 0
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "--name", "x", *TINY])
    assert result.exit_code == 2 and "already exists" in result.stderr


SWEEP_CASES = [
    (["epochs=10,abc"], "epochs=abc"),
    (["activation=glob(nosuch*)"], "has no members"),
    (["seed=range(0)"], "has no members"),
    (["nosuch=1,2"], "unknown config key"),
    (["activation=gelu,nosuch"], "unknown activation 'nosuch'"),
    (["lr=interval(0,1)"], "interval() is continuous"),
    (["seed=range(3"], "cannot parse override"),
    (["lr=0.1,-1"], "lr=-1"),
    (["seed=0,99999999999999999999"], "seed must be at most 2**63-1"),
]


@pytest.mark.parametrize(("overrides", "message"), SWEEP_CASES)
def test_sweep_bad_values(runner, runs_dir, overrides, message):
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", *overrides, *TINY])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert message in err
    assert files_under(runs_dir) == []


def test_sweep_unknown_launcher(runner, runs_dir):
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "--launcher", "ray", "seed=0,1", *TINY])
    assert result.exit_code == 2 and "unknown launcher" in result.stderr


HUGE = ["model.hidden_dim=100000000"]  # about 145 GB a member: more than any budget or machine


@pytest.mark.parametrize("command", [["run"], ["sweep", "seed=0,1"], ["sweep", "--memory-mb", "1e9", "seed=0,1"]])
def test_member_that_cannot_fit_is_refused_before_anything_is_allocated(runner, runs_dir, command):
    result = runner.invoke(app, [*command, "--runs-dir", str(runs_dir), "-q", *HUGE])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: a member needs about ") and "\n" not in err, err
    assert "model.hidden_dim=100000000" in err and "available on this machine" in err
    assert ("--memory-mb 1024" in err) == (command == ["sweep", "seed=0,1"])
    assert "Traceback" not in result.output
    assert not runs_dir.exists()


def test_member_larger_than_memory_mb_is_refused_with_the_estimate(runner, runs_dir):
    from activation_bench.config.compose import compose
    from activation_bench.engine import plan

    small = ["epochs=4"]  # default sizes: about 0.1 MB a member (TINY's is under --memory-mb's minimum)
    per_mb = plan.member_bytes(compose(small)) / 2**20
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", "--memory-mb", str(per_mb / 2),
                                 "seed=0,1", *small])
    assert result.exit_code == 2, result.output
    assert f"--memory-mb {per_mb / 2:g}" in result.stderr
    assert files_under(runs_dir) == []
    # a budget that holds one member but not the stack chunks it instead
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", "--memory-mb", str(per_mb * 1.5),
                                 "seed=0,1", *small])
    assert result.exit_code == 0, result.output


def test_memory_check_without_a_known_budget_refuses_nothing(monkeypatch):
    from activation_bench.config.compose import compose
    from activation_bench.runs import memory

    monkeypatch.setattr(memory, "available_mb", lambda device="cpu": None)
    memory.check_memory([compose(HUGE)], None)  # nothing to compare with: no refusal
    with pytest.raises(memory.UsageError, match="--memory-mb 10"):
        memory.check_memory([compose(HUGE)], 10)
    assert memory.stack_budget_mb(10) == 10 and memory.stack_budget_mb(None) == 1024.0
