"""sweep --tune with sequential judging (--judge-seeds-max N --look-every K --margin X): judging seeds
added K at a time, a group's seeds stop once its comparison with the baseline is decided
(analysis/sequential.decisions), resumable to the same decisions; bad input one line."""

from __future__ import annotations

import json
import shutil

import pytest

from activation_bench.cli.main import app
from tests.test_tune_sweep import losses, members, sweep

GRID = ["activation=gelu,relu", "lr=1e-3,1e-1", "seed=range(12)", "data=function", "data.fn=bessel_j0",
        "epochs=3", "data.n_samples=30", "model.hidden_dim=4"]
SEQ = ["--tune", "lr", "--tune-seeds", "2", "--judge-seeds-max", "10", "--look-every", "2", "--margin", "1.5"]


def test_judging_stops_once_every_comparison_is_decided_and_resumes_alike(runner, tmp_path):
    runs = tmp_path / "runs"
    result = sweep(runner, runs, "seq", *SEQ, grid=GRID)
    assert result.exit_code == 0, result.output
    looks = [ln for ln in result.output.splitlines() if ln.startswith("look after")]
    assert looks and "decided" in looks[-1] and all("open" in ln for ln in looks[:-1])
    judged = len(members(runs / "seq")) - 8  # 8 tuning members (2 seeds x 4 settings)
    assert judged == 2 * 2 * len(looks) < 2 * 10  # both groups, 2 seeds a look, fewer than 10 seeds each
    record = json.loads((runs / "seq" / "judging.json").read_text())
    assert record == {"margin": 1.5, "unit": "ratio", "alpha": 0.05, "max_seeds": 10, "look_every": 2}
    compared = runner.invoke(app, ["compare", str(runs / "seq"), "--tune", "lr", "--tune-seeds", "2", "--format",
                                   "csv"])
    assert compared.exit_code == 0 and "verdict" in compared.stdout.splitlines()[0]
    # killed in the last look's batch: the same command makes the same decisions, trains what is missing
    want = losses(runs / "seq")
    last = sorted(n for n in members(runs / "seq"))[-1]
    shutil.rmtree(runs / "seq" / last)
    again = sweep(runner, runs, "seq", *SEQ, grid=GRID)
    assert again.exit_code == 0, again.output
    assert losses(runs / "seq") == want
    assert [ln for ln in again.output.splitlines() if ln.startswith("look after")] == looks


@pytest.mark.parametrize("args, message", [
    (["--tune", "lr", "--judge-seeds-max", "8", "--look-every", "2"], "give --margin X too"),
    (["--tune", "lr", "--margin", "1.05"], "--margin on sweep sets up sequential judging"),
    (["--judge-seeds-max", "8", "--look-every", "2", "--margin", "1.05"], "give --tune KEY too"),
    (["--tune", "lr", "--tune-seeds", "2", "--judge-seeds-max", "8", "--look-every", "11", "--margin", "1.05"],
     "--look-every 11: larger than the 10 judging seeds of the seed range"),
    (["--tune", "lr", "--tune-seeds", "2", "--judge-seeds-max", "12", "--look-every", "2", "--margin", "1.05"],
     "--judge-seeds-max 12: the seed range has 10 judging seeds"),
    (["--tune", "lr", "--judge-seeds-max", "8", "--look-every", "2", "--margin", "-1"], "--margin -1: negative"),
    # the judged column is a loss: a ratio of 1 is no region at all, refused before the tuning stage trains
    (["--tune", "lr", "--tune-seeds", "2", "--judge-seeds-max", "8", "--look-every", "2", "--margin", "1"],
     "--margin 1: out of range"),
])
def test_sequential_bad_input_is_one_line_exit_2(runner, tmp_path, args, message):
    result = sweep(runner, tmp_path / "runs", "bad", *args, grid=GRID)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
