"""`actbench compare --metric early_stop`: the loss at each run's epoch of lowest val_loss."""

from __future__ import annotations

import numpy as np
import pytest

from activation_bench.analysis import compare as cmp
from activation_bench.analysis.metrics import run_values
from activation_bench.errors import UsageError

ROWS = [  # act, seed, epoch, train, val, test
    ("gelu", 0, 1, 0.9, 0.50, 0.60), ("gelu", 0, 2, 0.5, 0.30, 0.40), ("gelu", 0, 3, 0.2, 0.30, 0.10),
    ("gelu", 0, 4, 0.1, 0.35, 0.05),
    ("gelu", 1, 1, 0.9, 0.20, 0.25), ("gelu", 1, 2, 0.5, 0.40, 0.20), ("gelu", 1, 3, 0.2, 0.45, 0.15),
    ("relu", 0, 1, 0.9, 0.60, 0.70), ("relu", 0, 2, 0.5, 0.50, 0.55), ("relu", 0, 3, 0.2, 0.40, 0.45),
    ("relu", 1, 1, 0.9, 0.70, 0.80), ("relu", 1, 2, 0.5, float("nan"), 0.30), ("relu", 1, 3, 0.2, 0.60, 0.65),
]


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "runs.csv"
    lines = ["activation,seed,epoch,train_loss,val_loss,test_loss"]
    lines += [",".join(map(str, r)) for r in ROWS]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_value_at_lowest_val_loss_earliest_on_ties(table):
    loaded = cmp.load([table])
    values = run_values(loaded, cmp.parse_metric("early_stop"), "test_loss")
    got = dict(zip(zip(values["activation"], values["seed"]), values["value"]))
    # gelu seed 0: val 0.30 at epochs 2 and 3 -> epoch 2 (earliest); seed 1: epoch 1
    # relu seed 1: a NaN val_loss is skipped, the lowest finite one (0.60, epoch 3) chosen
    assert got == {("gelu", "0"): 0.40, ("gelu", "1"): 0.25, ("relu", "0"): 0.45, ("relu", "1"): 0.65}
    train = run_values(loaded, cmp.parse_metric("early_stop"), "train_loss")
    assert list(train["value"]) == [0.5, 0.9, 0.2, 0.2]


def test_default_loss_is_test_loss_for_early_stop(table):
    res = cmp.run_compare([table], metric="early_stop", baseline="activation=gelu")
    assert res.loss == "test_loss"
    relu = res.table[res.table["activation"] == "relu"].iloc[0]
    expected = np.log10([0.45, 0.65]) - np.log10([0.40, 0.25])
    assert relu["mean_diff"] == pytest.approx(expected.mean())
    assert relu["geo_mean"] == pytest.approx(10 ** np.log10([0.45, 0.65]).mean())
    assert any("lowest val_loss" in line for line in res.methods)
    assert cmp.run_compare([table], metric="final").loss == "train_loss"
    assert cmp.run_compare([table], metric="early_stop", loss="val_loss").loss == "val_loss"


def test_early_stop_needs_val_loss(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("activation,seed,epoch,train_loss\ngelu,0,1,0.5\ngelu,0,2,0.4\n")
    assert cmp.parse_metric("early_stop").label == "early_stop"
    with pytest.raises(UsageError, match="needs a val_loss column"):
        cmp.run_compare([path], metric="early_stop")


def test_cli_early_stop_without_val_loss_exits_2(runner, tmp_path):
    from activation_bench.cli.main import app

    path = tmp_path / "t.csv"
    path.write_text("activation,seed,epoch,train_loss\ngelu,0,1,0.5\n")
    result = runner.invoke(app, ["compare", str(path), "--metric", "early_stop"])
    assert result.exit_code == 2 and "needs a val_loss column" in result.stderr
