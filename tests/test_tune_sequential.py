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
    trained = record.pop("members")  # the judging members it trained, by name
    assert len(set(trained)) == judged and set(trained) <= set(members(runs / "seq"))
    assert record == {"margin": 1.5, "unit": "ratio", "loss": "train_loss", "alpha": 0.05, "max_seeds": 10,
                      "look_every": 2}
    # the dry run counts the judging stage as the judging trained it: nothing left to run
    dry = sweep(runner, runs, "seq", *SEQ, "--dry-run", grid=GRID)
    assert dry.exit_code == 0, dry.output
    assert f"judging stage {judged} members" in dry.output and "trained by sequential judging" in dry.output
    assert dry.output.rstrip().endswith("; 0 to run")
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


ACC_GRID = ["activation=gelu,relu", "lr=1e-2,1e-1", "seed=range(12)", "data=iris", "epochs=3", "model.hidden_dim=4",
            "batch_size=32"]
ACC_SEQ = ["--tune", "lr", "--tune-seeds", "2", "--tune-on", "val_acc", "--judge-seeds-max", "10", "--look-every", "2",
           "--margin", "20", "--loss", "test_acc"]


def _verdicts(line: str) -> dict[str, tuple[str, int, str]]:
    """A look line's verdicts: 'gelu equivalent (6 pairs, decided)' -> {'gelu': ('equivalent', 6, 'decided')}."""
    import re

    return {g: (v, int(n), why) for g, v, n, why in re.findall(r"(\w+) (\w+) \((\d+) pairs, ([\w ]+)\)", line)}


def test_an_accuracy_column_is_judged_in_percentage_points_and_compare_agrees(runner, tmp_path):
    """--loss test_acc: the verdicts judge the accuracy, --margin 20 is 20 percentage points (a ratio of
    20 would be refused on a loss); the decided group stops early; judging.json names the column, so
    compare on the folder, with or without --loss test_acc, reads the last look's verdicts."""
    import csv
    import io

    runs = tmp_path / "runs"
    result = sweep(runner, runs, "acc", *ACC_SEQ, grid=ACC_GRID)
    assert result.exit_code == 0, result.output
    looks = [ln for ln in result.output.splitlines() if ln.startswith("look after")]
    last = _verdicts(looks[-1])
    assert list(last) == ["gelu"] and last["gelu"][2] == "decided" and last["gelu"][1] < 10
    assert len(members(runs / "acc")) - 8 == 2 * last["gelu"][1] < 2 * 10  # stopped before --judge-seeds-max
    record = json.loads((runs / "acc" / "judging.json").read_text())
    assert len(record.pop("members")) == 2 * last["gelu"][1]
    assert record == {"margin": 20.0, "unit": "pp", "loss": "test_acc", "alpha": 0.05, "max_seeds": 10,
                      "look_every": 2}
    base = ["compare", str(runs / "acc"), "--tune", "lr", "--tune-seeds", "2", "--tune-on", "val_acc",
            "--format", "csv"]
    tables = [runner.invoke(app, base + extra) for extra in ([], ["--loss", "test_acc"])]
    assert tables[0].exit_code == 0, tables[0].output
    assert tables[0].stdout == tables[1].stdout
    row = next(r for r in csv.DictReader(io.StringIO(tables[0].stdout)) if r["activation"] == "gelu")
    assert (row["verdict"], int(row["seeds_used"]), row["stopped"]) == last["gelu"]
    assert float(row["verdict_hi_pp"]) - float(row["verdict_lo_pp"]) < 2 * 20  # an interval in pp, inside +-20
    # a loss column of the same folder: the record's margin is in pp, so no verdicts there
    other = runner.invoke(app, base + ["--loss", "test_loss"])
    assert other.exit_code == 0 and "verdict" not in other.stdout.splitlines()[0]


@pytest.mark.parametrize("args, grid, message", [
    (ACC_SEQ[:-1] + ["val_accuracy"], ACC_GRID, "--loss val_accuracy: not a per-epoch column; valid: train_loss"),
    (ACC_SEQ, GRID, "--loss test_acc: the sweep's runs do not log it (they log test_loss, train_loss, val_loss)"),
    (["--tune", "lr", "--loss", "test_acc"], ACC_GRID, "--loss on sweep is the sequential judging's"),
    ([*ACC_SEQ[:11], "150", "--loss", "test_acc"], ACC_GRID, "--margin 150: out of range; needs a difference in "
     "percentage points"),
    ([*ACC_SEQ, "--metric", "to=0.5"], ACC_GRID, "--metric to=0.5: sequential judging reads a loss or an accuracy"),
])
def test_a_judged_column_is_checked_before_anything_trains(runner, tmp_path, args, grid, message):
    result = sweep(runner, tmp_path / "runs", "bad", *args, grid=grid)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_record_of_several_columns_gives_each_its_margin(tmp_path):
    """judging.json of a sweep judged by several comparisons (a study's judge: chosen): read_record picks
    the entry of the compared column, else the first of its kind; a record from before the column
    was recorded reads as before (loss None); a column that is not one is refused in one line."""
    from activation_bench.analysis import sequential as sq
    from activation_bench.analysis.verdicts import Margin
    from activation_bench.errors import UsageError

    text = sq.record_text(Margin(2, "pp"), 0.05, 10, 2, "test_acc", [(Margin(1.1), "test_loss")], ["b", "a"])
    doc = json.loads(text)
    assert doc["columns"] == [{"loss": "test_acc", "margin": 2, "unit": "pp"},
                              {"loss": "test_loss", "margin": 1.1, "unit": "ratio"}]
    assert doc["members"] == ["a", "b"]
    (tmp_path / sq.RECORD_FILE).write_text(text)
    pick = {col: sq.read_record([tmp_path], col) for col in (None, "test_acc", "val_acc", "test_loss", "train_loss")}
    assert {c: (r["margin"], r["loss"]) for c, r in pick.items()} == {
        None: (Margin(2, "pp"), "test_acc"), "test_acc": (Margin(2, "pp"), "test_acc"),
        "val_acc": (Margin(2, "pp"), "test_acc"), "test_loss": (Margin(1.1), "test_loss"),
        "train_loss": (Margin(1.1), "test_loss")}
    assert sq.recorded_loss([tmp_path]) == "test_acc" and sq.recorded_members(tmp_path) == ["a", "b"]
    (tmp_path / sq.RECORD_FILE).write_text(sq.record_text(Margin(1.05), 0.05, 10, 2))
    assert sq.read_record([tmp_path])["loss"] is None and sq.recorded_members(tmp_path) is None
    (tmp_path / sq.RECORD_FILE).write_text(text.replace('"loss": "test_loss"', '"loss": "test_lose"'))
    with pytest.raises(UsageError, match="not a sequential judging record"):
        sq.read_record([tmp_path])
