"""The budget check (analysis/budget.py): per run the epoch of its best validation score, per group
the shares in the last 10% of the epochs and at the last epoch, the warning above the threshold,
and where it shows: compare (markdown, csv, json, the command's stderr), --tune, rank, report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from activation_bench.analysis import budget as bd
from activation_bench.analysis import compare as cmp
from activation_bench.analysis import rank as rk
from activation_bench.analysis.loading import load
from activation_bench.analysis.tune import TuneSpec
from activation_bench.cli.main import app
from activation_bench.render import rank_tables, tables

EPOCHS = 10


def val_curve(best: int, epochs: int = EPOCHS) -> list[float]:
    """A validation loss whose lowest value is at epoch `best` (a V around it)."""
    return [0.1 + 0.01 * abs(e - best) for e in range(1, epochs + 1)]


def write(path: Path, best: dict, seeds: range = range(4), lrs: tuple = (), val: str | None = "val_loss",
          extra: dict | None = None) -> Path:
    """Long CSV: per activation (and lr) and seed, EPOCHS epochs; `best[act]` (or `best[(act, lr)]`)
    is the epoch of the best `val` score, or a function of the seed. Without `val`: no validation
    column, and train_loss has its lowest value at that epoch."""
    rows = []
    for key, b in best.items():
        act, lr = key if isinstance(key, tuple) else (key, None)
        for s in seeds:
            where = b(s) if callable(b) else b
            curve = val_curve(where)
            for e in range(1, EPOCHS + 1):
                row = {"activation": act, "seed": s, "epoch": e, "train_loss": curve[e - 1] * (1 + s / 10)}
                if lr is not None:
                    row["lr"] = lr
                if val == "val_loss":
                    row["val_loss"] = curve[e - 1]
                elif val == "val_acc":  # highest where val_loss (which says otherwise) is lowest
                    row["val_acc"], row["val_loss"] = 1 - curve[e - 1], 0.5 - 0.01 * e
                rows.append(row | (extra or {}))
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_best_epoch_late_and_last_per_run(tmp_path):
    # gelu: best at the last epoch; relu: at epoch 5; silu: at 9 (in the first 90%: 9 > 0.9 * 10 is false)
    loaded = load([write(tmp_path / "r.csv", {"gelu": 10, "relu": 5, "silu": 9})])
    per, column, notes = bd.run_budget(loaded)
    assert column == "val_loss" and notes == []
    acts = loaded.runs["activation"].to_numpy()
    assert (per["epochs"] == EPOCHS).all()
    assert per["best_epoch"][acts == "gelu"].eq(10).all() and per["best_epoch"][acts == "relu"].eq(5).all()
    assert per["late"][acts == "gelu"].all() and per["last"][acts == "gelu"].all()
    assert not per["late"][acts != "gelu"].any() and not per["last"][acts != "gelu"].any()
    assert (per["status"] == "ok").all()


def test_ties_go_to_the_earliest_epoch_and_runs_of_other_lengths(tmp_path):
    rows = [{"run": "a", "epoch": e, "train_loss": 1.0, "val_loss": v}
            for e, v in enumerate([0.5, 0.2, 0.3, 0.2, 0.2], 1)]  # lowest at 2, 4 and 5: epoch 2
    rows += [{"run": "b", "epoch": e, "train_loss": 1.0, "val_loss": 1.0 / e} for e in range(1, 21)]  # 20 epochs
    rows += [{"run": "c", "epoch": e, "train_loss": 1.0, "val_loss": v} for e, v in enumerate([0.5, 0.4, 0.6], 1)]
    path = tmp_path / "t.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    per, _, _ = bd.run_budget(load([path]))
    assert per["best_epoch"].tolist() == [2, 20, 2] and per["epochs"].tolist() == [5, 20, 3]
    assert per["late"].tolist() == [False, True, False] and per["last"].tolist() == [False, True, False]


def test_compare_budget_shares_and_one_warning(tmp_path):
    # gelu: best at the last epoch in every run; silu: in 1 of 4 runs (25%: not above the threshold)
    path = write(tmp_path / "r.csv", {"relu": 5, "gelu": 10, "silu": lambda s: 10 if s == 0 else 4})
    res = cmp.run_compare([path], "final", baseline="activation=relu")
    t = res.budget.table.set_index("activation")
    assert list(res.budget.table["activation"]) == list(res.table["activation"])  # the compare table's order
    assert t.loc["gelu", "late"] == 1.0 and t.loc["gelu", "last"] == 1.0 and t.loc["gelu", "runs"] == 4
    assert t.loc["silu", "late"] == 0.25 and t.loc["relu", "late"] == 0.0
    assert res.budget.warning == ("budget: 100% of gelu's runs had their best val_loss in the last 10% of their "
                                  "epochs: runs were still improving; a longer budget may change this verdict")
    assert res.all_warnings[-1] == res.budget.warning and res.budget.warning not in res.warnings
    assert bd.LATE_SHARE == 0.25 and res.budget.threshold == bd.LATE_SHARE
    strict = bd.budget_check(load([path]), ["activation"], threshold=0.2)
    assert "100% of gelu's runs, 25% of silu's runs had" in (strict.warning or "")


def test_diverged_runs_are_counted_apart(tmp_path):
    path = write(tmp_path / "r.csv", {"relu": 5, "gelu": 10})
    df = pd.read_csv(path)
    df.loc[(df["activation"] == "gelu") & (df["seed"] == 0) & (df["epoch"] >= 6), ["train_loss", "val_loss"]] = np.nan
    df.to_csv(path, index=False)
    res = cmp.run_compare([path], "final", baseline="activation=relu")
    gelu = res.budget.table.set_index("activation").loc["gelu"]
    assert gelu["runs"] == 3 and gelu["diverged"] == 1 and gelu["late"] == 1.0
    assert res.budget.overall == {"runs": 7, "diverged": 1, "late": 3 / 7, "last": 3 / 7}
    assert "1 diverged run(s) not counted" in res.budget.line()


def test_without_validation_the_compared_column_is_used_and_said(tmp_path):
    res = cmp.run_compare([write(tmp_path / "r.csv", {"relu": 3, "gelu": 10}, val=None)], "final")
    assert res.budget.column == "train_loss"
    assert res.budget.notes == ["no run logs val_loss: the budget check uses the best epoch of train_loss, "
                                "the compared column"]
    assert "best train_loss" in (res.budget.warning or "") and "no run logs val_loss" in res.budget.line()
    assert res.budget.table.set_index("activation")["late"].to_dict() == {"gelu": 1.0, "relu": 0.0}


def test_tuned_comparison_judges_the_chosen_values(tmp_path):
    # lr 0.1 is best for gelu (lowest val_loss) and peaks at the last epoch; lr 0.01 peaks early
    best = {("gelu", 0.01): 3, ("gelu", 0.1): 10, ("relu", 0.01): 4, ("relu", 0.1): 4}
    path = write(tmp_path / "r.csv", best, seeds=range(6), lrs=(0.01, 0.1))
    df = pd.read_csv(path)
    df.loc[(df["activation"] == "gelu") & (df["lr"] == 0.1), ["val_loss"]] -= 0.05
    df.to_csv(path, index=False)
    res = cmp.run_compare([path], "early_stop", baseline="activation=relu", tune=TuneSpec(("lr",)))
    t = res.budget.table.set_index("activation")
    assert t.loc["gelu", "lr"] == "0.1" and t.loc["gelu", "runs"] == 4  # seeds 2-5 judge, 0-1 tune
    # the runs the verdict reads: the tuning seeds at both rates (4), the judging seeds at 0.1 (4)
    assert t.loc["gelu", "late"] == 1.0 and t.loc["gelu", "runs_all"] == 8 and t.loc["gelu", "late_all"] == 0.75
    assert t.loc["relu", "late"] == 0.0 and t.loc["relu", "lr"] == "0.01"
    assert res.budget.overall["runs"] == 16 and res.budget.overall["late"] == 0.375
    assert res.budget.warning == ("budget: 100% of gelu's runs (lr 0.1) had their best val_loss in the last 10% of "
                                  "their epochs: runs were still improving; a longer budget may change this verdict")
    doc = json.loads(tables.to_json(res))["budget_check"]
    assert doc["tuned_keys"] == ["lr"] and doc["threshold"] == 0.25 and doc["late_fraction"] == 0.1
    assert doc["rows"][0] == {"activation": "gelu", "lr": "0.1", "runs": 4, "diverged": 0, "late": 1.0, "last": 1.0,
                              "runs_all": 8, "diverged_all": 0, "late_all": 0.75, "last_all": 0.75}
    assert doc["all_runs"] == {"runs": 16, "diverged": 0, "late": 0.375, "last": 0.375}
    assert "all runs read (tuning seeds at every lr, judging seeds at the chosen): 38% (38%) of 16" in res.budget.line()


def test_tuned_budget_check_is_the_same_without_the_runs_no_verdict_reads(tmp_path):
    # a sweep that trained its judging seeds at the chosen rates only (sweep --tune) prints the full
    # grid's tables byte for byte, budget check included
    best = {("gelu", 0.01): 3, ("gelu", 0.1): 10, ("relu", 0.01): 4, ("relu", 0.1): 9}
    full = write(tmp_path / "full.csv", best, seeds=range(6), lrs=(0.01, 0.1))
    df = pd.read_csv(full)
    df.loc[(df["activation"] == "gelu") & (df["lr"] == 0.1), ["val_loss"]] -= 0.05
    df.to_csv(full, index=False)
    out = []
    res = cmp.run_compare([full], "early_stop", baseline="activation=relu", tune=TuneSpec(("lr",)))
    out.append((tables.to_markdown(res), tables.to_json(res)))
    chosen = {a: float(v) for a, v in res.budget.table.set_index("activation")["lr"].items()}
    keep = (df["seed"] < 2) | (df["lr"] == df["activation"].map(chosen))
    plan = tmp_path / "plan.csv"
    df[keep].to_csv(plan, index=False)
    assert df[keep].groupby(["activation", "lr", "seed"]).ngroups == 16 < 24
    res = cmp.run_compare([plan], "early_stop", baseline="activation=relu", tune=TuneSpec(("lr",)))
    out.append((tables.to_markdown(res), tables.to_json(res)))
    assert out[0][1].replace(str(full), "X") == out[1][1].replace(str(plan), "X")
    assert out[0][0].replace(str(full), "X") == out[1][0].replace(str(plan), "X")
    assert "of 16" in out[0][0]


def test_tune_on_val_acc_reads_the_highest_accuracy(tmp_path):
    path = write(tmp_path / "r.csv", {("gelu", 0.01): 10, ("gelu", 0.1): 10, ("relu", 0.01): 4, ("relu", 0.1): 4},
                 seeds=range(6), val="val_acc")
    res = cmp.run_compare([path], "final", baseline="activation=relu", loss="val_acc",
                          tune=TuneSpec(("lr",), on="val_acc"))
    assert res.budget.column == "val_acc"
    t = res.budget.table.set_index("activation")
    assert t.loc["gelu", "late"] == 1.0 and t.loc["relu", "late"] == 0.0  # val_loss falls to the end in both
    plain = cmp.run_compare([path], "final", baseline="activation=relu", loss="val_acc")
    assert plain.budget.column == "val_loss" and (plain.budget.table["late"] == 1.0).all()


def test_markdown_csv_and_json_show_it(tmp_path):
    path = write(tmp_path / "r.csv", {"relu": 5, "gelu": 10})
    res = cmp.run_compare([path], "final", baseline="activation=relu")
    md = tables.to_markdown(res)
    assert ("- Budget check: share of runs whose best val_loss came in the last 10% of their epochs (at the last "
            "epoch): gelu 100% (100%) of 4; relu 0% (0%) of 4 (above 25%: see the warning).") in md
    assert "- warning: budget: 100% of gelu's runs had their best val_loss" in md
    header = tables.to_csv(res).splitlines()[0].split(",")
    assert header[-2:] == ["still_improving_late", "still_improving_last"]
    assert header[:-2] == cmp.output_columns(res)  # the existing columns, in their order
    back = pd.read_csv(pd.io.common.StringIO(tables.to_csv(res))).set_index("activation")
    assert back.loc["gelu", "still_improving_late"] == 1.0 and back.loc["relu", "still_improving_last"] == 0.0
    doc = json.loads(tables.to_json(res))
    assert doc["budget_check"]["warning"] == res.budget.warning and res.budget.warning in doc["warnings"]
    assert doc["budget_check"]["column"] == "val_loss" and len(doc["budget_check"]["rows"]) == 2
    assert "Budget check: 50% (50%) of 8 runs" in tables.table_text(res)


def test_the_command_prints_the_warning_on_stderr(tmp_path):
    path = write(tmp_path / "r.csv", {"relu": 5, "gelu": 10})
    result = CliRunner().invoke(app, ["compare", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "warning: budget: 100% of gelu's runs" in result.stderr
    assert json.loads(result.stdout)["budget_check"]["rows"][0]["activation"] in ("gelu", "relu")


def test_many_groups_make_one_readable_warning(tmp_path):
    path = write(tmp_path / "r.csv", {f"act{i}": 10 for i in range(9)} | {"relu": 5}, seeds=range(2))
    warning = cmp.run_compare([path], "final", baseline="activation=relu").budget.warning or ""
    assert warning.count("'s runs") == bd.SHOWN and "and 3 more groups above 25%" in warning
    assert warning.count("\n") == 0


def test_rank_reports_it_per_ranked_value(tmp_path):
    path = write(tmp_path / "r.csv", {"relu": 5, "gelu": 10, "silu": 4}, extra={"data": "a"})
    other = write(tmp_path / "s.csv", {"relu": 5, "gelu": 10, "silu": 4}, extra={"data": "b"})
    res = rk.rank(load([path, other]), "final")
    t = res.budget.table.set_index("activation")
    assert list(res.budget.table["activation"]) == list(res.table["activation"])
    assert t.loc["gelu", "runs"] == 8 and t.loc["gelu", "late"] == 1.0 and t.loc["silu", "late"] == 0.0
    assert res.budget.warning.endswith("a longer budget may change this ranking")
    assert res.warnings == [] and res.all_warnings == [res.budget.warning]
    doc = json.loads(rank_tables.to_json(res))
    assert doc["budget_check"]["rows"][t.index.get_loc("gelu")]["late"] == 1.0
    assert "- Budget check: share of runs" in rank_tables.to_markdown(res)


def test_report_shows_it_under_each_table(tmp_path, monkeypatch):
    from activation_bench.render import report as rep
    from tests.test_report import leave_figures_undrawn

    leave_figures_undrawn(monkeypatch)  # the page's text is read, not its figures' drawing (test_report.py draws)

    path = write(tmp_path / "r.csv", {"relu": 5, "gelu": 10})
    html = rep.render_html(rep.build([path], draw_shapes=False))
    assert '<p class="notes budget">Budget check: share of runs whose best val_loss' in html
    assert "warning: budget: 100% of gelu&#39;s runs" in html


@pytest.mark.parametrize("spec, want", [(None, "val_loss"), (TuneSpec(("lr",)), "val_loss"),
                                        (TuneSpec(("lr",), on="val_acc"), "val_acc")])
def test_validation_column(spec, want):
    assert bd.validation_column(spec) == want


def test_no_warning_for_metrics_read_at_a_fixed_epoch_or_loss(tmp_path):
    """epoch=K and to=EPS are read at a fixed point, not at the end of the budget: the shares are
    shown, the warning is not (and a note says why); final on the same runs warns."""
    loaded = load([write(tmp_path / "r.csv", {"gelu": 10, "relu": 10})])
    assert cmp.compare(loaded, "final").budget.warning is not None
    for metric in ("epoch=3", "to=0.2"):
        check = cmp.compare(loaded, metric).budget
        assert check.warning is None and "no warning for --metric" in check.notes[-1]
        assert list(check.table["late"]) == [1.0, 1.0]
