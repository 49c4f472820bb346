"""`actbench run --config FILE`: a saved run, or a sweep member, re-runs to the same losses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from activation_bench.cli.main import app
from tests.conftest import TINY, files_under


def _run(runner, runs_dir: Path, *args: str):
    return runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", *args])


def _new_dir(runs_dir: Path, before: set[Path]) -> Path:
    (new,) = set(runs_dir.iterdir()) - before
    return new


@pytest.mark.parametrize("first", [
    ["activation=leaky_relu", "activation.negative_slope=0.2", "data=uniform", "seed=3", "lr=0.01", *TINY],
    ["activation=gelu", "data.target=teacher", "data.n_val=4", "model.depth=2", "model.init=auto", "shuffle=true",
     "batch_size=2", *TINY],
    ["data=function", "data.fn=exp_sin", "epochs=3", "model.hidden_dim=4", "batch_size=16", "activation=tanh"],
])
def test_rerun_gives_bit_identical_losses(runner, runs_dir, first):
    assert _run(runner, runs_dir, "--name", "first", *first).exit_code == 0
    saved = runs_dir / "first"
    result = _run(runner, runs_dir, "--config", str(saved / "config.yaml"), "--name", "again")
    assert result.exit_code == 0, result.output
    again = runs_dir / "again"
    assert (again / "losses.csv").read_bytes() == (saved / "losses.csv").read_bytes()
    assert (again / "config.yaml").read_text() == (saved / "config.yaml").read_text()


def test_rerun_of_a_sweep_member(runner, runs_dir):
    done = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "--name", "s", "-q",
                               "activation=gelu,relu", "seed=0,1", *TINY])
    assert done.exit_code == 0, done.output
    member = next(p for p in (runs_dir / "s").iterdir() if p.is_dir() and "relu" in p.name and "1" in p.name)
    before = set(runs_dir.iterdir())
    assert _run(runner, runs_dir, "--config", str(member / "config.yaml")).exit_code == 0
    again = _new_dir(runs_dir, before)
    assert (again / "losses.csv").read_bytes() == (member / "losses.csv").read_bytes()


def test_rerun_says_when_the_thread_count_or_cpu_differs(runner, runs_dir):
    """The saved summary names the CPU and torch's thread count it trained at; a re-run under others
    says in one line that its losses need not come back bit for bit, and under the same says nothing."""
    import json

    import torch

    from activation_bench.host import cpu_model

    assert _run(runner, runs_dir, "--name", "first", *TINY).exit_code == 0
    summary_file = runs_dir / "first" / "summary.json"
    summary = json.loads(summary_file.read_text())
    here = torch.get_num_threads()
    assert (summary["cpu"], summary["threads"]) == (cpu_model(), here)
    same = _run(runner, runs_dir, "--config", str(runs_dir / "first" / "config.yaml"), "--name", "same")
    assert same.exit_code == 0 and "note:" not in same.stderr
    summary_file.write_text(json.dumps({**summary, "threads": here + 3, "cpu": "Some Other CPU"}))
    other = _run(runner, runs_dir, "--config", str(runs_dir / "first" / "config.yaml"), "--name", "other")
    assert other.exit_code == 0, other.output
    assert other.stderr.splitlines() == [
        f"note: {runs_dir / 'first'} was trained at {here + 3} torch threads (this process: {here}; "
        f"OMP_NUM_THREADS={here + 3} sets it) and on Some Other CPU (this machine: {cpu_model()}); its losses "
        "need not come back bit for bit"]
    assert (runs_dir / "other" / "losses.csv").read_bytes() == (runs_dir / "first" / "losses.csv").read_bytes()


def test_overrides_apply_on_top_of_the_saved_config(runner, runs_dir):
    assert _run(runner, runs_dir, "--name", "first", "activation=elu", "activation.alpha=0.5", "lr=0.02",
                *TINY).exit_code == 0
    saved = runs_dir / "first" / "config.yaml"
    assert _run(runner, runs_dir, "--config", str(saved), "--name", "longer", "epochs=6").exit_code == 0
    cfg = yaml.safe_load((runs_dir / "longer" / "config.yaml").read_text())
    assert cfg["epochs"] == 6 and cfg["lr"] == 0.02 and cfg["activation"] == {"name": "elu", "alpha": 0.5}
    first = (runs_dir / "first" / "losses.csv").read_text().splitlines()
    assert (runs_dir / "longer" / "losses.csv").read_text().splitlines()[:5] == first  # same first 4 epochs
    # another option of a group replaces the saved group's values instead of merging into them
    assert _run(runner, runs_dir, "--config", str(saved), "--name", "relu", "activation=relu").exit_code == 0
    cfg = yaml.safe_load((runs_dir / "relu" / "config.yaml").read_text())
    assert cfg["activation"] == {"name": "relu"} and cfg["lr"] == 0.02


def _bad(runner, runs_dir: Path, path: Path, *overrides: str) -> str:
    before = files_under(runs_dir)
    result = _run(runner, runs_dir, "--config", str(path), *overrides)
    assert result.exit_code == 2, result.output
    assert files_under(runs_dir) == before  # nothing written
    (line,) = result.stderr.strip().splitlines()
    return line


def test_bad_config_files_are_refused_in_one_line(runner, runs_dir, tmp_path):
    assert "cannot read" in _bad(runner, runs_dir, tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert "not an actbench config" in _bad(runner, runs_dir, empty)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    assert "not an actbench config" in _bad(runner, runs_dir, listing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("epochs: [1\n")
    assert "not YAML" in _bad(runner, runs_dir, broken)
    assert _run(runner, runs_dir, "--name", "ok", *TINY).exit_code == 0
    good = yaml.safe_load((runs_dir / "ok" / "config.yaml").read_text())
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(yaml.safe_dump({**good, "data": {**good["data"], "colour": "red"}}))
    assert "colour" in _bad(runner, runs_dir, unknown)
    malformed = tmp_path / "malformed.yaml"
    malformed.write_text(yaml.safe_dump({**good, "epochs": "many"}))
    assert "epochs" in _bad(runner, runs_dir, malformed)
    bad_act = tmp_path / "act.yaml"
    bad_act.write_text(yaml.safe_dump({**good, "activation": {"name": "nosuch"}}))
    assert "nosuch" in _bad(runner, runs_dir, bad_act)
    assert "malformed override" in _bad(runner, runs_dir, runs_dir / "ok" / "config.yaml", "epochs")


def test_changed_csv_file_is_refused(runner, runs_dir, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("a,b,y\n" + "".join(f"{i},{i % 3},{i * 0.5}\n" for i in range(30)))
    assert _run(runner, runs_dir, "--name", "csv", "data=csv", f"data.path={table}", "data.target=y",
                "epochs=2", "model.hidden_dim=3").exit_code == 0
    table.write_text("a,b,y\n" + "".join(f"{i},{i % 3},{i * 0.25}\n" for i in range(30)))
    assert "sha256" in _bad(runner, runs_dir, runs_dir / "csv" / "config.yaml")
