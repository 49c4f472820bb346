"""Every analysis command works whatever config key a sweep varies: a swept key becomes a column of
the loaded runs, and it must never meet a column the analysis makes itself (the budget check's
per-run `epochs` met a swept `epochs`: `compare` ended in "Grouper for 'epochs' not 1-dimensional").
Each key swept alone (compare, compare --tune KEY, rank; report where cheap), then every sweep's
runs read together from their parent folder (every key varying at once)."""

from __future__ import annotations

import json

import pytest

from activation_bench.cli.main import app

BASE = ["epochs=3", "data.n_samples=8", "data.input_dim=2", "model.hidden_dim=4", "data.n_val=4"]
SEEDS = "seed=range(4)"
# key -> its two values, each a key a run writes into config.yaml; a value replaces BASE's
SWEPT = {
    "epochs": "2,5",
    "lr": "1e-3,1e-2",
    "batch_size": "4,8",
    "model.hidden_dim": "3,4",
    "model.depth": "1,2",
    "data.n_samples": "8,10",
    "data.n_val": "4,5",
}


def _ok(runner, args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (args, result.output[-3000:])
    assert "Traceback" not in result.output
    return result.stdout


def _compare(runner, folder: str, *extra: str) -> dict:
    return json.loads(_ok(runner, ["compare", folder, "--format", "json", *extra]))


# the default run's keys: the regression's (epochs), a float and a model key (reports' figures left
# undrawn); every key, with the reports drawn, is slow-marked
QUICK = ("epochs", "lr", "model.depth")


def test_analysis_commands_with_some_keys_swept_alone_and_all_together(runner, tmp_path, monkeypatch):
    from tests.test_report import leave_figures_undrawn

    leave_figures_undrawn(monkeypatch)  # the reports' tables and text, their figures built but not drawn
    _check(runner, tmp_path, {k: SWEPT[k] for k in QUICK})


@pytest.mark.slow
def test_every_analysis_command_with_each_key_swept_alone_and_all_together(runner, tmp_path):
    _check(runner, tmp_path, SWEPT)


def _check(runner, tmp_path, swept: dict[str, str]) -> None:
    runs = tmp_path / "runs"
    for key, values in swept.items():
        base = [b for b in BASE if not b.startswith(f"{key}=")]
        _ok(runner, ["sweep", "--runs-dir", str(runs), "-q", "--name", key, "activation=gelu,relu",
                     f"{key}={values}", SEEDS, *base])
        folder = str(runs / key)
        out = _compare(runner, folder)
        assert out["group_columns"] == ["activation", key]
        assert len(out["rows"]) == 4 and all(r["n"] == 4 for r in out["rows"])
        tuned = _compare(runner, folder, "--tune", key, "--tune-seeds", "2")
        assert tuned["group_columns"] == ["activation"] and len(tuned["rows"]) == 2
        assert all(r[key] not in (None, "") for r in tuned["rows"])  # each activation's chosen value
        ranked = json.loads(_ok(runner, ["rank", folder, "--format", "json"]))
        assert ranked["task_columns"] == [key] and len(ranked["tasks"]) == 2
    # seed alone, its largest value too (2**63 - 1, the largest seed taken)
    _ok(runner, ["sweep", "--runs-dir", str(runs), "-q", "--name", "seed", "activation=gelu,relu",
                 "seed=0,1,2,9223372036854775807", *BASE])
    out = _compare(runner, str(runs / "seed"))
    assert out["group_columns"] == ["activation"] and all(r["n"] == 4 for r in out["rows"])
    # the case: runs of different epochs, in a report with and without tuning
    _ok(runner, ["report", str(runs / "epochs"), "--output", str(tmp_path / "epochs.html")])
    _ok(runner, ["report", str(runs / "epochs"), "--tune", "epochs", "--tune-seeds", "2",
                 "--output", str(tmp_path / "epochs-tuned.html")])
    # together: every sweep at once, every key varying
    out = _compare(runner, str(runs))
    assert set(swept) <= set(out["group_columns"])
    assert _compare(runner, str(runs), "--tune", "lr", "--tune-seeds", "2")["rows"]
    assert json.loads(_ok(runner, ["rank", str(runs), "--format", "json"]))["rows"]
    _ok(runner, ["report", str(runs), "--output", str(tmp_path / "all.html")])
    assert all((tmp_path / f).is_file() for f in ("epochs.html", "epochs-tuned.html", "all.html"))
