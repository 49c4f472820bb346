"""actbench search: the candidate spaces, behavioural deduplication, the rung schedule, and a tiny
search end to end (duplicates, rungs, the fresh-seed judgement, resume, bad input)."""

from __future__ import annotations

import csv
import math
import shlex
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from activation_bench.cli.main import app
from activation_bench.cli.search import SEARCH_HELP
from activation_bench.search import driver, fingerprint, halving, scores, space
from tests.conftest import files_under

TASK = ["data=function", "data.n_samples=60", "model.hidden_dim=5", "epochs=2"]
SEARCH = ["--candidates", "12", "--seeds", "1", "--rungs", "2", "--final-seeds", "2", "--tune-seeds", "2",
          "--lrs", "3e-3,3e-2", "-q"]


def test_core_space_is_the_papers_core_unit():
    core = space.core()
    assert len(core.unary) == 24 and len(core.binary) == 10
    assert core.size == 24 * 24 * 10
    assert core.candidate(0) == "x + x"
    candidates = core.candidates()  # every one composed and printed: half a second, done once
    assert candidates[:3] == [core.candidate(i) for i in range(3)]
    assert "x * sigmoid(x)" in candidates  # Swish: (x1 * x2)(x, sigmoid(x))


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


def test_schedule_doubles_and_judges_on_fresh_seeds():
    rungs = halving.schedule(30, 2, 3, 10)
    assert [(r.epochs, r.seeds, r.final) for r in rungs[:2]] == [(30, (0, 1), False), (60, (0, 1, 2, 3), False)]
    assert rungs[2].epochs == 60 and rungs[2].final
    assert rungs[2].tune_seeds == (4, 5, 6, 7) and rungs[2].seeds == tuple(range(8, 18))
    assert not set(rungs[2].seeds + rungs[2].tune_seeds) & {s for r in rungs[:2] for s in r.seeds}
    assert halving.schedule(30, 2, 3, 10, tune_seeds=2)[2].seeds == tuple(range(6, 16))


def test_score_and_selection():
    assert halving.score([1e-2, 1e-4]) == pytest.approx(1e-3)
    assert math.isinf(halving.score([1.0, math.inf]))
    scores_ = {"a": 3.0, "b": 1.0, "c": 1.0, "d": math.inf}
    assert halving.select(scores_, ["a", "b", "c", "d"], 0.5) == ["b", "c"]
    assert halving.survivors(10, 0.25) == 3 and halving.survivors(1, 0.01) == 1


def test_candidate_scores_take_each_candidates_best_learning_rate():
    import pandas as pd

    t = pd.DataFrame([("a", "0.001", "0", 1e-2), ("a", "0.001", "1", 1e-4), ("a", "0.01", "0", 1e-4),
                      ("a", "0.01", "1", 1e-4), ("b", "0.001", "0", 0.5), ("b", "0.01", "0", math.inf),
                      ("b", "0.01", "1", 0.1), ("b", "0.001", "1", 0.5), ("c", "0.01", "0", 2.0)],
                     columns=scores.COLUMNS)
    got = scores.candidate_scores(t, {"a": ["1e-3", "0.01"], "b": ["0.01", "0.001"], "c": ["0.01"]}, [0, 1], "val_loss")
    assert got["a"] == (pytest.approx(1e-4), "0.01")
    assert got["b"] == (pytest.approx(0.5), "0.001")  # a diverged seed makes 0.01 infinite
    assert got["c"] == (math.inf, "0.01")  # a missing seed: the worst score
    tie = pd.DataFrame([("a", "0.1", "0", 1.0), ("a", "0.01", "0", 1.0)], columns=scores.COLUMNS)
    assert scores.candidate_scores(tie, {"a": ["0.1", "0.01"]}, [0], "val_loss")["a"][1] == "0.01"  # smaller lr
    acc = scores.candidate_scores(t.assign(value=[0.5, 0.7, 0.9, 0.9, 0.2, -math.inf, 0.3, 0.3, 0.1]),
                                  {"a": ["0.001", "0.01"], "b": ["0.001", "0.01"]}, [0, 1], "val_acc")
    assert acc["a"] == (pytest.approx(0.9), "0.01") and acc["b"] == (pytest.approx(0.25), "0.001")


def test_spearman_matches_scipy():
    from scipy.stats import spearmanr

    x, y = [3.0, 1.0, 2.0, 5.0, 4.0, 4.0], [0.3, 0.2, 0.25, 0.9, 0.1, 0.5]
    assert scores.spearman(x, y) == pytest.approx(spearmanr(x, y).statistic)
    assert math.isnan(scores.spearman([1.0, 2.0], [1.0, 2.0]))
    assert scores.spearman([1.0, 2.0, math.inf, 3.0], [1.0, 2.0, 5.0, 3.0]) == pytest.approx(1.0)


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _early(path, column="val_loss"):
    """(activation, lr, seed) -> (the lowest val_loss, `column` at its first epoch) of a rung's results.csv, by hand."""
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    for r in _rows(path):
        key = (r["activation"], r["lr"], r["seed"])
        v = float(r["val_loss"])
        if key not in out or v < out[key][0]:
            out[key] = (v, float(r[column]))
    return out


def _geo(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Result]:
    """The tiny search of TASK and SEARCH, run once for the module: (its folder, the command's
    result). Tests read it; one that changes it works on a copy (a copied search resumes: its files
    hold no absolute paths)."""
    runs_dir = tmp_path_factory.mktemp("search") / "runs"
    result = CliRunner().invoke(app, ["search", *TASK, *SEARCH, "--runs-dir", str(runs_dir), "--name", "s"])
    assert result.exit_code == 0, result.output
    return runs_dir / "s", result


def test_search_end_to_end_and_resume(runner, searched, tmp_path):
    root, result = searched
    rows = _rows(root / "candidates.csv")
    assert list(rows[0]) == ["fn", "same_as", "status", "reason", "rung", "score", "screen_lr", "lr", "judged"]
    assert len(rows) == 12
    trained = [r for r in rows if r["status"] == "trained"]
    assert trained and all(r["rung"] in ("1", "2") and r["score"] and r["screen_lr"] for r in trained)
    for r in rows:
        assert (r["status"] == "duplicate") == bool(r["same_as"])
        assert (r["status"] == "rejected") == bool(r["reason"])
    # rung 1: every distinct candidate at both screening learning rates on seed 0
    rung1 = _rows(root / "rung1" / "results.csv")
    assert {(r["activation"], r["lr"]) for r in rung1} == {(r["fn"], lr) for r in trained for lr in ("0.003", "0.03")}
    assert {r["seed"] for r in rung1} == {"0"}
    # rung 2, the judgement: the best quarter and the baselines, every lr on the tuning seeds 1-2, then
    # each at its chosen lr on the judging seeds 3-4
    rung2 = _rows(root / "rung2" / "results.csv")
    survivors = [r["fn"] for r in trained if r["rung"] == "2"]
    assert len(survivors) == halving.survivors(len(trained), 0.25)
    fns = set(survivors) | set(halving.BASELINES)
    assert {r["activation"] for r in rung2} == fns
    tuning = {(r["activation"], r["lr"], r["seed"]) for r in rung2 if r["seed"] in ("1", "2")}
    assert tuning == {(fn, lr, seed) for fn in fns for lr in ("0.003", "0.03") for seed in ("1", "2")}
    early = _early(root / "rung2" / "results.csv", "test_loss")
    chosen = {}
    for fn in fns:  # the lowest mean log10 of the early-stopped val_loss on the tuning seeds; ties: smaller lr
        per = {lr: sum(math.log10(early[(fn, lr, s)][0]) for s in ("1", "2")) for lr in ("0.003", "0.03")}
        chosen[fn] = min(per, key=lambda lr: (per[lr], float(lr)))
    judging = {(r["activation"], r["lr"], r["seed"]) for r in rung2 if r["seed"] in ("3", "4")}
    assert judging == {(fn, chosen[fn], seed) for fn in fns for seed in ("3", "4")}
    for r in rows:
        if r["fn"] in survivors:
            assert r["lr"] == chosen[r["fn"]]
            judged = _geo([early[(r["fn"], chosen[r["fn"]], s)][1] for s in ("3", "4")])
            assert float(r["judged"]) == pytest.approx(judged, rel=1e-9)
        else:
            assert r["lr"] == "" and r["judged"] == ""
    # the verdict is compare --tune lr on the rung, printed the same by the command it names
    command = result.stderr.split("the same table: ")[1].strip()
    assert command == (f"actbench compare {root / 'rung2'} --metric early_stop --loss test_loss --tune lr "
                       "--baseline activation=relu")
    again = runner.invoke(app, shlex.split(command)[1:])
    assert again.exit_code == 0 and again.stdout.strip() and result.stdout.endswith(again.stdout)
    assert "relu" in result.stdout and "lr (tuned)" in result.stdout and "baseline" in result.stdout
    yaml_text = (root / "search.yaml").read_text()
    assert "spearman_screen_vs_judged" in yaml_text and "optimism" in yaml_text

    # a kill in the final rung: its runs and the table lost; the same command finishes them alone
    before = (root / "candidates.csv").read_text()
    root = shutil.copytree(root, tmp_path / "runs" / "s")  # the copy is killed and resumed
    args = ["search", *TASK, *SEARCH, "--runs-dir", str(tmp_path / "runs"), "--name", "s"]
    members = sorted(p for p in (root / "rung2").iterdir() if p.is_dir() and not p.name.startswith("."))
    for p in [*members[:3], *members[-2:]]:  # tuning and judging runs
        shutil.rmtree(p)
    (root / "candidates.csv").unlink()
    kept = {p: p.stat().st_mtime_ns for p in (root / "rung1").iterdir() if p.is_dir()}
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (root / "candidates.csv").read_text() == before
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())  # rung 1 not retrained


def test_search_keeps_the_best_of_the_screen_and_measures_agreement(runner, runs_dir):
    from scipy.stats import spearmanr

    extra = ["--screen-lrs", "3e-3,3e-2", "--rungs", "3", "--candidates", "16", "--keep", "0.5"]
    result = runner.invoke(app, ["search", *TASK, *SEARCH, *extra, "--runs-dir", str(runs_dir), "--name", "s"])
    assert result.exit_code == 0, result.output
    root = runs_dir / "s"
    rows = [r for r in _rows(root / "candidates.csv") if r["status"] == "trained"]
    order = [r["fn"] for r in rows]
    early = _early(root / "rung1" / "results.csv")
    best = {}  # per candidate: the best of its two learning rates (one seed: the value itself), smaller on ties
    for fn in order:
        best[fn] = min((early[(fn, lr, "0")][0], float(lr), lr) for lr in ("0.003", "0.03"))
    ranked = sorted(order, key=lambda fn: (best[fn][0], order.index(fn)))
    reached2 = [r["fn"] for r in rows if r["rung"] in ("2", "3")]
    assert set(reached2) == set(ranked[: halving.survivors(len(order), 0.5)])
    for r in rows:
        assert r["screen_lr"] == best[r["fn"]][2]
        if r["rung"] == "1":
            assert float(r["score"]) == pytest.approx(best[r["fn"]][0], rel=1e-12)
    # rung 2 trains each survivor at its rung-1 learning rate only, on seeds 0-1
    rung2 = _rows(root / "rung2" / "results.csv")
    assert {(r["activation"], r["lr"]) for r in rung2} == {(fn, best[fn][2]) for fn in reached2}
    # agreement: rung 2's score against the judged score; the screen's score against the fresh tuning seeds
    doc = __import__("yaml").safe_load((root / "search.yaml").read_text())["agreement"]
    survivors = [r["fn"] for r in rows if r["rung"] == "3"]
    early2 = _early(root / "rung2" / "results.csv")
    screen = {fn: _geo([early2[(fn, best[fn][2], s)][0] for s in ("0", "1")]) for fn in survivors}
    judged = {r["fn"]: float(r["judged"]) for r in rows if r["rung"] == "3"}
    assert doc["judged"] == len(survivors) >= 3
    rho = spearmanr([screen[f] for f in survivors], [judged[f] for f in survivors]).statistic
    assert doc["spearman_screen_vs_judged"] == pytest.approx(rho, abs=1e-3)
    early3 = _early(root / "rung3" / "results.csv")
    fresh = {fn: _geo([early3[(fn, best[fn][2], s)][0] for s in ("2", "3")]) for fn in survivors}
    ratio = _geo([fresh[f] / screen[f] for f in survivors])
    assert doc["optimism_n"] == len(survivors) and doc["optimism"] == pytest.approx(ratio, rel=1e-3)
    assert doc["tune_seeds"] == [2, 3] and doc["judge_seeds"] == [4, 5]
    # the verdict's budget check: each judged function at its chosen lr (analysis/budget.py)
    budget = __import__("yaml").safe_load((root / "search.yaml").read_text())["budget_check"]
    assert budget["tuned_keys"] == ["lr"] and {r["activation"] for r in budget["rows"]} >= set(survivors)
    assert all(r["runs"] + r["diverged"] == 2 for r in budget["rows"])  # judging seeds 4 and 5


BAD = [
    (["--keep", "0"], "--keep must be in (0, 1]"),
    (["--rungs", "1"], "--rungs must be at least 2"),
    (["--seeds", "0"], "--seeds must be at least 1"),
    (["--final-seeds", "1"], "--final-seeds must be at least 2: the verdict's paired statistics"),
    (["--tune-seeds", "0"], "--tune-seeds and --judge must be at least 1"),
    (["--judge", "0"], "--tune-seeds and --judge must be at least 1"),
    (["lr=0.01"], "the search sets lr itself (--screen-lrs in the screen, --lrs in the judgement)"),
    (["--lrs", "1e-3"], "--lrs needs at least 2 learning rates"),
    (["--lrs", "1e-3,fast"], "--lrs 1e-3,fast: expected a comma list of positive numbers"),
    (["--screen-lrs", "-1"], "--screen-lrs -1: expected a comma list of positive numbers"),
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


def test_search_refuses_another_search_in_its_directory(runner, runs_dir, searched):
    shutil.copytree(searched[0], runs_dir / "s")  # a search of 12 candidates
    before = files_under(runs_dir)
    result = runner.invoke(app, ["search", *TASK, *SEARCH, "--runs-dir", str(runs_dir), "--name", "s",
                                 "--candidates", "4"])
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
CLASSIFY = ["data=iris", "model.hidden_dim=5", "epochs=3"]
CLASSIFY_SEARCH = ["--seeds", "2", "--rungs", "2", "--keep", "0.25", "--final-seeds", "2", "--tune-seeds", "2",
                   "--screen-lrs", "0.03", "--lrs", "0.01,0.03", "-q"]


@pytest.fixture
def small_space(tmp_path):
    f = tmp_path / "space.yaml"
    f.write_text("unary: [x, 'sin(x)', 'tanh(x)']\nbinary: ['x1 + x2', 'x1 * x2']\n")
    return str(f)


def test_accuracy_score_and_selection():
    assert halving.score([0.5, 0.75], "val_acc") == pytest.approx(0.625)  # arithmetic, not geometric
    assert halving.score([0.5, -math.inf], "val_acc") == -math.inf and halving.score([], "val_acc") == -math.inf
    scores = {"a": 0.5, "b": 0.9, "c": 0.9, "d": -math.inf, "e": 0.7}
    assert halving.select(scores, list("abcde"), 0.6, "val_acc") == ["b", "c", "e"]  # highest; ties: drawn first
    assert halving.select(scores, list("acbde"), 0.2, "val_acc") == ["c"]
    assert halving.select({"a": 0.1, "b": 0.2}, ["a", "b"], 0.5) == ["a"]  # val_loss: still the lowest


def test_the_default_name_follows_the_settings():
    s = driver.Settings(("data=function", "epochs=2"), "core", 12, 0, 1, 2, 0.25, 2)
    assert driver.default_name(s) == driver.default_name(replace(s))
    assert driver.default_name(s).startswith("search_data=function_epochs=2-")
    for change in ({"select_on": "val_acc"}, {"lrs": (1e-3, 1e-1)}, {"screen_lrs": (1e-2,)}, {"tune_seeds": 3},
                   {"judge": 4}):
        assert driver.default_name(replace(s, **change)) != driver.default_name(s), change


def test_search_selects_on_validation_accuracy(runner, runs_dir, small_space):
    args = ["search", *CLASSIFY, *CLASSIFY_SEARCH, "--space", small_space, "--select-on", "val_acc",
            "--runs-dir", str(runs_dir), "--name", "s"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())  # the table's title wraps
    assert "early_stop of test_acc" in out and "lr (tuned)" in out and "%" in out
    assert "--loss test_acc --tune lr --tune-on val_acc --baseline activation=relu" in result.stderr
    root = runs_dir / "s"
    rows = _rows(root / "candidates.csv")
    assert list(rows[0]) == ["fn", "same_as", "status", "reason", "rung", "mean_val_acc", "screen_lr", "lr", "judged"]
    trained = [r["fn"] for r in rows if r["status"] == "trained"]
    early = _early(root / "rung1" / "results.csv", "val_acc")  # the accuracy at the lowest val_loss
    mean = {fn: sum(early[(fn, "0.03", s)][1] for s in ("0", "1")) / 2 for fn in trained}
    by_loss = {fn: _geo([early[(fn, "0.03", s)][0] for s in ("0", "1")]) for fn in trained}
    n = halving.survivors(len(trained), 0.25)
    best = sorted(trained, key=lambda fn: (-mean[fn], trained.index(fn)))[:n]
    survivors = [r["fn"] for r in rows if r["rung"] == "2"]
    assert set(survivors) == set(best)
    assert set(sorted(trained, key=lambda fn: (by_loss[fn], trained.index(fn)))[:n]) != set(best)  # the choice matters
    for r in rows:
        if r["rung"] == "1":
            assert float(r["mean_val_acc"]) == pytest.approx(mean[r["fn"]], rel=1e-12)
        if r["rung"] == "2":
            assert 0 <= float(r["judged"]) <= 1 and r["lr"] in ("0.01", "0.03")
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
    args = ["search", *TASK, "--space", small_space, "--seeds", "1", "--rungs", "2", "--final-seeds", "2",
            "--tune-seeds", "1", "--lrs", "1e-2,1e-1", "-q", "--runs-dir", str(runs_dir), "--name", "s"]
    assert runner.invoke(app, args).exit_code == 0
    settings = runs_dir / "s" / "search.yaml"
    text = settings.read_text()
    assert "  select_on: val_loss\n" in text
    settings.write_text(text.replace("  select_on: val_loss\n", ""))
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert list(_rows(runs_dir / "s" / "candidates.csv")[0])[5] == "score"
    result = runner.invoke(app, [*args, "--select-on", "val_acc"])  # a regression task: refused first
    assert result.exit_code == 2 and "regression task" in result.stderr
