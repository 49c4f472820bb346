"""The default baseline: activation=relu where the group column `activation` has relu, else the
first value of the first group column; --baseline always wins. One rule (compare.parse_baseline),
used by compare, report and the report's curves."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from activation_bench.analysis import compare as cmp
from activation_bench.cli.main import app
from tests.test_compare import FINAL, write_long_csv


def frame(**cols: list) -> pd.DataFrame:
    return pd.DataFrame(cols)


def test_relu_is_the_default_wherever_it_is_in_the_groups():
    values = frame(data=["normal", "normal", "uniform"], activation=["gelu", "relu", "tanh"])
    assert cmp.parse_baseline(None, ["activation"], values) == ("activation", "relu")
    # activation is not the first group column: still relu, not data=normal
    assert cmp.parse_baseline(None, ["data", "activation"], values) == ("activation", "relu")


def test_without_relu_the_first_value_of_the_first_group_column():
    values = frame(activation=["x*sigmoid(x)", "gelu"], lr=["0.01", "0.001"])
    assert cmp.parse_baseline(None, ["activation", "lr"], values) == ("activation", "x*sigmoid(x)")
    # relu in another column, or no activation column among the groups: the old rule
    values = frame(activation=["gelu", "relu"], lr=["0.01", "0.001"])
    assert cmp.parse_baseline(None, ["lr"], values) == ("lr", "0.01")
    values = frame(model_init=["he", "relu"])
    assert cmp.parse_baseline(None, ["model_init"], values) == ("model_init", "he")


def test_an_explicit_baseline_wins():
    values = frame(activation=["gelu", "relu"])
    assert cmp.parse_baseline("activation=gelu", ["activation"], values) == ("activation", "gelu")


def test_compare_defaults_to_relu_when_it_is_not_first(tmp_path: Path):
    """relu is the last activation in the file: the table is paired against it all the same."""
    order = {a: FINAL[a] for a in ("gelu", "silu", "relu")}
    csv = write_long_csv(tmp_path / "results.csv", order)
    res = cmp.compare(cmp.load([csv]), "final")
    assert res.baseline == ("activation", "relu")
    out = CliRunner().invoke(app, ["compare", str(csv), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["baseline"] == {"key": "activation", "value": "relu"}
    # without relu in the runs: the first value of the first group column (gelu)
    csv2 = write_long_csv(tmp_path / "no_relu.csv", {a: FINAL[a] for a in ("gelu", "silu")})
    assert cmp.compare(cmp.load([csv2]), "final").baseline == ("activation", "gelu")
