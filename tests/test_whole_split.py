"""A text's test split judged whole (data.eval_windows null): each member's best-validation weights kept,
the split's every window evaluated at that epoch and the last, the per-window losses written and the
comparison's interval over those windows (analysis/windows.py)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from activation_bench.cli.main import app
from activation_bench.engine.whole_split import BestWeights

TINY = ["model=transformer", "model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.block_size=8",
        "batch_size=4", "epochs=4", "data.steps=3", "data.val_windows=4", "data=python_docs"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    from typer.testing import CliRunner

    root = tmp_path_factory.mktemp("whole")
    out = CliRunner().invoke(app, ["sweep", "--runs-dir", str(root), "-q", *TINY, "--name", "s",
                                   "activation=gelu,relu", "seed=range(3)", "lr=3e-2"])
    assert out.exit_code == 0, out.output
    return root / "s"


def _column(path: Path, name: str) -> list[float]:
    with path.open() as fh:
        return [float(row[name]) for row in csv.DictReader(fh)]


def test_the_judged_test_loss_is_the_mean_over_every_window_at_the_chosen_epochs(sweep):
    for run in sorted(p for p in sweep.iterdir() if p.is_dir()):
        s = json.loads((run / "summary.json").read_text())
        val, test = _column(run / "losses.csv", "val_loss"), _column(run / "losses.csv", "test_loss")
        best = min(range(len(val)), key=lambda i: (val[i], i))  # the earliest lowest validation loss
        assert s["early_stop_epoch"] == best + 1
        judged = {i for i, v in enumerate(test) if not math.isnan(v)}
        assert judged == {best, len(test) - 1}  # evaluated at those two epochs only
        windows = run / "test_windows.csv"
        assert len(_column(windows, "final_loss")) == s["data"]["test_scored"] // 8 == (s["data"]["test_characters"]
                                                                                        - 1) // 8
        for col, epoch in (("final_loss", len(test) - 1), ("early_stop_loss", best)):
            assert test[epoch] == pytest.approx(np.mean(_column(windows, col)), rel=1e-6)
        assert s["early_stop_test_loss"] == test[best] and s["final_test_loss"] == test[-1]


def test_compare_gives_an_interval_over_the_windows_beside_the_seed_interval(runner, sweep):
    args = ["compare", str(sweep), "--metric", "early_stop", "--format", "json"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    (gelu,) = [r for r in doc["rows"] if r["activation"] == "gelu"]
    assert gelu["window_ratio_lo"] <= gelu["ratio"] <= gelu["window_ratio_hi"]
    assert 0 < gelu["window_ratio_hi"] - gelu["window_ratio_lo"] < 0.2
    assert any("2,000 bootstrap resamples" in n and "windows of 8 characters" in n for n in doc["methods"])
    again = runner.invoke(app, args)
    assert again.stdout == out.stdout  # one fixed draw: the same table every time
    md = runner.invoke(app, ["compare", str(sweep), "--metric", "final", "--loss", "test_loss",
                             "--format", "markdown"])
    assert md.exit_code == 0 and "95% CI (windows)" in md.stdout, md.output


def test_metrics_and_curves_that_need_every_epoch_are_refused(runner, sweep, tmp_path, monkeypatch):
    from tests.test_report import leave_figures_undrawn

    leave_figures_undrawn(monkeypatch)  # the report is built, its figures not drawn (test_report.py draws)
    out = runner.invoke(app, ["compare", str(sweep), "--metric", "best", "--loss", "test_loss"])
    assert out.exit_code == 2 and "use early_stop or final" in out.stderr
    out = runner.invoke(app, ["plot", str(sweep), "--loss", "test_loss", "-o", str(tmp_path / "p.png")])
    assert out.exit_code == 2 and "test_loss has no curve" in out.stderr
    out = runner.invoke(app, ["report", str(sweep), "-o", str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output


def test_sampled_runs_have_no_window_interval(runner, tmp_path):
    out = runner.invoke(app, ["sweep", "--runs-dir", str(tmp_path), "-q", *TINY, "data.eval_windows=4", "--name",
                              "s", "activation=gelu,relu", "seed=range(2)", "epochs=2"])
    assert out.exit_code == 0, out.output
    assert not list(tmp_path.rglob("test_windows.csv"))
    out = runner.invoke(app, ["compare", str(tmp_path / "s"), "--metric", "early_stop", "--format", "markdown"])
    assert out.exit_code == 0 and "windows" not in out.stdout, out.output


def test_best_weights_keep_each_members_earliest_lowest_validation():
    from activation_bench.engine.models.base import MemberLayers

    class Stacked(MemberLayers):  # one stacked parameter [members, ...], no activation slices
        def __init__(self) -> None:
            torch.nn.Module.__init__(self)
            self.slices, self.norms = [], None
            self.weight = torch.nn.Parameter(torch.zeros(3, 2))

    model = Stacked()
    best = BestWeights(model, 3, torch.float32, "cpu")
    for epoch, val in enumerate(([3.0, 2.0, float("nan")], [1.0, 2.0, 5.0], [1.0, 3.0, 4.0])):
        with torch.no_grad():
            model.weight.fill_(epoch)
        best.update(model, torch.tensor(val), epoch)
    assert best.epoch.tolist() == [1, 0, 2] and best.val.tolist() == [1.0, 2.0, 4.0]
    assert best.p0[:, 0].tolist() == [1.0, 0.0, 2.0]
    best.swap(model)
    assert model.weight[:, 0].tolist() == [1.0, 0.0, 2.0] and best.p0[:, 0].tolist() == [2.0, 2.0, 2.0]


def _sources(tmp_path: Path) -> dict[str, list[str]]:
    from tests.test_images import write_mnist

    write_mnist(tmp_path)
    return {"table": ["data=diabetes"], "class table": ["data=digits"], "function": ["data=function"],
            "image": ["data=mnist", f"data.root={tmp_path}", "model=cnn"], "synthetic": ["data.n_val=30"]}


@pytest.mark.parametrize("kind", ["table", "class table", "function", "image", "synthetic"])
def test_every_table_image_and_function_source_evaluates_its_whole_splits(tmp_path, monkeypatch, kind):
    """docs/reproducibility.md: only the text sources sample a held-out split; every other source's
    validation and test losses are taken on every row of the split, after every epoch."""
    from activation_bench.config.compose import compose
    from activation_bench.data.shapes import data_shapes
    from activation_bench.engine import train as engine

    cfg = compose([*_sources(tmp_path)[kind], "epochs=2"])
    data = engine.load_data(cfg)
    n_train, n_val, n_test, _ = data_shapes(cfg)
    rows = [0 if t is None else len(t) for t in (data.x_val, data.x_test)]
    assert rows == [n_val, n_test] and n_val > 0
    if data.info and "rows" in data.info:  # the split sizes add up to every row of the source
        assert (data.info["n_val"], data.info["n_test"]) == (n_val, n_test)
        assert data.info["n_train"] + n_val + n_test == data.info["rows"]
    seen: list[int] = []
    predict = engine._Stack.predict
    monkeypatch.setattr(engine._Stack, "predict", lambda self, x: (seen.append(x.shape[1]), predict(self, x))[1])
    (result,) = engine.train([cfg])
    assert seen.count(n_val) >= 2 and (n_test == 0 or seen.count(n_test) >= 2)  # every row, every epoch
    assert len(result.val_loss) == 2 and not any(math.isnan(v) for v in result.val_loss)


def test_pair_by_seed_pairs_groups_trained_at_their_own_recipes(runner, sweep, tmp_path):
    other = tmp_path / "o"
    out = runner.invoke(app, ["sweep", "--runs-dir", str(other), "-q", *TINY, "--name", "s", "activation=silu",
                              "seed=range(3)", "lr=1e-2"])
    assert out.exit_code == 0, out.output
    args = ["compare", str(sweep), str(other / "s"), "--metric", "early_stop", "--by", "activation", "--format", "json"]
    rows = {r["activation"]: r for r in json.loads(runner.invoke(app, args).stdout)["rows"]}
    assert rows["silu"]["n_pairs"] == 0  # paired on lr too by default: silu trained at another rate
    doc = json.loads(runner.invoke(app, [*args, "--pair-by", "seed"]).stdout)
    rows = {r["activation"]: r for r in doc["rows"]}
    assert rows["silu"]["n_pairs"] == 3 and rows["silu"]["window_ratio_lo"] <= rows["silu"]["window_ratio_hi"]
    out = runner.invoke(app, [*args, "--pair-by", "seed,colour"])
    assert out.exit_code == 2 and "--pair-by colour: no such config column" in out.stderr


def test_every_shipped_text_study_pins_how_its_held_out_splits_are_evaluated():
    """A published study keeps its tables: each text sweep names data.eval_windows (N: sampled, as the
    studies before the whole-split test; null: the whole test split), so a new default changes none."""
    import yaml

    root = Path(__file__).resolve().parents[1] / "docs" / "studies"
    seen = 0
    for path in sorted(root.rglob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for name, sweep in (doc.get("sweeps") or {}).items():
            words = [str(w) for w in [*sweep.get("overrides", []), *sweep.get("grid", [])]]
            if any(w in ("data=shakespeare", "data=python_docs", "data=text") for w in words):
                seen += 1
                assert any(w.startswith("data.eval_windows=") for w in words), f"{path.name}: {name}"
    assert seen >= 10


def test_the_early_stop_number_is_the_run_stopped_at_that_epoch(runner, sweep, tmp_path):
    """The kept weights are the chosen epoch's: the same run trained for that many epochs (a constant
    learning rate: nothing else depends on the epoch count) judges the same windows bit for bit."""
    runs = [(json.loads((r / "summary.json").read_text()), r) for r in sorted(sweep.iterdir()) if r.is_dir()]
    s, run = next((s, r) for s, r in runs if s["early_stop_epoch"] < s["epochs"])
    act = (run / "config.yaml").read_text().split("activation:\n  name: ")[1].split()[0]
    out = runner.invoke(app, ["run", "--runs-dir", str(tmp_path), "-q", *TINY, f"activation={act}", "lr=3e-2",
                              f"seed={s['seed']}", f"epochs={s['early_stop_epoch']}"])
    assert out.exit_code == 0, out.output
    short = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert short["final_test_loss"] == s["early_stop_test_loss"] != s["final_test_loss"]
    assert _column(next(tmp_path.rglob("test_windows.csv")), "final_loss") == _column(run / "test_windows.csv",
                                                                                         "early_stop_loss")


def test_a_users_module_with_batch_norm_is_judged_at_its_best_epochs_weights_and_statistics(runner, tmp_path):
    """model=module on text, judged whole: the kept state holds batch norm's running statistics with the
    parameters (evaluation reads both), so the early-stop number is the run stopped at that epoch's,
    bit for bit, in a stack of two seeds as alone."""
    (tmp_path / "tiny.txt").write_text("the quick brown fox jumps over the lazy dog. " * 60, encoding="utf-8")
    base = ["model=module", "model.target=tests.module_models:NormLM", "model.act_arg=act_layer", "data=text",
            f"data.path={tmp_path / 'tiny.txt'}", "data.block_size=8", "data.steps=3", "data.val_windows=4",
            "batch_size=4", "+model.kwargs.vocab=28", "activation=gelu", "lr=0.1", "epochs=6"]
    out = runner.invoke(app, ["sweep", "--runs-dir", str(tmp_path / "runs"), "-q", *base, "seed=0,1", "--name", "s"])
    assert out.exit_code == 0, out.output
    runs = [json.loads(p.read_text()) for p in sorted((tmp_path / "runs" / "s").glob("*/summary.json"))]
    table = runner.invoke(app, ["compare", str(tmp_path / "runs" / "s"), "--metric", "early_stop", "--format", "json"])
    assert table.exit_code == 0, table.output  # the window length is data.block_size here (model=module)
    assert any("windows of 8 characters" in n for n in json.loads(table.stdout)["methods"]), table.stdout
    s = next(s for s in runs if s["early_stop_epoch"] < s["epochs"])  # lr 0.1: some epoch after the best
    out = runner.invoke(app, ["run", "--runs-dir", str(tmp_path / "short"), "-q", *base, f"seed={s['seed']}",
                              f"epochs={s['early_stop_epoch']}"])
    assert out.exit_code == 0, out.output
    short = json.loads(next((tmp_path / "short").rglob("summary.json")).read_text())
    assert short["final_test_loss"] == s["early_stop_test_loss"]


def test_the_window_length_is_read_from_model_or_data_block_size():
    import pandas as pd

    from activation_bench.analysis.loading import Loaded
    from activation_bench.analysis.windows import block_size

    def loaded(**cols: list) -> Loaded:
        return Loaded(pd.DataFrame(cols), list(cols), np.zeros(0), {}, np.zeros(1, dtype=np.int64))

    assert block_size(loaded(**{"model.block_size": ["64", "64"]}), [0, 1]) == 64
    assert block_size(loaded(**{"data.block_size": ["8", "8"]}), [0, 1]) == 8  # model=module's text runs
    both = loaded(**{"model.block_size": ["32", None], "data.block_size": [None, "32"]})
    assert block_size(both, [0, 1]) == 32  # a transformer's and a module's runs of one window length
    assert block_size(loaded(**{"model.block_size": ["32", None], "data.block_size": [None, "8"]}), [0, 1]) is None
    assert block_size(loaded(seed=["0"]), [0]) is None
