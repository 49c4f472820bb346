"""benchmarks/halving_agreement.py: what `sweep --tune --halving ETA` would choose, replayed from a full
tuning's runs, is what a real halved sweep of the same grid chose, rung by rung, with the member-epochs
its dry run counts and its folder logged; it reads the sweep only; bad input is one line, exit 2."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import halving_agreement as agreement
from tests.test_tune_halving import GRID
from tests.test_tune_sweep import sweep

ROOT = Path(__file__).resolve().parents[1]
TUNE = ["--tune", "lr", "--tune-seeds", "2"]  # GRID's seeds 0-3: 0 and 1 tune, the choice by the final val_loss
ETAS = (2, 3)  # 3 values per group over 9 epochs: rungs at 2, 4, 9 and at 3, 9


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """GRID tuned then judged (the full tuning), and halved at each of ETAS, trained once for the module."""
    from typer.testing import CliRunner

    runner = CliRunner()
    runs_dir = tmp_path_factory.mktemp("agreement") / "runs"
    for name, extra in [("tuned", []), *((f"halved{eta}", ["--halving", str(eta)]) for eta in ETAS)]:
        result = sweep(runner, runs_dir, name, *TUNE, *extra, grid=GRID)
        assert result.exit_code == 0, result.output
    return runs_dir


def replay(directory: Path, *extra: str) -> tuple:
    args = agreement.options().parse_args([str(directory), *TUNE, "--eta", *map(str, ETAS), *extra])
    return agreement.agreement(args)


def recorded_choice(directory: Path) -> dict[tuple, tuple]:
    rows = json.loads((directory / "tuning.json").read_text())["choices"][0]["chosen"]
    return {(r["activation"],): (str(r["lr"]),) for r in rows}


def trained(directory: Path, tune_seeds: set[str]) -> tuple[int, list[set[tuple]]]:
    """The tuning stage as a halved sweep's folder logged it: its member-epochs (every (run, epoch) of
    its rung tables and of its tuning members' losses.csv, once) and the settings of each rung's table."""
    pairs: set[tuple[str, str]] = set()
    tables = []
    for path in sorted(directory.glob(".rungs/rung*.csv")):
        with open(path, encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        pairs.update((r["run"], r["epoch"]) for r in rows)
        tables.append({(r["activation"], r["lr"]) for r in rows})
    for path in directory.glob("*/losses.csv"):
        if path.parent.name.rsplit("seed=", 1)[1] in tune_seeds:
            with open(path, encoding="utf-8") as fh:
                pairs.update((path.parent.name, r["epoch"]) for r in csv.DictReader(fh))
    return len(pairs), tables


def dry_run(runs_dir: Path, eta: int) -> tuple[list[int], int, int]:
    """(rungs, member-epochs, the full tuning's) as `sweep --halving ETA --dry-run` prints them."""
    from typer.testing import CliRunner

    result = sweep(CliRunner(), runs_dir, "planned", *TUNE, "--halving", str(eta), "--dry-run", grid=GRID)
    assert result.exit_code == 0, result.output
    found = re.search(r"rungs at ([\d, ]+) epochs; the tuning stage takes ([\d,]+) member-epochs instead of ([\d,]+)",
                      result.output)
    assert found, result.output
    return [int(e) for e in found[1].split(", ")], int(found[2].replace(",", "")), int(found[3].replace(",", ""))


def test_the_replay_chooses_as_the_halved_sweeps_did_rung_by_rung(swept):
    s, full, outcomes = replay(swept / "tuned")
    assert agreement.chosen(full) == recorded_choice(swept / "tuned")  # the full tuning's choice: the sweep's own
    for o in outcomes:
        halved = swept / f"halved{o.eta}"
        assert agreement.chosen(o.choice) == recorded_choice(halved)
        # each rung's settings are those the halved sweep trained to it (its .rungs tables), the last
        # rung's those of its tuning members trained to the end
        member_epochs, tables = trained(halved, set(s.tune_s))
        assert [set(x) for x in o.live[:-1]] == tables and len(tables) == len(o.rungs) - 1
        ended = {(d.name.split("activation=")[1].split("_")[0], d.name.split("lr=")[1].split("_")[0])
                 for d in (f.parent for f in halved.glob("*/losses.csv")) if d.name.rsplit("seed=", 1)[1] in s.tune_s}
        assert set(o.live[-1]) == ended
        assert o.member_epochs == member_epochs
        assert (o.rungs, o.member_epochs, o.full_member_epochs) == dry_run(swept, o.eta)
    # on this grid halving moves choices (the final val_loss after a few epochs favours the large rate),
    # so the agreement above is no copy of the full tuning's choice
    assert [o.rungs for o in outcomes] == [[2, 4, 9], [3, 9]]
    assert all(agreement.chosen(o.choice) != agreement.chosen(full) for o in outcomes)


def test_the_report_says_rungs_member_epochs_and_moves_and_writes_nothing(swept, capsys):
    before = snapshot(swept / "tuned")
    assert agreement.main([str(swept / "tuned"), *TUNE, "--eta", "3", "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "ETA 3: rungs at 3, 9 epochs (6 -> 2 settings); the tuning stage takes 60 member-epochs instead of 108 " \
        "(56%), 4 of its members train to the end" in out
    assert "activation=gelu: halving lr 0.1, full tuning 0.01: lr 1 grid step up" in out
    assert "ETA 3: 2 of 2 choices moved" in out
    assert "the sweep's tuning.json (sweep) chose the same" in out
    assert snapshot(swept / "tuned") == before


def test_it_runs_without_torch(swept):
    code = ("import sys; from benchmarks.halving_agreement import main; "
            f"rc = main([{str(swept / 'tuned')!r}, '--tune', 'lr', '--tune-seeds', '2', '--eta', '2', '--no-record']); "
            "sys.exit(rc or 3 * ('torch' in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "ETA 2: 1 of 2 choices moved" in done.stdout


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(directory.rglob("*"))}


@pytest.mark.parametrize("where, extra, message", [
    ("nowhere", [], "not a sweep folder (no readable sweep.yaml)"),
    ("tuned", ["--eta", "1"], "--eta 1: halving keeps the best 1/ETA"),
    ("halved3", [], "8 of its 12 members on the tuning seeds (0, 1) have no finished run"),
    ("tuned", ["--tune-on", "test_loss"], "--tune-on test_loss: tuning selects on validation numbers only"),
])
def test_bad_input_is_one_line_exit_2(swept, tmp_path, capsys, where, extra, message):
    directory = swept / where if where != "nowhere" else tmp_path
    (tmp_path / "notes.txt").write_text("not a sweep\n")
    before = snapshot(directory)
    eta = [] if "--eta" in extra else ["--eta", "3"]
    assert agreement.main([str(directory), *TUNE, *eta, *extra, "--no-record"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(directory) == before
