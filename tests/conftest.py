from __future__ import annotations

import functools
import io
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import typer.main
import typer.testing
from typer.testing import CliRunner

# pytest rewrites the asserts of every test module (and of every module of a package that ships a
# pytest plugin: all of hydra's) when it imports them, and keeps the rewritten bytecode in
# __pycache__ unless bytecode writing is off. With PYTHONDONTWRITEBYTECODE set (some sandboxes and CI
# images set it) every process rewrites them again: about 9 s of CPU for each xdist worker, more than
# the whole collection takes otherwise. The rewritten files are kept (in __pycache__, ignored by git);
# the tests' own subprocesses keep the variable.
sys.dont_write_bytecode = False

# pytest -n auto runs one worker per core, each with torch's default of one thread per core: idle
# OpenMP threads that spin while waiting take the core the other worker needs. Passive waiting
# (read when torch loads OpenMP, so before any test imports torch) changes no result, only how
# threads wait.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# CliRunner.invoke builds the app's whole click command tree on every call (typer.testing calls
# typer.main.get_command each time: about 45 ms for actbench's, and the suite invokes it thousands of
# times). Built once per app and process instead: a click command keeps no state between
# invocations (each gets its own click Context), and the callbacks look their helpers up at call
# time, so monkeypatching still reaches them.
typer.testing._get_command = functools.cache(typer.main.get_command)

# tiny models and few epochs keep the suite fast
TINY = ["epochs=4", "data.n_samples=6", "data.input_dim=3", "model.hidden_dim=5"]


# The modules holding the suite's longest tests (launcher, kill and wheel processes of 5-16 s each,
# whole studies): under xdist they run first. Each worker gets a contiguous half of the tests, and
# a worker that is done takes the last queued tests of the other; one of these at the end of a
# queue kept a worker busy for seconds after the other had finished. Whole modules move (their
# module fixtures stay built once), in this order; the others keep theirs.
RUN_FIRST = ("test_wheel.py", "test_tune_halving.py", "test_reliability.py", "test_launchers.py",
             "test_report_browser.py", "test_study.py", "test_combined_verdicts.py", "test_study_sequential.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    rank = {name: k for k, name in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(RUN_FIRST)))  # stable: the rest keep their order


@pytest.fixture(scope="session", autouse=True)
def _no_user_cache(tmp_path_factory: pytest.TempPathFactory):
    """No test reads or writes the user's real cache: actbench's cache ($ACTBENCH_CACHE_DIR: generated
    data, downloaded image files, tiny shakespeare, the compiled engine's store) and every other
    XDG cache (matplotlib's font list) point into a temporary folder for the whole session (one per
    xdist worker). A test that needs a file there writes it; one that sets its own folder with
    monkeypatch gets this one back afterwards.
    engine=auto (the default) does not look in the compile store (ACTBENCH_AUTO_STORE=off): a test
    that compiles would otherwise make later tests in the same worker train compiled, so which
    tests ran before one would decide its engine and bits. The tests of auto's store lookup set it on."""
    root = tmp_path_factory.mktemp("user-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACTBENCH_CACHE_DIR", str(root / "activation-bench"))
        mp.setenv("ACTBENCH_AUTO_STORE", "off")
        mp.setenv("XDG_CACHE_HOME", str(root / "xdg"))
        yield root


@pytest.fixture(scope="session", autouse=True)
def _mnist1d_generated_once(tmp_path_factory: pytest.TempPathFactory, _no_user_cache):
    """MNIST-1D's arrays, generated (about 3 s, and 2 s to import the mnist1d package) where a process
    first needs them, then kept in its cache directory: one per xdist worker, so each worker generated
    them. Here they are generated once per test run by the first worker that needs them and read by
    the others (built_once); each worker's cache is still written and read by the product as before.
    test_classification_data checks the generation itself with the real function (__wrapped__)."""
    import hashlib
    import json

    import numpy as np

    from activation_bench.data import mnist1d as generated

    make = generated._make

    @functools.wraps(make)
    def made_once(args):  # noqa: ANN001, ANN202
        key = hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:16]
        folder = built_once(tmp_path_factory, f"mnist1d-{key}",
                            lambda f: np.savez(f / "arrays.npz", **make(args)))
        with np.load(folder / "arrays.npz", allow_pickle=False) as npz:
            return {name: npz[name] for name in generated.ARRAYS}

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generated, "_make", made_once)
        yield


@pytest.fixture(scope="session", autouse=True)
def _no_waiting_for_the_disk():
    """The product flushes what it writes to the disk (fsync, fdatasync) so that a crash of the machine
    loses nothing; no test can see the difference (a killed process loses nothing either way), and
    each call waits about 5 ms for this kind of disk (hundreds per test file). In the test processes
    both are no-ops; atomic writes (a temporary file renamed) are unchanged, and the processes the
    tests start (kills, launchers, the wheel) flush as users' do."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "fsync", lambda fd: None)
        if hasattr(os, "fdatasync"):
            mp.setattr(os, "fdatasync", lambda fd: None)
        yield


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


def assert_refused_by_run_and_sweep(runner: CliRunner, runs_dir: Path, args: list[str], message: str) -> None:
    """`run` and `sweep` (over two seeds) both refuse args: exit 2, one line on stderr holding
    message, nothing written under runs_dir."""
    from activation_bench.cli.main import app

    for command in ("run", "sweep"):
        extra = ["seed=0,1"] if command == "sweep" else []
        result = runner.invoke(app, [command, "--runs-dir", str(runs_dir), "-q", *args, *extra])
        assert result.exit_code == 2, result.output
        err = result.stderr.strip()
        assert err.startswith("error: ") and "\n" not in err, err
        assert message in err, err
        assert files_under(runs_dir) == []


def run_doc_block(runner: CliRunner, tmp_path: Path, doc: Path, section: str, shorten: dict[str, str]) -> str:
    """Run the commands of the first bash block after `section` in `doc` (continuation lines joined),
    each word in `shorten` replaced, sweeps into tmp_path/runs and runs/ paths read from there;
    every command must exit 0. Returns the last command's output."""
    import re
    import shlex

    from activation_bench.cli.main import app

    block = re.search(r"```bash\n(.*?)```", doc.read_text(encoding="utf-8").split(section, 1)[1], re.S)
    assert block is not None, f"{doc}: no bash block after {section}"
    out = ""
    for line in block.group(1).replace("\\\n", " ").splitlines():
        if not line.strip():
            continue
        argv = shlex.split(line)
        assert argv[0] == "actbench"
        args = [w for a in argv[1:] for w in shorten.get(a, a).split()]  # a shortening may add words
        if args[0] == "sweep":
            args[1:1] = ["--runs-dir", str(tmp_path / "runs"), "-q"]
        else:
            args = [str(tmp_path / a) if a.startswith("runs/") else a for a in args]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
        out = result.output
    return out


_BUILT: dict[str, Path] = {}  # built_once's folders, in a run without xdist


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name`, filled by build(folder) once for the whole test run and read by every test
    that asks for it, in every xdist worker.

    A session fixture is built once per worker; one that trains costs each worker that much. Under
    xdist, every worker's base temporary folder sits in the run's own folder: the first worker to
    take the lock there builds, the others wait for it and read (pytest-xdist's documented pattern).
    A finished build leaves a marker, so a failed one is not read: the next worker builds again and
    fails with its own error. Tests must only read the folder (copy it to change anything)."""
    from filelock import FileLock

    if os.environ.get("PYTEST_XDIST_WORKER") is None:  # one process: built at its first call
        if name not in _BUILT:
            folder = tmp_path_factory.mktemp(name)
            build(folder)
            _BUILT[name] = folder
        return _BUILT[name]
    shared = tmp_path_factory.getbasetemp().parent  # this run's folder, shared by its workers
    folder, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            if folder.exists():
                shutil.rmtree(folder)  # what a failed build left
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


STAND_IN = '<svg xmlns="http://www.w3.org/2000/svg"><!-- a figure built, not drawn (a test) --></svg>'


def _stand_in_savefig(fig, fname, *args, **kwargs) -> None:  # noqa: ANN001
    """Figure.savefig that writes STAND_IN where the drawn figure would go (a path, a text or a bytes file)."""
    if isinstance(fname, io.TextIOBase):
        fname.write(STAND_IN)
    elif hasattr(fname, "write"):
        fname.write(STAND_IN.encode())
    else:
        Path(fname).write_text(STAND_IN, encoding="utf-8")


def leave_files_undrawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every figure a command writes (plot, plot-activations, rank --plot, a study's figures) is built
    but not drawn: STAND_IN is written in its place. For tests whose commands write figures that they
    do not look at; each kind of figure is drawn by its own tests (test_plots, test_depth,
    test_tuned_curves, test_accuracy_render, test_rank, test_study). A report's inline figures:
    tests.test_report.leave_figures_undrawn."""
    monkeypatch.setattr("matplotlib.figure.Figure.savefig", _stand_in_savefig)
    monkeypatch.setattr("activation_bench.study.outputs.image", lambda fig, fmt: STAND_IN.encode())
