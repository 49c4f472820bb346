"""actbench compare: statistics checked against numpy/scipy on small hand-built data, loading of
sweep dirs / run dirs / CSVs, incomplete and diverged runs, output formats, bad input (exit 2)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from activation_bench.analysis import compare as cmp
from activation_bench.analysis.stats import holm
from activation_bench.cli.main import app
from activation_bench.errors import UsageError
from activation_bench.render import tables

ACTS = ["relu", "gelu", "silu"]
SEEDS = range(5)
EPOCHS = 4
# final losses [activation][seed]; gelu is uniformly better than relu, silu is mixed
FINAL = {
    "relu": [0.20, 0.10, 0.40, 0.05, 0.30],
    "gelu": [0.10, 0.04, 0.20, 0.03, 0.10],
    "silu": [0.30, 0.08, 0.50, 0.04, 0.20],
}


def curve(final: float) -> list[float]:
    """Decreasing curve ending at `final`: final * [8, 4, 2, 1]."""
    return [final * 2 ** (EPOCHS - e) for e in range(1, EPOCHS + 1)]


def write_long_csv(path: Path, final: dict[str, list[float]] = FINAL, with_run: bool = True) -> Path:
    rows = []
    for act, finals in final.items():
        for seed, f in zip(SEEDS, finals):
            for e, loss in enumerate(curve(f), 1):
                row = {"activation": act, "data": "normal", "seed": seed, "epoch": e, "train_loss": loss}
                if with_run:
                    row["run"] = f"{act}_s{seed}"
                rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.fixture
def table_csv(tmp_path: Path) -> Path:
    return write_long_csv(tmp_path / "results.csv")


def invoke(*args: str):
    return CliRunner().invoke(app, ["compare", *args])


def row(res: cmp.CompareResult, **labels: str) -> pd.Series:
    t = res.table
    mask = np.ones(len(t), bool)
    for k, v in labels.items():
        mask &= (t[k] == v).to_numpy()
    assert mask.sum() == 1, labels
    return t[mask].iloc[0]


# ---------------------------------------------------------------------------------------------
# metrics and statistics against numpy/scipy


def test_parse_metric():
    assert cmp.parse_metric("final") == cmp.Metric("final")
    assert cmp.parse_metric("epoch=10") == cmp.Metric("epoch", 10.0)
    assert cmp.parse_metric("to=1e-6") == cmp.Metric("to", 1e-6)
    for bad in ("nosuch", "epoch=0", "epoch=1.5", "to=-1", "to=abc", "epoch="):
        with pytest.raises(UsageError):
            cmp.parse_metric(bad)


def test_group_stats_final_match_numpy_scipy(table_csv):
    res = cmp.run_compare([table_csv], "final", baseline="activation=relu")
    assert res.group_cols == ["activation"]
    assert res.pair_cols == ["seed"]
    for act, finals in FINAL.items():
        r = row(res, activation=act)
        x = np.array(finals)
        lg = np.log10(x)
        lo, hi = stats.t.interval(0.95, len(x) - 1, loc=lg.mean(), scale=stats.sem(lg))
        assert r["n"] == 5 and r["n_diverged"] == 0
        assert r["mean"] == pytest.approx(x.mean())
        assert r["std"] == pytest.approx(x.std(ddof=1))
        assert r["median"] == pytest.approx(np.median(x))
        assert r["geo_mean"] == pytest.approx(stats.gmean(x))
        assert r["ci_low"] == pytest.approx(10**lo)
        assert r["ci_high"] == pytest.approx(10**hi)
    # best first: by geometric mean
    assert list(res.table["activation"]) == sorted(FINAL, key=lambda a: stats.gmean(FINAL[a]))


def test_paired_comparison_matches_scipy_and_holm(table_csv):
    res = cmp.run_compare([table_csv], "final", baseline="activation=relu")
    base = np.log10(FINAL["relu"])
    p_t, p_w = {}, {}
    for act in ("gelu", "silu"):
        r = row(res, activation=act)
        c = np.log10(FINAL[act])
        d = c - base
        assert r["n_pairs"] == 5
        assert r["mean_diff"] == pytest.approx(d.mean())
        assert r["ratio"] == pytest.approx(10 ** d.mean())
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        assert (r["ratio_lo"], r["ratio_hi"]) == pytest.approx((10 ** (d.mean() - half), 10 ** (d.mean() + half)))
        assert r["win_rate"] == pytest.approx(np.mean(d < 0))
        assert r["d_z"] == pytest.approx(d.mean() / d.std(ddof=1))
        assert r["p_t"] == pytest.approx(stats.ttest_rel(c, base).pvalue)
        assert r["p_wilcoxon"] == pytest.approx(stats.wilcoxon(d, zero_method="pratt").pvalue)
        p_t[act], p_w[act] = r["p_t"], r["p_wilcoxon"]
    # Holm by hand for two comparisons: smallest * 2, then max(that, largest * 1)
    lo, hi = sorted(p_t.values())
    expect = {a: (min(1, 2 * lo) if p == lo else max(min(1, 2 * lo), hi)) for a, p in p_t.items()}
    for act in p_t:
        assert row(res, activation=act)["p_t_holm"] == pytest.approx(expect[act])
    assert bool(row(res, activation="relu")["is_baseline"])
    assert row(res, activation="gelu")["win_rate"] == 1.0


def test_holm_by_hand():
    got = holm([0.01, 0.04, 0.03, float("nan")])
    assert got[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(got[3])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize("metric", ["best", "epoch=2", "auc"])
def test_other_loss_metrics(table_csv, metric):
    res = cmp.run_compare([table_csv], metric, baseline="activation=relu")
    for act, finals in FINAL.items():
        curves = np.array([curve(f) for f in finals])
        per_run = {"best": curves.min(axis=1), "epoch=2": curves[:, 1],
                   "auc": np.log10(curves).mean(axis=1)}[metric]
        r = row(res, activation=act)
        assert r["mean"] == pytest.approx(per_run.mean())
        assert r["median"] == pytest.approx(np.median(per_run))
        lg = per_run if metric == "auc" else np.log10(per_run)
        assert r["geo_mean"] == pytest.approx(10 ** lg.mean())
    d = np.log10(FINAL["gelu"]) - np.log10(FINAL["relu"])  # all three metrics shift by the same log
    assert row(res, activation="gelu")["mean_diff"] == pytest.approx(d.mean())


def test_to_eps_counts_not_reached_and_pairs_epochs(tmp_path):
    path = write_long_csv(tmp_path / "t.csv")
    eps = 0.25
    res = cmp.run_compare([path], f"to={eps}", baseline="activation=relu")
    epochs = {}
    for act, finals in FINAL.items():
        curves = np.array([curve(f) for f in finals])
        hit = curves <= eps
        reached = hit.any(axis=1)
        ep = np.where(reached, hit.argmax(axis=1) + 1, np.nan)
        epochs[act] = ep
        r = row(res, activation=act)
        got = ep[reached]
        assert r["n"] == reached.sum() and r["n_not_reached"] == (~reached).sum()
        assert len(got) > 1  # the data are built so every group has an interval to check
        assert r["mean"] == pytest.approx(got.mean())
        lo, hi = stats.t.interval(0.95, len(got) - 1, loc=got.mean(), scale=stats.sem(got))
        assert (r["ci_low"], r["ci_high"]) == pytest.approx((max(lo, 1.0), hi))  # no epoch before the first
    both = ~np.isnan(epochs["gelu"]) & ~np.isnan(epochs["relu"])
    d = (epochs["gelu"] - epochs["relu"])[both]
    r = row(res, activation="gelu")
    assert r["n_pairs"] == both.sum()
    assert r["mean_diff"] == pytest.approx(d.mean())
    # an epoch count is compared as epochs, never on the log10 scale of the loss metrics
    assert not any("log10" in m for m in res.methods)
    assert any("differences of epochs" in m for m in res.methods)


def test_ties_at_the_float_floor(tmp_path):
    final = {"relu": [1e-15, 3e-14, 1e-13, 2e-16, 5e-14], "gelu": [4e-16, 1e-14, 8e-14, 1e-13, 1e-17]}
    path = write_long_csv(tmp_path / "floor.csv", final)
    res = cmp.run_compare([path], "final", baseline="activation=relu")
    r = row(res, activation="gelu")
    assert r["n_ties"] == 5 and r["mean_diff"] == 0
    assert r["p_t"] == 1.0 and r["p_wilcoxon"] == 1.0
    assert r["note"] == "all 5 pairs tie: both runs at or below the float floor in every pair"
    assert row(res, activation="relu")["geo_mean"] == pytest.approx(1e-13)
    assert any("log10" in m for m in res.methods)
    # partial ties: Wilcoxon with Pratt's zero handling, no crash
    final["gelu"] = [1e-15, 1e-14, 1e-3, 1e-2, 1e-4]
    res = cmp.run_compare([write_long_csv(tmp_path / "f2.csv", final)], "final", baseline="activation=relu")
    r = row(res, activation="gelu")
    d = np.log10(np.maximum(final["gelu"], 1e-13)) - np.log10(np.maximum(final["relu"], 1e-13))
    assert r["n_ties"] == 2
    assert r["p_wilcoxon"] == pytest.approx(stats.wilcoxon(d, zero_method="pratt").pvalue)


def test_identical_functions_tie_as_identical_losses(tmp_path):
    """relu6 equals relu below 6 (celu equals elu at alpha 1): every pair has the same losses."""
    final = {"relu": FINAL["relu"], "relu6": list(FINAL["relu"]), "gelu": FINAL["gelu"]}
    res = cmp.run_compare([write_long_csv(tmp_path / "same.csv", final)], "final", baseline="activation=relu")
    r = row(res, activation="relu6")
    assert r["n_ties"] == 5 and r["mean_diff"] == 0 and r["p_t"] == 1.0
    assert r["note"] == "all 5 pairs tie: identical losses (every paired difference is exactly zero)"
    assert row(res, activation="gelu")["note"] == ""
    assert "identical losses" in tables.table_text(res)  # the note is shown below the table


def test_diverged_runs_counted_apart(tmp_path):
    path = write_long_csv(tmp_path / "d.csv")
    df = pd.read_csv(path)
    last = (df["run"] == "gelu_s0") & (df["epoch"] == EPOCHS)
    df["train_loss"] = df["train_loss"].astype(object)
    df.loc[last, "train_loss"] = "nan"
    df.loc[(df["run"] == "gelu_s1") & (df["epoch"] == 3), "train_loss"] = "inf"
    df = df[~((df["run"] == "gelu_s1") & (df["epoch"] == 4))]
    df.to_csv(path, index=False)
    res = cmp.run_compare([path], "final", baseline="activation=relu")
    r = row(res, activation="gelu")
    x = np.array(FINAL["gelu"][2:])
    assert r["n"] == 3 and r["n_diverged"] == 2
    assert r["mean"] == pytest.approx(x.mean())
    assert r["n_pairs"] == 3


def test_too_few_pairs_warns(tmp_path):
    final = {"relu": [0.1], "gelu": [0.2]}
    path = write_long_csv(tmp_path / "one.csv", final)
    res = cmp.run_compare([path], "final")
    r = row(res, activation="gelu")
    assert r["n_pairs"] == 1 and math.isnan(r["p_t"])
    assert any("only 1 pair" in w for w in res.warnings)


def test_shuffled_csv_without_run_column_gives_same_result(tmp_path, table_csv):
    ref = cmp.run_compare([table_csv], "final", baseline="activation=relu").table
    df = pd.read_csv(write_long_csv(tmp_path / "norun.csv", with_run=False))
    df.sample(frac=1.0, random_state=1).to_csv(tmp_path / "shuffled.csv", index=False)
    got = cmp.run_compare([tmp_path / "shuffled.csv"], "final", baseline="activation=relu").table
    pd.testing.assert_frame_equal(ref.reset_index(drop=True), got.reset_index(drop=True))


# ---------------------------------------------------------------------------------------------
# sweep directories, run directories, mixing


def write_run_dir(path: Path, act: str, seed: int, losses: list[float], lr: str = "0.001",
                  labels: dict | None = None, status: str | None = "complete") -> Path:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(
        f"activation:\n  name: {act}\ndata:\n  name: normal\n  n_samples: 10\n  low: null\n"
        f"model:\n  hidden_dim: 64\nepochs: {len(losses)}\nlr: {lr}\nseed: {seed}\ndevice: cpu\n")
    (path / "losses.csv").write_text("epoch,train_loss\n" + "".join(f"{e},{v!r}\n" for e, v in enumerate(losses, 1)))
    if status is not None:
        summary = {"status": status, "seed": seed, "labels": labels or {}, "final_loss": losses[-1]}
        (path / "summary.json").write_text(json.dumps(summary))
    return path


def make_sweep(root: Path, with_results: bool = True) -> Path:
    sweep = root / "sweep"
    rows = []
    i = 0
    for act, finals in FINAL.items():
        for seed, f in zip(SEEDS, finals):
            name = f"{i:04d}_activation={act}_seed={seed}"
            write_run_dir(sweep / name, act, seed, curve(f), labels={"activation": act, "seed": str(seed)})
            rows += [{"activation": act, "seed": seed, "run": name, "epoch": e, "train_loss": v}
                     for e, v in enumerate(curve(f), 1)]
            i += 1
    (sweep / "sweep.yaml").write_text("overrides: []\nkeys: [activation, seed]\nmembers: []\n")
    if with_results:
        pd.DataFrame(rows).to_csv(sweep / "results.csv", index=False)
    write_run_dir(sweep / "9999_unfinished", "relu", 9, [1.0, 0.5], status=None)
    return sweep


def test_sweep_dir_with_and_without_results_csv(tmp_path, table_csv):
    ref = cmp.run_compare([table_csv], "final", baseline="activation=relu").table
    sweep = make_sweep(tmp_path)
    res = cmp.run_compare([sweep], "final", baseline="activation=relu")
    assert any("9999_unfinished" in w and "incomplete" in w for w in res.warnings)
    cols = ["activation", "n", "mean", "geo_mean", "ci_low", "p_t", "p_wilcoxon"]
    pd.testing.assert_frame_equal(res.table[cols], ref[cols])
    (sweep / "results.csv").unlink()
    res2 = cmp.run_compare([sweep], "final", baseline="activation=relu")
    pd.testing.assert_frame_equal(res2.table[cols], ref[cols])


def test_a_folder_of_single_runs_is_grouped_by_their_configs(tmp_path):
    """`actbench run` several times into runs/, then `actbench compare runs/`: each run's
    config.yaml says what it is (not one group of every run)."""
    for i, (act, seed, final) in enumerate([("relu", 0, 0.2), ("gelu", 0, 0.1), ("relu", 1, 0.3), ("gelu", 1, 0.1)]):
        write_run_dir(tmp_path / "runs" / f"run{i}", act, seed, [0.5, final])
    folder = cmp.run_compare([tmp_path / "runs"], "final", baseline="activation=relu").table
    direct = cmp.run_compare(sorted((tmp_path / "runs").iterdir()), "final", baseline="activation=relu").table
    assert sorted(folder["activation"]) == ["gelu", "relu"] and list(folder["n"]) == [2, 2]
    cols = ["activation", "n", "geo_mean", "p_t"]
    pd.testing.assert_frame_equal(folder[cols], direct[cols])


def test_run_dirs_and_csv_combined_with_canonical_values(tmp_path):
    a = write_run_dir(tmp_path / "a", "relu", 0, [0.4, 0.2], lr="0.001")
    b = write_run_dir(tmp_path / "b", "gelu", 0, [0.3, 0.1], lr="1e-3")
    c = write_run_dir(tmp_path / "c", "gelu", 1, [0.3, 0.05])
    d = write_run_dir(tmp_path / "d", "relu", 1, [0.3, 0.1])
    pd.DataFrame({"activation": ["silu"] * 2, "seed": [0, 0], "lr": ["1e-3", "1e-3"], "epoch": [1, 2],
                  "train_loss": [0.5, 0.3]}).to_csv(tmp_path / "extra.csv", index=False)
    res = cmp.run_compare([a, b, c / "losses.csv", d, tmp_path / "extra.csv"], "final", baseline="activation=relu")
    assert res.group_cols == ["activation"]  # lr 0.001 == 1e-3, so it does not vary
    assert row(res, activation="gelu")["n_pairs"] == 2
    assert row(res, activation="silu")["n_pairs"] == 1
    assert row(res, activation="gelu")["mean_diff"] == pytest.approx(np.mean([np.log10(0.5), np.log10(0.5)]))


def test_incomplete_run_dir_reported_and_skipped(tmp_path, table_csv):
    bad = write_run_dir(tmp_path / "half", "relu", 0, [1.0], status=None)
    res = cmp.run_compare([table_csv, bad], "final")
    assert any(str(bad) in w for w in res.warnings)
    assert res.table["n"].sum() == 15
    with pytest.raises(UsageError, match="no complete runs"):
        cmp.run_compare([bad], "final")


def test_by_option_and_val_loss(tmp_path):
    df = pd.read_csv(write_long_csv(tmp_path / "x.csv"))
    df["data"] = np.where(df["seed"] % 2 == 0, "normal", "uniform")
    df["val_loss"] = df["train_loss"] * 2
    df.to_csv(tmp_path / "v.csv", index=False)
    res = cmp.run_compare([tmp_path / "v.csv"], "final", by=["activation,data"], loss="val_loss")
    assert res.group_cols == ["activation", "data"]
    r = row(res, activation="relu", data="normal")
    assert r["mean"] == pytest.approx(np.mean([2 * FINAL["relu"][s] for s in (0, 2, 4)]))
    res = cmp.run_compare([tmp_path / "v.csv"], "final", by=["activation"])
    assert res.pair_cols == ["data", "seed"]


# ---------------------------------------------------------------------------------------------
# output formats and the command


def test_formats(table_csv):
    res = cmp.run_compare([table_csv], "final", baseline="activation=relu")
    csv_text = tables.to_csv(res)
    header = csv_text.splitlines()[0].split(",")
    assert header[:9] == ["activation", "metric", "n", "mean", "std", "median", "geo_mean", "ci_low", "ci_high"]
    assert {"n_pairs", "ratio", "win_rate", "p_t", "p_wilcoxon", "p_t_holm", "p_wilcoxon_holm", "d_z"} <= set(header)
    back = pd.read_csv(pd.io.common.StringIO(csv_text))
    assert back["mean"].tolist() == res.table["mean"].tolist()  # raw, full precision
    doc = json.loads(tables.to_json(res))
    assert doc["baseline"] == {"key": "activation", "value": "relu"}
    assert doc["rows"][0]["geo_mean"] == res.table["geo_mean"].iloc[0]
    md = tables.to_markdown(res)
    assert "| activation |" in md and "|:---|" in md and "log10" in md
    text = tables.table_text(res)
    assert "gelu" in text and "log10" in text and "t interval" in text


def test_command_writes_output_atomically(tmp_path, table_csv):
    out = tmp_path / "table.md"
    result = invoke(str(table_csv), "--metric", "epoch=2", "--format", "markdown", "--output", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("**epoch=2")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    result = invoke(str(table_csv), "--format", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["metric"] == "final"
    result = invoke(str(table_csv))
    assert result.exit_code == 0 and "geo mean" in result.stdout


def _bad_files(tmp: Path) -> dict[str, Path]:
    (tmp / "empty").mkdir()
    (tmp / "nocols.csv").write_text("step,loss\n1,0.5\n")
    (tmp / "text.csv").write_text("epoch,train_loss\n1,0.5\n2,abc\n")
    (tmp / "dup.csv").write_text("epoch,train_loss\n1,0.5\n1,0.4\n")
    (tmp / "notes.txt").write_text("hello\n")
    (tmp / "blank.csv").write_text("")
    return {p.name: p for p in tmp.iterdir()}


@pytest.mark.parametrize(("args", "message"), [
    (["{tmp}/nosuch"], "no such file or directory"),
    (["{tmp}/empty"], "empty directory"),
    (["{tmp}/nocols.csv"], "missing column epoch and train_loss"),
    (["{tmp}/text.csv"], "text.csv, line 3: non-numeric train_loss value 'abc'"),
    (["{tmp}/dup.csv"], "line 3: epoch 1 appears twice"),
    (["{tmp}/notes.txt"], "not a CSV file"),
    (["{tmp}/blank.csv"], "empty file"),
    (["{csv}", "--metric", "nosuch"], "unknown metric 'nosuch'"),
    (["{csv}", "--metric", "epoch=99"], "no run has epoch 99"),
    (["{csv}", "--baseline", "activation=tanh"], "no runs with activation=tanh"),
    (["{csv}", "--baseline", "seed=1"], "'seed' is not a group column"),
    (["{csv}", "--baseline", "relu"], "expected KEY=VALUE"),
    (["{csv}", "--by", "nosuch"], "no such config column"),
    (["{csv}", "--format", "xml"], "unknown format 'xml'"),
    (["{csv}", "--loss", "val_loss"], "no val_loss column"),
    (["{csv}", "--loss", "nosuch"], "unknown loss"),
    (["{csv}", "--output", "{tmp}/no/dir/out.csv"], "does not exist"),
])
def test_bad_input_exit_2(tmp_path, table_csv, args, message):
    _bad_files(tmp_path)
    args = [a.format(tmp=tmp_path, csv=table_csv) for a in args]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert "Traceback" not in result.output
    assert not (tmp_path / "no").exists()


def test_compare_does_not_import_torch():
    code = ("import sys, activation_bench.analysis.compare, activation_bench.render.tables, "
            "activation_bench.cli.compare; "
            "assert 'torch' not in sys.modules, 'torch imported'; assert 'rich' not in sys.modules, 'rich'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_summary_status_diverged_counts_even_with_finite_last_loss(tmp_path):
    sweep = make_sweep(tmp_path)
    run = next(sweep.glob("*_activation=gelu_seed=0"))
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "diverged"}))
    df = pd.read_csv(sweep / "results.csv")
    df["n_params"] = 4225  # results.csv carries facts about runs too: never a group column
    df.to_csv(sweep / "results.csv", index=False)
    for paths in ([sweep], [run, *[p for p in sweep.iterdir() if p.is_dir() and p != run]]):
        res = cmp.run_compare(paths, "final", baseline="activation=relu")
        assert res.group_cols == ["activation"]
        r = row(res, activation="gelu")
        assert r["n"] == 4 and r["n_diverged"] == 1 and r["n_pairs"] == 4


def test_missing_config_values_group_and_pair(tmp_path):
    df = pd.read_csv(write_long_csv(tmp_path / "m.csv", with_run=False))
    df["activation.negative_slope"] = np.where(df["activation"] == "relu", 0.1, np.nan)
    df.to_csv(tmp_path / "m2.csv", index=False)
    res = cmp.run_compare([tmp_path / "m2.csv"], "final", baseline="activation=relu")
    assert res.group_cols == ["activation"]  # defined for one activation only: it does not vary
    assert list(res.table["n"]) == [5, 5, 5]
    assert row(res, activation="gelu")["n_pairs"] == 5


def test_canon_keeps_the_value_none_apart_from_null():
    from activation_bench.analysis.configs import canon

    assert canon("none") == "none" and canon("batch") == "batch"  # model.norm=none is a choice, not a missing value
    assert canon("None") is None and canon("null") is None and canon("") is None and canon(None) is None
    assert canon("1e-3") == canon(0.001) == "0.001"


def test_runs_at_norm_none_are_a_group_of_their_own(tmp_path):
    rows = ["model.norm,seed,epoch,train_loss"]
    rows += [f"{norm},{seed},1,{(1.0 if norm == 'none' else 2.0) * (1 + seed / 10)}"
             for norm in ("none", "batch") for seed in range(3)]
    f = tmp_path / "r.csv"
    f.write_text("\n".join(rows) + "\n")
    res = cmp.run_compare([f], "final", baseline="model.norm=none")
    assert res.group_cols == ["model.norm"] and res.pair_cols == ["seed"]
    assert row(res, **{"model.norm": "batch"})["ratio"] == pytest.approx(2.0)
