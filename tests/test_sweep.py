"""`actbench sweep`: stacked members equal single runs, output layout, resume, chunking."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from activation_bench.cli.main import app
from activation_bench.config.compose import compose, compose_many
from activation_bench.engine import divergence, plan, train
from activation_bench.runs import orchestrate
from tests.conftest import TINY, files_under
from tests.engine_helpers import stacked_and_alone


def _sweep(runner, runs_dir: Path, *args: str):
    return runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", *args])


GRID = ["activation=gelu,relu,prelu,stochastic_gelu,swiglu", "data=normal,uniform", "seed=0,1",
        "lr=0.01,0.03", "epochs=25"]


def test_stacked_members_equal_single_runs_bitwise_at_default_sizes():
    """Each member of a mixed stack follows exactly the trajectory of the same run done alone:
    activations, data distributions, seeds, and learning rates (lr values form separate stacks).

    With the default sizes (64 inputs, 64 hidden, 10 samples) every member's block is a whole
    number of SIMD vectors, and on CPU the equality is bit-for-bit.
    """
    for labels, alone, stacked in stacked_and_alone(GRID):
        assert alone.train_loss == stacked.train_loss, labels


def test_stacked_members_equal_single_runs_within_rtol_at_odd_sizes():
    """With odd sizes, vectorised kernels take a scalar path for some elements (transcendentals
    like erf round differently there), so equality is to float rounding: rtol 1e-5."""
    for labels, alone, stacked in stacked_and_alone([*GRID, *TINY[1:]]):
        assert alone.train_loss == pytest.approx(stacked.train_loss, rel=1e-5), labels


def test_engine_matches_plain_torch_module_and_optimizer():
    """Reference: nn.Sequential + nn.MSELoss + torch.optim.Adam from the same initial weights.

    Different matmul kernels round differently, so this is a tolerance check (rtol 1e-5) over
    the early epochs, before rounding differences compound near the float floor.
    """
    from activation_bench.data.synthetic import generator
    from activation_bench.engine.models.base import linear_init
    from activation_bench.engine.teacher import make_dataset

    cfg = compose(["activation=gelu", "epochs=20", "lr=0.01"])
    ds = make_dataset(cfg)
    gen = generator(cfg.seed, "init")
    w1, b1 = linear_init(64, 64, gen, torch.float32)
    w2, b2 = linear_init(64, 1, gen, torch.float32)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    with torch.no_grad():
        net[0].weight.copy_(w1.T), net[0].bias.copy_(b1), net[2].weight.copy_(w2.T), net[2].bias.copy_(b2)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    ref = []
    for _ in range(cfg.epochs):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(ds.x), ds.y)
        loss.backward()
        opt.step()
        ref.append(loss.item())
    ours = train.train([cfg])[0].train_loss
    assert ours == pytest.approx(ref, rel=1e-5)


def test_sweep_writes_run_dirs_and_long_results(runner, runs_dir):
    result = _sweep(runner, runs_dir, "activation=gelu,relu", "data=normal,uniform", "seed=range(2)", *TINY)
    assert result.exit_code == 0, result.output
    (sweep_dir,) = list(runs_dir.iterdir())
    members = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert len(members) == 8
    for m in members:
        assert sorted(p.name for p in m.iterdir()) == ["config.yaml", "losses.csv", "summary.json"]
    doc = yaml.safe_load((sweep_dir / "sweep.yaml").read_text())
    assert doc["keys"] == ["activation", "data", "seed"] and len(doc["members"]) == 8
    with open(sweep_dir / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["activation", "data", "seed", "run", "n_params", "epoch", "train_loss"]
    assert {r["n_params"] for r in rows} == {str(3 * 5 + 5 + 5 + 1)}
    assert len(rows) == 8 * 4
    assert {(r["activation"], r["data"], r["seed"]) for r in rows} == {
        (a, d, s) for a in ("gelu", "relu") for d in ("normal", "uniform") for s in ("0", "1")
    }
    # every row equals the member's own losses.csv, and the single run of that config
    first = [r for r in rows if r["run"] == members[0].name]
    own = (members[0] / "losses.csv").read_text().splitlines()[1:]
    assert [f"{r['epoch']},{r['train_loss']}" for r in first] == own
    cfg = compose(doc["members"][0]["overrides"])
    assert [float(r["train_loss"]) for r in first] == train.train([cfg])[0].train_loss


def test_results_csv_aligns_members_with_and_without_val_loss(runner, runs_dir):
    """Members whose losses.csv lacks a column get an empty field there, never shifted values."""
    result = _sweep(runner, runs_dir, "data.n_val=0,3", "seed=0,1", *TINY)
    assert result.exit_code == 0, result.output
    (sweep_dir,) = list(runs_dir.iterdir())
    with open(sweep_dir / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["data.n_val", "seed", "run", "n_params", "epoch", "train_loss", "val_loss"]
    assert len(rows) == 4 * 4
    for r in rows:
        own = (sweep_dir / r["run"] / "losses.csv").read_text().splitlines()
        line = dict(zip(own[0].split(","), own[int(r["epoch"])].split(",")))
        assert r["train_loss"] == line["train_loss"]
        assert r["val_loss"] == line.get("val_loss", "")
        assert (r["val_loss"] == "") == (r["data.n_val"] == "0")


def test_dry_run_prints_grid_and_writes_nothing(runner, runs_dir):
    result = _sweep(runner, runs_dir, "--dry-run", "activation=gelu,relu", "seed=range(3)", *TINY)
    assert result.exit_code == 0
    assert "6 members" in result.output
    assert files_under(runs_dir) == []


def test_resume_skips_finished_and_reruns_incomplete(runner, runs_dir):
    args = ["activation=gelu,relu", "seed=range(3)", *TINY]
    assert _sweep(runner, runs_dir, *args).exit_code == 0
    (sweep_dir,) = list(runs_dir.iterdir())
    members = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    stamps = {m.name: (m / "summary.json").stat().st_mtime_ns for m in members}
    # make one member incomplete, as a killed run would leave it
    (members[2] / "summary.json").unlink()
    result = _sweep(runner, runs_dir, *args)
    assert result.exit_code == 0, result.output
    assert "5 finished members skipped, 1 to run" in result.stderr
    for m in members:
        same = (m / "summary.json").stat().st_mtime_ns == stamps[m.name]
        assert same == (m != members[2])
    with open(sweep_dir / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6 * 4  # rebuilt from run dirs: no duplicates
    assert len({(r["run"], r["epoch"]) for r in rows}) == len(rows)
    # --force re-runs everything
    result = _sweep(runner, runs_dir, "--force", *args)
    assert result.exit_code == 0
    assert all((m / "summary.json").stat().st_mtime_ns != stamps[m.name] for m in members)


def test_sweep_name_is_deterministic_and_given_name_used(runner, runs_dir):
    a = orchestrate.sweep_name(["activation=gelu,relu", "seed=range(3)"])
    assert a == orchestrate.sweep_name(["activation=gelu,relu", "seed=range(3)"])
    assert a != orchestrate.sweep_name(["activation=gelu,relu", "seed=range(4)"])
    assert _sweep(runner, runs_dir, "--name", "mine", "seed=0,1", *TINY).exit_code == 0
    assert (runs_dir / "mine" / "results.csv").is_file()
    # the same name with a different grid is refused rather than mixed
    result = _sweep(runner, runs_dir, "--name", "mine", "seed=5,6", *TINY)
    assert result.exit_code == 2 and "different sweep" in result.stderr


def test_memory_budget_chunks_stacks_without_changing_results():
    cfgs = compose_many([[f"seed={s}", *TINY] for s in range(5)])
    assert [len(s) for s in plan.plan_stacks(cfgs, memory_mb=1e9)] == [5]
    per = plan.member_bytes(cfgs[0])
    small = plan.plan_stacks(cfgs, memory_mb=2.5 * per / 2**20)
    assert [len(s) for s in small] == [2, 2, 1]
    assert [len(s) for s in plan.plan_stacks(cfgs, max_members=4)] == [3, 2]  # even chunks
    whole = train.train(cfgs)
    chunked = [r for s in small for r in train.train([cfgs[i] for i in s])]
    assert [r.train_loss for r in whole] == [r.train_loss for r in chunked]


def test_divergence_is_recorded_and_isolated(runner, runs_dir):
    """lr=1e6 diverges; its stack-mate (same lr) is unaffected; the sweep goes on."""
    cfgs = compose_many([["lr=1e6", "epochs=50", "seed=0"], ["lr=1e6", "epochs=50", "seed=0",
                                                                    "activation=tanh"]])
    stacked = train.train(cfgs)
    bad = [r for r in stacked if r.status == "diverged"]
    assert bad, "expected lr=1e6 to diverge"
    for cfg, res in zip(cfgs, stacked):
        alone = train.train([cfg])[0]
        assert alone.status == res.status and alone.diverged_epoch == res.diverged_epoch
        assert alone.train_loss[:-1] == res.train_loss[:-1]
    r = bad[0]
    assert len(r.train_loss) == r.diverged_epoch
    last = r.train_loss[-1]
    assert not math.isfinite(last) or last > divergence.DIVERGENCE_FACTOR * r.train_loss[0]
    result = _sweep(runner, runs_dir, "--name", "div", "lr=1e6,0.001", "epochs=50")
    assert result.exit_code == 0, result.output
    statuses = {json.loads(p.read_text())["status"] for p in (runs_dir / "div").glob("*/summary.json")}
    assert "diverged" in statuses and "complete" in statuses
    assert "diverged:" in result.stderr


def test_shuffled_batches_take_each_members_own_rows():
    import torch

    from activation_bench.data.feed import _take_rows

    x, y = torch.randn(3, 7, 2, 4), torch.randint(0, 5, (3, 7))
    idx = torch.stack([torch.randperm(7) for _ in range(3)])
    assert torch.equal(_take_rows(x, idx), torch.stack([x[m, idx[m]] for m in range(3)]))
    assert torch.equal(_take_rows(y, idx), y.gather(1, idx))
