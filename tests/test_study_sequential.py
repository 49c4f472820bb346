"""Sequential judging in a study file: a `judge: chosen` sweep judged by every comparison that tunes
it (a group's seeds stop once each of them has decided it), a sweep's own rule judging an accuracy
in percentage points, the comparisons' tables reading the verdicts from the sweep's judging.json,
and bad values refused in one line before anything trains."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from activation_bench.cli.main import app
from tests.conftest import built_once

# gelu against relu on iris, lr tuned on 2 seeds; up to 10 judging seeds, 2 a look
STUDY = """\
title: sequential
runs_dir: runs
output: out
sweeps:
  iris:
    grid: ['activation=gelu,relu', 'lr=1e-2,1e-1', 'seed=range(12)']
    overrides: [data=iris, epochs=3, model.hidden_dim=4, batch_size=32]
    judge: chosen
    judge_seeds_max: 10
    look_every: 2
comparisons:
  acc: {sweeps: [iris], metric: final, loss: test_acc, tune: [lr], tune_seeds: 2, tune_on: val_acc, margin: 20}
  loss: {sweeps: [iris], metric: final, loss: test_loss, tune: [lr], tune_seeds: 2, margin: 1.3}
"""
SEQUENTIAL = "    judge_seeds_max: 10\n    look_every: 2\n"


def _write(tmp_path: Path, text: str, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _members(folder: Path) -> int:
    return sum(1 for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))


def _last_looks(output: str) -> dict[str, dict[str, tuple[str, int, str]]]:
    """Each comparison's last look: {'comparisons.acc': {'gelu': ('equivalent', 6, 'decided')}}."""
    out = {}
    for name, line in re.findall(r"^(comparisons\.\w+): (look after .*)$", output, re.MULTILINE):
        out[name] = {g: (v, int(n), why) for g, v, n, why in re.findall(r"(\w+) (\w+) \((\d+) pairs, ([\w ]+)\)", line)}
    return out


OUTPUT = "study-run.txt"  # what `study run` printed, kept beside the study it ran


def _run_study(root: Path) -> None:
    """STUDY run in root (its paths are relative to its folder), its output kept in root/OUTPUT."""
    from tests.test_study import study_run_in

    _write(root, STUDY)
    (root / OUTPUT).write_text(study_run_in(root), encoding="utf-8")


def finished_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """STUDY run once per test run, read by every xdist worker (conftest.built_once): its folder, to be
    copied by a test that changes anything (copy_study). test_judging_record and
    test_combined_verdicts start from it too."""
    return built_once(tmp_path_factory, "sequential-study", _run_study)


@pytest.fixture(scope="session")
def judged_study(tmp_path_factory) -> Path:
    return finished_study(tmp_path_factory)


def copy_study(judged_study: Path, folder: Path) -> str:
    """The finished study copied into folder (files' times kept); returns what its `study run` printed."""
    import shutil

    shutil.copytree(judged_study, folder, dirs_exist_ok=True, copy_function=shutil.copy2)
    return (folder / OUTPUT).read_text(encoding="utf-8")


def test_a_judge_chosen_sweep_stops_once_every_comparison_has_decided(judged_study, tmp_path, runner, monkeypatch):
    monkeypatch.chdir(tmp_path)
    output = copy_study(judged_study, tmp_path)
    looks = _last_looks(output)
    assert set(looks) == {"comparisons.acc", "comparisons.loss"}
    assert all(v[2] == "decided" for last in looks.values() for v in last.values()), looks
    # fewer members than the same study without sequential judging would train: its dry run (the
    # tuning stage has chosen) counts the judging stage at every judging seed of the choices
    full = runner.invoke(app, ["study", "run", str(_write(tmp_path, STUDY.replace(SEQUENTIAL, ""), "full.yaml")),
                               "--dry-run"])
    assert full.exit_code == 0, full.output
    judging = int(re.search(r"judging stage (\d+) members", full.output).group(1))
    trained = _members(tmp_path / "runs" / "iris")
    assert trained < 8 + judging  # 8 tuning members (2 seeds x 4 settings)
    # both choose lr 0.1 for both groups: a group's seeds stop once the later comparison has decided
    # (on this machine acc decides at 6 seeds, loss, with its narrower margin, at 8)
    chosen = re.findall(r"^comparisons\.\w+: chose (.*?) \(by", output, re.MULTILINE)
    assert len(chosen) == 2 and chosen[0] == chosen[1], chosen
    most = max(last["gelu"][1] for last in looks.values())
    assert trained == 8 + 2 * most
    # each comparison's table shows the verdict it stopped on (a confidence sequence only narrows,
    # so a decided verdict stands on the seeds trained after it), the seeds it reads and why it stopped
    for name in ("acc", "loss"):
        rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / f"{name}.csv").read_text())))
        gelu = next(r for r in rows if r["activation"] == "gelu")
        verdict, n, why = looks[f"comparisons.{name}"]["gelu"]
        assert (gelu["verdict"], int(gelu["seeds_used"]), gelu["stopped"]) == (verdict, most, why)
        assert int(gelu["decided_at"]) <= n
    assert "verdict (20 pp)" in (tmp_path / "out" / "acc.md").read_text()
    page = (tmp_path / "out" / "report.html").read_text()
    assert "stopped" in page and "anytime" in page
    record = json.loads((tmp_path / "runs" / "iris" / "judging.json").read_text())
    assert record["columns"] == [{"loss": "test_acc", "margin": 20.0, "unit": "pp"},
                                 {"loss": "test_loss", "margin": 1.3, "unit": "ratio"}]
    # compare on the folder reads the same verdicts, each column with its own margin
    for loss, name in (("test_acc", "acc"), ("test_loss", "loss")):
        extra = ["--tune-on", "val_acc"] if name == "acc" else []
        compared = runner.invoke(app, ["compare", "runs/iris", "--tune", "lr", "--tune-seeds", "2", "--loss", loss,
                                       *extra, "--format", "csv"])
        assert compared.exit_code == 0, compared.output
        assert compared.stdout == (tmp_path / "out" / f"{name}.csv").read_text()
    # `report` on the folder: the loss tables read the ratio margin, the accuracy tables the pp one. From
    # here on the pages' and the study's figures are built, not drawn: only text is read (test_report and
    # test_study draw them)
    from tests.conftest import leave_files_undrawn
    from tests.test_report import leave_figures_undrawn

    leave_figures_undrawn(monkeypatch)
    leave_files_undrawn(monkeypatch)
    report = runner.invoke(app, ["report", "runs/iris", "-o", "page.html", "--no-shapes"])
    assert report.exit_code == 0, report.output
    heads = set(re.findall(r"verdict \([^)]*\)", (tmp_path / "page.html").read_text()))
    assert heads == {"verdict (1.3x)", "verdict (20 pp)"}
    # finished: the dry run counts what the judging trained, nothing is left, `study tables` renders it
    dry = runner.invoke(app, ["study", "run", "study.yaml", "--dry-run"])
    assert dry.exit_code == 0 and "trained by sequential judging" in dry.output, dry.output
    assert "0 members to train" in dry.output
    tables = runner.invoke(app, ["study", "tables", "study.yaml"])
    assert tables.exit_code == 0, tables.output
    again = runner.invoke(app, ["study", "run", "study.yaml", "-q"])  # resumed: nothing more to train
    assert again.exit_code == 0, again.output
    assert _members(tmp_path / "runs" / "iris") == trained and _last_looks(again.output) == looks


def test_a_sweeps_own_rule_judges_an_accuracy_in_percentage_points(tmp_path, runner, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = STUDY.replace("    judge: chosen\n", "    tune: [lr]\n    tune_seeds: 2\n    tune_on: val_acc\n").replace(
        SEQUENTIAL, SEQUENTIAL + "    margin: 20\n    loss: test_acc\n").replace(", margin: 20}", "}").replace(
        ", margin: 1.3}", "}")
    result = runner.invoke(app, ["study", "run", str(_write(tmp_path, text)), "-q"])
    assert result.exit_code == 0, result.output
    looks = [ln for ln in result.output.splitlines() if ln.startswith("look after")]
    record = json.loads((tmp_path / "runs" / "iris" / "judging.json").read_text())
    assert (record["margin"], record["unit"], record["loss"]) == (20.0, "pp", "test_acc")
    last = {g: (v, int(n), why) for g, v, n, why in re.findall(r"(\w+) (\w+) \((\d+) pairs, ([\w ]+)\)", looks[-1])}
    acc = next(r for r in csv.DictReader(io.StringIO((tmp_path / "out" / "acc.csv").read_text()))
               if r["activation"] == "gelu")
    assert (acc["verdict"], int(acc["seeds_used"]), acc["stopped"]) == last["gelu"]
    # the loss comparison has no margin of its own and the record's is in pp: no verdicts there
    assert "verdict" not in (tmp_path / "out" / "loss.csv").read_text().splitlines()[0]


OWN = STUDY.replace("    judge: chosen\n", "    tune: [lr]\n    tune_seeds: 2\n").replace(
    SEQUENTIAL, SEQUENTIAL + "    margin: 20\n    loss: test_acc\n")


@pytest.mark.parametrize("text, message", [
    (STUDY.replace(SEQUENTIAL, SEQUENTIAL + "    margin: 1.05\n"),
     "sweeps.iris.margin: judge: chosen: the comparisons that tune the sweep judge it"),
    (STUDY.replace(", margin: 1.3}", "}"), "comparisons.loss.margin: sweep iris is judged sequentially"),
    (STUDY.replace("metric: final, loss: test_loss", "metric: to=0.5, loss: test_loss"),
     "comparisons.loss.metric: to=0.5: sequential judging reads a loss or an accuracy"),
    (STUDY + "rankings:\n  r: {sweeps: [iris], loss: test_loss, tune: [lr], task: [data]}\n",
     "rankings.r: reads sweep iris, judged sequentially: a ranking has no verdict to stop on"),
    (STUDY.replace("    look_every: 2\n", ""), "sweeps.iris.judge_seeds_max: sequential judging: give judge_seeds_max "
     "and look_every"),
    (STUDY.replace("look_every: 2", "look_every: 11"), "look_every 11: larger than the 10 judging seeds"),
    (OWN.replace("margin: 20\n", "margin: 150\n"), "sweeps.iris.margin: out of range; needs a difference in "
     "percentage points"),
    (OWN.replace("loss: test_acc\n", "loss: test_accuracy\n"), "sweeps.iris.loss: 'test_accuracy'; valid:"),
    (OWN.replace("data=iris", "data=function"), "sweeps.iris.loss: no run of sweep iris logs test_acc"),
])
def test_bad_sequential_judging_is_refused_before_anything_trains(tmp_path, runner, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    if "data=function" in text:  # a regression task: the comparisons read its losses
        text = text.replace("loss: test_acc, tune: [lr], tune_seeds: 2, tune_on: val_acc",
                            "loss: test_loss, tune: [lr], tune_seeds: 2")
    result = runner.invoke(app, ["study", "run", str(_write(tmp_path, text)), "-q"])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "runs").exists()


def test_the_documented_example_plans(tmp_path, runner, monkeypatch):
    """docs/studies.md's sequential judging example is a valid study: planned (--dry-run), as written."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "studies.md").read_text(encoding="utf-8")
    section = text.split("### Sequential judging\n", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None, "docs/studies.md: the sequential judging section's yaml block"
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["study", "run", str(_write(tmp_path, block.group(1))), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "tuned sweep: tuning stage 24 members" in result.output  # 4 tuning seeds x 6 settings
