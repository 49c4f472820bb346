"""Sweeps survive kills, interrupts, full disks and bulk bad input without losing or corrupting results."""

from __future__ import annotations

import csv
import errno
import functools
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from activation_bench.cli.main import app
from activation_bench.config.compose import compose
from activation_bench.config.hashing import config_hash
from activation_bench.engine import plan, train
from activation_bench.runs import store
from tests.conftest import TINY, files_under

KILL_EPOCHS = 1000  # a whole sweep trains for about 3 s unloaded: the kills below land 0-2.5 s after a start
KILL_GRID = ["activation=gelu,relu,tanh", "seed=range(4)", *TINY[1:], f"epochs={KILL_EPOCHS}"]


def _sweep_cmd(root: Path) -> list[str]:
    per = plan.member_bytes(compose(KILL_GRID[2:]))
    budget = 2.5 * per / 2**20  # stacks of two members: many chances to be killed mid-way
    return [sys.executable, "-m", "activation_bench.cli", "sweep", "--runs-dir", str(root), "--name", "k",
            "-q", "--memory-mb", str(budget), *KILL_GRID]


def _check_complete(sweep: Path, members: int, epochs: int) -> None:
    with open(sweep / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    keys = [(r["run"], int(r["epoch"])) for r in rows]
    assert len(keys) == len(set(keys)) == members * epochs  # no gaps, no duplicates
    dirs = [p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(dirs) == members
    for d in dirs:
        assert json.loads((d / "summary.json").read_text())["status"] == "complete"
        lines = (d / "losses.csv").read_text().splitlines()
        assert [int(x.split(",")[0]) for x in lines[1:]] == list(range(1, epochs + 1))
    assert not [p for p in sweep.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def _kill_at_random_moments(cmd: list[str], sweep: Path, rng: random.Random, kills: int) -> None:
    """Start the sweep `kills` times, each SIGKILLed at a random moment up to 2.5 s after its
    planning is done (after its start, where an earlier start wrote sweep.yaml); whatever is visible
    under a member's name after each kill is whole or marked incomplete."""
    for _ in range(kills):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and not (sweep / "sweep.yaml").exists():
            time.sleep(0.02)  # planning done: training and writing from here on
        time.sleep(rng.uniform(0.0, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for d in (p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")):
            # whatever is visible under a member's name is either whole or marked incomplete
            s = store.read_summary(d)
            assert s is None or s["status"] == "complete"


def _interrupt_after_the_first_member(cmd: list[str], sweep: Path) -> None:
    """Start the sweep and SIGINT it once a member is finished: it stops cleanly, exit 130, one line
    saying how many members are done and how to resume."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300  # waits only until the first member is done (about a second unloaded)

    def finished_members() -> int:  # under their final names (a hidden temporary one is not finished yet)
        return sum(store.is_done(d) for d in sweep.iterdir() if not d.name.startswith(".")) if sweep.is_dir() else 0

    while time.time() < deadline and not finished_members():
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("sweep finished before the interrupt arrived")
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    match = re.search(r"interrupted: (\d+)/12 members done; run the same command again to resume", err)
    assert match and int(match.group(1)) >= 1


def _resume(cmd: list[str], sweep: Path) -> None:
    """Run the same command to the end: every member complete, and those finished before untouched
    (only unfinished members are retrained). A hidden temporary directory killed after its files
    were written but before its rename holds a complete summary too: it is not a finished member
    (resume removes it and trains the member)."""
    finished_before = {d.name for d in sweep.iterdir() if not d.name.startswith(".") and store.is_done(d)}
    stamps = {n: (sweep / n / "summary.json").stat().st_mtime_ns for n in finished_before}
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _check_complete(sweep, 12, KILL_EPOCHS)
    assert all((sweep / n / "summary.json").stat().st_mtime_ns == t for n, t in stamps.items())


def test_sigint_then_sigkill_at_random_moments_then_resume(tmp_path):
    """The quick run's one sweep for both signals (each start imports torch; the training is paid
    once): interrupted cleanly after its first member, killed twice at random moments, resumed
    to a complete sweep. The two tests below (-m slow) do each on its own sweep, with three kills."""
    cmd = _sweep_cmd(tmp_path)
    _interrupt_after_the_first_member(cmd, tmp_path / "k")
    _kill_at_random_moments(cmd, tmp_path / "k", random.Random(1234), kills=2)
    _resume(cmd, tmp_path / "k")


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(tmp_path):
    cmd = _sweep_cmd(tmp_path)
    _kill_at_random_moments(cmd, tmp_path / "k", random.Random(1234), kills=3)
    _resume(cmd, tmp_path / "k")


@pytest.mark.slow
def test_sigint_stops_cleanly_with_exit_130(tmp_path):
    cmd = _sweep_cmd(tmp_path)
    _interrupt_after_the_first_member(cmd, tmp_path / "k")
    _resume(cmd, tmp_path / "k")


def _no_space(*_args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# the disk fills while flushing run files (_syncfs) or sweep.yaml (_datasync)
@pytest.mark.parametrize(("command", "where"), [("run", "_syncfs"), ("sweep", "_syncfs"), ("sweep", "_datasync")])
def test_full_disk_gives_clear_error_and_leaves_nothing(runner, runs_dir, monkeypatch, where, command):
    monkeypatch.setattr(store, where, _no_space)
    args = [command, "--runs-dir", str(runs_dir), "-q", *TINY] + (["seed=0,1"] if command == "sweep" else [])
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "No space left on device" in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1
    if command == "run" or where == "_datasync":  # sweep.yaml is the sweep's first file
        assert files_under(runs_dir) == []
    else:  # sweep.yaml is written; no member directory, finished or temporary, is left
        (sweep,) = runs_dir.iterdir()
        assert [p.name for p in sweep.iterdir()] == ["sweep.yaml"]


def test_stage_failure_in_a_batch_leaves_no_temporary_directories(tmp_path, monkeypatch):
    cfg = compose(TINY)
    res = train.train([cfg])[0]
    real = store.losses_csv
    calls = []

    def fail_third(*args: object) -> str:
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(*args)

    monkeypatch.setattr(store, "losses_csv", fail_third)
    items = [(tmp_path / f"m{i}", cfg, res, f"h{i}", None) for i in range(6)]
    with pytest.raises(OSError):
        store.write_runs(items, threads=2)
    assert list(tmp_path.iterdir()) == []


def _batch(tmp_path: Path, n: int) -> list:
    return [(tmp_path / f"m{i}", *_trained(), f"h{i}", {"i": str(i)}) for i in range(n)]


@functools.cache
def _trained() -> tuple:
    cfg = compose([*TINY, "epochs=7"])
    return cfg, train.train([cfg])[0]


def _files(run_dir: Path) -> dict[str, object]:
    out: dict[str, object] = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    out["summary.json"] = {k: v for k, v in json.loads(out["summary.json"]).items() if k != "created"}
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="writer processes are forked on Linux")
def test_a_batch_formatted_in_several_processes_writes_the_same_directories(tmp_path, monkeypatch):
    one, three = tmp_path / "one", tmp_path / "three"
    one.mkdir(), three.mkdir()
    store.write_runs(_batch(one, 7), processes=1)
    monkeypatch.setattr(store, "_FLOATS_PER_WRITER", 7)  # every run's 7 losses are a writer's share
    assert store._writers(_batch(three, 7), 3) == 3 and store._writers(_batch(three, 7), 1) == 1
    assert store._writers(_batch(three, 2), 3) == 2  # never more writers than runs
    parent, real = os.getpid(), store._stage

    def record(*args: object) -> None:
        (Path(str(args[0]) + ".pid")).write_text(str(os.getpid()))  # beside the hidden directory
        real(*args)

    monkeypatch.setattr(store, "_stage", record)
    store.write_runs(_batch(three, 7), processes=3)
    staged_by = {int(p.read_text()) for p in three.glob(".*.pid")}
    assert len(staged_by) == 3 and parent in staged_by  # two children and this process staged
    assert sorted(p.name for p in three.iterdir() if not p.name.endswith(".pid")) == [f"m{i}" for i in range(7)]
    for i in range(7):
        assert _files(three / f"m{i}") == _files(one / f"m{i}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="writer processes are forked on Linux")
def test_when_no_writer_process_can_be_forked_this_one_writes_their_share(tmp_path, monkeypatch):
    one, three = tmp_path / "one", tmp_path / "three"
    one.mkdir(), three.mkdir()
    store.write_runs(_batch(one, 7), processes=1)
    monkeypatch.setattr(store, "_FLOATS_PER_WRITER", 7)
    real, forks = os.fork, []

    def second_fails() -> int:
        forks.append(1)
        if len(forks) == 2:
            raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        return real()

    monkeypatch.setattr(os, "fork", second_fails)
    store.write_runs(_batch(three, 7), processes=3)
    assert len(forks) == 2
    assert sorted(p.name for p in three.iterdir()) == [f"m{i}" for i in range(7)]
    for i in range(7):
        assert _files(three / f"m{i}") == _files(one / f"m{i}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="writer processes are forked on Linux")
@pytest.mark.parametrize("where", ["child", "parent"])
def test_a_failing_writer_process_fails_the_batch_and_leaves_nothing(tmp_path, monkeypatch, where):
    items = _batch(tmp_path, 6)
    monkeypatch.setattr(store, "_FLOATS_PER_WRITER", 7)
    parent, real = os.getpid(), store.losses_csv

    def fail_in(*args: object) -> str:
        if (os.getpid() == parent) == (where == "parent"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(*args)

    monkeypatch.setattr(store, "losses_csv", fail_in)
    # a child's failure comes back as one line (UsageError); this process's own raises as it is
    with pytest.raises(store.UsageError if where == "child" else OSError, match="Input/output error"):
        store.write_runs(items, processes=2)
    assert list(tmp_path.iterdir()) == []


def test_runs_dir_that_is_a_file(runner, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = runner.invoke(app, ["run", "--runs-dir", str(blocker / "runs"), "-q", *TINY])
    assert result.exit_code == 2 and "cannot create runs directory" in result.stderr


def test_concurrent_identical_member_keeps_the_first(tmp_path):
    """Two processes finishing the same member: the second copy is dropped, nothing clobbered."""
    cfg = compose(TINY)
    res = train.train([cfg])[0]
    h = config_hash(cfg)
    first = store.write_run(tmp_path / "m", cfg, res, h)
    stamp = (first / "summary.json").stat().st_mtime_ns
    assert store.write_run(tmp_path / "m", cfg, res, h) == first
    assert (first / "summary.json").stat().st_mtime_ns == stamp
    # single runs racing for one name move on to name-2
    assert store.write_run(tmp_path / "m", cfg, res, h, unique=True).name == "m-2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "m-2"]


NUMERIC_KEYS = ["epochs", "lr", "seed", "batch_size", "data.n_samples", "data.input_dim", "model.hidden_dim"]
_number = re.compile(r"^\s*[+]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")
junk = st.text(alphabet=st.characters(codec="ascii", exclude_characters="\x00\r\n"), min_size=1, max_size=12)


@st.composite
def bad_override(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["value", "key", "group", "shape"]))
    if kind == "value":  # a numeric key with a non-number, zero-or-negative, or absurd value
        value = draw(junk.filter(lambda v: not _number.match(v)) | st.sampled_from(["0", "-1", "-0.5", "1e999"]))
        key = draw(st.sampled_from(NUMERIC_KEYS))
        if key == "seed" and value == "0":
            value = "-1"
        return f"{key}={value}"
    if kind == "key":
        key = draw(st.from_regex(r"[a-z]{3,8}(\.[a-z]{2,6})?", fullmatch=True))
        return f"{'zz' + key}={draw(junk)}"
    if kind == "group":
        group = draw(st.sampled_from(["activation", "data"]))
        return f"{group}=zz{draw(st.from_regex(r'[a-z0-9_]{1,8}', fullmatch=True))}"
    return draw(st.sampled_from(["=1", "epochs", "epochs==3", "lr=[1,2", "seed=range(", "activation=glob(",
                                 "=="]))


def _refused_and_nothing_written(runner, tmp_path: Path, override: str, command: str) -> None:
    """`run` or `sweep` with one bad override: exit 2, one line on stderr, no traceback, no files."""
    root = tmp_path / f"r{abs(hash((override, command)))}"
    # the sweep's own axis (optimizer) is a key the generator never corrupts, so it cannot mask the defect
    result = runner.invoke(app, [command, "--runs-dir", str(root), "-q", *TINY[:1], override, "optimizer=adam,sgd"]
                           if command == "sweep" else [command, "--runs-dir", str(root), "-q", override])
    assert result.exit_code == 2, (override, result.output)
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, (override, err)
    assert "Traceback" not in result.output
    assert files_under(root) == []


BAD_OVERRIDES = given(override=bad_override(), command=st.sampled_from(["run", "sweep"]))
FIXED = {"deadline": None, "derandomize": True, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


# the quick run's 20 examples hold every kind of defect for both commands; the 60 under -m slow
@settings(max_examples=20, **FIXED)
@BAD_OVERRIDES
def test_bulk_bad_overrides(runner, tmp_path, override, command):
    _refused_and_nothing_written(runner, tmp_path, override, command)


@pytest.mark.slow
@settings(max_examples=60, **FIXED)
@BAD_OVERRIDES
def test_bulk_bad_overrides_more_examples(runner, tmp_path, override, command):
    _refused_and_nothing_written(runner, tmp_path, override, command)


CSV_HEADER = "activation,seed,epoch,train_loss"


@st.composite
def broken_csv(draw: st.DrawFn) -> tuple[str, str]:
    """A small long-format table with one defect; returns (text, expected message fragment)."""
    rows = [f"{a},{s},{e},{0.5 / e}" for a in ("gelu", "relu") for s in range(3) for e in range(1, 4)]
    kind = draw(st.sampled_from(["loss", "header", "empty", "epoch"]))
    if kind == "loss":
        i = draw(st.integers(0, len(rows) - 1))
        bad = draw(junk.filter(lambda v: not _number.match(v) and "," not in v and v.strip()
                               and v.strip().lower() not in ("nan", "inf", "-inf", "+inf", "infinity")))
        cells = rows[i].split(",")
        rows[i] = ",".join([*cells[:3], bad.replace('"', "")])
        return CSV_HEADER + "\n" + "\n".join(rows) + "\n", f"line {i + 2}"
    if kind == "header":
        missing = draw(st.sampled_from(["epoch", "train_loss"]))
        header = CSV_HEADER.replace(missing, "zz" + missing)
        return header + "\n" + "\n".join(rows) + "\n", missing
    if kind == "epoch":
        i = draw(st.integers(0, len(rows) - 1))
        cells = rows[i].split(",")
        rows[i] = ",".join([cells[0], cells[1], "x" + cells[2], cells[3]])
        return CSV_HEADER + "\n" + "\n".join(rows) + "\n", "epoch"
    return draw(st.sampled_from(["", CSV_HEADER + "\n"])), ""


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=broken_csv())
def test_bulk_malformed_csv_for_compare(runner, tmp_path, case):
    text, fragment = case
    path = tmp_path / "table.csv"
    path.write_text(text)
    before = files_under(tmp_path)
    result = runner.invoke(app, ["compare", str(path), "--output", str(tmp_path / "out.csv"), "--format", "csv"])
    assert result.exit_code == 2, (text, result.output)
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in result.output, err
    assert str(path) in err and fragment in err, err
    assert files_under(tmp_path) == before  # no output file, no temporary left behind
