"""actbench export mlflow: sweeps written to a real SQLite tracking store in a temporary directory
and read back with MlflowClient (run counts, parent-child ties, every metric history against
results.csv, params, tags, artifacts, idempotence, resume); bad input exits 2 with nothing
written. Skipped where the [mlflow] extra is not installed, except the install-hint test."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from activation_bench.analysis.configs import flatten_config
from activation_bench.cli.main import app
from activation_bench.errors import UsageError
from activation_bench.export import mlflow as ex
from tests.conftest import TINY

SWEEP = ["activation=gelu,relu", "seed=range(2)"]


def sweep(runs_dir: Path, *overrides: str, name: str = "study") -> Path:
    """The same command twice resumes the sweep."""
    base = TINY if not overrides else ["epochs=4", "model.hidden_dim=5"]
    res = CliRunner().invoke(app, ["sweep", *SWEEP, *base, *overrides, "--runs-dir", str(runs_dir),
                                   "--name", name, "-q"])
    assert res.exit_code == 0, res.output
    return runs_dir / name


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`sweep` without overrides, trained once per module (per xdist worker): `study` copies it."""
    return sweep(tmp_path_factory.mktemp("trained") / "runs")


@pytest.fixture
def study(trained: Path, runs_dir: Path) -> Path:
    """A copy of the trained sweep at runs_dir/study, as `sweep(runs_dir)` would leave it: each test
    may change its copy (and `sweep(runs_dir)` resumes it)."""
    return Path(shutil.copytree(trained, runs_dir / "study"))


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file with MLflow's tables, made once: each test copies it (creating the tables
    runs MLflow's migrations, about a second)."""
    pytest.importorskip("mlflow")
    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    ex.connect(f"sqlite:///{path}")
    return path


@pytest.fixture
def store(empty_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A tracking URI in tmp_path; the working directory is tmp_path too (MLflow puts a SQLite
    store's artifacts in ./mlruns)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def all_runs(uri: str, experiment: str) -> list:
    c = client(uri)
    exp = c.get_experiment_by_name(experiment)
    return c.search_runs([exp.experiment_id], max_results=10_000)


def history(uri: str, run_id: str, key: str) -> tuple[list[int], list[float]]:
    points = sorted(client(uri).get_metric_history(run_id, key), key=lambda m: m.step)
    return [m.step for m in points], [m.value for m in points]


def results_rows(sweep_dir: Path) -> dict[str, list[dict[str, str]]]:
    """results.csv read with the csv module (no pandas), grouped by run."""
    out: dict[str, list[dict[str, str]]] = {}
    with open(sweep_dir / "results.csv", newline="") as f:
        for row in csv.DictReader(f):
            out.setdefault(row["run"], []).append(row)
    return out


def members(runs: list) -> dict[str, object]:
    return {r.info.run_name: r for r in runs if r.data.tags.get(ex.KIND) == "member"}


# ---------------------------------------------------------------------------------------------
# pure parts


def test_kept_epochs_every_k_plus_the_last():
    epoch = np.arange(1, 11)
    assert epoch[ex.kept_epochs(epoch, 1)].tolist() == list(range(1, 11))
    assert epoch[ex.kept_epochs(epoch, 3)].tolist() == [3, 6, 9, 10]
    assert epoch[ex.kept_epochs(epoch, 5)].tolist() == [5, 10]
    assert epoch[ex.kept_epochs(epoch, 50)].tolist() == [10]


def test_summary_metrics_final_best_early_stop():
    epoch = np.array([1, 2, 3, 4])
    losses = {"train_loss": np.array([4.0, 3.0, 1.0, 2.0]), "val_loss": np.array([5.0, 2.0, 2.0, 3.0]),
              "test_loss": np.array([6.0, 7.0, 8.0, 9.0])}
    got = {k: (v, s) for k, v, s in ex.summary_metrics(epoch, losses)}
    assert got["final_train_loss"] == (2.0, 4) and got["best_train_loss"] == (1.0, 3)
    assert got["best_val_loss"] == (2.0, 2)  # earliest on ties
    assert got["early_stop_epoch"] == (2.0, 2) and got["early_stop_test_loss"] == (7.0, 2)
    assert got["early_stop_train_loss"] == (3.0, 2)
    diverged = {k for k, _, _ in ex.summary_metrics(epoch, {"train_loss": np.array([1.0, 0.5, np.inf, np.nan])})}
    assert diverged == {"best_train_loss"}  # non-finite values are left out


def test_summary_metrics_of_accuracy_best_is_the_highest():
    epoch = np.array([1, 2, 3, 4])
    columns = {"val_loss": np.array([5.0, 2.0, 3.0, 4.0]), "val_acc": np.array([0.5, 0.7, 0.8, 0.75]),
               "test_acc": np.array([0.4, 0.65, 0.9, np.nan])}
    got = {k: (v, s) for k, v, s in ex.summary_metrics(epoch, columns)}
    assert got["best_val_acc"] == (0.8, 3) and got["best_test_acc"] == (0.9, 3)
    assert got["final_val_acc"] == (0.75, 4) and "final_test_acc" not in got  # NaN left out
    assert got["early_stop_test_acc"] == (0.65, 2) and got["early_stop_val_acc"] == (0.7, 2)  # by val_loss


def test_tracking_uri_default(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert ex.resolve_uri(None) == "sqlite:///mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://example:5000")
    assert ex.resolve_uri(None) == "http://example:5000"
    assert ex.resolve_uri("sqlite:///x.db") == "sqlite:///x.db"


def test_member_params_are_the_flattened_config_and_results_columns(study: Path):
    d = study
    plan = ex.collect([d])
    assert len(plan.members) == 4 and not plan.skipped
    m = plan.members[0]
    cfg = flatten_config(yaml.safe_load((m.run_dir / "config.yaml").read_text()))
    assert m.params["activation"] == "gelu" and m.params["data"] == "normal"
    assert m.params["lr"] == "0.001" and m.params["model.hidden_dim"] == "5" and m.params["seed"] == "0"
    summary = yaml.safe_load((m.run_dir / "summary.json").read_text())
    assert m.params["run"] == m.name and m.params["n_params"] == str(summary["n_params"])
    assert set(cfg) | {"run", "n_params"} == set(m.params)
    assert m.experiment == "study" and m.sweep == d


def test_without_the_extra_one_line_install_hint(study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    d = study
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow raises ImportError
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"MLflow is not installed.*pip install 'activation-bench\[mlflow\]'"):
        ex.export([d])
    assert not (tmp_path / "mlflow.db").exists()


# ---------------------------------------------------------------------------------------------
# a real SQLite store, read back


def test_export_reads_back_exactly(study: Path, store: str, tmp_path: Path):
    d = study
    (d / "report.html").write_text("<html></html>")
    seen: list[tuple[int, int]] = []
    res = ex.export([d], tracking_uri=store, progress=lambda done, total: seen.append((done, total)))
    assert (res.added, res.present, res.sweeps, res.skipped) == (4, 0, 1, [])
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    runs = all_runs(store, "study")
    assert len(runs) == 5
    parent = [r for r in runs if r.data.tags.get(ex.KIND) == "sweep"]
    assert len(parent) == 1 and parent[0].info.run_name == "study" and parent[0].info.status == "FINISHED"
    parent_id = parent[0].info.run_id
    assert parent[0].data.params == {"activation": "gelu,relu", "seed": "range(2)", **dict(
        o.split("=", 1) for o in TINY)}
    c = client(store)
    assert {a.path for a in c.list_artifacts(parent_id)} == {"results.csv", "sweep.yaml", "report.html"}
    rows = results_rows(d)
    kids = members(runs)
    assert set(kids) == set(rows)
    for name, run in kids.items():
        tags, params = run.data.tags, run.data.params
        summary = yaml.safe_load((d / name / "summary.json").read_text())
        assert tags[ex.PARENT] == parent_id and run.info.status == "FINISHED"
        assert tags[ex.HASH] == summary["config_hash"] and tags[ex.STATUS] == "complete"
        assert tags[ex.VERSION] == summary["versions"]["activation_bench"]
        assert params == ex.member_params(yaml.safe_load((d / name / "config.yaml").read_text()), summary, name)
        assert params["activation"] == rows[name][0]["activation"] and params["seed"] == rows[name][0]["seed"]
        steps, values = history(store, run.info.run_id, "train_loss")
        assert steps == [int(r["epoch"]) for r in rows[name]]
        assert values == [float(r["train_loss"]) for r in rows[name]]  # exact, not approximate
        assert run.data.metrics["final_train_loss"] == float(rows[name][-1]["train_loss"])
        assert "val_loss" not in run.data.metrics
        assert [a.path for a in c.list_artifacts(run.info.run_id)] == ["config.yaml"]


def test_real_data_val_and_test_histories(runs_dir: Path, store: str):
    d = sweep(runs_dir, "data=diabetes", name="real")
    res = ex.export([d], tracking_uri=store, experiment="tables")
    assert res.added == 4 and res.experiments.keys() == {"tables"}
    rows = results_rows(d)
    for name, run in members(all_runs(store, "tables")).items():
        for key in ("train_loss", "val_loss", "test_loss"):
            steps, values = history(store, run.info.run_id, key)
            assert steps == [int(r["epoch"]) for r in rows[name]]
            assert values == [float(r[key]) for r in rows[name]]
        summary = yaml.safe_load((d / name / "summary.json").read_text())
        assert run.data.metrics["early_stop_epoch"] == summary["early_stop_epoch"]
        assert run.data.metrics["early_stop_test_loss"] == summary["early_stop_test_loss"]


def test_classification_accuracy_histories_and_summaries(tmp_path: Path, store: str):
    from tests.test_accuracy_render import COLUMNS, fake_sweep

    d = fake_sweep(tmp_path / "runs", tasks=("iris",), seeds=2)
    res = ex.export([d], tracking_uri=store)
    assert res.added == 4
    rows = results_rows(d)
    for name, run in members(all_runs(store, "cls")).items():
        for key in COLUMNS:  # the losses as before, and val_acc / test_acc with step = epoch
            steps, values = history(store, run.info.run_id, key)
            assert steps == [int(r["epoch"]) for r in rows[name]]
            assert values == [float(r[key]) for r in rows[name]]
        summary = yaml.safe_load((d / name / "summary.json").read_text())
        metrics = run.data.metrics
        assert metrics["final_test_acc"] == summary["final_test_acc"]
        assert metrics["early_stop_test_acc"] == summary["early_stop_test_acc"]
        assert metrics["early_stop_epoch"] == summary["early_stop_epoch"]
        assert metrics["best_val_acc"] == max(float(r["val_acc"]) for r in rows[name])
        assert metrics["best_test_loss"] == min(float(r["test_loss"]) for r in rows[name])


def test_every_k_keeps_every_kth_epoch_and_the_last(study: Path, store: str):
    d = study
    ex.export([d], tracking_uri=store, every=3)
    rows = results_rows(d)
    for name, run in members(all_runs(store, "study")).items():
        steps, values = history(store, run.info.run_id, "train_loss")
        assert steps == [3, 4]
        assert values == [float(rows[name][2]["train_loss"]), float(rows[name][3]["train_loss"])]


def test_second_export_adds_nothing(study: Path, store: str):
    d = study
    ex.export([d], tracking_uri=store)
    before = {r.info.run_id for r in all_runs(store, "study")}
    res = ex.export([d], tracking_uri=store)
    assert (res.added, res.present, res.sweeps) == (0, 4, 0)
    assert {r.info.run_id for r in all_runs(store, "study")} == before


def test_resumed_sweep_exports_only_new_members(runs_dir: Path, study: Path, store: str):
    d = study
    victim = sorted(p for p in d.iterdir() if p.is_dir())[1]
    (victim / "summary.json").unlink()  # as if the sweep was killed before this member finished
    first = ex.export([d], tracking_uri=store)
    assert first.added == 3 and len(first.skipped) == 1 and victim.name in first.skipped[0]
    ids = {r.info.run_id for r in all_runs(store, "study")}
    sweep(runs_dir)  # the same command resumes: trains the missing member, rebuilds results.csv
    second = ex.export([d], tracking_uri=store)
    assert (second.added, second.present, second.skipped) == (1, 3, [])
    runs = all_runs(store, "study")
    new = [r for r in runs if r.info.run_id not in ids]
    assert [r.info.run_name for r in new] == [victim.name]
    parent = [r for r in runs if r.data.tags.get(ex.KIND) == "sweep"]
    assert len(parent) == 1 and new[0].data.tags[ex.PARENT] == parent[0].info.run_id
    steps, values = history(store, new[0].info.run_id, "train_loss")
    assert values == [float(r["train_loss"]) for r in results_rows(d)[victim.name]]


def test_unfinished_member_from_an_interrupted_export_is_redone(study: Path, store: str):
    d = study
    plan = ex.collect([d])
    c = client(store)
    eid = ex.experiment_id(c, "study")
    m = plan.members[0]
    stale = c.create_run(eid, run_name=m.name, tags={ex.KIND: "member", ex.HASH: m.config_hash})
    res = ex.export([d], tracking_uri=store)
    assert res.added == 4
    names = [r.info.run_name for r in members(all_runs(store, "study")).values()]
    assert sorted(names) == sorted(x.name for x in plan.members)
    assert c.get_run(stale.info.run_id).info.lifecycle_stage == "deleted"


def test_lone_run_directory(runs_dir: Path, store: str):
    res = CliRunner().invoke(app, ["run", *TINY, "--runs-dir", str(runs_dir), "--name", "solo"])
    assert res.exit_code == 0, res.output
    out = ex.export([runs_dir / "solo"], tracking_uri=store)
    assert out.experiments.keys() == {"runs"} and out.added == 1
    (run,) = all_runs(store, "runs")
    assert run.info.run_name == "solo" and ex.PARENT not in run.data.tags
    rows = list(csv.DictReader(open(runs_dir / "solo" / "losses.csv")))
    assert history(store, run.info.run_id, "train_loss")[1] == [float(r["train_loss"]) for r in rows]


# ---------------------------------------------------------------------------------------------
# bad input: one line, nothing exported


def test_bad_inputs_write_nothing(study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    d = study
    (tmp_path / "empty").mkdir()
    incomplete = tmp_path / "incomplete"
    shutil.copytree(d / sorted(p.name for p in d.iterdir() if p.is_dir())[0], incomplete / "m0")
    (incomplete / "m0" / "summary.json").unlink()
    (tmp_path / "afile").write_text("x")
    cases = [
        ([tmp_path / "nosuch"], {}, "no such file or directory"),
        ([tmp_path / "empty"], {}, "empty directory"),
        ([incomplete], {}, "no finished runs|no complete runs"),
        ([d / "results.csv"], {}, "not files"),
        ([d], {"tracking_uri": f"sqlite:///{tmp_path / 'afile' / 'x.db'}"}, "cannot use tracking URI"),
        ([d], {"tracking_uri": "nosuch://here"}, "cannot use tracking URI"),
        ([d], {"experiment": ""}, "MLflow needs a name"),
        ([d], {"experiment": "x" * 501}, "MLflow needs a name"),
        ([d], {"every": 0}, "--every"),
    ]
    for paths, kwargs, message in cases:
        with pytest.raises(UsageError, match=message):
            ex.export(paths, **kwargs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "empty", "incomplete", "runs"]


def test_unreachable_server_fails_fast(study: Path, tmp_path: Path):
    pytest.importorskip("mlflow")
    d = study
    with pytest.raises(UsageError, match="cannot use tracking URI http://127.0.0.1:9"):
        ex.export([d], tracking_uri="http://127.0.0.1:9")


def test_deleted_experiment_is_refused(study: Path, store: str):
    d = study
    c = client(store)
    c.delete_experiment(c.create_experiment("study"))
    with pytest.raises(UsageError, match="experiment 'study' is deleted"):
        ex.export([d], tracking_uri=store)
    assert all_runs(store, "study") == []


# ---------------------------------------------------------------------------------------------
# the command line


def export_cli(*args: str):
    return CliRunner().invoke(app, ["export", "mlflow", *args])


def test_cli_exports_and_says_what_it_did(study: Path, store: str):
    d = study
    res = export_cli(str(d), "--tracking-uri", store, "-q")
    assert res.exit_code == 0, res.output
    assert "4 members exported, 0 already there, 0 skipped; experiment study at " + store in res.stdout
    res = export_cli(str(d), "--tracking-uri", store, "-q", "--every", "2")
    assert "0 members exported, 4 already there" in res.stdout
    assert len(all_runs(store, "study")) == 5


def test_cli_default_uri_is_mlflow_db_in_the_working_directory(study: Path, store: str, tmp_path: Path):
    d = study
    res = export_cli(str(d), "--experiment", "mine", "-q")  # store's fixture: cwd is tmp_path, no env
    assert res.exit_code == 0, res.output
    assert len(all_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "mine")) == 5


def test_cli_bad_input_exit_2_one_line(study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    d = study
    (tmp_path / "empty").mkdir()
    for args in ([str(tmp_path / "nosuch")], [str(tmp_path / "empty")], [str(d), "--experiment", ""],
                 [str(d), "--tracking-uri", "nosuch://x"]):
        res = export_cli(*args)
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    res = export_cli(str(d), "--every", "0")
    assert res.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "runs"]


def test_cli_without_the_extra(study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    d = study
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.chdir(tmp_path)
    res = export_cli(str(d))
    assert res.exit_code == 2 and "pip install 'activation-bench[mlflow]'" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_help_imports_no_mlflow():
    code = ("import sys; from typer.testing import CliRunner; from activation_bench.cli.main import app; "
            "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0; "
            "r = CliRunner().invoke(app, ['export', 'mlflow', '--help']); assert r.exit_code == 0; "
            "assert 'mlflow' not in sys.modules and 'torch' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
