"""actbench search: the candidate spaces, behavioural deduplication, the rung schedule, and a tiny
search end to end (duplicates, rungs, the fresh-seed judgement, resume, bad input)."""

from __future__ import annotations

import csv
import math
import shlex
import shutil
from dataclasses import replace

import numpy as np
import pytest

from activation_bench.cli.main import app
from activation_bench.cli.search import SEARCH_HELP
from activation_bench.search import driver, fingerprint, halving, space
from tests.conftest import files_under

TASK = ["data=function", "data.n_samples=60", "model.hidden_dim=5", "epochs=2"]
SEARCH = ["--candidates", "12", "--seeds", "1", "--rungs", "2", "--final-seeds", "2", "-q"]


def test_core_space_is_the_papers_core_unit():
    core = space.core()
    assert len(core.unary) == 24 and len(core.binary) == 10
    assert core.size == 24 * 24 * 10
    assert core.candidate(0) == "x + x"
    assert core.candidates()[:3] == [core.candidate(i) for i in range(3)]
    assert "x * sigmoid(x)" in core.candidates()  # Swish: (x1 * x2)(x, sigmoid(x))


def test_compose_substitutes_and_prints_canonically():
    assert space.compose("x1 * x2", "x", "sigmoid(x)") == "x * sigmoid(x)"
    assert space.compose("sigmoid(x1) * x2", "x + 1", "-x") == "sigmoid(x + 1) * -x"
    assert space.compose("x1 - x2", "x", "x + 1") == "x - (x + 1)"


def test_draw_is_seeded_and_without_replacement():
    core = space.core()
    a, b, c = space.draw(core, 50, 0), space.draw(core, 50, 0), space.draw(core, 50, 1)
    assert a == b and a != c and len(set(a)) == 50
    assert space.draw(core, None, 0) == list(range(core.size))
    assert space.draw(core, 10**6, 0) == list(range(core.size))


def test_file_space(tmp_path):
    f = tmp_path / "space.yaml"
    f.write_text("unary: [x, 'sin(x)', 'x**2']\nbinary: ['x1 + x2', 'max(x1, x2)']\n")
    sp = space.load(str(f))
    assert sp.size == 2 * 3 * 3
    assert "x + sin(x)" in sp.candidates() and "max(sin(x), x ** 2)" in sp.candidates()


def test_fingerprint_finds_twins_and_the_probe_rejects():
    fns = ["x + sin(x)", "sin(x) + x", "x * sigmoid(x)", "sigmoid(x) * x", "sqrt(x)", "x - x", "max(x, 0)"]
    verdicts = fingerprint.dedup(fns, fingerprint.expr_probe())
    got = {v.fn: (v.status, v.same_as) for v in verdicts}
    assert got["x + sin(x)"] == ("unique", "")
    assert got["sin(x) + x"] == ("duplicate", "x + sin(x)")
    assert got["sigmoid(x) * x"] == ("duplicate", "x * sigmoid(x)")
    assert got["sqrt(x)"][0] == "rejected" and got["x - x"][0] == "rejected"
    reasons = {v.fn: v.reason for v in verdicts}
    assert "not finite" in reasons["sqrt(x)"] and "constant" in reasons["x - x"]


def test_fingerprint_rounds_relative():
    v = np.array([1.0, -2.5, 1e-30, 0.0, -0.0, 1e30])
    assert fingerprint.fingerprint(v) == fingerprint.fingerprint(v * (1 + 1e-9))
    assert fingerprint.fingerprint(v) != fingerprint.fingerprint(v * (1 + 1e-3))
    assert fingerprint.fingerprint(np.array([0.0])) == fingerprint.fingerprint(np.array([-0.0]))


def test_schedule_doubles_and_judges_on_fresh_seeds():
    rungs = halving.schedule(30, 2, 3, 10)
    assert [(r.epochs, r.seeds, r.final) for r in rungs[:2]] == [(30, (0, 1), False), (60, (0, 1, 2, 3), False)]
    assert rungs[2].epochs == 60 and rungs[2].final
    assert rungs[2].seeds == tuple(range(4, 14))
    assert not set(rungs[2].seeds) & {s for r in rungs[:2] for s in r.seeds}


def test_score_and_selection():
    assert halving.score([1e-2, 1e-4]) == pytest.approx(1e-3)
    assert math.isinf(halving.score([1.0, math.inf]))
    assert halving.member_score({"status": "diverged", "final_loss": 1.0}) == math.inf
    assert halving.member_score({"status": "complete", "final_val_loss": 0.5, "final_loss": 0.1}) == 0.5
    assert halving.member_score({"status": "complete", "final_val_loss": None, "final_loss": 0.1}) == 0.1
    scores = {"a": 3.0, "b": 1.0, "c": 1.0, "d": math.inf}
    assert halving.select(scores, ["a", "b", "c", "d"], 0.5) == ["b", "c"]
    assert halving.survivors(10, 0.25) == 3 and halving.survivors(1, 0.01) == 1


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_search_end_to_end_and_resume(runner, runs_dir):
    args = ["search", *TASK, *SEARCH, "--runs-dir", str(runs_dir), "--name", "s"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    root = runs_dir / "s"
    rows = _rows(root / "candidates.csv")
    assert list(rows[0]) == ["fn", "same_as", "status", "reason", "rung", "score"]
    assert len(rows) == 12
    trained = [r for r in rows if r["status"] == "trained"]
    assert trained and all(r["rung"] in ("1", "2") and r["score"] for r in trained)
    for r in rows:
        assert (r["status"] == "duplicate") == bool(r["same_as"])
        assert (r["status"] == "rejected") == bool(r["reason"])
    # rung 1: every distinct candidate on seed 0; rung 2: the best quarter and the baselines on fresh seeds
    rung1 = _rows(root / "rung1" / "results.csv")
    assert {r["activation"] for r in rung1} == {r["fn"] for r in trained}
    assert {r["seed"] for r in rung1} == {"0"}
    rung2 = _rows(root / "rung2" / "results.csv")
    survivors = {r["fn"] for r in trained if r["rung"] == "2"}
    assert len(survivors) == halving.survivors(len(trained), 0.25)
    assert {r["activation"] for r in rung2} == survivors | set(halving.BASELINES)
    assert {r["seed"] for r in rung2} == {"1", "2"}
    # the rung is a normal sweep directory
    assert runner.invoke(app, ["compare", str(root / "rung2")]).exit_code == 0

    # a kill in the final rung: its runs and the table lost; the same command finishes them alone
    before = (root / "candidates.csv").read_text()
    members = sorted(p for p in (root / "rung2").iterdir() if p.is_dir() and not p.name.startswith("."))
    for p in members[:3]:
        shutil.rmtree(p)
    (root / "candidates.csv").unlink()
    kept = {p: p.stat().st_mtime_ns for p in (root / "rung1").iterdir() if p.is_dir()}
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (root / "candidates.csv").read_text() == before
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())  # rung 1 not retrained


def test_search_keeps_the_best_of_the_screen(runner, runs_dir):
    result = runner.invoke(app, ["search", *TASK, *SEARCH, "--runs-dir", str(runs_dir), "--name", "s"])
    assert result.exit_code == 0, result.output
    rows = [r for r in _rows(runs_dir / "s" / "candidates.csv") if r["status"] == "trained"]
    survivors = {r["fn"] for r in rows if r["rung"] == "2"}
    final_val = {}
    for r in _rows(runs_dir / "s" / "rung1" / "results.csv"):  # epoch order: the last row is the final epoch
        final_val[r["activation"]] = float(r["val_loss"])
    best = sorted(final_val, key=lambda fn: final_val[fn])[: len(survivors)]
    assert survivors == set(best)
    # the screen's scores are the rung-1 losses (one seed: the geometric mean is the loss itself)
    for r in rows:
        if r["rung"] == "1":
            assert float(r["score"]) == pytest.approx(final_val[r["fn"]], rel=1e-12)


BAD = [
    (["--keep", "0"], "--keep must be in (0, 1]"),
    (["--rungs", "1"], "--rungs must be at least 2"),
    (["--seeds", "0"], "--seeds and --final-seeds must be at least 1"),
    (["--candidates", "0"], "--candidates must be at least 1"),
    (["seed=3"], "the search sets seed itself"),
    (["activation=relu"], "the search sets activation itself"),
    (["--space", "nosuch.yaml"], "no such file"),
    (["epochs=0"], "epochs must be a positive integer"),
    (["--name", "../up"], "invalid name"),
    (["--select-on", "test_acc"], "--select-on test_acc: the search selects on validation numbers only; valid: "
     "val_loss, val_acc"),
    (["--select-on", "val_acc"], "--select-on val_acc: data=function is a regression task"),
]


@pytest.mark.parametrize(("extra", "message"), BAD)
def test_search_bad_input(runner, runs_dir, extra, message):
    result = runner.invoke(app, ["search", *TASK, "--runs-dir", str(runs_dir), "-q", *extra])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert message in err
    assert files_under(runs_dir) == []


@pytest.mark.parametrize(("text", "message"), [
    ("unary: [x]\n", "non-empty lists 'unary' and 'binary'"),
    ("unary: [x]\nbinary: ['x1 + beta']\n", "uses beta"),
    ("unary: ['x + x1']\nbinary: ['x1 + x2']\n", "uses x1"),
    ("unary: ['__import__(\"os\")']\nbinary: ['x1 + x2']\n", "unknown function"),
    ("unary: [x]\nbinary: ['x1.real']\n", "attribute access"),
    ("[1, 2\n", "not a readable YAML file"),
])
def test_search_bad_space_file(runner, runs_dir, tmp_path, text, message):
    f = tmp_path / "space.yaml"
    f.write_text(text)
    result = runner.invoke(app, ["search", *TASK, "--space", str(f), "--runs-dir", str(runs_dir), "-q"])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "\n" not in result.stderr.strip()
    assert files_under(runs_dir) == []


def test_search_refuses_another_search_in_its_directory(runner, runs_dir):
    args = ["search", *TASK, *SEARCH, "--runs-dir", str(runs_dir), "--name", "s", "--candidates", "4"]
    assert runner.invoke(app, args).exit_code == 0
    before = files_under(runs_dir)
    result = runner.invoke(app, [*args[:-1], "5"])
    assert result.exit_code == 2 and "holds a different search" in result.stderr
    assert files_under(runs_dir) == before


@pytest.mark.slow
def test_search_through_a_launcher_equals_the_local_search(runner, tmp_path):
    local, launched = tmp_path / "local", tmp_path / "launched"
    args = ["search", *TASK, *SEARCH, "--name", "s"]
    assert runner.invoke(app, [*args, "--runs-dir", str(local)]).exit_code == 0
    result = runner.invoke(app, [*args, "--runs-dir", str(launched), "--launcher", "basic", "--jobs", "2"])
    assert result.exit_code == 0, result.output
    assert (launched / "s" / "candidates.csv").read_text() == (local / "s" / "candidates.csv").read_text()


def test_search_dry_run_counts_and_writes_nothing(runner, runs_dir):
    result = runner.invoke(app, ["search", *TASK, *SEARCH, "--runs-dir", str(runs_dir), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "12 candidates drawn" in result.stderr
    assert files_under(runs_dir) == []


# classification: iris, a 3 x 2 file space (9 candidates, 3 of them duplicates), 3 epochs
CLASSIFY = ["data=iris", "model.hidden_dim=5", "epochs=3", "lr=0.03"]
CLASSIFY_SEARCH = ["--seeds", "2", "--rungs", "2", "--keep", "0.25", "--final-seeds", "1", "-q"]


@pytest.fixture
def small_space(tmp_path):
    f = tmp_path / "space.yaml"
    f.write_text("unary: [x, 'sin(x)', 'tanh(x)']\nbinary: ['x1 + x2', 'x1 * x2']\n")
    return str(f)


def test_accuracy_score_and_selection():
    assert halving.member_score({"status": "complete", "final_val_loss": 0.5, "final_val_acc": 0.75}, "val_acc") == 0.75
    assert halving.member_score({"status": "diverged", "final_val_acc": 0.9}, "val_acc") == -math.inf
    assert halving.member_score({"status": "complete", "final_val_acc": None}, "val_acc") == -math.inf
    assert halving.member_score(None, "val_acc") == -math.inf
    assert halving.score([0.5, 0.75], "val_acc") == pytest.approx(0.625)  # arithmetic, not geometric
    assert halving.score([0.5, -math.inf], "val_acc") == -math.inf and halving.score([], "val_acc") == -math.inf
    scores = {"a": 0.5, "b": 0.9, "c": 0.9, "d": -math.inf, "e": 0.7}
    assert halving.select(scores, list("abcde"), 0.6, "val_acc") == ["b", "c", "e"]  # highest; ties: drawn first
    assert halving.select(scores, list("acbde"), 0.2, "val_acc") == ["c"]
    assert halving.select({"a": 0.1, "b": 0.2}, ["a", "b"], 0.5) == ["a"]  # val_loss: still the lowest


def test_select_on_changes_the_default_name_but_not_the_old_ones():
    s = driver.Settings(("data=function", "epochs=2"), "core", 12, 0, 1, 2, 0.25, 2)
    assert driver.default_name(s) == "search_data=function_epochs=2-b17998f7"  # the name before --select-on
    assert driver.default_name(replace(s, select_on="val_acc")) != driver.default_name(s)


def test_search_selects_on_validation_accuracy(runner, runs_dir, small_space):
    args = ["search", *CLASSIFY, *CLASSIFY_SEARCH, "--space", small_space, "--select-on", "val_acc",
            "--runs-dir", str(runs_dir), "--name", "s"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())  # the table's title wraps
    assert "mean final validation accuracy over 1 fresh seeds (higher is better)" in out
    assert "%" in out and "--loss test_acc" in out
    root = runs_dir / "s"
    rows = _rows(root / "candidates.csv")
    assert list(rows[0]) == ["fn", "same_as", "status", "reason", "rung", "mean_val_acc"]
    trained = [r["fn"] for r in rows if r["status"] == "trained"]
    acc: dict[str, dict[str, float]] = {}
    loss: dict[str, dict[str, float]] = {}
    for r in _rows(root / "rung1" / "results.csv"):  # epoch order: the last row of a run is its final epoch
        acc.setdefault(r["activation"], {})[r["seed"]] = float(r["val_acc"])
        loss.setdefault(r["activation"], {})[r["seed"]] = float(r["val_loss"])
    mean = {fn: sum(v.values()) / len(v) for fn, v in acc.items()}
    n = halving.survivors(len(trained), 0.25)
    best = sorted(trained, key=lambda fn: (-mean[fn], trained.index(fn)))[:n]
    survivors = [r["fn"] for r in rows if r["rung"] == "2"]
    assert set(survivors) == set(best)
    by_loss = sorted(trained, key=lambda fn: (halving.score(list(loss[fn].values())), trained.index(fn)))[:n]
    assert set(by_loss) != set(best)  # on this task the choice matters: val_loss would keep others
    for r in rows:
        if r["rung"] == "1":
            assert float(r["mean_val_acc"]) == pytest.approx(mean[r["fn"]], rel=1e-12)
    assert "select_on: val_acc" in (root / "search.yaml").read_text()

    # resumed with the same choice: nothing retrained; another choice is another search
    kept = {p: p.stat().st_mtime_ns for p in (root / "rung1").iterdir() if p.is_dir()}
    before = (root / "candidates.csv").read_text()
    assert runner.invoke(app, args).exit_code == 0
    assert (root / "candidates.csv").read_text() == before
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())
    files = files_under(runs_dir)
    result = runner.invoke(app, [a for a in args if a not in ("--select-on", "val_acc")])
    assert result.exit_code == 2 and "holds a different search" in result.stderr
    assert files_under(runs_dir) == files

    # the compare commands the help shows, on this search's final rung
    examples = [line.strip() for line in SEARCH_HELP.splitlines() if line.strip().startswith("actbench compare")]
    assert len(examples) == 2
    for example in examples:
        argv = shlex.split(example.replace("runs/<search>/rung3", str(root / "rung2")))[1:]
        result = runner.invoke(app, argv)
        assert result.exit_code == 0, (example, result.output)


def test_search_yaml_without_select_on_resumes(runner, runs_dir, small_space):
    """A search written before --select-on existed (no select_on in search.yaml) resumes as val_loss."""
    args = ["search", *TASK, "--space", small_space, "--seeds", "1", "--rungs", "2", "--final-seeds", "1", "-q",
            "--runs-dir", str(runs_dir), "--name", "s"]
    assert runner.invoke(app, args).exit_code == 0
    settings = runs_dir / "s" / "search.yaml"
    text = settings.read_text()
    assert "  select_on: val_loss\n" in text
    settings.write_text(text.replace("  select_on: val_loss\n", ""))
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert list(_rows(runs_dir / "s" / "candidates.csv")[0])[-1] == "score"
    result = runner.invoke(app, [*args, "--select-on", "val_acc"])  # a regression task: refused first
    assert result.exit_code == 2 and "regression task" in result.stderr
