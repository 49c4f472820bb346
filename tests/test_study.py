"""`actbench study`: a study file runs end to end, resumes, re-renders byte for byte, refuses bad
input before training, and every shipped study file validates and plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from activation_bench.cli.main import app
from tests.conftest import built_once, files_under

ROOT = Path(__file__).resolve().parents[1]
# every YAML file under docs/studies/ is a study file (study.yaml, fixed-lr.yaml, tuned.yaml, ...)
SHIPPED = sorted((ROOT / "docs" / "studies").glob("*/*.yaml"))

# stands for a document nested past Python's recursion limit, written when the test runs
DEEP = "(nested past the recursion limit)"

# two small classification tasks, two activations, two lrs, 4 seeds (2 tune, 2 judge)
STUDY = """\
title: A tiny study
description: gelu against relu on two class tables, lr tuned.
runs_dir: runs
output: out
sweeps:
  iris:
    grid: ['activation=gelu,relu', 'lr=1e-2,1e-1', 'seed=range(4)']
    overrides: [data=iris, epochs=3, model.hidden_dim=4, batch_size=32]
  wine:
    grid: ['activation=gelu,relu', 'lr=1e-2,1e-1', 'seed=range(4)']
    overrides: [data=wine, epochs=3, model.hidden_dim=4, batch_size=32]
comparisons:
  acc: {sweeps: [iris], metric: early_stop, loss: test_acc, tune: [lr], tune_seeds: 2, tune_on: val_acc}
  loss: {sweeps: [iris], metric: early_stop, loss: test_loss, tune: [lr], tune_seeds: 2, title: test log loss}
tables:
  both: {comparisons: [acc, loss]}
rankings:
  tasks: {sweeps: [iris, wine], metric: early_stop, loss: test_loss, tune: [lr], tune_seeds: 2}
figures:
  curves: {sweeps: [iris], loss: val_loss}
  tuned: {sweeps: [iris], loss: val_loss, tuned: loss}
  lr: {sweeps: [iris, wine], kind: sensitivity, x: lr, format: png}
"""
FILES = ["acc.md", "acc.csv", "acc.json", "loss.md", "loss.csv", "loss.json", "both.md", "both.csv", "both.json",
         "tasks.md", "tasks.csv", "tasks.json", "tasks-cd.svg", "curves.svg", "tuned.svg", "lr.png", "report.html"]


def _write(tmp_path: Path, text: str = STUDY) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _digests(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def study_run_in(root: Path) -> str:
    """`study run study.yaml -q` in root (a study's paths are relative to its folder): its output."""
    import os

    from typer.testing import CliRunner

    cwd = os.getcwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(app, ["study", "run", "study.yaml", "-q"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    return result.output


def _run_tiny_study(root: Path) -> None:
    """The tiny study run in root."""
    _write(root)
    study_run_in(root)


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """The tiny study, run once per test run and read by every xdist worker (conftest.built_once):
    the tests that use it work on a copy (done)."""
    return built_once(tmp_path_factory, "tiny-study", _run_tiny_study) / "study.yaml"


@pytest.fixture
def done(finished, tmp_path, monkeypatch):
    """A copy of the finished tiny study in tmp_path, the working directory."""
    import shutil

    shutil.copytree(finished.parent, tmp_path, dirs_exist_ok=True, copy_function=shutil.copy2)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "study.yaml"


def test_run_writes_every_table_figure_and_the_report(done, tmp_path):
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert (tmp_path / "runs" / "iris" / "results.csv").is_file() and (tmp_path / "runs" / "wine").is_dir()
    page = (out / "report.html").read_text(encoding="utf-8")
    for part in ('data-name="acc"', 'data-name="both"', 'data-name="tasks"', "lr.png", "<svg", "A tiny study",
                 "actbench sweep --runs-dir runs --name iris", "description: gelu against relu"):
        assert part in page, part
    assert "(lr 0.1" in (out / "tuned.svg").read_text()  # each curve names its tuned value
    # the budget check: in each comparison's markdown and JSON, and on the page
    assert "Budget check: share of judged runs" in (out / "acc.md").read_text()
    assert json.loads((out / "acc.json").read_text())["budget_check"]["column"] == "val_acc"
    assert 'class="notes budget">Budget check' in page
    assert "Generated" not in page  # no time of rendering: the page renders the same bytes again


def test_tables_equal_the_compare_and_rank_commands(done, tmp_path, runner):
    """Each comparison's files are what `actbench compare` with the same options writes."""
    args = ["compare", "runs/iris", "--metric", "early_stop", "--loss", "test_acc", "--tune", "lr", "--tune-seeds",
            "2", "--tune-on", "val_acc", "-f", "json", "-o", "acc.json"]
    assert runner.invoke(app, args).exit_code == 0
    assert (tmp_path / "acc.json").read_bytes() == (tmp_path / "out" / "acc.json").read_bytes()
    args = ["rank", "runs/iris", "runs/wine", "--metric", "early_stop", "--loss", "test_loss", "--tune", "lr",
            "--tune-seeds", "2", "-f", "markdown", "-o", "tasks.md"]
    assert runner.invoke(app, args).exit_code == 0
    assert (tmp_path / "tasks.md").read_bytes() == (tmp_path / "out" / "tasks.md").read_bytes()


def test_combined_table_holds_each_comparisons_numbers(done, tmp_path):
    out = tmp_path / "out"
    both = json.loads((out / "both.json").read_text())
    acc, loss = (json.loads((out / f"{n}.json").read_text()) for n in ("acc", "loss"))
    assert [p["name"] for p in both["parts"]] == ["acc", "loss"] and both["group_columns"] == ["activation"]
    for row in both["rows"]:
        a = next(r for r in acc["rows"] if r["activation"] == row["activation"])
        b = next(r for r in loss["rows"] if r["activation"] == row["activation"])
        assert row["acc"]["mean"] == a["mean"] and row["acc"]["lr"] == a["lr"]
        assert row["loss"]["geo_mean"] == b["geo_mean"] and row["loss"]["p_t_holm"] == b["p_t_holm"]
    md = (out / "both.md").read_text()
    assert "acc: mean test_acc [95% CI]" in md and "loss: geo mean [95% CI]" in md and "| relu |" in md


def test_rerun_trains_nothing_and_writes_the_same_bytes(done, tmp_path, runner):
    before = _digests(tmp_path / "out")
    summaries = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("summary.json")}
    # the first run typed `study.yaml`, this one the absolute path: the page is the same
    result = runner.invoke(app, ["study", "run", str(done)])
    assert result.exit_code == 0, result.output
    assert "to train" not in result.output  # no sweep had anything left
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("summary.json")} == summaries
    assert _digests(tmp_path / "out") == before
    assert runner.invoke(app, ["study", "tables", str(done)]).exit_code == 0
    assert _digests(tmp_path / "out") == before


def test_resume_trains_only_the_missing_members_to_the_same_tables(done, tmp_path, runner):
    import shutil

    before = _digests(tmp_path / "out")
    member = sorted(p for p in (tmp_path / "runs" / "iris").iterdir() if p.is_dir())[3]
    shutil.rmtree(member)
    (tmp_path / "runs" / "iris" / "results.csv").unlink()
    result = runner.invoke(app, ["study", "tables", str(done)])
    assert result.exit_code == 2 and "not finished: iris (1 of 16 members" in result.output
    result = runner.invoke(app, ["study", "run", str(done)])
    assert result.exit_code == 0, result.output
    assert "sweep iris: 1 of 16 members to train" in result.output and "sweep wine" not in result.output
    after = _digests(tmp_path / "out")
    # every table and figure the same; the report's provenance shows when the retrained member was made
    assert {k: v for k, v in after.items() if k != "report.html"} == {k: v for k, v in before.items()
                                                                       if k != "report.html"}


def test_dry_run_prints_the_plan_and_writes_nothing(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path)
    result = runner.invoke(app, ["study", "run", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "32 members to train" in result.output and "report.html" in result.output
    assert files_under(tmp_path) == [path]


def test_a_later_sweep_whose_folder_holds_another_grid_is_refused_before_any_training(runner, tmp_path, monkeypatch):
    """The wine sweep's folder holds a sweep of another grid: the dry run says so, and the run trains
    nothing (the iris sweep, planned first, is not started)."""
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path)
    (tmp_path / "runs" / "wine").mkdir(parents=True)
    (tmp_path / "runs" / "wine" / "sweep.yaml").write_text("overrides: [seed=0, data=wine]\n", encoding="utf-8")
    before = files_under(tmp_path)
    for command in (["study", "run", str(path), "--dry-run"], ["study", "run", str(path), "-q"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        assert result.stderr.strip() == (f"error: {path}: sweeps.wine: {Path('runs') / 'wine'} holds a different sweep "
                                         "(seed=0 data=wine); choose another --name")
    assert files_under(tmp_path) == before


ONE_RATE_EACH = """\
title: one rate per sweep
runs_dir: runs
output: out
sweeps:
  slow: {grid: ['activation=gelu,relu', 'seed=range(4)'], overrides: [lr=1e-2, data=iris, epochs=3, model.hidden_dim=4]}
  fast: {grid: ['activation=gelu,relu', 'seed=range(4)'], overrides: [lr=1e-1, data=iris, epochs=3, model.hidden_dim=4]}
comparisons:
  c: {sweeps: [slow, fast], metric: early_stop, loss: test_loss, tune: [lr], tune_seeds: 2}
"""


def test_a_key_set_once_per_sweep_to_different_values_is_tuned_over(runner, tmp_path, monkeypatch):
    """lr is swept in neither sweep but differs between them (compare reads each sweep's single values
    from its sweep.yaml): the study tunes over it; with one sweep it has one value and is refused."""
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, ONE_RATE_EACH)
    result = runner.invoke(app, ["study", "run", str(path), "-q"])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "out" / "c.json").read_text())
    assert doc["tuning"]["grid"] == {"lr": ["0.01", "0.1"]}
    assert sorted(r["activation"] for r in doc["rows"]) == ["gelu", "relu"]
    path = _write(tmp_path, ONE_RATE_EACH.replace("sweeps: [slow, fast]", "sweeps: [slow]"))
    result = runner.invoke(app, ["study", "run", str(path), "--dry-run"])
    assert result.exit_code == 2
    assert "'lr' is not swept in slow (swept: activation, seed) and has one value in all of them" in result.stderr


def test_output_runs_dir_and_report_name(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, STUDY.replace("output: out", "output: out\nreport: tiny.html").split("figures:")[0])
    result = runner.invoke(app, ["study", "run", str(path), "-q", "--runs-dir", "elsewhere", "-o", "tables"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "elsewhere" / "iris" / "results.csv").is_file() and not (tmp_path / "runs").exists()
    assert (tmp_path / "tables" / "both.md").is_file() and not (tmp_path / "out").exists()
    assert (tmp_path / "tables" / "tiny.html").is_file() and not (tmp_path / "tables" / "report.html").exists()


def test_the_files_thread_count_trains_the_runs_and_is_restored(runner, tmp_path, monkeypatch):
    """threads: N trains every sweep at N torch threads (each summary.json says so), whatever this
    process had, which it has again afterwards."""
    import torch

    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, "title: threads\nthreads: 3\nsweeps:\n  s: {grid: ['activation=gelu,relu'], "
                            "overrides: [epochs=2, data.n_samples=4, model.hidden_dim=3]}\n")
    before = torch.get_num_threads()
    plan = runner.invoke(app, ["study", "run", str(path), "--dry-run"])
    assert "2 members to train at 3 torch threads (the file's threads)" in plan.output
    result = runner.invoke(app, ["study", "run", str(path), "-q"])
    assert result.exit_code == 0, result.output
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "s").glob("*/summary.json")]
    assert len(summaries) == 2 and {s["threads"] for s in summaries} == {3}
    assert torch.get_num_threads() == before
    assert "<dt>runs trained on</dt><dd>" in (tmp_path / "report.html").read_text() and ", 3 torch threads" in \
        (tmp_path / "report.html").read_text()


BAD = [
    ("title: [\n", "not a YAML study file: line 2"),
    ("- a list\n", "a study file is a YAML mapping"),
    (STUDY.replace("  acc: {sweeps", "  acc: {colour: red, sweeps"), "comparisons.acc.colour: unknown key"),
    (STUDY.replace("title: A tiny study", "title: A tiny study\ntitel: typo"), "titel: unknown key"),
    (STUDY.replace("acc: {sweeps: [iris]", "acc: {sweeps: [irises]"), "comparisons.acc.sweeps: no sweep 'irises'"),
    (STUDY.replace("both: {comparisons: [acc, loss]}", "both: {comparisons: [acc, los]}"), "no comparison 'los'"),
    (STUDY.replace("'lr=1e-2,1e-1'", "'lr=range(a)'", 1), "sweeps.iris:"),
    (STUDY.replace("    overrides: [data=wine", "    dir: iris\n    overrides: [data=wine"),
     "sweeps.wine: writes the same directory 'iris' as sweep 'iris'"),
    (STUDY.replace("curves: {sweeps: [iris], loss: val_loss}", "curves: {sweeps: [iris], loss: train_eval_loss}"),
     "figures.curves.loss: no run of sweep iris logs train_eval_loss"),
    (STUDY.replace("lr: {sweeps: [iris, wine], kind: sensitivity, x: lr", "lr: {sweeps: [iris], kind: sensitivity, "
                   "x: model.depth"), "figures.lr.x: 'model.depth' is not swept"),
    (STUDY.replace("loss: test_acc, tune: [lr]", "loss: test_acc, tune: [batch_size]"),
     "comparisons.acc.tune: 'batch_size' is not swept"),
    (STUDY.replace("tune_on: val_acc}", "tune_on: val_acc, tune_grid: each}"),
     "comparisons.acc.tune_grid: 'each'; valid: shared, own"),
    (STUDY.replace("metric: early_stop, loss: test_acc", "metric: eventually, loss: test_acc"),
     "comparisons.acc.metric: unknown metric 'eventually'"),
    (STUDY.replace("  loss: {sweeps", "  acc: {sweeps"), "key 'acc' given twice"),
    (STUDY.replace("  both:", "  acc:"), "tables.acc: writes acc.md, as comparisons.acc does"),
    (STUDY.replace("format: png", "format: gif"), "figures.lr.format: 'gif'"),
    (STUDY.replace("tuned: loss}", "tuned: los}"), "figures.tuned.tuned: no comparison 'los'"),
    (STUDY.replace("tuned: loss}", "tuned: loss, x: lr}"), "figures.tuned.x: applies to kind: sensitivity"),
    (STUDY.replace("output: out", "output: ../out"), "output: '../out' must be a folder inside"),
    (STUDY.replace("output: out", "output: out\nreport: page.txt"), "report: 'page.txt': the page's file name ends"),
    (STUDY.replace("sweeps: [iris, wine], metric", "sweeps: [iris], metric"), "rankings.tasks: only one task"),
    (STUDY.replace("  iris:\n", "  ../iris:\n").replace("[iris", "[../iris"), "is not a usable name"),
    (STUDY.replace("output: out", "output: out\nthreads: 0"), "threads: 0: a count of torch threads, 1 or more"),
    ("a: &a [*a, *a]\n", "a YAML alias refers to the value that holds it"),
    (STUDY + "x: &x {y: *x}\n", "found unconstructable recursive node"),  # PyYAML refuses mappings itself
    ("l0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
     + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 7)), "more than 100,000 values"),
    # past Python's recursion limit in PyYAML (the text is sized in the test: see _deeper_than_the_limit)
    (DEEP, "nested too deeply"),
    ("title: " + "[" * 60 + "]" * 60 + "\n", "nested more than 50 levels deep"),
    (STUDY.replace("runs_dir: runs", "runs_dir: /etc"), "runs_dir: '/etc' must be a folder under the working"),
    (STUDY.replace("runs_dir: runs", "runs_dir: ../runs"), "runs_dir: '../runs' must be a folder under the"),
    (STUDY.replace("runs_dir: runs", "runs_dir: ~/runs"), "runs_dir: '~/runs' must be a folder under the"),
]


@pytest.mark.parametrize("text, message", BAD, ids=[m for _, m in BAD])
def test_bad_study_files_are_refused_before_anything_is_written(runner, tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, _deeper_than_the_limit() if text == DEEP else text)
    for command in (["study", "run", str(path)], ["study", "run", str(path), "--dry-run"],
                    ["study", "tables", str(path)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        err = result.stderr.strip()
        assert err.startswith("error: ") and "\n" not in err, err
        assert message in err, err
    assert files_under(tmp_path) == [path]


def _deeper_than_the_limit() -> str:
    """A flow sequence nested past the recursion limit in force now (1,000, or 2,000 once torch's inductor
    raised it in this worker): PyYAML's composer spends two frames a level, so 0.6 x the limit levels
    overflow it. Not a fixed 5,000: PyYAML's scanner is quadratic in the brackets it reads ahead, and
    those cost 2-4 s a command."""
    import sys

    levels = int(0.6 * sys.getrecursionlimit())
    return "title: " + "[" * levels + "]" * levels + "\n"


def test_missing_file_and_stray_arguments(runner, tmp_path):
    result = runner.invoke(app, ["study", "run", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "no such study file" in result.stderr
    path = _write(tmp_path)
    result = runner.invoke(app, ["study", "run", str(path), "epochs=3"])
    assert result.exit_code == 2 and "only hydra.launcher.* settings" in result.stderr
    result = runner.invoke(app, ["study", "run", str(path), "hydra.launcher.n_jobs=2"])
    assert result.exit_code == 2 and "add --launcher" in result.stderr


def test_a_failing_part_writes_no_output(runner, tmp_path, monkeypatch):
    """A comparison that fails only on the results (a baseline no run has) leaves no output at all."""
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, STUDY.replace("tune_on: val_acc}", "tune_on: val_acc, baseline: activation=elu}"))
    result = runner.invoke(app, ["study", "run", str(path), "-q"])
    assert result.exit_code == 2 and "comparisons.acc: --baseline activation=elu: no runs" in result.stderr
    assert not (tmp_path / "out").exists()


def test_shipped_study_plans_and_writes_nothing(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = ROOT / "docs" / "studies" / "gelu-vs-relu" / "study.yaml"
    result = runner.invoke(app, ["study", "run", str(path), "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert "240 members to train" in result.output
    assert files_under(tmp_path) == []


def test_every_shipped_study_is_planned_by_its_docs():
    """Each shipped study file is named by a doc's `actbench study run` example, which
    tests/test_examples.py plans (--dry-run: validated, every member composed) on every run."""
    from tests.test_examples import EXAMPLES

    planned = {ex.argv[2] for ex in EXAMPLES.values() if ex.argv[:2] == ["study", "run"]}
    assert len(SHIPPED) >= 8
    assert {str(p.relative_to(ROOT)) for p in SHIPPED} <= planned


def test_critical_difference_diagram_is_the_same_bytes_in_every_process(tmp_path):
    """scikit-posthocs orders its crossbars by string hashing; the diagram must not depend on it."""
    import os
    import subprocess
    import sys

    script = (
        "import numpy as np, pandas as pd, sys\n"
        "from activation_bench.analysis.loading import load\n"
        "from activation_bench.analysis import rank as rk\n"
        "from activation_bench.render import rank_tables\n"
        "from activation_bench.study.outputs import image\n"
        "rows = [dict(task=t, activation=a, seed=s, epoch=1, train_loss=float(1 + 0.01 * i + 0.001 * s + 0.1 * t))\n"
        "        for t in range(6) for i, a in enumerate('abcdefgh') for s in range(3)]\n"
        "pd.DataFrame(rows).to_csv(sys.argv[1], index=False)\n"
        "res = rk.rank(load([sys.argv[1]]), 'final', 'activation', ['task'])\n"
        "sys.stdout.write(image(rank_tables.draw_cd(res), 'svg').decode())\n"
    )
    out = []
    # two hash seeds: without render.rank_tables._sorted_crossbars these two already draw different
    # bytes (as does a third, which cost 2 s more: a process that imports scikit-posthocs)
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "r.csv")], capture_output=True,
                              text=True, env=env, check=True)
        out.append(done.stdout)
    assert out[0] == out[1] and "<svg" in out[0]


def test_the_spec_mirrors_the_analysis_choices_it_checks():
    # spec.py repeats these tuples so that loading a study file imports no analysis module
    from activation_bench.analysis import rank, tune
    from activation_bench.runs import contents
    from activation_bench.study import spec

    assert spec.TUNE_ON == tune.TUNE_ON and spec.TUNE_GRIDS == tune.TUNE_GRIDS
    assert tuple(spec.POSTHOCS) == tuple(rank.POSTHOCS) and tuple(spec.COLUMNS) == tuple(contents.COLUMNS)


def test_every_shipped_study_pins_the_eager_engine():
    """A published study keeps its tables whatever the machine compiled before: every sweep of every
    shipped study file trains with engine=eager (the default, engine=auto, would take a compiled
    step saved on the machine)."""
    import yaml

    root = Path(__file__).resolve().parents[1] / "docs" / "studies"
    sweeps = [(path.name, name, sweep) for path in sorted(root.rglob("*.yaml"))
              for name, sweep in (yaml.safe_load(path.read_text(encoding="utf-8")).get("sweeps") or {}).items()]
    assert len(sweeps) >= 50
    for file, name, sweep in sweeps:
        assert "engine=eager" in [str(w) for w in [*sweep.get("overrides", []), *sweep.get("grid", [])]], (file, name)


def _tuned_study(text: str = STUDY, judge: str = "    judge: chosen\n") -> str:
    """The tiny study with both sweeps tuned (judge: chosen: the comparisons and the ranking choose)."""
    for data in ("iris", "wine"):
        line = f"    overrides: [data={data}, epochs=3, model.hidden_dim=4, batch_size=32]\n"
        text = text.replace(line, line + judge)
    return text


def test_tuned_sweeps_write_the_full_grids_tables_from_fewer_members(done, tmp_path, runner, monkeypatch):
    """judge: chosen: the judging seeds train at the union of what acc (val_acc), loss (val_loss) and the
    ranking choose; every table is byte for byte the full grid's; a re-run trains nothing. The figures
    are built, not drawn (the tables are compared; the tests above draw them)."""
    from tests.conftest import leave_files_undrawn

    leave_files_undrawn(monkeypatch)
    path = tmp_path / "tuned.yaml"
    path.write_text(_tuned_study().replace("runs_dir: runs", "runs_dir: staged").replace("output: out",
                                                                                           "output: out-tuned"))
    dry = runner.invoke(app, ["study", "run", str(path), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "staged/wine: tuned sweep: tuning stage 8 members (24 member-epochs), judging stage 4 members" in dry.output
    assert "judging stages together: 8 to 16 members, once the tuning stages have chosen" in dry.output
    result = runner.invoke(app, ["study", "run", str(path), "-q"])
    assert result.exit_code == 0, result.output
    assert "rankings.tasks: chose" in result.output and "comparisons.acc: chose" in result.output
    for name in ("acc", "loss", "both", "tasks"):
        for ext in ("csv", "md", "json"):  # the budget check counts the runs the verdict reads: the same
            assert (tmp_path / "out-tuned" / f"{name}.{ext}").read_bytes() == \
                (tmp_path / "out" / f"{name}.{ext}").read_bytes(), (name, ext)
    trained = {d: len([r for r in (tmp_path / "staged" / d).iterdir() if r.is_dir()]) for d in ("iris", "wine")}
    assert trained["wine"] == 8 + 4 and 8 + 4 <= trained["iris"] <= 16  # iris: the union of three choices
    doc = json.loads((tmp_path / "staged" / "iris" / "tuning.json").read_text())
    assert [c["name"] for c in doc["choices"]] == ["comparisons.acc", "comparisons.loss", "rankings.tasks"]
    again = runner.invoke(app, ["study", "run", str(path), "--dry-run"])
    assert "0 members to train" in again.output and "at the chosen values" in again.output
    tables = runner.invoke(app, ["study", "tables", str(path)])
    assert tables.exit_code == 0, tables.output


@pytest.mark.parametrize("edit, message", [
    (lambda t: _tuned_study(t, "    judge: sometimes\n"), "sweeps.iris.judge: 'sometimes'; valid: all, chosen"),
    (lambda t: _tuned_study(t, "    metric: final\n"), "sweeps.iris.metric: the metric of a sweep's own choice"),
    (lambda t: _tuned_study(t, "    tune: [lr]\n    judge: all\n"), "sweeps.iris.judge: all: a sweep that declares"),
    (lambda t: _tuned_study(t, "    tune: [model.hidden_dim]\n"),
     "sweeps.iris: tune: model.hidden_dim: the grid does not vary 'model.hidden_dim'"),
    (lambda t: _tuned_study(t, "    tune: [lr]\n    tune_seeds: 3\n"),
     "sweeps.iris: --tune-seeds 3: 4 seeds leave 1 to evaluate on"),
    (lambda t: _tuned_study(t.replace("tune: [lr], tune_seeds: 2, title", "title")),
     "comparisons.loss: reads sweep iris, whose judging seeds train at the chosen values only"),
    (lambda t: _tuned_study(t.replace("'lr=1e-2,1e-1', ", "").replace("hidden_dim=4", "hidden_dim=4, lr=1e-2")),
     "comparisons.acc.tune: 'lr' is not swept in iris"),
])
def test_tuned_sweep_bad_input_is_one_line_before_training(tmp_path, runner, monkeypatch, edit, message):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, edit(STUDY))
    result = runner.invoke(app, ["study", "run", str(path)])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "runs").exists()


def test_a_halved_sweep_in_a_study(tmp_path, runner, monkeypatch):
    """A sweep's own tuning with halving: its rungs, then the judging stage; its comparisons choose
    among the settings that reached the end (tune_grid: own). Its figure is built, not drawn."""
    from tests.conftest import leave_files_undrawn

    leave_files_undrawn(monkeypatch)
    text = STUDY.replace("tune_on: val_acc}", "tune_on: val_acc, tune_grid: own}").replace(
        "tune_seeds: 2, title", "tune_seeds: 2, tune_grid: own, title")
    text = text.replace("    overrides: [data=iris, epochs=3, model.hidden_dim=4, batch_size=32]\n",
                        "    overrides: [data=iris, epochs=4, model.hidden_dim=4, batch_size=32]\n"
                        "    tune: [lr]\n    tune_seeds: 2\n    metric: early_stop\n    halving: 2\n")
    text = text.split("tables:\n")[0] + "figures:\n  curves: {sweeps: [iris], loss: val_loss}\n"
    path = _write(tmp_path, text)
    monkeypatch.chdir(tmp_path)
    dry = runner.invoke(app, ["study", "run", str(path), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "halving (ETA 2): rungs at 2, 4 epochs; the tuning stage takes 24 member-epochs instead of 32" in dry.output
    result = runner.invoke(app, ["study", "run", str(path), "-q"])
    assert result.exit_code == 0, result.output
    assert "halving rung 1/2 (2 of 4 epochs): 2 of 4 settings go on" in result.output
    assert len([d for d in (tmp_path / "runs" / "iris").iterdir() if d.is_dir() and d.name[0] != "."]) == 4 + 4
    bad = _write(tmp_path, text.replace(", tune_grid: own, title", ", title"))
    refused = runner.invoke(app, ["study", "run", str(bad)])
    assert refused.exit_code == 2 and "comparisons.loss.tune_grid: reads sweep iris, halved" in refused.output


def test_a_sweeps_own_sequential_judging_in_a_study(tmp_path, runner, monkeypatch):
    """judge_seeds_max, look_every, margin on a sweep with its own tune: its judging seeds come a look
    at a time, as sweep --judge-seeds-max ... adds them; the judging record is written."""
    monkeypatch.chdir(tmp_path)
    text = STUDY.split("tables:\n")[0].replace("'seed=range(4)'", "'seed=range(8)'").replace(
        "    overrides: [data=iris, epochs=3, model.hidden_dim=4, batch_size=32]\n",
        "    overrides: [data=iris, epochs=3, model.hidden_dim=4, batch_size=32]\n    tune: [lr]\n    tune_seeds: 2\n"
        "    judge_seeds_max: 6\n    look_every: 2\n    margin: 1.5\n")
    text = text.replace("tune_on: val_acc}", "tune_on: val_acc, tune_grid: own}").replace(
        "acc: {sweeps: [iris], metric: early_stop, loss: test_acc, tune: [lr], tune_seeds: 2, tune_on: val_acc, "
        "tune_grid: own}", "acc: {sweeps: [iris], metric: final, loss: test_loss, tune: [lr], tune_seeds: 2}")
    path = _write(tmp_path, text)
    result = runner.invoke(app, ["study", "run", str(path), "-q"])
    assert result.exit_code == 0, result.output
    assert "look after 2 judging seeds" in result.output
    assert json.loads((tmp_path / "runs" / "iris" / "judging.json").read_text())["look_every"] == 2
    for old, new, message in (("look_every: 2", "look_every: 7", "look_every 7: larger than the 6 judging seeds"),
                              ("    margin: 1.5\n", "", "sweeps.iris.judge_seeds_max: sequential judging stops")):
        refused = runner.invoke(app, ["study", "run", str(_write(tmp_path, text.replace(old, new))), "--dry-run"])
        assert refused.exit_code == 2 and message in refused.output, refused.output
