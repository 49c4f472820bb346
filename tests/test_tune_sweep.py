"""sweep --tune: the tuning seeds over the whole grid, each group's choice (compare --tune's own code),
the judging seeds at the chosen values only; exact against the full grid, resumable at any point."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from activation_bench.cli.main import app

GRID = ["activation=gelu,relu", "lr=1e-3,1e-1", "seed=range(5)", "data=function", "data.fn=bessel_j0",
        "epochs=3", "data.n_samples=30", "model.hidden_dim=4"]
TUNE = ["--tune", "lr", "--tune-seeds", "2"]
COMPARE = ["--metric", "final", "--tune", "lr", "--tune-seeds", "2", "--format", "csv"]


def sweep(runner, runs_dir: Path, name: str, *args: str, grid: list[str] = GRID):
    return runner.invoke(app, ["sweep", *grid, "--runs-dir", str(runs_dir), "--name", name, "-q", *args])


def members(directory: Path) -> list[str]:
    return sorted(d.name for d in directory.iterdir() if d.is_dir() and not d.name.startswith("."))


def losses(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name / "losses.csv").read_bytes() for name in members(directory)}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The full grid and the tuned sweep of it, trained once for the module."""
    from typer.testing import CliRunner

    runner = CliRunner()
    runs_dir = tmp_path_factory.mktemp("tuned") / "runs"
    full = sweep(runner, runs_dir, "full")
    assert full.exit_code == 0, full.output
    tuned = sweep(runner, runs_dir, "tuned", *TUNE)
    assert tuned.exit_code == 0, tuned.output
    return runs_dir, tuned.output


def test_tuned_sweep_compares_byte_for_byte_as_the_full_grid(runner, swept):
    runs_dir, output = swept
    assert len(members(runs_dir / "full")) == 20
    assert len(members(runs_dir / "tuned")) == 8 + 6  # 2 tuning seeds x 4 settings + 3 judging seeds x 2 groups
    for extra in ([], ["--loss", "test_loss"], ["--metric", "best"]):
        out = [runner.invoke(app, ["compare", str(runs_dir / d), *COMPARE, *extra]) for d in ("full", "tuned")]
        assert out[0].exit_code == 0, out[0].output
        assert out[0].stdout == out[1].stdout
    # without --tune-seeds, compare reads the layout: the seeds with the grid tune
    out = [runner.invoke(app, ["compare", str(runs_dir / d), "--tune", "lr", "--tune-seeds", "2"])
           for d in ("full", "tuned")]
    layout = runner.invoke(app, ["compare", str(runs_dir / "tuned"), "--tune", "lr"])
    assert out[0].stdout == out[1].stdout == layout.stdout
    # a member is bit for bit its run in the full grid
    full, tuned = losses(runs_dir / "full"), losses(runs_dir / "tuned")
    assert all(tuned[name] == full[name] for name in tuned)
    assert "chose gelu: lr " in output and "judging seeds 2, 3, 4 at the chosen values: 6 members" in output


def test_the_choice_is_written_with_its_scores(swept):
    runs_dir, _ = swept
    doc = json.loads((runs_dir / "tuned" / "tuning.json").read_text())
    (choice,) = doc["choices"]
    assert choice["tune"] == ["lr"] and choice["metric"] == "final" and choice["tune_on"] == "val_loss"
    assert choice["tune_seeds"] == ["0", "1"] and choice["judge_seeds"] == ["2", "3", "4"]
    assert {r["activation"] for r in choice["chosen"]} == {"gelu", "relu"}
    rows = (runs_dir / "tuned" / "tuning.csv").read_text().splitlines()
    assert rows[0] == "choice,activation,lr,score,n_ok,n_failed,rank,chosen"
    assert len(rows) == 1 + 4 and sum(r.endswith(",True") for r in rows) == 2
    sweep_doc = (runs_dir / "tuned" / "sweep.yaml").read_text()
    assert "tuned:" in sweep_doc and len(sweep_doc.split("config_hash")) == 21  # the full grid's 20 members


def test_dry_run_counts_members_and_member_epochs_against_the_full_grid(runner, swept, tmp_path):
    runs_dir, _ = swept
    before = sweep(runner, tmp_path / "runs", "new", *TUNE, "--dry-run")
    assert before.exit_code == 0, before.output
    assert "tuning stage 8 members (24 member-epochs), judging stage 6 members (18 member-epochs, expected" in \
        before.output
    assert "14 of the full grid's 20 members, 42 of its 60 member-epochs (70%); 14 to run" in before.output
    assert not (tmp_path / "runs").exists()
    after = sweep(runner, runs_dir, "tuned", *TUNE, "--dry-run")
    assert "judging stage 6 members (18 member-epochs, at the chosen values)" in after.output
    assert after.output.rstrip().endswith("; 0 to run")


def test_resume_in_either_stage_trains_only_what_is_missing_bit_for_bit(runner, swept, tmp_path):
    runs_dir, _ = swept
    work = tmp_path / "runs"
    shutil.copytree(runs_dir / "tuned", work / "tuned")
    want = losses(work / "tuned")
    choice = (work / "tuned" / "tuning.json").read_bytes()
    names = members(work / "tuned")
    tuning_member = next(n for n in names if n.endswith("seed=1"))
    judging = [n for n in names if not n.endswith(("seed=0", "seed=1"))]
    # killed in the tuning stage (a tuning member and every judging member missing), during the choice
    # (no tuning.json) or in the judging stage (one judging member missing)
    for gone, to_run in (([tuning_member, *judging], (1, 6)), ([], (0, 0)), (judging[:1], (0, 1))):
        for name in gone:
            shutil.rmtree(work / "tuned" / name)
        (work / "tuned" / "tuning.json").unlink()
        result = sweep(runner, work, "tuned", *TUNE)
        assert result.exit_code == 0, result.output
        assert losses(work / "tuned") == want
        assert (work / "tuned" / "tuning.json").read_bytes() == choice
        said = [ln.rpartition(", ")[2] for ln in result.output.splitlines() if ln.startswith("resuming")]
        assert said == [f"{n} to run" for n in to_run]
        assert "changed since" not in result.output


def test_more_seeds_after_the_choice_choose_again_and_train_what_the_choice_needs(runner, swept, tmp_path):
    runs_dir, _ = swept
    work = tmp_path / "runs"
    shutil.copytree(runs_dir / "tuned", work / "tuned")
    grid = [g if not g.startswith("seed=") else "seed=range(7)" for g in GRID]
    result = sweep(runner, work, "tuned", *TUNE, grid=grid)
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if "changed since the last choice" in ln]
    assert len(lines) == 1 and "4 judging members to train for the new choice" in lines[0]
    assert len(members(work / "tuned")) == 14 + 4
    doc = json.loads((work / "tuned" / "tuning.json").read_text())
    assert doc["choices"][0]["judge_seeds"] == ["2", "3", "4", "5", "6"]


@pytest.mark.parametrize("args, message", [
    (["--tune", "model.hidden_dim"], "--tune model.hidden_dim: the grid does not vary 'model.hidden_dim'"),
    (["--tune", "lr", "--tune-seeds", "4"], "--tune-seeds 4: 5 seeds leave 1 to evaluate on"),
    (["--tune", "seed"], "--tune seed"),
    (["--tune", "lr", "--tune-on", "test_loss"], "--tune-on test_loss"),
    (["--metric", "final"], "--metric sets up --tune"),
    (["--tune", "lr", "--metric", "nonsense"], "nonsense"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(runner, tmp_path, args, message):
    result = sweep(runner, tmp_path / "runs", "bad", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


MODULE = ["activation=relu,tanh", "lr=1e-3,3e-2", "seed=range(4)", "model=module",
          "model.target=tests.module_models:Fixed", "model.replace=[torch.nn.ReLU]", "data=iris", "epochs=2",
          "batch_size=32"]


@pytest.mark.parametrize("launcher", [None, pytest.param("basic", marks=pytest.mark.slow)])  # basic: a process a member
def test_model_module_and_a_launcher_tune_then_judge_exactly(runner, tmp_path, launcher):
    """model=module (a user's torch module) through a Hydra launcher: the same table from fewer members."""
    runs_dir = tmp_path / "runs"
    more = ["--launcher", launcher, "--jobs", "2"] if launcher else []
    assert sweep(runner, runs_dir, "full", grid=MODULE).exit_code == 0
    result = sweep(runner, runs_dir, "tuned", "--tune", "lr", "--tune-seeds", "2", "--tune-on", "val_acc",
                   "--metric", "early_stop", *more, grid=MODULE)
    assert result.exit_code == 0, result.output
    assert len(members(runs_dir / "tuned")) == 8 + 4
    args = ["--metric", "early_stop", "--loss", "test_acc", "--tune", "lr", "--tune-seeds", "2", "--tune-on",
            "val_acc", "--format", "csv"]
    out = [runner.invoke(app, ["compare", str(runs_dir / d), *args]).stdout for d in ("full", "tuned")]
    assert out[0] == out[1] and out[0].count("\n") == 3


def test_compare_says_when_judging_seeds_hold_another_value_than_it_chooses(runner, tmp_path):
    """A tuned sweep compared with other options than it chose by: the groups without judged runs
    are named, not silently empty."""
    rows = ["activation,lr,seed,epoch,train_loss,val_loss"]
    for act in ("gelu", "relu"):
        for seed in range(4):
            for lr in (("0.001", "0.01") if seed < 2 else ("0.001",)):  # judged at 0.001: chosen otherwise
                v = 0.1 if lr == "0.01" else 0.5
                rows += [f"{act},{lr},{seed},{e},{v * (1 + seed / 10) * (4 - e)!r},{v * (4 - e)!r}" for e in (1, 2, 3)]
    path = tmp_path / "table.csv"
    path.write_text("\n".join(rows) + "\n")
    result = runner.invoke(app, ["compare", str(path), "--tune", "lr", "--tune-seeds", "2"])
    assert "2 group(s) (activation=gelu, ...) have judging-seed runs but none at their chosen lr" in result.output


def test_a_grid_that_drops_finished_members_is_refused(runner, swept, tmp_path):
    runs_dir, _ = swept
    work = tmp_path / "runs"
    shutil.copytree(runs_dir / "tuned", work / "tuned")
    grid = [g if not g.startswith("lr=") else "lr=1e-3,3e-2" for g in GRID]
    result = sweep(runner, work, "tuned", *TUNE, grid=grid)
    assert result.exit_code == 2 and "finished member(s) this grid leaves out" in result.output


def test_a_grid_grown_after_the_choice_chooses_again(runner, swept, tmp_path):
    """A value added to the grid: its tuning members train, the choice is made again over the whole
    grid, said in one line, and the judging seeds train at what it now chooses."""
    runs_dir, _ = swept
    work = tmp_path / "runs"
    shutil.copytree(runs_dir / "tuned", work / "tuned")
    grid = [g if not g.startswith("lr=") else "lr=1e-3,1e-1,1e-2" for g in GRID]
    result = sweep(runner, work, "tuned", *TUNE, grid=grid)
    assert result.exit_code == 0, result.output
    assert len([ln for ln in result.output.splitlines() if "changed since the last choice" in ln]) == 1
    choice = json.loads((work / "tuned" / "tuning.json").read_text())["choices"][0]
    assert choice["grid"] == {"lr": ["0.001", "0.01", "0.1"]}
    chosen = {r["activation"]: str(r["lr"]) for r in choice["chosen"]}
    names = members(work / "tuned")
    for act, lr in chosen.items():  # every judging seed at the new choice
        assert all(any(n.endswith(f"activation={act}_lr={lr}_seed={s}") for n in names) for s in (2, 3, 4))


def test_a_choice_at_the_grids_end_is_said_out_loud(swept):
    """Each group's choice is one of the grid's two values, so at its end: the sweep warns as compare does."""
    _, output = swept
    chose = next(ln for ln in output.splitlines() if ln.startswith("chose "))
    assert "warning: chosen lr=" in output and ("the grid's largest value" in output or "smallest" in output), output
    assert output.index(chose) < output.index("warning: chosen lr=")
