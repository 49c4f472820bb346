"""model=module's activation sites (module_sites.py): dead and saturated unit shares and
log.preact_stats per site, members one after another and model.vmap=true."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from activation_bench.cli.main import app
from activation_bench.config.compose import compose
from activation_bench.engine import train
from activation_bench.engine.models.module_sites import as_units
from tests.conftest import assert_refused_by_run_and_sweep

M = "tests.module_models"
ACT = ["model=module", f"model.target={M}:ActNet", "model.act_arg=act_layer", "data=digits", "data.n_train=150",
       "epochs=2", "batch_size=64", "lr=0.01"]
KNOWN = ["model=module", f"model.target={M}:Known", "model.act_arg=act_layer", "data=iris", "epochs=2",
         "batch_size=32", "lr=0.01"]


def _train(args: list[str], seeds: tuple[int, ...] = (0,)) -> list[train.RunResult]:
    return train.train([compose([*args, f"seed={s}"]) for s in seeds])


def test_shares_on_digits_are_numbers_one_per_site_written_to_summary(runner, tmp_path):
    runs = tmp_path / "runs"
    result = runner.invoke(app, ["run", "--runs-dir", str(runs), "--name", "r", *ACT, "activation=relu"])
    assert result.exit_code == 0, result.output
    summary = json.loads((runs / "r" / "summary.json").read_text())
    assert summary["depth"] == 2 and summary["activation_sites"]["modules"] == 2
    for key in ("dead_units", "saturated_units"):
        assert len(summary[key]) == 2 and all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in summary[key]), summary
    assert summary["dead_units"] == summary["saturated_units"]  # ReLU: a unit is saturated exactly where dead


@pytest.mark.parametrize("vmap", [False, True])
def test_known_shares_relu_half_dead_then_dead_at_a_module_called_twice(vmap):
    extra = ["model.vmap=true"] if vmap else []
    results = _train([*KNOWN, "activation=relu", *extra], seeds=(0, 1))
    for r in results:
        assert r.model_info["depth"] == 3 and r.model_info["activation_sites"]["modules"] == 2
        assert r.dead_units == [0.5, 1.0, 1.0] and r.saturated_units == [0.5, 1.0, 1.0]


@pytest.mark.parametrize("vmap", [False, True])
def test_known_shares_tanh_far_from_zero_saturated_never_dead(vmap):
    extra = ["model.vmap=true"] if vmap else []
    (r,) = _train([*KNOWN, "activation=tanh", "+model.kwargs.shift=100.0", *extra])
    assert r.dead_units == [0.0, 0.0, 0.0] and r.saturated_units == [1.0, 1.0, 1.0]


def test_learnable_activations_use_each_members_own_parameters_under_vmap():
    # prelu: a dead ReLU site is a live PReLU site (slope 0.25 on negative inputs), per member's weight
    for vmap in ([], ["model.vmap=true"]):
        results = _train([*KNOWN, "activation=prelu", *vmap], seeds=(0, 1))
        assert all(r.dead_units == [0.0, 0.0, 0.0] and r.saturated_units == [0.0, 0.0, 0.0] for r in results)


def test_vmap_shares_and_preacts_agree_with_members_one_after_another():
    args = [*ACT, "+model.kwargs.dropout=0.0", "activation=relu", "log.preact_stats=1", "epochs=1"]
    seq = _train(args, seeds=(0, 1))
    vm = _train([*args, "model.vmap=true"], seeds=(0, 1))
    for a, b in zip(seq, vm):
        assert len(a.dead_units) == 2 and a.dead_units == b.dead_units and a.saturated_units == b.saturated_units
        epoch0 = [row for row in a.preact if row[0] == 0]
        assert [r[:3] for r in epoch0] == [r[:3] for r in b.preact if r[0] == 0]
        assert [r[3] for r in epoch0] == pytest.approx([r[3] for r in b.preact if r[0] == 0], rel=1e-4, abs=1e-6)


def test_preact_stats_per_site_leave_training_unchanged(runner, tmp_path):
    """The probe pass (batch norm on the probe batch, its running statistics put back) changes
    nothing: a member with the log trains bit for bit as without it."""
    (plain,) = _train([*ACT, "activation=silu"])
    (logged,) = _train([*ACT, "activation=silu", "log.preact_stats=1"])
    for field in ("train_loss", "val_loss", "test_loss", "dead_units"):
        assert repr(getattr(plain, field)) == repr(getattr(logged, field)), field
    rows = logged.preact
    assert {(e, layer) for e, layer, _, _ in rows} == {(e, k) for e in (0, 1, 2) for k in (1, 2)}
    first = {stat: v for e, layer, stat, v in rows if e == 0 and layer == 1}  # batch norm's output: standardised
    assert first["mean"] == pytest.approx(0.0, abs=1e-6) and first["std"] == pytest.approx(1.0, abs=1e-3)
    runs = tmp_path / "runs"
    result = runner.invoke(app, ["run", "--runs-dir", str(runs), "--name", "p", *ACT, "log.preact_stats=2"])
    assert result.exit_code == 0, result.output
    with open(runs / "p" / "preact.csv") as f:
        written = list(csv.DictReader(f))
    assert {r["layer"] for r in written} == {"1", "2"} and all(math.isfinite(float(r["value"])) for r in written)


def test_calls_other_than_the_check_forwards_give_null_shares():
    (r,) = _train(["model=module", f"model.target={M}:ModeDependent", "model.replace=[ReLU]", "data=iris",
                   "epochs=1"])
    assert r.model_info["depth"] == 3  # the check forward (training mode) calls body[1] twice
    assert len(r.dead_units) == 3 and all(math.isnan(v) for v in r.dead_units + r.saturated_units)


def test_a_model_that_never_calls_its_activation_has_no_sites():
    (r,) = _train(["model=module", f"model.target={M}:Unused", "model.act_arg=act_layer", "data=iris", "epochs=1",
                   "log.preact_stats=1"])
    assert r.model_info["depth"] == 0 and r.dead_units == [] and r.saturated_units == [] and r.preact == []


def test_text_shares_on_fixed_windows_and_preact_refused(runner, tmp_path):
    (tmp_path / "tiny.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40)
    text = ["model=module", f"model.target={M}:TinyLM", "model.act_arg=act_layer", "data=text",
            f"data.path={tmp_path / 'tiny.txt'}", "data.block_size=8", "data.steps=2", "data.eval_windows=4",
            "batch_size=4", "+model.kwargs.vocab=28", "epochs=1"]
    (r,) = _train([*text, "activation=relu"])
    assert len(r.dead_units) == 1 and 0.0 <= r.dead_units[0] <= 1.0 and r.dead_units == r.saturated_units
    assert_refused_by_run_and_sweep(runner, tmp_path / "runs", [*text, "log.preact_stats=1"],
                                    "log.preact_stats probes the training split's first rows")


def test_units_are_channels_positions_and_samples_are_rows():
    conv = torch.arange(2 * 3 * 4 * 5 * 6.0).reshape(2, 3, 4, 5, 6)  # [M, N, C, H, W]
    u = as_units(conv, channels_last=False)
    assert u.shape == (2, 3 * 5 * 6, 4) and torch.equal(u[1, :, 2].sort().values, conv[1, :, 2].flatten().sort().values)
    seq = torch.randn(2, 3, 4, 7)  # [M, N, C, L] sequences, [M, N, T, F] text
    assert as_units(seq, channels_last=False).shape == (2, 21, 4)
    assert torch.equal(as_units(seq, channels_last=True), seq.reshape(2, 12, 7))
    assert as_units(torch.randn(2, 3, 4), channels_last=False).shape == (2, 3, 4)
    assert as_units(torch.randn(2, 3), channels_last=False).shape == (2, 3, 1)  # [N]: one unit
