"""sweep --tune --halving: successive halving in the tuning stage. Promoted members end bit for bit as
their full runs (they continue from their rung's checkpoint), a killed rung resumes, bad input is one line."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from activation_bench.cli.main import app
from activation_bench.runs import checkpoint_files as checkpoint
from activation_bench.runs import rungs
from tests.test_tune_sweep import losses, members, sweep

GRID = ["activation=gelu,relu", "lr=1e-3,1e-2,1e-1", "seed=range(4)", "data=function", "data.fn=bessel_j0",
        "epochs=9", "data.n_samples=30", "model.hidden_dim=4"]
HALVING = ["--tune", "lr", "--tune-seeds", "2", "--halving", "3"]


@pytest.fixture(scope="module")
def halved(tmp_path_factory):
    from typer.testing import CliRunner

    runner = CliRunner()
    runs_dir = tmp_path_factory.mktemp("halving") / "runs"
    assert sweep(runner, runs_dir, "full", grid=GRID).exit_code == 0
    result = sweep(runner, runs_dir, "halved", *HALVING, grid=GRID)
    assert result.exit_code == 0, result.output
    return runs_dir, result.output


def test_promoted_members_end_bit_for_bit_as_their_full_runs(halved):
    runs_dir, output = halved
    assert "halving rung 1/2 (3 of 9 epochs): 2 of 6 settings go on" in output
    full, halved_runs = losses(runs_dir / "full"), losses(runs_dir / "halved")
    # 2 settings x 2 tuning seeds to the end, then 2 judging seeds at each group's choice
    assert len(halved_runs) == 4 + 4
    assert all(halved_runs[name] == full[name] for name in halved_runs)
    choice = json.loads((runs_dir / "halved" / "tuning.json").read_text())["choices"][0]
    assert choice["halving"] == 3 and choice["tune_grid"] == "own"
    # compare with --tune-grid own chooses as the sweep did, among the settings that reached the end
    out = tuned_compare(runs_dir / "halved")
    assert {row.split(",")[0]: row.split(",")[1] for row in out.splitlines()[1:]} == \
        {r["activation"]: str(r["lr"]) for r in choice["chosen"]}


def tuned_compare(directory: Path) -> str:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["compare", str(directory), "--tune", "lr", "--tune-seeds", "2", "--tune-grid",
                                      "own", "--format", "csv"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_dry_run_counts_the_rungs_member_epochs(runner, tmp_path):
    result = sweep(runner, tmp_path / "runs", "new", *HALVING, "--dry-run", grid=GRID)
    assert result.exit_code == 0, result.output
    # 12 tuning members x 3 epochs, then 4 of them 6 epochs more: 60 member-epochs instead of 108
    assert "halving (ETA 3): rungs at 3, 9 epochs; the tuning stage takes 60 member-epochs instead of 108 (56%), " \
        "4 of its members train to the end" in result.output
    assert not (tmp_path / "runs").exists()


def test_a_rung_killed_resumes_to_the_same_sweep(runner, halved, tmp_path, monkeypatch):
    runs_dir, _ = halved
    monkeypatch.setenv(checkpoint.SIGNAL_AT_ENV, "TERM@2")  # a SIGTERM at epoch 2 of the first rung
    stopped = sweep(runner, tmp_path / "runs", "halved", *HALVING, grid=GRID)
    assert stopped.exit_code == checkpoint.exit_code(15), stopped.output
    assert "interrupted in a halving rung" in stopped.output
    monkeypatch.delenv(checkpoint.SIGNAL_AT_ENV)
    again = sweep(runner, tmp_path / "runs", "halved", *HALVING, grid=GRID)
    assert again.exit_code == 0, again.output
    assert losses(tmp_path / "runs" / "halved") == losses(runs_dir / "halved")
    for name in ("tuning.json", "tuning.csv", "results.csv"):
        assert (tmp_path / "runs" / "halved" / name).read_bytes() == (runs_dir / "halved" / name).read_bytes()
    # and once finished, the same command trains nothing and chooses the same
    shutil.rmtree(tmp_path / "runs" / "halved" / ".rungs")
    final = sweep(runner, tmp_path / "runs", "halved", *HALVING, grid=GRID)
    assert final.output.count("0 to run") == 2 and len(members(tmp_path / "runs" / "halved")) == 8


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """The halved sweep again under Hydra's basic launcher, each stack's epochs traced."""
    from typer.testing import CliRunner

    runs_dir = tmp_path_factory.mktemp("launched") / "runs"
    trace = runs_dir.parent / "trace.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(checkpoint.TRACE_ENV, str(trace))
        result = sweep(CliRunner(), runs_dir, "halved", *HALVING, "--launcher", "basic", "--jobs", "2", grid=GRID)
    assert result.exit_code == 0, result.output
    return runs_dir / "halved", result.output, events(trace)


def events(trace: Path) -> list[dict]:
    return [json.loads(line) for line in trace.read_text().splitlines()]


def trained_epochs(trace: list[dict]) -> int:
    """The stack-epochs trained (every epoch but a run's last is traced once, where it ends)."""
    return sum(e["event"] == "epoch" for e in trace)


def test_rungs_go_out_through_the_launcher_bit_for_bit(halved, launched):
    runs_dir, _ = halved
    directory, output, trace = launched
    assert "halving rung 1/2 (3 of 9 epochs): 2 of 6 settings go on" in output
    assert losses(directory) == losses(runs_dir / "halved")  # the local halving's, so the full runs' (above)
    for name in ("tuning.json", "tuning.csv", "results.csv"):
        assert (directory / name).read_bytes() == (runs_dir / "halved" / name).read_bytes()
    # every epoch trained in the launcher's jobs, none in this process: the rung's 6 stacks to epoch 3,
    # the 2 promoted ones resumed from their rung's checkpoints to the end
    assert trace and os.getpid() not in {e["pid"] for e in trace}
    rung = [e for e in trace if e["event"] == "save" and e["epoch"] == 3]
    assert len({e["stack"] for e in rung}) == 6
    resumed = [e for e in trace if e["event"] == "resume"]
    assert len(resumed) == 2 and {e["epoch"] for e in resumed} == {3}


# -m slow: four launcher processes (each imports torch), 18 s. By default, its parts are checked on their
# own: a rung killed and resumed (test_a_rung_killed_resumes_to_the_same_sweep), launcher jobs resuming
# stacks from their rungs' checkpoints (test_rungs_go_out_through_the_launcher_bit_for_bit) and a
# launch whose job was killed told in one line (test_a_killed_launch_is_one_line_with_its_exit_code)
@pytest.mark.slow
def test_a_rung_killed_under_the_launcher_trains_only_what_is_missing(launched, runner, tmp_path, monkeypatch):
    directory, _, trace = launched
    log = tmp_path / "trace.jsonl"
    monkeypatch.setenv(checkpoint.TRACE_ENV, str(log))
    monkeypatch.setenv(checkpoint.SIGNAL_AT_ENV, "TERM@2")  # a job's SIGTERM at epoch 2 of the first rung
    args = [*HALVING, "--launcher", "basic", "--jobs", "2"]
    stopped = sweep(runner, tmp_path / "runs", "halved", *args, grid=GRID)
    assert stopped.exit_code == 2 and "launcher 'basic' failed (exit 143)" in stopped.output, stopped.output
    assert list((tmp_path / "runs" / "halved" / ".checkpoints").glob("*.ckpt"))
    killed = len(events(log))
    monkeypatch.delenv(checkpoint.SIGNAL_AT_ENV)
    again = sweep(runner, tmp_path / "runs", "halved", *args, grid=GRID)
    assert again.exit_code == 0, again.output
    assert losses(tmp_path / "runs" / "halved") == losses(directory)
    # no epoch trained twice: the two commands trained as many stack-epochs as one uninterrupted
    assert trained_epochs(events(log)) == trained_epochs(trace)
    assert any(e["event"] == "resume" and e["epoch"] == 2 for e in events(log)[killed:])


def test_a_killed_launch_is_one_line_with_its_exit_code(monkeypatch, tmp_path):
    """The launcher's process ended by a job's SIGTERM (exit 143, its checkpoint written): launch raises
    one line naming the launcher, the exit code, the log's last line and the log (a stand-in process)."""
    from types import SimpleNamespace

    from activation_bench.errors import UsageError
    from activation_bench.runs import launching

    class Killed:
        returncode = 143

        def __init__(self, cmd, stdout, **_kwargs):
            assert "upto=3" in cmd
            stdout.write("[HYDRA] Launching 2 jobs locally\n"
                         "job 0 stopped by SIGTERM: checkpoint written at epoch 2/9\n")

        def wait(self, timeout=None):
            return self.returncode

    monkeypatch.setattr(launching.subprocess, "Popen", Killed)
    monkeypatch.setattr(launching, "steps_per_epoch", lambda _cfg: 1)
    p = SimpleNamespace(directory=tmp_path, hashes=["a", "b"], cfgs=[SimpleNamespace(epochs=9)] * 2)
    with pytest.raises(UsageError) as err:
        launching.launch(p, [0, 1], "basic", 2, [], 64.0, False, upto=3, groups=[[0], [1]])
    assert str(err.value) == ("launcher 'basic' failed (exit 143): job 0 stopped by SIGTERM: checkpoint written at "
                              f"epoch 2/9 (see {tmp_path / '.hydra_launch.log'})")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is None,
                    reason="needs the [cluster] extra")
def test_rungs_through_joblib_end_as_the_local_halving(halved, runner, tmp_path, monkeypatch):
    runs_dir, _ = halved
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(checkpoint.TRACE_ENV, str(trace))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)  # 4 jobs for the rung's 6 settings, then 2 for the 2 promoted
    far = sweep(runner, tmp_path / "runs", "halved", *HALVING, "--launcher", "joblib", "--jobs", "4", grid=GRID)
    assert far.exit_code == 0, far.output
    assert losses(tmp_path / "runs" / "halved") == losses(runs_dir / "halved")
    # the promoted settings resume from their rung's checkpoints (each job at one thread, both times)
    assert [e["epoch"] for e in events(trace) if e["event"] == "resume"] == [3, 3]


def test_rungs_are_eta_times_apart_up_to_the_full_run():
    assert rungs.schedule(30, 5, 3) == [3, 10, 30]
    assert rungs.schedule(9, 3, 3) == [3, 9]
    assert rungs.schedule(8, 8, 2) == [1, 2, 4, 8]
    assert rungs.survivors(5, 3) == 2 and rungs.survivors(2, 3) == 1


@pytest.mark.parametrize("args, message", [
    (["--tune", "lr", "--halving", "1"], "--halving 1: keeps the best 1/ETA"),
    (["--halving", "3"], "--halving sets up --tune"),
    (["--tune", "lr", "--halving", "3", "--force"], "--halving with --force"),
    (["--tune", "lr", "--halving", "3", "epochs=2"], "--halving 3: 3 values per group need 2 rungs, the first at 2/3"),
])
def test_halving_bad_input_is_one_line_exit_2(runner, tmp_path, args, message):
    result = sweep(runner, tmp_path / "runs", "bad", *args, grid=GRID)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
