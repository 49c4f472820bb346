"""Tuned curves (`plot --tune`, `report --tune`, render/tuned_curves.py) on small hand-made loss
tables (no training): each group drawn at the value compare --tune chooses, over the judging seeds only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from activation_bench.analysis import compare as cmp
from activation_bench.analysis.tune import TuneSpec
from activation_bench.cli.main import app
from activation_bench.render import plots
from activation_bench.render.tuned_curves import (
    plot_tuned_curves,
    select_curves,
    tuned_curve_stats,
    tuned_curves_figure,
)
from tests.test_report import leave_figures_undrawn

LRS = ("0.001", "0.01", "0.1")
# each group's best lr on the tuning seeds' val_loss: relu's differs between the tasks (per-panel
# legends), gelu's is the grid's largest, relu's on task b its smallest
BEST = {("relu", "a"): "0.01", ("relu", "b"): "0.001", ("gelu", "a"): "0.1", ("gelu", "b"): "0.1"}
SEEDS = 6  # default split: seeds 0-1 tune, 2-5 judge


def train(lr: str, seed: int, epoch: int) -> float:
    """The training loss says which lr and seed it comes from: 100 * (position of lr + 1) + seed,
    over the epoch. Over the judging seeds 2-5 its median is (code + 3.5) / epoch."""
    return (100.0 * (LRS.index(lr) + 1) + seed) / epoch


def write_table(path: Path, classes: bool = False) -> Path:
    """activation x data x lr x seed, epochs 1-3. On the tuning seeds (0, 1) val_loss is lowest at
    the group's BEST lr; on the judging seeds at the smallest lr (a selection that looked at them
    would choose it). classes=True adds val_acc and test_acc (80% at the best lr, else 50%)."""
    head = "activation,data,lr,seed,epoch,train_loss,val_loss,test_loss" + (",val_acc,test_acc" if classes else "")
    rows = [head]
    for (act, data), best in BEST.items():
        for lr in LRS:
            for seed in range(SEEDS):
                good = lr == best if seed < 2 else lr == "0.001"
                for e in (1, 2, 3):
                    val = (0.1 if good else 0.5) * (1 + 0.1 * (3 - e))
                    acc = f",{0.8 if lr == best else 0.5},{0.8 if lr == best else 0.5}" if classes else ""
                    rows.append(f"{act},{data},{lr},{seed},{e},{train(lr, seed, e)!r},{val!r},{val!r}{acc}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return write_table(tmp_path / "runs.csv")


def invoke(*args: str):
    return CliRunner().invoke(app, [*args])


def test_only_the_chosen_value_and_the_judging_seeds_enter(table):
    loaded = cmp.load([table])
    tuned = select_curves(loaded, TuneSpec(("lr",)))
    assert tuned.selection.tune_seeds == ["0", "1"] and tuned.selection.eval_seeds == ["2", "3", "4", "5"]
    assert (tuned.panels, tuned.lines) == (["data"], ["activation"])
    stats = tuned_curve_stats(loaded, tuned, "train_loss")
    assert len(stats) == 4 * 3  # a curve per (task, activation), 3 epochs: one lr each
    for _, row in stats.iterrows():
        lr = BEST[(row["line"], row["panel"])]
        assert row["lr"] == lr
        assert row["n"] == 4  # the judging seeds only
        assert row["q50"] == pytest.approx((100 * (LRS.index(lr) + 1) + 3.5) / row["epoch"])
        assert row["q25"] == pytest.approx((100 * (LRS.index(lr) + 1) + 2.75) / row["epoch"])
    drawn = loaded.runs[tuned.drawn]
    assert set(drawn["seed"]) == {"2", "3", "4", "5"}
    assert len(drawn) == 4 * 4


def test_the_choice_is_compares(table):
    """The same values as `compare --tune lr --metric early_stop` (the default metric with val_loss)."""
    result = invoke("compare", str(table), "--tune", "lr", "--metric", "early_stop", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = {(r["activation"], r["data"]): str(r["lr"]) for r in json.loads(result.stdout)["rows"]}
    tuned = select_curves(cmp.load([table]), TuneSpec(("lr",)), "early_stop")
    chosen = {(r["activation"], r["data"]): r["lr"] for _, r in tuned.selection.chosen.iterrows()}
    assert chosen == rows == BEST


def test_tune_seeds_and_metric_are_passed_on(table):
    loaded = cmp.load([table])
    tuned = select_curves(loaded, TuneSpec(("lr",), tune_seeds=3), "final")
    assert tuned.selection.eval_seeds == ["3", "4", "5"]
    stats = tuned_curve_stats(loaded, tuned, "train_loss")
    assert set(stats["n"]) == {3}
    # seed 2 now tunes, and its val_loss favours lr 0.001; two seeds against one keep every choice
    assert dict(zip(zip(stats["line"], stats["panel"]), stats["lr"])) == BEST
    last = stats[stats["epoch"] == 3]
    assert list(last["q50"]) == pytest.approx([(100 * (LRS.index(lr) + 1) + 4) / 3 for lr in last["lr"]])


def test_legend_names_the_chosen_value_and_marks_grid_ends(table):
    loaded = cmp.load([table])
    tuned = select_curves(loaded, TuneSpec(("lr",)))
    assert tuned.legend == {"relu": "relu (lr tuned per panel)", "gelu": "gelu (lr 0.1, grid max)"}
    assert tuned.panel_legends == {"a": {"relu": "relu (lr 0.01)"}, "b": {"relu": "relu (lr 0.001, grid min)"}}
    fig = tuned_curves_figure(loaded, tuned, "train_loss", "early_stop")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["relu (lr tuned per panel)",
                                                                  "gelu (lr 0.1, grid max)"]
    inside = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes if ax.get_legend()]
    assert inside == [["relu (lr 0.01)"], ["relu (lr 0.001, grid min)"]]
    assert "judging seeds (seeds 2-5)" in fig.get_suptitle() and "tuned lr" in fig.get_suptitle()


def test_one_task_one_legend(tmp_path):
    """With one panel every chosen value is in the figure legend; no panel legend."""
    path = write_table(tmp_path / "runs.csv")
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], *[x for x in lines[1:] if x.split(",")[1] == "a"]]) + "\n")
    tuned = select_curves(cmp.load([path]), TuneSpec(("lr",)))
    assert tuned.panels == [] and tuned.panel_legends is None
    assert tuned.legend == {"relu": "relu (lr 0.01)", "gelu": "gelu (lr 0.1, grid max)"}


def test_plot_tune_writes_the_figure(tmp_path, table):
    out = tmp_path / "tuned.png"
    result = invoke("plot", str(table), "--tune", "lr", "--loss", "val_loss", "--metric", "final", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0
    assert "grid's largest value" in result.stderr  # compare's note on an edge of the grid


def test_plot_tuned_curves_for_a_study_runner(tmp_path, table):
    """The entry point a study runner calls, with a Loaded, a TuneSpec, a metric and a path."""
    out = tmp_path / "tuned.svg"
    tuned = plot_tuned_curves(cmp.load([table]), out, TuneSpec(("lr",)), "early_stop", loss="train_loss")
    assert tuned.selection.keys == ["lr"]
    assert "grid max" in out.read_text()


def test_classification_keeps_its_accuracy_panel(tmp_path, monkeypatch):
    from tests.conftest import leave_files_undrawn

    # built, not drawn: its panels are read from the figure (test_study's tiny study draws a classification
    # sweep's tuned curves, test_plot_tune_writes_the_figure this module's PNG)
    leave_files_undrawn(monkeypatch)
    loaded = cmp.load([write_table(tmp_path / "runs.csv", classes=True)])
    tuned = plot_tuned_curves(loaded, tmp_path / "t.png", TuneSpec(("lr",), on="val_acc"), "final")
    assert tuned.selection.selected_on == "val_acc"
    acc = tuned_curve_stats(loaded, tuned, "test_acc")
    assert set(acc["q50"]) == {80.0}  # the chosen (best) lr of every group, in %
    fig = tuned_curves_figure(loaded, tuned, "val_loss", "final", accuracy=plots.companion_accuracy(loaded, "val_loss"))
    assert sum(ax.get_visible() for ax in fig.axes) == 4  # a loss and an accuracy panel per task
    assert (tmp_path / "t.png").stat().st_size > 0


@pytest.mark.parametrize("args, message", [
    (["--tune", "lr", "--grads"], "--tune and --grads draw different figures"),
    (["--tune", "lr", "--x", "lr"], "--tune and --x draw different figures"),
    (["--tune-seeds", "2"], "give --tune KEY too"),
    (["--tune-on", "val_acc"], "give --tune KEY too"),
    (["--tune", "lr", "--by", "lr"], "--tune lr and --by lr"),
    (["--tune", "seed"], "--tune seed"),
    (["--tune", "nosuch"], "'nosuch' was not swept"),
    (["--tune", "lr", "--metric", "bogus"], "bogus"),
    (["--tune", "lr", "--tune-seeds", "5"], "leave 1 to evaluate"),
    (["--metric", "final"], "give --x KEY too"),
])
def test_bad_combinations_exit_2(tmp_path, table, args, message):
    out = tmp_path / "p.png"
    result = invoke("plot", str(table), *args, "-o", str(out))
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_report_tune_draws_tuned_curves(tmp_path, table, monkeypatch):
    """The page holds the tuned figures' legends; the figures are built, not drawn (matplotlib's
    drawing of tuned curves is checked by the plot tests above and test_report_browser.py)."""
    leave_figures_undrawn(monkeypatch)
    out = tmp_path / "r.html"
    result = invoke("report", str(table), "--tune", "lr", "--no-shapes", "-o", str(out))
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "gelu (lr 0.1, grid max)" in page and "relu (lr 0.001, grid min)" in page
    assert "on the evaluation seeds (2, 3, 4, 5) only; the legend names each value" in page
    assert "the median over the evaluation seeds" in page
    untuned = tmp_path / "u.html"
    assert invoke("report", str(table), "--no-shapes", "-o", str(untuned)).exit_code == 0
    assert "grid max" not in untuned.read_text()
