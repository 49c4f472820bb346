"""A swept key Hydra adds (`+model.kwargs.hidden=4,8`) is named by its config key in labels,
results.csv and compare's table, without Hydra's `+`; the member's override keeps it."""

from __future__ import annotations

import csv
import json

from activation_bench.analysis.loading import fixed_values
from activation_bench.cli.main import app
from activation_bench.config.grid import expand

FIXED = ["model=module", "model.target=tests.module_models:Fixed", "model.replace=[torch.nn.ReLU]", "data=iris",
         "epochs=2", "batch_size=32", "lr=0.01"]


def test_grid_labels_an_added_key_by_its_config_key():
    grid = expand(["+model.kwargs.hidden=4,8", "seed=0,1", "++model.kwargs.n_in=4"])
    assert grid.keys == ["model.kwargs.hidden", "seed"]
    assert grid.labels[0] == {"model.kwargs.hidden": "4", "seed": "0"}
    assert "+model.kwargs.hidden=4" in grid.members[0] and "++model.kwargs.n_in=4" in grid.members[0]
    assert set(fixed_values(["+model.kwargs.hidden=8", "lr=0.1", "seed=0,1", "~model.kwargs.x"])) == {
        "model.kwargs.hidden", "lr"}


def test_results_and_compare_name_the_swept_constructor_keyword(runner, tmp_path):
    runs = tmp_path / "runs"
    out = runner.invoke(app, ["sweep", "--runs-dir", str(runs), "--name", "k", "-q", *FIXED, "activation=relu,tanh",
                              "+model.kwargs.hidden=4,8", "seed=0,1"])
    assert out.exit_code == 0, out.output
    with open(runs / "k" / "results.csv") as f:
        header = next(csv.reader(f))
    assert "model.kwargs.hidden" in header and not any(c.startswith("+") for c in header), header
    table = runner.invoke(app, ["compare", str(runs / "k"), "--baseline", "activation=relu", "--format", "json"])
    assert table.exit_code == 0, table.output
    rows = json.loads(table.stdout)["rows"]
    assert {str(r["model.kwargs.hidden"]) for r in rows} == {"4", "8"} and not any("+model.kwargs.hidden" in r
                                                                                 for r in rows)
    md = runner.invoke(app, ["compare", str(runs / "k"), "--format", "markdown"])
    assert md.exit_code == 0 and "model.kwargs.hidden" in md.stdout and "+model" not in md.stdout, md.output
