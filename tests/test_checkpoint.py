"""Mid-run checkpoints (#40): runs stopped at chosen points (between steps, at an epoch's end, in a
checkpoint's write) resume bit for bit; damaged or foreign checkpoints are never used; signals,
full disks and submitit's requeue."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from activation_bench.cli.main import app
from activation_bench.runs import checkpoint_files as checkpoint
from activation_bench.runs import store
from tests.conftest import TINY, files_under

MINI = ["data.n_samples=12", "data.input_dim=3", "model.hidden_dim=5", "batch_size=4", "shuffle=true", "epochs=12"]
TIMING = ("wall_time_s", "created")  # differ between any two runs, interrupted or not


def _run(runner, root: Path, args: list[str], monkeypatch=None, at: str | None = None, command: str = "run"):
    if monkeypatch is not None:
        if at:
            monkeypatch.setenv(checkpoint.SIGNAL_AT_ENV, at)
        else:
            monkeypatch.delenv(checkpoint.SIGNAL_AT_ENV, raising=False)
    return runner.invoke(app, [command, "--runs-dir", str(root), "--name", "r", "-q", *args])


def assert_same_outputs(a: Path, b: Path) -> None:
    """Every file of run (or sweep) directory a equals b's byte for byte; summary.json's timing
    fields aside."""
    files = sorted(p.relative_to(a) for p in files_under(a) if not p.name.startswith(".")
                   and ".hydra" not in p.parts)
    assert files == sorted(p.relative_to(b) for p in files_under(b) if not p.name.startswith(".")
                           and ".hydra" not in p.parts)
    assert files
    for rel in files:
        if rel.name == "summary.json":
            left, right = (json.loads((d / rel).read_text()) for d in (a, b))
            for k in TIMING:
                left.pop(k), right.pop(k)
            assert left == right, rel
        else:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


CASES = {
    # dropout and the data order drawn per epoch, stopped between two steps of epoch 6
    "mlp-dropout-mid-epoch": ([*MINI, "model.dropout=0.3"], "TERM@5.2"),
    # batch norm (running statistics), two layers, the gradient and pre-activation logs, at an epoch's end
    "mlp-batchnorm-logs": ([*MINI, "model.norm=batch", "model.depth=2", "log.grad_norms=true", "log.every=2",
                            "log.preact_stats=3"], "INT@7"),
    # a random activation (its own generator), SGD
    "rrelu-sgd": ([*MINI, "activation=rrelu", "optimizer=sgd", "lr=0.05"], "USR2@3.1"),
    # SGD with Nesterov momentum (its buffers), the cosine schedule (the step count) and per-member clipping
    # (a PReLU's own parameters), stopped mid-epoch
    "sgd-momentum-cosine-clip": ([*MINI, "activation=prelu", "optimizer=sgd", "lr=0.05", "momentum=0.9",
                                  "nesterov=true", "schedule=cosine", "warmup_steps=5", "min_lr=0.001",
                                  "grad_clip=0.5"], "TERM@5.2"),
    # AdamW (weight decay, beta2) with the cosine schedule and clipping, stopped at an epoch's end
    "adamw-cosine-clip": ([*MINI, "weight_decay=0.1", "beta2=0.99", "schedule=cosine", "warmup_steps=4",
                           "decay_steps=30", "grad_clip=0.1", "lr=0.01"], "INT@7"),
    # a classifier with validation and test splits
    "classifier": (["data=iris", "batch_size=32", "model.hidden_dim=8", "epochs=8", "lr=0.01", "model.dropout=0.1",
                    "log.train_eval=true"], "TERM@4.1"),
}


@pytest.mark.parametrize("case", CASES)
def test_stopped_run_resumes_bit_for_bit(runner, tmp_path, monkeypatch, case):
    args, at = CASES[case]
    ref = _run(runner, tmp_path / "ref", args, monkeypatch)
    assert ref.exit_code == 0, ref.output
    stopped = _run(runner, tmp_path / "b", args, monkeypatch, at)
    signum = getattr(signal, "SIG" + at.split("@")[0])
    assert stopped.exit_code == 128 + signum, stopped.output
    line = stopped.stderr.strip()
    assert line.startswith(f"stopped by {signal.Signals(signum).name}: checkpoint written at epoch ")
    assert "\n" not in line
    assert not (tmp_path / "b" / "r").exists()  # no run directory until it is finished
    (ckpt,) = (tmp_path / "b" / ".checkpoints").glob("*.ckpt")
    head, _ = checkpoint.read(ckpt)
    assert head["epoch"] == int(at.split("@")[1].split(".")[0])
    resumed = _run(runner, tmp_path / "b", args, monkeypatch)
    assert resumed.exit_code == 0, resumed.output
    assert "resuming the run from checkpoint" in resumed.stderr
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")
    assert not (tmp_path / "b" / ".checkpoints").exists()  # removed once the run is written


def test_convnet_resumes_bit_for_bit(runner, tmp_path, monkeypatch):
    args = ["model=cnn", "data=mnist1d", "model.channels=[4,4]", "model.kernel=[5,3]", "model.stride=[2,2]",
            "model.padding=[1,1]", "epochs=3", "lr=0.01", "data.n_train=60", "batch_size=20", "shuffle=true",
            "model.dropout=0.2", "model.norm=batch"]
    assert _run(runner, tmp_path / "ref", args, monkeypatch).exit_code == 0
    assert _run(runner, tmp_path / "b", args, monkeypatch, "TERM@1.2").exit_code == 143
    assert _run(runner, tmp_path / "b", args, monkeypatch).exit_code == 0
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


def test_stacked_sweep_resumes_as_stacks(runner, tmp_path, monkeypatch):
    """A sweep of two stacks stopped in the first: finished members are skipped, the stopped stack
    resumes as the same stack, and every file equals an uninterrupted sweep's."""
    grid = ["activation=gelu,relu", "seed=0,1", "model.hidden_dim=5,6", *MINI[:2], *MINI[3:]]
    ref = _run(runner, tmp_path / "ref", grid, monkeypatch, command="sweep")
    assert ref.exit_code == 0, ref.output
    stopped = _run(runner, tmp_path / "b", grid, monkeypatch, "TERM@6.1", command="sweep")
    assert stopped.exit_code == 143, stopped.output
    assert "interrupted: 0/8 members done; run the same command again to resume (stopped by SIGTERM; checkpoint " \
           "written at epoch 6/12)" in stopped.stderr
    resumed = _run(runner, tmp_path / "b", grid, monkeypatch, command="sweep")
    assert resumed.exit_code == 0, resumed.output
    assert "resuming stack 1/2 (4 members) from checkpoint" in resumed.stderr
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")
    assert not (tmp_path / "b" / "r" / ".checkpoints").exists()


def test_short_runs_write_no_checkpoint_by_default(runner, tmp_path, monkeypatch):
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(checkpoint.TRACE_ENV, str(trace))
    assert _run(runner, tmp_path / "runs", TINY, monkeypatch).exit_code == 0
    events = [json.loads(line)["event"] for line in trace.read_text().splitlines()]
    assert "save" not in events and events.count("epoch") == 3  # the last epoch writes its results instead
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["r"]


def _checkpointed(runner, tmp_path, monkeypatch, every: str = "checkpoint.every=2") -> tuple[list[str], Path]:
    """A run stopped at epoch 7 with checkpoints every 2 epochs: its checkpoint (epoch 7) and the
    previous one (epoch 6)."""
    args = [*MINI, every]
    assert _run(runner, tmp_path / "ref", args, monkeypatch).exit_code == 0
    assert _run(runner, tmp_path / "b", args, monkeypatch, "TERM@7").exit_code == 143
    (ckpt,) = (tmp_path / "b" / ".checkpoints").glob("*[0-9a-f].ckpt")
    assert checkpoint.read(checkpoint.previous(ckpt))[0]["epoch"] == 6
    return args, ckpt


def test_damaged_checkpoint_is_not_used_previous_one_is(runner, tmp_path, monkeypatch):
    args, ckpt = _checkpointed(runner, tmp_path, monkeypatch)
    data = bytearray(ckpt.read_bytes())
    data[-100] ^= 0xFF  # one flipped bit in the payload
    ckpt.write_bytes(bytes(data))
    prevs: list[int] = []
    real = checkpoint.write

    def write(path, state, header):
        real(path, state, header)
        prevs.append(checkpoint.read(checkpoint.previous(path))[0]["epoch"])

    monkeypatch.setattr(checkpoint, "write", write)
    resumed = _run(runner, tmp_path / "b", args, monkeypatch)
    assert resumed.exit_code == 0, resumed.output
    err = resumed.stderr.splitlines()
    assert err[0] == f"checkpoint {ckpt} not used: it fails its checksum (a write cut short or a damaged disk)"
    assert err[1].startswith("resuming the run from checkpoint ") and ".prev.ckpt at epoch 6/12" in err[1]
    assert prevs == [6, 8]  # the damaged one was dropped, never kept as the previous checkpoint
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


def test_cut_short_and_foreign_checkpoints_start_over(runner, tmp_path, monkeypatch):
    """A checkpoint cut short (kill -9 in a copy without the rename) and one of other members are
    never used: one line each, and the run starts over to the same result."""
    args, ckpt = _checkpointed(runner, tmp_path, monkeypatch)
    prev = checkpoint.previous(ckpt)
    ckpt.write_bytes(ckpt.read_bytes()[: len(ckpt.read_bytes()) // 2])
    other = _run(runner, tmp_path / "other", [*args, "seed=1"], monkeypatch, "TERM@3")
    assert other.exit_code == 143
    (foreign,) = (tmp_path / "other" / ".checkpoints").glob("*[0-9a-f].ckpt")
    prev.write_bytes(foreign.read_bytes())
    (ckpt.parent / f".{ckpt.name}.tmp-999999999").write_bytes(b"half")  # a dead writer's temporary file
    resumed = _run(runner, tmp_path / "b", args, monkeypatch)
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stderr.splitlines() == [
        f"checkpoint {ckpt} not used: it fails its checksum (a write cut short or a damaged disk)",
        f"checkpoint {prev} not used: it holds other members (config hashes differ)",
    ]
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")
    assert not (tmp_path / "b" / ".checkpoints").exists()


def test_checkpoint_of_another_thread_count_starts_over(runner, tmp_path, monkeypatch):
    """A CPU's last bits depend on torch's thread count: a checkpoint written at another count (or
    on another CPU) is not continued, and the run starts over to the same result."""
    import torch

    here = checkpoint.machine()
    assert here == {"cpu": here["cpu"], "threads": torch.get_num_threads()} and here["cpu"]
    monkeypatch.setattr(checkpoint, "machine", lambda: {**here, "threads": here["threads"] + 7})
    args, ckpt = _checkpointed(runner, tmp_path, monkeypatch)
    monkeypatch.setattr(checkpoint, "machine", lambda: here)
    resumed = _run(runner, tmp_path / "b", args, monkeypatch)
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stderr.splitlines()[0] == (
        f"checkpoint {ckpt} not used: written on {here['cpu']} at {here['threads'] + 7} torch threads, this process "
        f"runs on {here['cpu']} at {here['threads']} torch thread{'s' * (here['threads'] != 1)}; it need not "
        "continue bit for bit there")
    assert "resuming" not in resumed.stderr
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


def _no_space(*_args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_while_checkpointing_keeps_the_previous_one(runner, tmp_path, monkeypatch):
    args = [*MINI, "checkpoint.every=3"]
    assert _run(runner, tmp_path / "ref", args, monkeypatch).exit_code == 0
    real, calls = checkpoint._sync, []

    def third_fails(fd: int) -> None:
        calls.append(fd)
        _no_space() if len(calls) == 3 else real(fd)

    monkeypatch.setattr(checkpoint, "_sync", third_fails)
    full = _run(runner, tmp_path / "b", args, monkeypatch)
    assert full.exit_code == 2
    (line,) = full.stderr.strip().splitlines()
    assert line.startswith("error: cannot write checkpoint ")
    assert line.endswith("No space left on device; the previous one is kept")
    folder = tmp_path / "b" / ".checkpoints"
    (ckpt,) = (p for p in folder.iterdir() if not p.name.endswith(".prev.ckpt"))  # no temporary file left
    assert checkpoint.read(ckpt)[0]["epoch"] == 6 and not (tmp_path / "b" / "r").exists()
    monkeypatch.setattr(checkpoint, "_sync", real)
    resumed = _run(runner, tmp_path / "b", args, monkeypatch)
    assert resumed.exit_code == 0 and "at epoch 6/12" in resumed.stderr
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


def test_full_disk_while_writing_results_keeps_checkpoint_and_finished_members(runner, tmp_path, monkeypatch):
    grid = ["seed=0,1", "model.hidden_dim=5,6", *MINI[:2], *MINI[3:], "checkpoint.every=4"]
    args: list[str] = []  # two stacks of two, written one after the other
    assert _run(runner, tmp_path / "ref", [*args, *grid], monkeypatch, command="sweep").exit_code == 0
    real, calls = store._syncfs, []

    def second_fails(fd: int) -> None:
        calls.append(fd)
        _no_space() if len(calls) == 2 else real(fd)

    monkeypatch.setattr(store, "_syncfs", second_fails)
    full = _run(runner, tmp_path / "b", [*args, *grid], monkeypatch, command="sweep")
    assert full.exit_code == 2 and "No space left on device" in full.stderr, full.output
    sweep = tmp_path / "b" / "r"
    assert sum(store.is_done(d) for d in sweep.iterdir()) == 2  # the first stack's members, intact
    assert len(list((sweep / ".checkpoints").glob("*.ckpt"))) == 2  # the second's (latest and previous)
    monkeypatch.setattr(store, "_syncfs", real)
    resumed = _run(runner, tmp_path / "b", [*args, *grid], monkeypatch, command="sweep")
    assert resumed.exit_code == 0, resumed.output
    assert "2 finished members skipped" in resumed.stderr and "at epoch 8/12" in resumed.stderr
    assert_same_outputs(tmp_path / "ref" / "r", sweep)


def test_second_sigint_stops_at_once():
    before = signal.getsignal(signal.SIGINT)
    with checkpoint.handling_signals() as state:
        os.kill(os.getpid(), signal.SIGINT)
        assert state.stop == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs before this returns
    assert signal.getsignal(signal.SIGINT) is before


def test_sigterm_under_submitit_checkpoints_and_goes_on(tmp_path):
    lines: list[str] = []
    ckpt = checkpoint.StackCheckpoints(tmp_path, ["a" * 16], {"seconds": 0, "every": 0}, lines.append)
    with checkpoint.handling_signals(submitit=True) as state:
        assert not ckpt.due(3, 0)
        os.kill(os.getpid(), signal.SIGTERM)
        assert state.stop is None and state.save_now and ckpt.due(4, 0)
        ckpt.save({"epoch": 4, "step": 0, "epochs": 10, "engine": "eager"})
        assert not state.save_now and not ckpt.due(5, 0)
    # the job's log says so (SLURM's requeue and preemption send SIGTERM, then SIGKILL)
    assert lines == ["SIGTERM: checkpoint written at epoch 4/10; training goes on until the job is stopped (submitit)"]
    assert ckpt.path.exists()


def _cli(root: Path, grid: list[str], env: dict[str, str] | None = None, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "activation_bench.cli", "sweep", "--runs-dir", str(root), "--name",
                           "r", "-q", *extra, *grid], capture_output=True, text=True, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_sigkill_at_random_moments_with_checkpoints(tmp_path):
    """kill -9 at random moments, also mid-write of a checkpoint (every epoch): a later run never
    trusts a half-written file, and the finished sweep equals an uninterrupted one."""
    import random

    grid = ["activation=gelu,relu", "seed=0,1", "data.n_samples=256", "batch_size=8", "shuffle=true", "epochs=60",
            "model.dropout=0.1", "checkpoint.every=1"]
    assert _cli(tmp_path / "ref", grid).returncode == 0
    rng = random.Random(40)
    cmd = [sys.executable, "-m", "activation_bench.cli", "sweep", "--runs-dir", str(tmp_path / "b"), "--name", "r",
           "-q", *grid]
    for _ in range(4):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not (tmp_path / "b" / "r" / ".checkpoints").is_dir() and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))
        proc.kill()
        proc.wait()
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None,
                    reason="needs the [cluster] extra")
def test_submitit_job_requeued_resumes_from_its_checkpoint(tmp_path):
    """submitit's preemption signal (USR2) in a job of Hydra's submitit launcher: the job writes its
    checkpoint, submitit requeues it, and the requeued job resumes: results equal a local sweep's."""
    grid = ["activation=gelu,relu", "seed=0,1", "epochs=40", "data.n_samples=32", "batch_size=8"]
    assert _cli(tmp_path / "ref", grid).returncode == 0
    far = _cli(tmp_path / "far", grid, {checkpoint.SIGNAL_AT_ENV: "USR2@20"}, "--launcher", "submitit_local",
               "--jobs", "1")
    assert far.returncode == 0, far.stderr
    logs = "".join(p.read_text() for p in (tmp_path / "far" / "r" / ".hydra").rglob("*_log.err"))
    assert "job 0 stopped by SIGUSR2: checkpoint written at epoch 20/40" in logs
    assert "resuming stack 1/1 (4 members) from checkpoint" in logs  # the requeued job
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "far" / "r")


@pytest.mark.slow
@pytest.mark.parametrize("activations", [
    # prelu's slopes are stacked views in the compiled step (compiled_acts): restored through them;
    # the draws of rrelu and stochastic_gelu go on from their members' restored generators
    ["activation=gelu,prelu,rrelu,stochastic_gelu"],
    # a user's module's parameters, stacked [members, units] in the step, restored the same way
    ["activation=custom", "activation._target_=act_helpers.LearnedSlope", "+activation.width=8"],
])
def test_compiled_engine_resumes_from_its_checkpoint(tmp_path, activations):
    from activation_bench.engine.compiled import choose as compiled

    if compiled.compiler_missing():
        pytest.skip(compiled.compiler_missing())
    grid = ["engine=compiled", *activations, "seed=0,1,2,3", "epochs=60", "data.n_samples=32", "model.hidden_dim=8"]
    path = {"PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
    ref = _cli(tmp_path / "ref", grid, path)
    assert ref.returncode == 0 and "engine eager" not in ref.stderr, ref.stderr
    stopped = _cli(tmp_path / "b", grid, {**path, checkpoint.SIGNAL_AT_ENV: "TERM@25"})
    assert stopped.returncode == 143, stopped.stderr
    resumed = _cli(tmp_path / "b", grid, path)
    assert resumed.returncode == 0 and "from checkpoint" in resumed.stderr, resumed.stderr
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


@pytest.mark.parametrize(("arg", "message"), [("checkpoint.seconds=-1", "checkpoint.seconds must be >= 0"),
                                              ("checkpoint.every=-2", "checkpoint.every must be >= 0")])
def test_bad_checkpoint_settings_are_refused(runner, runs_dir, arg, message):
    from tests.conftest import assert_refused_by_run_and_sweep

    assert_refused_by_run_and_sweep(runner, runs_dir, [*TINY, arg], message)
