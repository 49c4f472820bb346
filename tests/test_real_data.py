"""Real tables, the user's CSV and function tasks: splits, standardisation, caching, the engine's
stacked = alone contract with minibatches, written results, and bad input."""

from __future__ import annotations

import csv
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from activation_bench.cli.main import app
from activation_bench.config.compose import compose, compose_many
from activation_bench.config.grid import expand
from activation_bench.config.hashing import config_hash
from activation_bench.data import functions, splits, tables
from activation_bench.engine import plan, train
from tests.conftest import assert_refused_by_run_and_sweep
from tests.engine_helpers import stacked_and_alone

SMALL = ["model.hidden_dim=8", "epochs=3"]


def _write_table(path: Path, rows: int = 40, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=rows), rng.uniform(size=rows)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["a", "b", "label", "y"])
        for i in range(rows):
            w.writerow([a[i], b[i], f"r{i}", 2 * a[i] - b[i]])
    return path


@pytest.mark.parametrize(("name", "rows", "dim", "target"), [
    ("diabetes", 442, 10, "progression"), ("star98", 303, 20, "math_above"), ("randhie", 20190, 9, "mdvis"),
])
def test_bundled_tables(name, rows, dim, target):
    cfg = compose([f"data={name}", *SMALL])
    table = tables.table_for(cfg.data)
    assert table.x.shape == (rows, dim) and table.y.shape == (rows,) and table.target == target
    assert np.isfinite(table.x).all() and np.isfinite(table.y).all() and table.y.std() > 0
    n_val, n_test = round(rows * 0.2), round(rows * 0.2)
    assert plan.data_shapes(cfg) == (rows - n_val - n_test, n_val, n_test, dim)
    if name == "star98":  # the share above the median; its two counts are not features (they would leak it)
        assert 0 < table.y.min() and table.y.max() < 1
        assert not {"NABOVE", "NBELOW"} & set(table.features)


def test_split_is_paired_across_activations_and_differs_between_seeds():
    gelu, relu, other = compose_many([["data=diabetes", "activation=gelu"], ["data=diabetes", "activation=relu"],
                                             ["data=diabetes", "seed=1"]])
    a, b, c = train.load_data(gelu), train.load_data(relu), train.load_data(other)
    for k in ("x", "y", "x_val", "y_val", "x_test", "y_test"):
        assert getattr(a, k).equal(getattr(b, k))
    assert not a.y_test.equal(c.y_test)
    # the three parts are a partition of the table's rows
    s = splits.split_arrays(gelu)
    table = tables.table_for(gelu.data)
    raw_y = np.concatenate([s.y, s.y_val, s.y_test]) * s.info["target_scale"] + s.info["target_mean"]
    np.testing.assert_allclose(np.sort(raw_y), np.sort(table.y), rtol=1e-12)
    assert (len(s.y), len(s.y_val), len(s.y_test)) == (266, 88, 88)


def test_standardisation_uses_the_training_split_only():
    on, off = compose_many([["data=diabetes"], ["data=diabetes", "data.standardize=false"]])
    s, raw = splits.split_arrays(on), splits.split_arrays(off)
    np.testing.assert_allclose(s.x.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(s.x.std(0), 1, rtol=1e-12)
    np.testing.assert_allclose(s.y.mean(), 0, atol=1e-12)
    mu, sd = raw.x.mean(0), raw.x.std(0)  # statistics of the training rows, applied to the held-out ones
    np.testing.assert_allclose(s.x_test, (raw.x_test - mu) / sd, rtol=1e-10)
    np.testing.assert_allclose(s.y_val, (raw.y_val - raw.y.mean()) / raw.y.std(), rtol=1e-10)
    assert abs(s.x_test.mean()) > 1e-6  # held-out rows are not re-centred on themselves
    assert raw.info["target_scale"] == 1.0 and s.info["target_scale"] == pytest.approx(raw.y.std())
    from sklearn.preprocessing import StandardScaler  # the reference

    fx, fy = StandardScaler().fit(raw.x), StandardScaler().fit(raw.y[:, None])
    np.testing.assert_allclose(s.x_val, fx.transform(raw.x_val), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s.y_test, fy.transform(raw.y_test[:, None])[:, 0], rtol=1e-12, atol=1e-14)
    const = splits.standardize(np.ones((4, 1)), np.arange(4.0), np.ones((1, 1)), np.zeros(1), np.full((1, 1), 2.0),
                                 np.zeros(1))
    assert np.array_equal(const.x_test, [[1.0]])  # a constant column is centred, not scaled


def test_a_table_is_read_once_and_split_once_per_seed(monkeypatch):
    calls = {"read": 0, "split": 0}
    real_builtin, real_split = tables._builtin, splits._split

    def counting_builtin(name):
        calls["read"] += 1
        return real_builtin(name)

    def counting_split(cfg):
        calls["split"] += 1
        return real_split(cfg)

    tables.load_table.cache_clear()
    splits._SPLITS.clear()
    monkeypatch.setattr(tables, "_builtin", counting_builtin)
    monkeypatch.setattr(splits, "_split", counting_split)
    grid = expand(["activation=gelu,relu,tanh", "seed=0,1", "data=star98", "epochs=2", "model.hidden_dim=4"])
    cfgs = compose_many(grid.members)
    for stack in plan.plan_stacks(cfgs):
        train.train([cfgs[i] for i in stack])
    assert calls == {"read": 1, "split": 2}
    tables.load_table.cache_clear()




def test_stacked_members_equal_single_runs_on_real_data_with_shuffled_minibatches():
    """The engine's contract on real tasks: minibatches of 64 (a partial last one), reshuffled each
    epoch, different seeds (so different splits) and activations in one stack; train, validation
    and test losses bit for bit."""
    out = stacked_and_alone(["activation=gelu,relu,prelu", "data=diabetes,function", "seed=0,1", "epochs=3",
                              "batch_size=64", "shuffle=true", "lr=0.01"])
    for labels, alone, stacked in out:
        assert alone.train_loss == stacked.train_loss, labels
        assert alone.val_loss == stacked.val_loss and alone.test_loss == stacked.test_loss, labels
        assert len(alone.test_loss) == 3 and all(math.isfinite(v) for v in alone.test_loss)


@pytest.mark.parametrize("fn", sorted(functions.FUNCTIONS))
def test_function_tasks_are_finite_and_seeded(fn):
    from activation_bench.data.synthetic import generator

    f = functions.get(fn)
    x, y = functions.sample(fn, 500, generator(0, "data"))
    assert x.shape == (500, f.dim) and y.shape == (500,)
    assert x.min() >= -1 and x.max() <= 1 and np.isfinite(y).all() and y.std() > 0.01
    x2, y2 = functions.sample(fn, 500, generator(0, "data"))
    assert np.array_equal(y, y2)


def test_function_default_and_values():
    cfg = compose(["data=function"])
    assert cfg.data.fn == "exp_sin"
    assert plan.data_shapes(cfg) == (1000, 500, 1000, 2)
    x = np.array([[0.5, 0.5], [-0.25, 1.0]])
    np.testing.assert_allclose(functions.get("exp_sin").fn(x), np.exp(np.sin(np.pi * x[:, 0]) + x[:, 1] ** 2))
    from scipy import special

    np.testing.assert_allclose(functions.get("bessel_j0").fn(np.array([[0.1]])), special.j0(2.0))


def test_csv_relative_path_is_recorded_resolved_with_sha256(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    table = _write_table(tmp_path / "mine.csv")
    result = runner.invoke(app, ["run", "-q", "--runs-dir", "out", "--name", "r", "data=csv", "data.path=mine.csv",
                                 "data.target=y", "data.features=[a,b]", *SMALL])
    assert result.exit_code == 0, result.output
    saved = yaml.safe_load((tmp_path / "out" / "r" / "config.yaml").read_text())
    assert saved["data"]["path"] == str(table.resolve())
    assert saved["data"]["sha256"] == hashlib.sha256(table.read_bytes()).hexdigest()
    assert saved["data"]["features"] == ["a", "b"]
    summary = json.loads((tmp_path / "out" / "r" / "summary.json").read_text())
    assert summary["data"]["n_train"] + summary["data"]["n_val"] + summary["data"]["n_test"] == 40
    scale = summary["data"]["target_scale"]
    assert summary["final_test_rmse"] == pytest.approx(math.sqrt(summary["final_test_loss"]) * scale)
    header = (tmp_path / "out" / "r" / "losses.csv").read_text().splitlines()[0]
    assert header == "epoch,train_loss,val_loss,test_loss"
    # a re-run of the saved config refuses a file that has changed since
    _write_table(table, seed=1)
    again = runner.invoke(app, ["run", "-q", "--runs-dir", "out", "data=csv", "data.path=mine.csv", "data.target=y",
                                "data.features=[a,b]", f"data.sha256={saved['data']['sha256']}", *SMALL])
    assert again.exit_code == 2 and "changed since" in again.stderr


def test_dropna_drops_rows_with_missing_values(tmp_path):
    path = _write_table(tmp_path / "t.csv")
    lines = path.read_text().splitlines()
    lines[3] = ",0.5,x,1.0"
    lines[7] = "inf,0.5,x,1.0"
    path.write_text("\n".join(lines) + "\n")
    cfg = compose(["data=csv", f"data.path={path}", "data.target=y", "data.features=[a,b]", "data.dropna=true"])
    table = tables.table_for(cfg.data)
    assert table.x.shape == (38, 2) and table.dropped == 2


def test_sweep_results_carry_val_and_test_loss(runner, runs_dir):
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", "--name", "s", "activation=gelu,relu",
                                 "seed=0,1", "data=star98", "batch_size=64", "shuffle=true", *SMALL])
    assert result.exit_code == 0, result.output
    with open(runs_dir / "s" / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[-3:] == ["train_loss", "val_loss", "test_loss"] and len(rows) == 4 * 3
    own = (runs_dir / "s" / rows[0]["run"] / "losses.csv").read_text().splitlines()[1]
    assert own == ",".join([rows[0]["epoch"], rows[0]["train_loss"], rows[0]["val_loss"], rows[0]["test_loss"]])
    out = runner.invoke(app, ["compare", str(runs_dir / "s"), "--metric", "early_stop", "--format", "csv"])
    assert out.exit_code == 0, out.output
    assert "early_stop" in out.stdout


def _bad_cases(tmp: Path) -> list[tuple[list[str], str]]:
    good = _write_table(tmp / "good.csv")
    (tmp / "image.csv").write_bytes(bytes(range(256)) * 4)
    (tmp / "one.csv").write_text("y\n1\n2\n3\n")
    (tmp / "empty.csv").write_text("")
    nan = _write_table(tmp / "nan.csv")
    lines = nan.read_text().splitlines()
    lines[5], lines[9] = "1.0,,r,2.0", "1.0,inf,r,2.0"
    nan.write_text("\n".join(lines) + "\n")
    (tmp / "tiny.csv").write_text("a,y\n1,2\n3,4\n5,6\n")
    unreadable = tmp / "secret.csv"
    unreadable.mkdir()
    csv_ = ["data=csv", "data.target=y"]
    return [
        ([*csv_, f"data.path={tmp / 'nosuch.csv'}"], "no such file"),
        ([*csv_, f"data.path={unreadable}"], "not a file"),
        ([*csv_, f"data.path={tmp / 'image.csv'}"], "not a table"),
        ([*csv_, f"data.path={tmp / 'one.csv'}"], "not a table: 1 column(s) (y)"),
        ([*csv_, f"data.path={tmp / 'empty.csv'}"], "empty file, not a table"),
        (["data=csv", f"data.path={good}", "data.target=price"], "no target column 'price' (columns: a, b, label, y)"),
        ([*csv_, f"data.path={good}"], "non-numeric column label"),
        ([*csv_, f"data.path={good}", "data.features=[a,zz]"], "no feature column zz"),
        ([*csv_, f"data.path={nan}", "data.features=[a,b]"],
         "2 rows with missing or infinite values, first row 4 (line 6 of the file), column b; data.dropna=true"),
        ([*csv_, f"data.path={tmp / 'tiny.csv'}"], "3 rows are too few for val_fraction=0.2 and test_fraction=0.2"),
        (["data=csv", f"data.path={good}"], "data=csv needs data.target=COLUMN"),
        (["data=csv"], "data=csv needs data.path=FILE"),
        (["data=diabetes", "data.val_fraction=0"], "data.val_fraction must be between 0 and 1"),
        (["data=diabetes", "data.test_fraction=1.5"], "data.test_fraction must be between 0 and 1"),
        (["data=diabetes", "data.val_fraction=0.5", "data.test_fraction=0.5"], "must be below 1"),
        (["data=function", "data.fn=nosuch"], "unknown data.fn 'nosuch'; valid: exp_sin, xy, bessel_j0"),
        (["data=diabetes", "batch_size=300"], "batch_size must be between 1 and the training split's 266 rows"),
        (["data=diabetes", "data.n_samples=5"], "data.n_samples does not apply to data=diabetes"),
        (["data=normal", "data.val_fraction=0.2"], "data.val_fraction applies to real and function data"),
    ]


@pytest.fixture(scope="module")
def bad_cases(tmp_path_factory) -> list[tuple[list[str], str]]:
    return _bad_cases(tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize("case", range(19))
def test_bad_real_data_input_exits_2_with_one_line_and_writes_nothing(runner, bad_cases, case, tmp_path):
    overrides, message = bad_cases[case]
    assert_refused_by_run_and_sweep(runner, tmp_path / "runs", [*overrides, *SMALL], message)


def test_real_data_keys_enter_the_hash_when_set():
    """(Synthetic configs hash as before the real-data keys existed: tests/test_config.py.)"""
    cfg = compose(["data=uniform", "seed=3"])
    assert all(k in cfg.data and cfg.data[k] is None for k in tables.REAL_KEYS)
    real = compose(["data=diabetes"])
    assert config_hash(real) != config_hash(compose(["data=diabetes", "data.test_fraction=0.3"]))
