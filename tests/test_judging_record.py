"""A finished sequential judging's record (judging.json) counts for the command only where it was written
with the command's settings (margin, --judge-seeds-max, --look-every, column, baseline): otherwise the
dry run counts the judging stage as not yet decided (the most it may train) and the real run judges
again from the looks, training only the members not on disk, and writes the new record; both say so in
one line on stderr. The same settings: nothing to train, the same record byte for byte."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from activation_bench.cli.main import app
from tests.test_study_sequential import STUDY, _write, copy_study, finished_study
from tests.test_tune_sequential import GRID, SEQ
from tests.test_tune_sweep import members, sweep

FIRST = SEQ  # --margin 1.5: decided after 6 judging seeds on this grid (12 judging members)
STRICTER = [*SEQ[:-1], "1.1"]  # decided later: more judging members


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> Path:
    """A sweep judged to the end with --margin 1.5, trained once for the module (tests copy it)."""
    from typer.testing import CliRunner

    runs = tmp_path_factory.mktemp("judged") / "runs"
    result = sweep(CliRunner(), runs, "seq", *FIRST, grid=GRID)
    assert result.exit_code == 0, result.output
    return runs


def _copy(judged: Path, tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(judged, runs)
    return runs


def _trained(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Each member's losses and the time its file was written (a member trained again changes it)."""
    return {n: ((folder / n / "losses.csv").read_bytes(), (folder / n / "losses.csv").stat().st_mtime_ns)
            for n in members(folder)}


def _looks(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith("look after")]


def test_a_changed_margin_is_judged_again_reusing_every_member(judged, runner, tmp_path):
    runs = _copy(judged, tmp_path)
    before, old = _trained(runs / "seq"), json.loads((runs / "seq" / "judging.json").read_text())
    said = f"{runs / 'seq' / 'judging.json'} was written with --margin 1.5; judging again with --margin 1.1"
    # the dry run: the judging stage is not decided for --margin 1.1: every judging member at the
    # chosen values (2 groups x 10 seeds), of which the 12 the first judging trained are done
    dry = sweep(runner, runs, "seq", *STRICTER, "--dry-run", grid=GRID)
    assert dry.exit_code == 0, dry.output
    assert dry.stderr.strip() == said
    assert "judging stage 20 members" in dry.stdout and "sequential judging may stop sooner" in dry.stdout
    assert dry.stdout.rstrip().endswith("; 8 to run")
    # the real run judges again from the first look, trains only what is not on disk
    again = sweep(runner, runs, "seq", *STRICTER, grid=GRID)
    assert again.exit_code == 0, again.output
    assert said in again.stderr.splitlines()
    after = _trained(runs / "seq")
    assert {n: after[n] for n in before} == before  # no member trained twice: same bytes, same file
    record = json.loads((runs / "seq" / "judging.json").read_text())
    assert (record["margin"], record["unit"], record["loss"]) == (1.1, "ratio", "train_loss")
    assert set(old["members"]) < set(record["members"]) and set(after) - set(before) == set(record["members"]) - set(
        old["members"])
    # exactly the judging a fresh sweep with --margin 1.1 makes: its looks and its record, byte for byte
    fresh = sweep(runner, tmp_path / "fresh", "seq", *STRICTER, grid=GRID)
    assert fresh.exit_code == 0, fresh.output
    assert _looks(again.output) == _looks(fresh.output) and len(_looks(fresh.output)) > 3
    assert (runs / "seq" / "judging.json").read_bytes() == (tmp_path / "fresh" / "seq" / "judging.json").read_bytes()
    # now finished for --margin 1.1 (and no longer for 1.5)
    done = sweep(runner, runs, "seq", *STRICTER, "--dry-run", grid=GRID)
    assert done.stderr == "" and done.stdout.rstrip().endswith("; 0 to run"), done.output
    assert "trained by sequential judging" in done.stdout
    back = sweep(runner, runs, "seq", *FIRST, "--dry-run", grid=GRID)
    assert "written with --margin 1.1; judging again with --margin 1.5" in back.stderr


def test_the_same_settings_train_nothing_and_write_the_same_record(judged, runner, tmp_path):
    runs = _copy(judged, tmp_path)
    before, text = _trained(runs / "seq"), (runs / "seq" / "judging.json").read_bytes()
    # --loss train_loss is the column the record judged by default: the same settings
    for extra in ([], ["--loss", "train_loss"]):
        dry = sweep(runner, runs, "seq", *FIRST, *extra, "--dry-run", grid=GRID)
        assert dry.exit_code == 0 and dry.stderr == "", dry.output
        assert "judging stage 12 members" in dry.stdout and "trained by sequential judging" in dry.stdout
        assert dry.stdout.rstrip().endswith("; 0 to run")
    again = sweep(runner, runs, "seq", *FIRST, grid=GRID)
    assert again.exit_code == 0, again.output
    assert "written with" not in again.output
    assert _trained(runs / "seq") == before and (runs / "seq" / "judging.json").read_bytes() == text


@pytest.mark.parametrize("extra, was, now", [
    (["--loss", "val_loss"], "--loss train_loss", "--loss val_loss"),
    (["--baseline", "activation=gelu"], "--baseline none", "--baseline activation=gelu"),
])
def test_a_record_of_another_column_or_baseline_is_not_this_commands(judged, runner, tmp_path, extra, was, now):
    runs = _copy(judged, tmp_path)
    dry = sweep(runner, runs, "seq", *FIRST, *extra, "--dry-run", grid=GRID)
    assert dry.exit_code == 0, dry.output
    assert dry.stderr.strip() == f"{runs / 'seq' / 'judging.json'} was written with {was}; judging again with {now}"
    assert "sequential judging may stop sooner" in dry.stdout and dry.stdout.rstrip().endswith("; 8 to run")


def test_each_setting_that_differs_is_named(tmp_path):
    """record_change names every setting that differs, in sweep's options or a study file's keys; a
    record without members (no finished judging) or none at all: nothing to say."""
    from activation_bench.analysis import sequential as sq
    from activation_bench.analysis.verdicts import Margin

    now = sq.record_text(Margin(1.05), 0.05, 10, 2, "test_loss", baseline="activation=relu")
    assert json.loads(now)["baseline"] == "activation=relu"
    assert sq.record_change(tmp_path, now) is None
    file = tmp_path / sq.RECORD_FILE
    file.write_text(sq.record_text(Margin(1.05), 0.05, 12, 3, "test_loss"))
    assert sq.record_change(tmp_path, now) is None  # not finished: nothing recorded to compare with
    file.write_text(sq.record_text(Margin(1.05), 0.05, 12, 3, "test_loss", members=["a"]))
    assert sq.record_change(tmp_path, now) == (
        f"{file} was written with --baseline none, --judge-seeds-max 12, --look-every 3; judging again with "
        "--baseline activation=relu, --judge-seeds-max 10, --look-every 2")
    file.write_text(sq.record_text(Margin(1.05), 0.05, 10, 2, "test_loss", members=["a"], baseline="activation=relu"))
    assert sq.record_change(tmp_path, now) is None
    # a study's judge: chosen sweep: its comparisons' margins, columns and baselines as one setting
    two = sq.record_text(Margin(20, "pp"), 0.05, 10, 2, "test_acc", [(Margin(1.3), "test_loss", "activation=relu")])
    file.write_text(sq.record_text(Margin(20, "pp"), 0.05, 10, 2, "test_acc", [(Margin(1.2), "test_loss")], ["a"]))
    assert sq.record_change(tmp_path, two, sq.KEYS) == (
        f"{file} was written with the comparisons' margins (test_acc 20 pp, test_loss 1.2); judging again with the "
        "comparisons' margins (test_acc 20 pp, test_loss 1.3 against activation=relu)")


def test_a_study_comparisons_changed_margin_judges_its_sweep_again(tmp_path_factory, tmp_path, runner, monkeypatch):
    """A judge: chosen sweep whose comparison's margin changed in the study file: `study tables` says it
    is not finished, the dry run counts its judging stage undecided, `study run` judges it again."""
    monkeypatch.chdir(tmp_path)
    copy_study(finished_study(tmp_path_factory), tmp_path)  # STUDY run to the end (trained once per test run)
    folder = tmp_path / "runs" / "iris"
    before = _trained(folder)
    changed = _write(tmp_path, STUDY.replace("margin: 1.3}", "margin: 1.2}"))
    said = (f"{Path('runs/iris/judging.json')} was written with the comparisons' margins (test_acc 20 pp, test_loss "
            "1.3); judging again with the comparisons' margins (test_acc 20 pp, test_loss 1.2)")
    dry = runner.invoke(app, ["study", "run", str(changed), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert said in dry.stderr.splitlines() and "sequential judging may stop sooner" in dry.stdout
    to_train = int(re.search(r"^(\d+) members to train", dry.stdout, re.MULTILINE).group(1))
    assert to_train == 8 + 20 - len(before)  # every judging member at the chosen values not on disk
    tables = runner.invoke(app, ["study", "tables", str(changed)])
    assert tables.exit_code == 2 and "not finished: iris" in tables.stderr, tables.output
    again = runner.invoke(app, ["study", "run", str(changed), "-q"])
    assert again.exit_code == 0, again.output
    assert said in again.stderr.splitlines()
    assert {n: v for n, v in _trained(folder).items() if n in before} == before
    record = json.loads((folder / "judging.json").read_text())
    assert record["columns"][1] == {"loss": "test_loss", "margin": 1.2, "unit": "ratio"}
    dry = runner.invoke(app, ["study", "run", str(changed), "--dry-run"])
    assert "0 members to train" in dry.stdout and "written with" not in dry.output, dry.output


def test_compare_and_report_judge_against_the_recorded_baseline(judged, runner, tmp_path, monkeypatch):
    """A sweep judged against --baseline activation=gelu records it (judging.json): compare and report on
    the folder then judge against gelu without being told, as with --baseline activation=gelu; a
    --baseline given to them still wins."""
    from activation_bench.render import report
    from tests.test_report import leave_figures_undrawn

    leave_figures_undrawn(monkeypatch)  # the pages' tables are read, not their figures' drawing (test_report draws)
    runs = _copy(judged, tmp_path)
    again = sweep(runner, runs, "seq", *FIRST, "--baseline", "activation=gelu", grid=GRID)
    assert again.exit_code == 0, again.output
    assert json.loads((runs / "seq" / "judging.json").read_text())["baseline"] == "activation=gelu"
    base = ["compare", str(runs / "seq"), "--tune", "lr", "--tune-seeds", "2", "--format", "json"]
    told, untold, relu = (runner.invoke(app, base + extra) for extra in
                          (["--baseline", "activation=gelu"], [], ["--baseline", "activation=relu"]))
    assert told.exit_code == untold.exit_code == relu.exit_code == 0, untold.output
    assert untold.stdout == told.stdout
    assert json.loads(untold.stdout)["baseline"] == {"key": "activation", "value": "gelu"}
    assert json.loads(relu.stdout)["baseline"] == {"key": "activation", "value": "relu"}
    page = report.build([runs / "seq"], ["final"], draw_shapes=False, tune=_tuning())
    assert page["tables"][0]["json"]["baseline"] == {"key": "activation", "value": "gelu"}
    assert page["tables"][0]["json"] == json.loads(untold.stdout)
    given = report.build([runs / "seq"], ["final"], "activation=relu", draw_shapes=False, tune=_tuning())
    assert given["tables"][0]["json"]["baseline"] == {"key": "activation", "value": "relu"}


def _tuning():
    from activation_bench.analysis import compare as cmp

    return cmp.parse_tune(["lr"], "2", None, None, None)
