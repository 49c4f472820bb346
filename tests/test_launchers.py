"""Scale-out through Hydra's real launcher plugins (joblib, submitit_local), for real."""

from __future__ import annotations

import csv
import importlib.util

import pytest

from activation_bench.cli.main import app
from tests.conftest import TINY


def _rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(
    "launcher",
    [
        pytest.param("joblib", marks=pytest.mark.skipif(
            importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is None,
            reason="needs the [cluster] extra")),
        pytest.param("submitit_local", marks=[pytest.mark.slow, pytest.mark.skipif(
            importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None,
            reason="needs the [cluster] extra")]),
    ],
)
def test_launcher_matches_local_sweep_and_resumes(runner, tmp_path, launcher):
    grid = ["activation=gelu,relu", "seed=range(3)", *TINY]
    local = runner.invoke(app, ["sweep", "--runs-dir", str(tmp_path / "local"), "--name", "s", "-q", *grid])
    assert local.exit_code == 0, local.output
    args = ["sweep", "--runs-dir", str(tmp_path / "far"), "--name", "s", "-q", "--launcher", launcher, "--jobs", "2"]
    far = runner.invoke(app, [*args, *grid])
    assert far.exit_code == 0, far.output
    assert "6/6 members done" in far.output
    local_rows = _rows(tmp_path / "local" / "s" / "results.csv")
    far_rows = _rows(tmp_path / "far" / "s" / "results.csv")
    key = lambda r: (r["activation"], r["seed"], r["epoch"])  # noqa: E731
    assert sorted(far_rows, key=key) == sorted(local_rows, key=key)
    assert (tmp_path / "far" / "s" / ".hydra" / "multirun.yaml").is_file()  # Hydra's own multirun record
    again = runner.invoke(app, [*args, *grid])
    assert again.exit_code == 0 and "6 finished members skipped, 0 to run" in again.stderr


def test_hydra_overrides_need_a_launcher(runner, runs_dir):
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "seed=0,1", "hydra.launcher.n_jobs=2"])
    assert result.exit_code == 2 and "add --launcher" in result.stderr


def test_a_stack_a_checkpoint_holds_goes_to_one_job(monkeypatch, tmp_path):
    """So that the job resumes it as that stack (a halving rung's promoted settings, a preempted sweep)."""
    from types import SimpleNamespace

    from activation_bench.runs import checkpoint_files, launching

    p = SimpleNamespace(directory=tmp_path, hashes=["a", "b", "c", "d", "e"])
    saved = {tmp_path / "1.ckpt": ["d", "b"], tmp_path / "2.ckpt": ["e", "z"]}  # z: not among these members
    monkeypatch.setattr(checkpoint_files, "saved_stacks", lambda _root: saved)
    assert launching._together(p, [0, 1, 2, 3, 4]) == [[0], [3, 1], [2], [4]]
    assert launching._together(p, [0, 2, 3]) == [[0], [2], [3]]  # b is not to train here: d goes alone


def test_local_jobs_share_the_cores_as_jobs_asks_however_many_members_are_left(monkeypatch, tmp_path):
    """A checkpoint continues only at the thread count that wrote it: a halving rung's settings, or a
    sweep resumed with fewer members left than --jobs, keep the thread share of the first launch."""
    from types import SimpleNamespace

    from activation_bench.runs import launching

    commands = []

    class Finished:
        returncode = 0

        def __init__(self, cmd, **_kwargs):
            commands.append(cmd)

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(launching.subprocess, "Popen", Finished)
    monkeypatch.setattr(launching.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(launching, "steps_per_epoch", lambda _cfg: 1)
    p = SimpleNamespace(directory=tmp_path, hashes=["a", "b", "c"], cfgs=[SimpleNamespace(epochs=2)] * 3)
    for indices in ([0, 1, 2], [2]):
        launching.launch(p, indices, "joblib", 4, [], 64.0, False)
    assert [[a for a in cmd if a.startswith(("chunk=", "threads="))] for cmd in commands] == [
        ["chunk=range(3)", "threads=2"], ["chunk=range(1)", "threads=2"]]
    launching.launch(p, [0, 1], "basic", 4, [], 64.0, False, upto=3, groups=[[0, 1]])
    assert "upto=3" in commands[-1] and "threads=0" in commands[-1]
