"""What a user sees: tables printed to a pipe keep every identifier whole, on one line
(`actbench ... | grep NAME`); sweep progress moves epoch by epoch within a stack."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from activation_bench.cli.main import app
from activation_bench.runs import orchestrate
from activation_bench.runs.progress import SweepProgress
from tests.conftest import TINY


def assert_whole(text: str, name: str, times: int) -> None:
    """name appears whole, within one line, `times` times (a wrapped name is split across two lines)."""
    assert sum(line.count(name) for line in text.splitlines()) == times, (name, text)


def test_activations_table_keeps_names_whole_when_piped(runner: CliRunner) -> None:
    result = runner.invoke(app, ["activations"])  # CliRunner's stdout is not a terminal
    assert result.exit_code == 0, result.output
    for name in ("stochastic_gelu", "gelu_sigmoid", "hardsigmoid", "tanhshrink", "negative_slope=0.01"):
        assert_whole(result.stdout, name, 1)


def test_compare_table_keeps_group_values_whole_when_piped(runner: CliRunner, tmp_path: Path) -> None:
    long = "a_very_long_activation_name_that_would_not_fit_a_narrow_column"
    rows = [{"activation": act, "data.teacher_activation": teacher, "seed": s, "epoch": 1,
             "train_loss": 0.1 * (s + 1) * (2 if act == long else 1) + 0.01 * s**2}
            for act in ("relu", long) for teacher in ("stochastic_gelu", "relu") for s in range(4)]
    path = tmp_path / "t.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    result = runner.invoke(app, ["compare", str(path)])
    assert result.exit_code == 0, result.output
    assert_whole(result.stdout, long, 2)  # one row per teacher activation
    assert_whole(result.stdout, "stochastic_gelu", 2)
    out = tmp_path / "table.txt"
    assert runner.invoke(app, ["compare", str(path), "--output", str(out)]).exit_code == 0
    assert_whole(out.read_text(), long, 2)


def test_run_summary_and_sweep_grid_keep_paths_and_values_whole(runner: CliRunner, tmp_path: Path) -> None:
    deep = tmp_path / ("runs_" + "x" * 90)
    result = runner.invoke(app, ["run", "--runs-dir", str(deep), "-q", "--name", "a_rather_long_run_name", *TINY])
    assert result.exit_code == 0, result.output
    assert_whole(result.stdout, str(deep / "a_rather_long_run_name"), 2)  # in the table, then on its own line
    result = runner.invoke(app, ["sweep", "--runs-dir", str(deep), "--dry-run", "--name", "grid",
                                 "activation=stochastic_gelu,relu", "data.teacher_activation=hardsigmoid,tanhshrink",
                                 *TINY])
    assert result.exit_code == 0, result.output
    assert_whole(result.stdout, "stochastic_gelu", 2)
    assert_whole(result.stdout, "tanhshrink", 2)
    assert_whole(result.stdout, str(deep / "grid"), 1)  # on the line above the table


def test_sweep_progress_moves_by_epochs_within_a_stack_and_counts_model_steps(tmp_path: Path) -> None:
    # two stacks (lr values), 3 members each; batch_size=4 of 6 samples: 2 optimiser steps an epoch
    p = orchestrate.plan(["lr=0.01,0.02", "seed=range(3)", "batch_size=4", *TINY], tmp_path, "prog")
    seen: list[SweepProgress] = []
    assert orchestrate.train_members(p, list(range(6)), 1024.0, False, seen.append) == 6
    first = [s for s in seen if s.stack == 1 and s.epochs]
    assert [s.epoch for s in first] == [1, 2, 3, 4]  # every epoch of the stack, before it finishes
    assert all(s.finished == 0 for s in first)
    assert [s.members for s in first] == [0.75, 1.5, 2.25, 3.0]
    assert [s.steps for s in first] == [6, 12, 18, 24]  # 3 members x 2 steps per epoch
    last = seen[-1]
    assert (last.finished, last.members, last.steps, last.stack, last.stacks) == (6, 6, 48, 2, 2)
