"""Commands that need an optional extra, run where it is missing (simulated: the module set to None
in sys.modules, so importing it fails as an absent package's import does; the dev environment has
every extra installed): one line naming the extra on stderr, exit 2, nothing written."""

from __future__ import annotations

import sys

import pytest

from activation_bench.cli.main import app
from tests.conftest import TINY, files_under


def _refused(result, extra: str) -> str:
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert f"activation-bench[{extra}]" in err, err
    assert "Traceback" not in result.output
    return err


@pytest.mark.parametrize(("launcher", "module"), [("joblib", "hydra_plugins.hydra_joblib_launcher"),
                                                  ("submitit_local", "hydra_plugins.hydra_submitit_launcher"),
                                                  ("submitit_slurm", "hydra_plugins.hydra_submitit_launcher")])
def test_launchers_without_the_cluster_extra(runner, tmp_path, monkeypatch, launcher, module):
    monkeypatch.setitem(sys.modules, module, None)
    runs = tmp_path / "runs"
    err = _refused(runner.invoke(app, ["sweep", "--runs-dir", str(runs), "-q", "--launcher", launcher,
                                       "seed=0,1", *TINY]), "cluster")
    assert f"launcher '{launcher}'" in err
    study = tmp_path / "study.yaml"
    study.write_text("sweeps:\n  s: {grid: ['seed=0,1'], overrides: [epochs=2, data.n_samples=4]}\n")
    monkeypatch.chdir(tmp_path)
    _refused(runner.invoke(app, ["study", "run", str(study), "--launcher", launcher]), "cluster")
    assert files_under(tmp_path) == [study]


def test_export_mlflow_without_the_mlflow_extra(runner, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    assert runner.invoke(app, ["sweep", "--runs-dir", str(runs), "-q", "--name", "s", "seed=0,1", *TINY]).exit_code == 0
    before = files_under(tmp_path)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.chdir(tmp_path)
    err = _refused(runner.invoke(app, ["export", "mlflow", str(runs / "s")]), "mlflow")
    assert "MLflow is not installed" in err
    assert files_under(tmp_path) == before  # no mlflow.db


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "cifar10"])
def test_image_data_without_its_files_names_the_images_extra(runner, tmp_path, monkeypatch, name):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # actbench never imports it: the files are read
    runs = tmp_path / "runs"
    err = _refused(runner.invoke(app, ["run", "--runs-dir", str(runs), "-q", f"data={name}",
                                       f"data.root={tmp_path / 'none'}", "epochs=1"]), "images")
    assert "download=True" in err
    assert files_under(tmp_path) == []
