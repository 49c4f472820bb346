"""Accuracy through the analysis commands: `compare`, `rank`, `--tune` (`--tune-on val_acc`),
`--power` and `early_stop` on val_acc / test_acc, recomputed by hand with numpy/scipy, and the bad
inputs (accuracy on regression runs, regression and classification runs mixed), through the CLI.

Classification runs are stood in for by hand-made long-format CSVs and run directories with the
contract's columns (cross-entropy losses, accuracies as fractions in [0, 1]): no training."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from activation_bench.analysis import compare as cmp
from activation_bench.analysis import expected_best, selection
from activation_bench.analysis import power as pw
from activation_bench.analysis import rank as rk
from activation_bench.analysis.loading import higher_is_better, load
from activation_bench.analysis.metrics import ACCURACY, EPOCHS, LOG10, run_values, scale
from activation_bench.cli.main import app
from activation_bench.errors import UsageError
from activation_bench.render import rank_tables, tables
from tests.test_compare import row

SEEDS = range(6)
# each run's last-epoch test accuracy [activation][seed]; gelu is better than relu on every seed
FINAL = {
    "relu": [0.90, 0.85, 0.88, 0.92, 0.87, 0.89],
    "gelu": [0.93, 0.88, 0.90, 0.95, 0.88, 0.92],
    "silu": [0.91, 0.84, 0.89, 0.91, 0.88, 0.89],
}


def acc_curve(f: float) -> list[float]:
    """Four epochs: highest at epoch 3 (best != final), val_loss lowest at epoch 2 (early_stop)."""
    return [f - 0.10, f - 0.05, f + 0.01, f]


VAL_LOSS = [1.0, 0.5, 0.6, 0.7]


def cls_rows(final: dict[str, list[float]] = FINAL, data: str = "digits") -> list[dict]:
    rows = []
    for act, finals in final.items():
        for seed, f in zip(SEEDS, finals):
            for e, acc in enumerate(acc_curve(f), 1):
                rows.append({"activation": act, "data": data, "seed": seed, "epoch": e,
                             "train_loss": 1.0 / e, "val_loss": VAL_LOSS[e - 1] * (1 + 0.01 * seed),
                             "test_loss": 1.2 / e, "val_acc": acc - 0.01, "test_acc": acc})
    return rows


def reg_rows(data: str = "friedman") -> list[dict]:
    return [{"activation": act, "data": data, "seed": seed, "epoch": e, "train_loss": 0.1 / e + 0.01 * seed,
             "val_loss": 0.2 / e, "test_loss": 0.3 / e}
            for act in ("relu", "gelu") for seed in SEEDS for e in (1, 2, 3, 4)]


def write(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.fixture
def cls_csv(tmp_path: Path) -> Path:
    return write(tmp_path / "cls.csv", cls_rows())


def invoke(*args: str):
    return CliRunner().invoke(app, [*args])


def final_acc(act: str, shift: float = 0.0) -> np.ndarray:
    return np.array(FINAL[act]) + shift


# ---------------------------------------------------------------------------------------------
# loading and metrics


def test_direction_lives_in_one_place():
    assert higher_is_better("val_acc") and higher_is_better("test_acc")
    for loss in ("train_loss", "train_eval_loss", "val_loss", "test_loss"):
        assert not higher_is_better(loss)
    final, to = cmp.parse_metric("final"), cmp.parse_metric("to=0.9")
    assert (scale(final, "test_acc"), scale(final, "test_loss"), scale(to, "test_acc")) == (ACCURACY, LOG10, EPOCHS)


def test_load_reads_every_column_and_tells_classification_runs(tmp_path, cls_csv):
    loaded = load([cls_csv])
    assert {"train_loss", "val_loss", "test_loss", "val_acc", "test_acc"} <= set(loaded.losses)
    assert loaded.has_accuracy().all()
    mixed = load([cls_csv, write(tmp_path / "reg.csv", reg_rows())])
    cls = mixed.has_accuracy()
    assert cls.sum() == 18 and (~cls).sum() == 12
    assert set(mixed.runs.loc[cls, "data"]) == {"digits"} and set(mixed.runs.loc[~cls, "data"]) == {"friedman"}
    with_eval = pd.DataFrame(cls_rows()).assign(train_eval_loss=lambda d: d["train_loss"] * 0.9)
    assert "train_eval_loss" in load([write(tmp_path / "te.csv", with_eval.to_dict("records"))]).losses


@pytest.mark.parametrize(("metric", "expected"), [
    ("final", lambda f: f),
    ("best", lambda f: f + 0.01),  # the highest accuracy, at epoch 3
    ("epoch=2", lambda f: f - 0.05),
    ("early_stop", lambda f: f - 0.05),  # the epoch of lowest val_loss (2), not of highest accuracy
    ("auc", lambda f: np.mean(acc_curve(f))),  # the mean accuracy, no log10
])
def test_accuracy_metrics(cls_csv, metric, expected):
    loaded = load([cls_csv], "test_acc")
    values = run_values(loaded, cmp.parse_metric(metric), "test_acc")
    want = [expected(f) for act in FINAL for f in FINAL[act]]
    np.testing.assert_allclose(values["value"].to_numpy(float), want, rtol=1e-12)
    assert values["log10"].isna().all() and (values["status"] == "ok").all()


def test_to_eps_on_accuracy_is_the_first_epoch_at_or_above(cls_csv):
    loaded = load([cls_csv], "test_acc")
    values = run_values(loaded, cmp.parse_metric("to=0.9"), "test_acc")
    want = []
    for act in FINAL:
        for f in FINAL[act]:
            hit = [e for e, a in enumerate(acc_curve(f), 1) if a >= 0.9]
            want.append(float(hit[0]) if hit else math.nan)
    got = values["value"].to_numpy(float)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], np.array(want)[~np.isnan(want)])
    assert set(values.loc[np.isnan(want), "status"]) == {"not_reached"}
    res = cmp.compare(loaded, "to=0.9", baseline="activation=relu", loss="test_acc")
    assert res.scale == EPOCHS and "geo_mean" in res.table.columns
    assert any("first epoch with test_acc >= 0.9" in m for m in res.methods)


def test_diverged_classification_run_is_counted_apart(tmp_path):
    rows = cls_rows()
    for r in rows:
        if r["activation"] == "gelu" and r["seed"] == 0 and r["epoch"] == 4:
            r["train_loss"] = float("nan")  # the loss diverged, the accuracy column still has a number
    loaded = load([write(tmp_path / "d.csv", rows)], "test_acc")
    res = cmp.compare(loaded, "final", baseline="activation=relu", loss="test_acc")
    gelu = row(res, activation="gelu")
    assert gelu["n"] == 5 and gelu["n_diverged"] == 1 and gelu["n_pairs"] == 5


# ---------------------------------------------------------------------------------------------
# compare


def test_compare_accuracy_by_hand(cls_csv):
    res = cmp.run_compare([cls_csv], "final", baseline="activation=relu", loss="test_acc")
    assert res.scale == ACCURACY and res.higher_is_better
    assert list(res.table["activation"]) == ["gelu", "silu", "relu"]  # best (highest mean accuracy) first
    for act in FINAL:
        r = row(res, activation=act)
        v = final_acc(act)
        assert r["mean"] == pytest.approx(v.mean()) and r["median"] == pytest.approx(np.median(v))
        lo, hi = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
        assert (r["ci_low"], r["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
        assert "geo_mean" not in res.table.columns
    for act in ("gelu", "silu"):
        r = row(res, activation=act)
        d = 100 * (final_acc(act) - final_acc("relu"))
        assert r["diff_pp"] == pytest.approx(d.mean()) and r["sd_diff_pp"] == pytest.approx(d.std(ddof=1))
        lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        assert (r["diff_lo_pp"], r["diff_hi_pp"]) == (pytest.approx(lo), pytest.approx(hi))
        assert r["p_t"] == pytest.approx(stats.ttest_rel(final_acc(act), final_acc("relu")).pvalue)
        assert r["p_wilcoxon"] == pytest.approx(stats.wilcoxon(d, zero_method="pratt").pvalue)
        assert r["win_rate"] == pytest.approx(np.mean(d > 0))  # a win is a higher accuracy
        assert r["n_ties"] == int(np.sum(np.isclose(d, 0, atol=1e-9)))
        assert r["d_z"] == pytest.approx(d.mean() / d.std(ddof=1))
    gelu = row(res, activation="gelu")
    assert gelu["win_rate"] == 1.0 and gelu["d_z"] > 0 and gelu["diff_lo_pp"] > 0
    for c in ("ratio", "mean_diff", "sd_diff"):
        assert c not in res.table.columns


def test_an_accuracy_interval_stays_within_0_and_100_percent(tmp_path):
    near = {"relu": [0.99, 0.99, 0.99, 0.99, 0.99, 0.60], "gelu": [0.99, 0.99, 0.99, 0.99, 0.99, 0.99]}
    res = cmp.run_compare([write(tmp_path / "near.csv", cls_rows(near))], "final", baseline="activation=relu",
                          loss="test_acc")
    v = np.array(near["relu"])
    lo, hi = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
    assert hi > 1.0  # the t interval claims more than every row right
    r = row(res, activation="relu")
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(lo), 1.0)


def test_compare_accuracy_formats(cls_csv):
    res = cmp.run_compare([cls_csv], "final", baseline="activation=relu", loss="test_acc")
    header = tables.to_csv(res).splitlines()[0].split(",")
    assert header[:8] == ["activation", "metric", "n", "mean", "std", "median", "ci_low", "ci_high"]
    assert {"diff_pp", "diff_lo_pp", "diff_hi_pp", "sd_diff_pp", "win_rate", "p_t_holm", "d_z"} <= set(header)
    assert not {"ratio", "geo_mean", "mean_diff"} & set(header)
    doc = json.loads(tables.to_json(res))
    assert doc["scale"] == "accuracy" and doc["higher_is_better"] is True and doc["floor"] is None
    assert doc["rows"][0]["activation"] == "gelu" and doc["rows"][0]["mean"] == pytest.approx(final_acc("gelu").mean())
    md = tables.to_markdown(res)
    assert "mean test_acc" in md and "Δ pp" in md and "percentage points" in md and "log10" not in md
    text = tables.table_text(res)
    gelu = row(res, activation="gelu")
    assert f"{100 * gelu['mean']:.2f}%" in text and f"{gelu['diff_pp']:+.2f}" in text and "ratio" not in text


def test_loss_output_keeps_its_columns(cls_csv):
    res = cmp.run_compare([cls_csv], "final", baseline="activation=relu", loss="test_loss")
    header = tables.to_csv(res).splitlines()[0].split(",")
    assert header[:9] == ["activation", "metric", "n", "mean", "std", "median", "geo_mean", "ci_low", "ci_high"]
    assert {"mean_diff", "sd_diff", "ratio"} <= set(header) and not any(c.endswith("_pp") for c in header)
    doc = json.loads(tables.to_json(res))
    assert doc["scale"] == "log10" and doc["higher_is_better"] is False and doc["floor"] == 1e-13


def test_compare_early_stop_accuracy_picks_the_epoch_by_val_loss(cls_csv):
    res = cmp.run_compare([cls_csv], "early_stop", baseline="activation=relu", loss="test_acc")
    assert row(res, activation="gelu")["mean"] == pytest.approx(final_acc("gelu", -0.05).mean())
    assert any("test_acc at each run's epoch of lowest val_loss" in m for m in res.methods)


def test_compare_accuracy_from_run_directories(tmp_path):
    for act in ("relu", "gelu"):
        for seed in SEEDS:
            d = tmp_path / "sweep" / f"{act}_{seed}"
            d.mkdir(parents=True)
            rows = [r for r in cls_rows() if r["activation"] == act and r["seed"] == seed]
            cols = ["epoch", "train_loss", "val_loss", "test_loss", "val_acc", "test_acc"]
            pd.DataFrame(rows)[cols].to_csv(d / "losses.csv", index=False)
            (d / "config.yaml").write_text(f"activation:\n  name: {act}\nseed: {seed}\n")
            summary = {"status": "complete", "seed": seed, "labels": {"activation": act},
                       "final_test_acc": rows[-1]["test_acc"], "data": {"task": "classification"}}
            (d / "summary.json").write_text(json.dumps(summary))
    res = cmp.run_compare([tmp_path / "sweep"], "final", baseline="activation=relu", loss="test_acc")
    d = 100 * (final_acc("gelu") - final_acc("relu"))
    assert row(res, activation="gelu")["diff_pp"] == pytest.approx(d.mean())


def test_command_on_accuracy(cls_csv):
    result = invoke("compare", str(cls_csv), "--loss", "val_acc", "--baseline", "activation=relu", "-f", "csv")
    assert result.exit_code == 0, result.output
    table = pd.read_csv(pd.io.common.StringIO(result.stdout))
    gelu = table[table["activation"] == "gelu"].iloc[0]
    assert gelu["diff_pp"] == pytest.approx(100 * (final_acc("gelu") - final_acc("relu")).mean())
    plain = invoke("compare", str(cls_csv), "--loss", "test_acc")
    assert plain.exit_code == 0 and "Δ pp" in plain.stdout and "mean test_acc" in plain.stdout


# ---------------------------------------------------------------------------------------------
# rank


def rank_rows() -> list[dict]:
    """3 tasks: gelu first everywhere; silu second in a and b, relu second in c."""
    tops = {"a": {"gelu": 0.95, "silu": 0.90, "relu": 0.85}, "b": {"gelu": 0.80, "silu": 0.75, "relu": 0.70},
            "c": {"gelu": 0.99, "silu": 0.96, "relu": 0.97}}
    rows = []
    for data, accs in tops.items():
        finals = {act: [a - 0.01 * s for s in SEEDS] for act, a in accs.items()}
        rows += cls_rows(finals, data)
    return rows


def test_rank_accuracy_highest_first(tmp_path):
    res = rk.rank(load([write(tmp_path / "r.csv", rank_rows())], "test_acc"), "final", loss="test_acc")
    assert res.higher_is_better
    t = res.table.set_index("activation")
    assert list(res.table["activation"]) == ["gelu", "silu", "relu"]
    assert t["mean_rank"].to_dict() == pytest.approx({"gelu": 1.0, "silu": 7 / 3, "relu": 8 / 3})
    assert (t.loc["silu", ["wins", "ties", "losses"]].tolist(), t.loc["relu", "losses"]) == ([0, 0, 3], 3)
    assert res.scores.loc["data=a", "gelu"] == pytest.approx(np.mean([0.95 - 0.01 * s for s in SEEDS]))
    assert any("higher is better" in m for m in res.methods)
    loss_res = rk.rank(load([write(tmp_path / "r.csv", rank_rows())]), "final", loss="test_loss")
    assert not loss_res.higher_is_better  # test_loss ties everywhere here: the direction follows the column
    doc = json.loads(rank_tables.to_json(res))
    assert doc["higher_is_better"] is True and doc["rows"][0]["activation"] == "gelu"


def test_rank_command_on_accuracy(tmp_path):
    path = write(tmp_path / "r.csv", rank_rows())
    result = invoke("rank", str(path), "--loss", "test_acc", "-f", "csv")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].startswith("gelu,1.0,3,")


# ---------------------------------------------------------------------------------------------
# --power in percentage points


def test_power_in_percentage_points(cls_csv):
    spec = pw.parse_power("1", accuracy=True)
    assert spec.unit == "pp" and spec.size == 1 and spec.label == "1 pp"
    res = cmp.compare(load([cls_csv], "test_acc"), "final", baseline="activation=relu", loss="test_acc", power=spec)
    gelu = row(res, activation="gelu")
    assert gelu["seeds_needed"] == pw.seeds_needed(gelu["sd_diff_pp"], spec)
    d_min = pw.min_detectable_d(int(gelu["n_pairs"]), spec)
    assert gelu["min_detectable_pp"] == pytest.approx(d_min * gelu["sd_diff_pp"])
    assert "min_detectable_ratio" not in res.table.columns
    assert any("difference of 1 percentage point with" in m and "sd_diff_pp" in m for m in res.methods)
    with pytest.raises(UsageError, match="percentage points"):  # a ratio spec on an accuracy column
        cmp.compare(load([cls_csv], "test_acc"), "final", loss="test_acc", power=pw.parse_power("1.05"))


def test_power_command_on_accuracy(cls_csv):
    result = invoke("compare", str(cls_csv), "--loss", "test_acc", "--power", "2", "-f", "csv")
    assert result.exit_code == 0, result.output
    table = pd.read_csv(pd.io.common.StringIO(result.stdout))
    assert {"seeds_needed", "min_detectable_pp", "sd_diff_pp"} <= set(table.columns)
    text = invoke("compare", str(cls_csv), "--loss", "test_acc", "--power", "2")
    assert text.exit_code == 0 and "seeds for 2 pp" in text.stdout


# ---------------------------------------------------------------------------------------------
# --tune on val_loss (default) and on val_acc

LRS = ("0.001", "0.01", "0.1")
# final val_loss and val_acc per activation and lr: relu's lowest val_loss (lr 0.01) is not its
# highest val_acc (lr 0.1); gelu's are both at lr 0.1
VAL = {("relu", "0.001"): (0.50, 0.80), ("relu", "0.01"): (0.20, 0.85), ("relu", "0.1"): (0.30, 0.90),
       ("gelu", "0.001"): (0.60, 0.70), ("gelu", "0.01"): (0.40, 0.80), ("gelu", "0.1"): (0.10, 0.95)}


def held_out_acc(act: str, lr: str, seed: int) -> float:
    return round(0.5 + VAL[(act, lr)][1] / 3 + 0.01 * seed, 4)


def tune_rows() -> list[dict]:
    rows = []
    for (act, lr), (vl, va) in VAL.items():
        for seed in SEEDS:
            s = 1 + 0.001 * seed
            for e, f in ((1, 2.0), (2, 1.0)):
                rows.append({"activation": act, "lr": lr, "seed": seed, "epoch": e, "train_loss": 0.5 * f,
                             "val_loss": vl * f * s, "test_loss": 0.4 * f, "val_acc": round(va / f - 0.002 * seed, 4),
                             "test_acc": held_out_acc(act, lr, seed)})
    return rows


def tune_json(path: Path, *args: str) -> dict:
    result = invoke("compare", str(path), "--tune", "lr", "--loss", "test_acc", "--baseline", "activation=relu",
                    "-f", "json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_tune_on_val_loss_and_on_val_acc(tmp_path):
    path = write(tmp_path / "t.csv", tune_rows())
    by_loss = tune_json(path)
    by_acc = tune_json(path, "--tune-on", "val_acc")
    assert {r["activation"]: r["lr"] for r in by_loss["rows"]} == {"relu": "0.01", "gelu": "0.1"}
    assert {r["activation"]: r["lr"] for r in by_acc["rows"]} == {"relu": "0.1", "gelu": "0.1"}
    assert (by_loss["tuning"]["selected_on"], by_acc["tuning"]["selected_on"]) == ("val_loss", "val_acc")
    assert by_acc["tuning"]["higher_is_better"] is True and by_loss["tuning"]["higher_is_better"] is False
    relu = next(r for r in by_acc["rows"] if r["activation"] == "relu")
    assert relu["tune_score"] == pytest.approx(np.mean([0.90 - 0.002 * s for s in (0, 1)]))  # mean val_acc
    assert relu["n"] == 4
    assert relu["mean"] == pytest.approx(np.mean([held_out_acc("relu", "0.1", s) for s in SEEDS[2:]]))
    gelu = next(r for r in by_loss["rows"] if r["activation"] == "gelu")
    want = [100 * (held_out_acc("gelu", "0.1", s) - held_out_acc("relu", "0.01", s)) for s in SEEDS[2:]]
    assert gelu["diff_pp"] == pytest.approx(np.mean(want))
    assert any("highest mean final of val_acc" in m for m in by_acc["methods"])
    assert any("lowest mean log10 final of val_loss" in m for m in by_loss["methods"])


def test_tune_on_val_acc_select_and_budget_by_hand():
    values = pd.DataFrame({"activation": ["relu"] * 4, "lr": ["0.01", "0.01", "0.1", "0.1"],
                           "seed": ["0", "1", "0", "1"], "status": ["ok"] * 4, "score": [0.8, 0.9, 0.7, 0.75]})
    sel = selection.select(values, ["activation"], ["lr"], ["0", "1"], [], score="score", higher_is_better=True)
    assert sel.chosen["lr"].tolist() == ["0.01"] and sel.chosen["tune_score"].iloc[0] == pytest.approx(0.85)
    b = expected_best.budget(sel)
    assert b["expected_best"].tolist() == pytest.approx([np.mean([0.85, 0.725]), 0.85 * 3 / 4 + 0.725 / 4])


def test_rank_tune_on_val_acc(tmp_path):
    rows = [{**r, "data": d} for d in ("a", "b") for r in tune_rows()]
    result = invoke("rank", str(write(tmp_path / "t.csv", rows)), "--loss", "test_acc", "--tune", "lr",
                    "--tune-on", "val_acc", "-f", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["rows"][0]["activation"] == "gelu" and doc["higher_is_better"] is True


# ---------------------------------------------------------------------------------------------
# bad input: one line, exit 2, nothing written


def bad_files(tmp: Path) -> dict[str, Path]:
    reg = write(tmp / "reg.csv", reg_rows())
    reg_nan = write(tmp / "reg_nan.csv", [{**r, "val_acc": float("nan"), "test_acc": float("nan")}
                                         for r in reg_rows()])
    mixed = write(tmp / "mixed.csv", cls_rows() + reg_rows())
    pct = write(tmp / "pct.csv", [{**r, "test_acc": 100 * r["test_acc"]} for r in cls_rows()])
    cls = write(tmp / "cls.csv", cls_rows())
    return {"reg": reg, "reg_nan": reg_nan, "mixed": mixed, "pct": pct, "cls": cls}


@pytest.mark.parametrize(("args", "message"), [
    (["compare", "{reg}", "--loss", "test_acc"], "no test_acc column: accuracy needs classification runs"),
    (["compare", "{reg_nan}", "--loss", "test_acc"], "--loss test_acc: no run has accuracy values"),
    (["rank", "{reg_nan}", "--loss", "val_acc"], "--loss val_acc: no run has accuracy values"),
    (["compare", "{mixed}", "--by", "activation"], "activation=relu mixes regression runs (no accuracy values) and "
     "classification runs, whose losses are not comparable: group them apart (--by activation,data)"),
    (["compare", "{mixed}", "--by", "activation", "--loss", "val_loss", "--metric", "early_stop"],
     "--by activation,data"),
    (["compare", "{mixed}", "--loss", "test_acc"], "--loss test_acc: 12 runs are regression runs (no accuracy values)"),
    (["rank", "{mixed}", "--task", "seed"], "mixes regression runs"),
    (["compare", "{cls}", "--loss", "test_acc", "--metric", "to=90"], "--metric to=90 on test_acc: accuracies are "
     "fractions in [0, 1]"),
    (["compare", "{pct}", "--loss", "test_acc"], "pct.csv, line 2: test_acc value '80.0' is outside [0, 1]"),
    (["compare", "{cls}", "--loss", "test_acc", "--power", "0"], "--power 0: on an accuracy column it is a difference"),
    (["compare", "{cls}", "--loss", "test_acc", "--power", "120"], "between 0 and 100"),
    (["compare", "{cls}", "--tune-on", "val_acc"], "--tune-on sets up --tune"),
    (["compare", "{cls}", "--tune", "seed", "--tune-on", "test_acc"], "--tune-on test_acc: tuning selects on "
     "validation numbers only"),
    (["compare", "{reg_nan}", "--tune", "activation", "--tune-on", "val_acc"], "--tune-on val_acc: no run has "
     "val_acc values"),
    (["compare", "{mixed}", "--tune", "activation", "--by", "data", "--tune-on", "val_acc"],
     "--tune-on val_acc: 12 runs have no val_acc values"),
    (["compare", "{cls}", "--loss", "accuracy"], "unknown loss 'accuracy'"),
])
def test_bad_input_exit_2(tmp_path, args, message):
    files = bad_files(tmp_path)
    out = tmp_path / "out.csv"
    result = invoke(*[a.format(**files) for a in args], "--output", str(out))
    assert result.exit_code == 2, result.output
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not out.exists()


def test_mixed_runs_grouped_apart_compare_on_a_loss(tmp_path):
    path = bad_files(tmp_path)["mixed"]
    res = cmp.run_compare([path], "final", baseline="activation=relu")
    assert res.group_cols == ["activation", "data"] and len(res.table) == 5
    friedman = row(res, activation="gelu", data="friedman")
    assert friedman["n_pairs"] == 6 and friedman["ratio"] == pytest.approx(1.0)  # paired within the task
    two = {act: FINAL[act] for act in ("relu", "gelu")}
    ranked = rk.rank(load([write(tmp_path / "m2.csv", cls_rows(two) + reg_rows())]), "final")
    assert ranked.task_cols == ["data"] and list(ranked.scores.index) == ["data=digits", "data=friedman"]
