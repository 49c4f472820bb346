"""The package as users install it: the wheel built from this source tree, installed into a fresh
virtual environment outside the tree, and every command run there from a folder outside the tree.

`pip install -e` (the README's set-up, and CI's) runs the tool from the checkout, so a subpackage,
config or template missing from the wheel goes unseen by every other test. Here the wheel is built
without network (`pip wheel --no-deps --no-build-isolation`, from a copy of the tree so the checkout
gets no build/ or egg-info), installed with `--no-deps --no-index` into a venv that sees this
environment's site-packages (torch, Hydra, ... come from there), and checked to be the copy that
runs. The commands run in one process of the venv's Python through Typer's test runner (each
subprocess would import torch again); the `actbench` script and `python -m activation_bench` run
as processes too. `plot` and `export mlflow` run there as --help only (their modules are in the
wheel by the first test; running them would import matplotlib's plotting and MLflow, 10 s more).
The commands that write figures (report, plot-activations, the study's report) build each figure
and write a stand-in where its drawing would go: drawing is matplotlib's own work, which the rest of
the suite does from the checkout (test_plots, test_report, test_study), and needs nothing of the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.conftest import built_once

ROOT = Path(__file__).resolve().parents[1]
TINY = ["epochs=3", "data.n_samples=8", "model.hidden_dim=4"]
# the files a build needs (pyproject's readme and licence, setup.py's hook, the package and its configs)
BUILD_INPUTS = ["pyproject.toml", "setup.py", "README.md", "LICENSE", "activation_bench", "configs"]

STUDY = """\
title: wheel study
runs_dir: runs
output: out
sweeps:
  s:
    grid: ['activation=gelu,relu', 'seed=range(4)']
    overrides: [epochs=3, data.n_samples=8, model.hidden_dim=4]
comparisons:
  c: {sweeps: [s], metric: final}
"""

# every command, run by the venv's Python in a folder outside the tree; each must exit 0
DRIVER = """\
import json, sys
from pathlib import Path
from typer.testing import CliRunner
import activation_bench
from activation_bench.cli.main import app

TINY = %(tiny)r
commands = [
    ["run", "--runs-dir", "runs", "--name", "one", "-q", *TINY],
    ["sweep", "--runs-dir", "runs", "--name", "sw", "-q", "activation=gelu,relu", "data=normal,uniform",
     "seed=range(3)", *TINY],
    ["compare", "runs/sw"],
    ["compare", "runs/sw", "--format", "json"],
    ["rank", "runs/sw"],
    ["report", "runs/sw"],
    ["plot-activations", "gelu", "relu", "--output", "acts.png"],
    ["study", "run", "-q", "study.yaml"],
    ["study", "tables", "study.yaml"],
    ["search", "--dry-run", "--candidates", "20", "--name", "sr", "epochs=2"],
    ["activations"],
    ["config", "activation=relu", "data=uniform"],
]
helps = [[], ["run"], ["sweep"], ["activations"], ["config"], ["compare"], ["plot"], ["plot-activations"],
         ["report"], ["rank"], ["search"], ["study"], ["study", "run"], ["study", "tables"], ["export"],
         ["export", "mlflow"]]
commands += [[*h, "--help"] for h in helps]
# figures are built but not drawn (Agg's rasterising is matplotlib's, not the wheel's: drawn elsewhere in
# the suite): a stand-in is written where each figure's file or inline <svg> would go
import io, matplotlib.figure
def undrawn(fig, fname, *args, **kwargs):
    stand_in = '<svg xmlns="http://www.w3.org/2000/svg"></svg>'
    if isinstance(fname, io.TextIOBase):
        fname.write(stand_in)
    elif hasattr(fname, "write"):
        fname.write(stand_in.encode())
    else:
        Path(fname).write_text(stand_in)
matplotlib.figure.Figure.savefig = undrawn
runner = CliRunner()
out = {"file": activation_bench.__file__, "results": []}
for args in commands:
    r = runner.invoke(app, args)
    out["results"].append({"args": args, "code": r.exit_code, "output": r.output[-2000:],
                           "exception": repr(r.exception) if r.exit_code else None})
Path("driver.json").write_text(json.dumps(out))
"""


def _copy_tree(dest: Path) -> Path:
    for name in BUILD_INPUTS:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _check(cmd: list, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=_env(), capture_output=True, text=True)
    assert result.returncode == 0, (cmd, result.stdout[-3000:], result.stderr[-3000:])
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the source tree, once per test run: the two tests of this module
    read it, in whichever xdist workers they land (conftest.built_once)."""
    def build(dist: Path) -> None:
        src = _copy_tree(tmp_path_factory.mktemp("src"))
        _check([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                "-w", dist, src], src)

    (whl,) = built_once(tmp_path_factory, "wheel", build).glob("activation_bench-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> Path:
    """A fresh venv with the wheel installed, seeing the packages of the environment running the tests
    (a venv or not) through a .pth file that names its site-packages; returns its bin/. Not
    --system-site-packages: that shows the *base* interpreter's packages, which lack the
    dependencies where the tests run in a venv."""
    root = tmp_path_factory.mktemp("venv")
    # without pip of its own (ensurepip's copy into the venv costs 9 s): this environment's pip installs
    # into it, run by the venv's interpreter (pip's --python), as the venv's own pip would
    _check([sys.executable, "-m", "venv", "--without-pip", root], root)
    bin_dir = root / ("Scripts" if os.name == "nt" else "bin")
    purelib = _check([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     root).stdout.strip()
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    # after the venv's own site-packages on sys.path: the wheel's copy is found first. Lines of a .pth
    # that are paths are appended as they are; the editable install's own .pth files in those folders
    # are not processed (only site directories' are), so the checkout is not importable from there.
    (Path(purelib) / "_tests_environment.pth").write_text("".join(f"{p}\n" for p in ours), encoding="utf-8")
    # --ignore-installed: this environment's editable install of the same name and version is not
    # uninstalled (it lies outside the venv) nor taken as the installed copy
    _check([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "--no-deps", "--no-index",
            "--ignore-installed", "-q", wheel], root)
    return bin_dir


def test_wheel_holds_every_module_config_and_template(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    # every module, and any other file in the package's folders (templates, data a module reads)
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "activation_bench").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    configs = {"activation_bench/configs/" + p.relative_to(ROOT / "configs").as_posix()
               for p in (ROOT / "configs").rglob("*.yaml")}
    templates = {p.relative_to(ROOT).as_posix()
                 for p in (ROOT / "activation_bench" / "render" / "templates").glob("*.j2")}
    assert "activation_bench/study/spec.py" in modules and "activation_bench/configs/config.yaml" in configs
    assert len(templates) >= 3
    missing = sorted((modules | configs | templates) - names)
    assert not missing, f"missing from {wheel.name}: {missing}"
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "actbench = activation_bench.cli.main:main" in zipfile.ZipFile(wheel).read(entry).decode()
    info = entry.removesuffix("entry_points.txt")
    assert "License-Expression: MIT" in zipfile.ZipFile(wheel).read(info + "METADATA").decode().splitlines()
    assert info + "licenses/LICENSE" in names


def test_every_command_runs_from_the_installed_wheel(venv, tmp_path):
    work = tmp_path / "work"  # outside the source tree
    work.mkdir()
    assert ROOT not in work.parents
    python, actbench = venv / "python", venv / "actbench"
    # the wheel's copy runs, not the checkout's editable install
    where = _check([python, "-c", "import activation_bench; print(activation_bench.__file__)"], work).stdout.strip()
    assert Path(where).is_relative_to(venv.parent), where

    version = _check([actbench, "--version"], work).stdout.strip()
    assert version == "actbench 0.1.0", version
    assert _check([python, "-m", "activation_bench", "--version"], work).stdout.strip() == version
    assert "Usage: actbench" in _check([actbench, "--help"], work).stdout
    out = _check([actbench, "run", "--runs-dir", "runs", "--name", "script", "-q", *TINY], work).stdout
    assert out.strip().splitlines()[-1] == str(Path("runs") / "script")
    assert (work / "runs" / "script" / "losses.csv").is_file()

    (work / "study.yaml").write_text(STUDY, encoding="utf-8")
    (work / "driver.py").write_text(DRIVER % {"tiny": TINY}, encoding="utf-8")
    _check([python, "driver.py"], work)
    report = json.loads((work / "driver.json").read_text(encoding="utf-8"))
    assert Path(report["file"]).is_relative_to(venv.parent), report["file"]
    failed = [r for r in report["results"] if r["code"] != 0]
    assert not failed, textwrap.shorten(json.dumps(failed), 6000)
    assert len(report["results"]) == 28
    for path in ["runs/one/losses.csv", "runs/sw/results.csv", "runs/sw/report.html", "acts.png",
                 "out/c.md", "out/report.html", "runs/s/results.csv"]:
        assert (work / path).is_file(), path
    assert not (work / "runs" / "sr").exists()  # --dry-run trains and writes nothing
