"""Accuracy in `plot`, `report` and `export mlflow`: classification runs' val_acc / test_acc drawn
beside their losses (in %, on a linear axis), compared in the report's tables, and logged to MLflow.

The engine's classification output is stood in for by hand-made sweeps carrying the contract's
columns (cross-entropy losses, accuracies as fractions in [0, 1]): tiny, exact and fast."""

from __future__ import annotations

import datetime as dt
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from activation_bench.analysis import compare as cmp
from activation_bench.cli.main import app
from activation_bench.render import plots
from tests.test_report import leave_figures_undrawn

COLUMNS = ["train_loss", "val_loss", "test_loss", "val_acc", "test_acc"]


def curves_rows(tasks=("digits", "iris"), acts=("relu", "gelu"), seeds=3, epochs=6, lrs=(None,)) -> pd.DataFrame:
    """Long-format rows: cross-entropy falling, accuracy rising; val_loss lowest at epoch 4."""
    rng = np.random.default_rng(0)
    rows = []
    for data in tasks:
        for i, act in enumerate(acts):
            for lr in lrs:
                for seed in range(seeds):
                    rate = rng.uniform(0.3, 0.6) + 0.1 * i + (0.2 if lr == 0.01 else 0.0)
                    for e in range(1, epochs + 1):
                        ce = 2.3 * np.exp(-rate * e) + 0.05
                        row = {"activation": act, "data": data, "seed": seed, "epoch": e, "train_loss": ce,
                               "val_loss": ce + 0.5 * (e - 4) ** 2, "test_loss": ce + 0.4 * (e - 4) ** 2,
                               "val_acc": round(1 - 0.9 * np.exp(-rate * e) - 0.02, 4),
                               "test_acc": round(1 - 0.9 * np.exp(-rate * e) - 0.01 * seed, 4)}
                        rows.append(row if lr is None else {"lr": lr, **row})
    return pd.DataFrame(rows)


@pytest.fixture
def cls_csv(tmp_path: Path) -> Path:
    path = tmp_path / "cls.csv"
    curves_rows().to_csv(path, index=False)
    return path


@pytest.fixture
def reg_csv(tmp_path: Path) -> Path:
    path = tmp_path / "reg.csv"
    curves_rows(tasks=("normal",)).drop(columns=["val_acc", "test_acc"]).to_csv(path, index=False)
    return path


def fake_sweep(root: Path, name: str = "cls", **kw) -> Path:
    """A finished sweep directory as the engine writes it for classification: sweep.yaml,
    results.csv and a run directory per member (config.yaml, summary.json, losses.csv)."""
    df = curves_rows(**kw)
    sweep = root / name
    sweep.mkdir(parents=True)
    keys = [c for c in ("activation", "data", "lr") if c in df.columns]
    overrides = [f"{k}={','.join(map(str, dict.fromkeys(df[k])))}" for k in keys] + \
        [f"seed=range({df['seed'].nunique()})", "data.task=classification"]
    (sweep / "sweep.yaml").write_text(yaml.safe_dump({"overrides": overrides}))
    parts = []
    for i, (key, part) in enumerate(df.groupby([*keys, "seed"], sort=False)):
        labels = dict(zip(keys, key[:-1]))
        run = f"{i:04d}_" + "_".join(f"{k}={v}" for k, v in labels.items()) + f"_seed={key[-1]}"
        run_dir = sweep / run
        run_dir.mkdir()
        part[["epoch", *COLUMNS]].to_csv(run_dir / "losses.csv", index=False)
        config = {"activation": {"name": labels["activation"]}, "seed": int(key[-1]), "epochs": int(part.epoch.max()),
                  "lr": float(labels.get("lr", 0.001)), "model": {"hidden_dim": 8, "dropout": 0.0},
                  "data": {"name": labels.get("data", "iris"), "task": "classification"}}
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
        stop = int(part["val_loss"].to_numpy().argmin())
        summary = {"status": "complete", "config_hash": f"hash{i:04d}", "labels": labels, "seed": int(key[-1]),
                   "n_params": 123, "wall_time_s": 1.5, "created": dt.datetime(2025, 1, 2, 3, 4, 5).isoformat(),
                   "versions": {"activation_bench": "0.test"}, "final_test_acc": float(part["test_acc"].iloc[-1]),
                   "early_stop_test_acc": float(part["test_acc"].iloc[stop]), "early_stop_epoch": stop + 1,
                   "data": {"task": "classification", "n_classes": 3, "classes": ["0", "1", "2"]}}
        (run_dir / "summary.json").write_text(json.dumps(summary))
        parts.append(part.assign(run=run))
    out = pd.concat(parts)
    out[["run", *keys, "seed", "epoch", *COLUMNS]].to_csv(sweep / "results.csv", index=False)
    return sweep


def lines_of(ax) -> dict[str, np.ndarray]:
    return {line.get_label(): np.asarray(line.get_ydata(), float) for line in ax.get_lines()
            if not line.get_label().startswith("_")}


# ---------------------------------------------------------------------------------------------
# plot


def test_companion_accuracy_is_the_same_split(cls_csv, reg_csv):
    loaded = cmp.load([cls_csv])
    assert plots.companion_accuracy(loaded, "train_loss") == "test_acc"
    assert plots.companion_accuracy(loaded, "val_loss") == "val_acc"
    assert plots.companion_accuracy(loaded, "test_loss") == "test_acc"
    assert plots.companion_accuracy(loaded, "val_acc") is None
    assert plots.companion_accuracy(cmp.load([reg_csv]), "train_loss") is None


def test_classification_curves_have_an_accuracy_panel_per_task(cls_csv):
    loaded = cmp.load([cls_csv])
    fig = plots.curves_figure(loaded, None, "train_loss", accuracy="test_acc")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 4  # loss panels of digits and iris, and below each its accuracy
    assert [ax.get_yscale() for ax in axes] == ["log", "log", "linear", "linear"]
    assert [ax.get_ylabel() for ax in axes] == ["train_loss (log scale)", "", "test_acc (%)", ""]
    assert [ax.get_title().split("  ")[0] for ax in axes[:2]] == ["data=digits", "data=iris"]
    assert axes[3].get_subplotspec().colspan.start == 1 and axes[3].get_subplotspec().rowspan.start == 1
    raw = pd.read_csv(cls_csv)
    want = raw[(raw.data == "iris") & (raw.activation == "gelu")].groupby("epoch")["test_acc"].median() * 100
    assert lines_of(axes[3])["gelu"] == pytest.approx(want.to_numpy())
    want = raw[(raw.data == "iris") & (raw.activation == "gelu")].groupby("epoch")["train_loss"].median()
    assert lines_of(axes[1])["gelu"] == pytest.approx(want.to_numpy())
    assert "train_loss (top) and test_acc in % (below each)" in fig._suptitle.get_text()


def test_one_task_has_its_accuracy_to_the_right(tmp_path):
    curves_rows(tasks=("iris",)).to_csv(tmp_path / "iris.csv", index=False)
    fig = plots.curves_figure(cmp.load([tmp_path / "iris.csv"]), None, "val_loss", accuracy="val_acc")
    loss_ax, acc_ax = fig.axes
    assert (loss_ax.get_yscale(), acc_ax.get_yscale()) == ("log", "linear")
    assert acc_ax.get_ylabel() == "val_acc (%)" and acc_ax.get_xlabel() == "epoch"
    assert "val_loss (left) and val_acc in % (right)" in fig._suptitle.get_text()


def test_accuracy_alone_in_percent_on_a_linear_axis(cls_csv):
    loaded = cmp.load([cls_csv])
    fig = plots.curves_figure(loaded, ["activation"], "val_acc")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2 and all(ax.get_yscale() == "linear" for ax in axes)
    assert axes[0].get_ylabel() == "val_acc (%)" and axes[0].get_title().startswith("activation=relu")
    raw = pd.read_csv(cls_csv)
    want = raw[(raw.activation == "relu") & (raw.data == "digits")].groupby("epoch")["val_acc"].median() * 100
    assert lines_of(axes[0])["digits"] == pytest.approx(want.to_numpy())


def test_regression_curves_unchanged(reg_csv):
    fig = plots.curves_figure(cmp.load([reg_csv]), None, "train_loss",
                              accuracy=plots.companion_accuracy(cmp.load([reg_csv]), "train_loss"))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 1 and axes[0].get_yscale() == "log"


def test_mixed_inputs_say_which_task_has_no_accuracy(tmp_path):
    rows = pd.concat([curves_rows(tasks=("iris",)), curves_rows(tasks=("normal",)).assign(val_acc=np.nan,
                                                                                        test_acc=np.nan)])
    rows.to_csv(tmp_path / "mixed.csv", index=False)
    fig = plots.curves_figure(cmp.load([tmp_path / "mixed.csv"]), None, "val_loss", accuracy="val_acc")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 4 and not axes[3].get_lines()
    assert "no accuracy" in axes[3].texts[0].get_text()
    fig = plots.curves_figure(cmp.load([tmp_path / "mixed.csv"]), None, "test_acc")
    assert "no accuracy" in [ax for ax in fig.axes if ax.get_title().startswith("data=normal")][0].texts[0].get_text()


# the quick run draws a loss with its accuracy panels ("": train_loss and test_acc) and an accuracy
# alone; the other loss and accuracy (the same figures of the other split) under -m slow
@pytest.mark.parametrize("loss", ["", pytest.param("val_loss", marks=pytest.mark.slow), "val_acc",
                                  pytest.param("test_acc", marks=pytest.mark.slow)])
def test_plot_cli_on_classification_runs(tmp_path, cls_csv, loss):
    out = tmp_path / "curves.png"
    result = CliRunner().invoke(app, ["plot", str(cls_csv), "-o", str(out), *(["--loss", loss] if loss else [])])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1000


def test_plot_accuracy_of_regression_runs_exits_2(tmp_path, reg_csv):
    result = CliRunner().invoke(app, ["plot", str(reg_csv), "-o", str(tmp_path / "c.png"), "--loss", "test_acc"])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and "test_acc" in err[0], err
    assert not (tmp_path / "c.png").exists()


def test_sensitivity_of_accuracy_in_percent(tmp_path):
    from activation_bench.render import sensitivity

    sweep = fake_sweep(tmp_path, tasks=("iris",), lrs=(0.001, 0.01))
    loaded = cmp.load([sweep])
    fig = sensitivity.sensitivity_figure(loaded, "lr", cmp.parse_metric("early_stop"), "test_acc")
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert ax.get_yscale() == "linear" and ax.get_xscale() == "log"
    assert ax.get_ylabel() == "test_acc % (early_stop)"
    raw = curves_rows(tasks=("iris",), lrs=(0.001, 0.01))
    at_stop = raw[(raw.epoch == 4) & (raw.activation == "gelu")].groupby("lr")["test_acc"].median() * 100
    assert lines_of(ax)["gelu"] == pytest.approx(at_stop.to_numpy())  # val_loss is lowest at epoch 4
    out = tmp_path / "lr.svg"
    result = CliRunner().invoke(app, ["plot", str(sweep), "--x", "lr", "--loss", "test_acc", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "test_acc % (early_stop)" in out.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# report


class Tables(HTMLParser):
    """Per compare table, keyed (data-metric, data-loss): its headers and rows of cells' data-* and text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[tuple[str, str], dict] = {}
        self._table: dict | None = None
        self._cell: dict | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "table" and "compare" in (a.get("class") or ""):
            self._table = self.tables[(a["data-metric"], a["data-loss"])] = {"headers": [], "rows": []}
        elif tag == "th" and self._table is not None:
            self._cell = {"text": ""}
            self._table["headers"].append(self._cell)
        elif tag == "tr" and self._table is not None and "data-row" in a:
            self._table["rows"].append([])
        elif tag == "td" and self._table is not None:
            self._cell = {"data": {k[5:]: v for k, v in a.items() if k.startswith("data-")}, "text": ""}
            self._table["rows"][-1].append(self._cell)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag in ("td", "th"):
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data


def report_tables(html: str) -> dict[tuple[str, str], dict]:
    parser = Tables()
    parser.feed(html)
    return parser.tables


@pytest.fixture
def cls_sweep(tmp_path: Path) -> Path:
    return fake_sweep(tmp_path / "runs", seeds=4)


@pytest.fixture
def undrawn(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The reports below are read for their tables and text: their figures are built, not drawn
    (test_report_browser.py draws a classification report's and measures them in a browser)."""
    return leave_figures_undrawn(monkeypatch)


def test_report_of_classification_runs(cls_sweep, tmp_path, undrawn):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(cls_sweep), "-o", str(out), "--no-shapes",
                                      "--baseline", "activation=relu"])
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    found = report_tables(html)
    assert list(found) == [("final", "train_loss"), ("early_stop", "test_loss"), ("final", "test_acc"),
                           ("early_stop", "test_acc")]
    for metric in ("final", "early_stop"):
        res = CliRunner().invoke(app, ["compare", str(cls_sweep), "--metric", metric, "--loss", "test_acc",
                                       "--baseline", "activation=relu", "--format", "json"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        table = found[(metric, "test_acc")]
        assert [h["text"] for h in table["headers"]][4:] == ["mean test_acc %", "95% CI", "median %", "pairs", "Δpp",
                                                              "95% CI of Δpp", "win", "p Holm t / W", "d_z", "sig"]
        assert len(table["rows"]) == len(doc["rows"]) == 4
        keys: set[str] = set()
        for cells, want in zip(table["rows"], doc["rows"]):
            assert [c["text"] for c in cells[:2]] == [want["activation"], want["data"]]
            assert cells[4]["text"] == f"{100 * want['mean']:.2f}"  # shown in %, compare's fraction in data-mean
            for cell in cells:
                for key, value in cell["data"].items():
                    keys.add(key)
                    assert (value == "") if want[key] is None else float(value) == want[key], (metric, key)
        assert {"mean", "ci_low", "ci_high", "median", "n_pairs", "diff_pp", "diff_lo_pp", "diff_hi_pp",
                "win_rate", "p_t_holm", "d_z"} <= keys
    assert 'data-loss="val_loss" data-accuracy="val_acc"' in html and 'data-accuracy="test_acc"' in html
    assert "Loss and accuracy curves" in html and "percentage points of test_acc against the baseline" in html
    assert html.count("<svg") == 4  # ranking; train_loss; val_loss | val_acc; test_loss | test_acc
    assert undrawn == ["ranking", "curves-train_loss", "curves-val_loss", "curves-test_loss"]


def test_report_on_an_accuracy_column(cls_sweep, tmp_path, undrawn):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(cls_sweep), "-o", str(out), "--no-shapes", "--loss", "val_acc"])
    assert result.exit_code == 0, result.output
    assert list(report_tables(out.read_text(encoding="utf-8"))) == [("final", "val_acc"), ("early_stop", "val_acc")]


def test_report_of_regression_runs_has_no_accuracy(tmp_path, reg_csv, undrawn):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(reg_csv), "-o", str(out), "--no-shapes"])
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert all(loss.endswith("_loss") for _, loss in report_tables(html))
    assert "Loss and accuracy" not in html and "data-accuracy" not in html and "Δpp" not in html


def test_report_tuned_on_validation_accuracy(tmp_path, undrawn):
    sweep = fake_sweep(tmp_path / "runs", tasks=("iris",), lrs=(0.001, 0.01), seeds=4)
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(sweep), "-o", str(out), "--no-shapes", "--tune", "lr",
                                      "--tune-on", "val_acc", "--baseline", "activation=relu"])
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert "chosen by the highest mean of the metric\nof val_acc on the tuning seeds (0, 1)" in html
    assert "--tune-on val_acc" in html  # the command in the provenance
    raw = curves_rows(tasks=("iris",), lrs=(0.001, 0.01), seeds=4)
    tuning = raw[(raw.epoch == 4) & (raw.seed < 2) & (raw.lr == 0.01)].groupby("activation")["val_acc"].mean()
    body = html[html.index('<table class="chosen">'):]
    rows = re.findall(r"<tr><td>(\w+)</td><td>([^<]*)</td><td>([^<]*)</td>", body[:body.index("</table>")])
    assert rows == [(act, "0.01", f"{100 * tuning[act]:.2f}%") for act in ("relu", "gelu")]


def test_report_of_mixed_runs_says_why_it_has_no_accuracy_tables(tmp_path, undrawn):
    from activation_bench.render import report

    rows = pd.concat([curves_rows(tasks=("iris",)), curves_rows(tasks=("normal",)).assign(val_acc=np.nan,
                                                                                        test_acc=np.nan)])
    rows.to_csv(tmp_path / "mixed.csv", index=False)
    doc = report.build([tmp_path / "mixed.csv"], metrics=["final"], draw_shapes=False)
    assert not doc["accuracy_tables"]
    notes = " ".join(str(n) for n in doc["problems"]["notes"])
    assert "no accuracy tables" in notes and "of 12 runs are classification runs" in notes
