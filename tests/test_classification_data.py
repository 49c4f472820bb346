"""Classification data: the bundled class tables, MNIST-1D (generated once per machine, its test
set fixed), the user's CSV with class labels; stratified splits whose sizes never depend on the
seed, labels as int64 class indices, and bad input."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from activation_bench.cli.main import app
from activation_bench.config.compose import compose, compose_many
from activation_bench.data import cache as user_cache
from activation_bench.data import classes, splits, tables
from activation_bench.data import mnist1d as generated
from activation_bench.engine import plan, train
from tests.conftest import assert_refused_by_run_and_sweep

SMALL = ["model.hidden_dim=8", "epochs=2"]
PARTS = ("y", "y_val", "y_test")


def _split_counts(s: splits.Split, k: int) -> list[list[int]]:
    return [np.bincount(getattr(s, p), minlength=k).tolist() for p in PARTS]


@pytest.mark.parametrize(("name", "rows", "dim", "k", "target"), [
    ("digits", 1797, 64, 10, "digit"), ("wine", 178, 13, 3, "cultivar"),
    ("breast_cancer", 569, 30, 2, "diagnosis"), ("iris", 150, 4, 3, "species"),
])
def test_bundled_class_tables_split_stratified_with_seed_independent_sizes(name, rows, dim, k, target):
    cfg0, cfg1 = compose_many([[f"data={name}"], [f"data={name}", "seed=1"]])
    assert cfg0.data.task == "classification" and cfg0.data.target == target
    table = tables.table_for(cfg0.data)
    assert table.x.shape == (rows, dim) and table.classes == tuple(str(i) for i in range(k))
    assert tables.n_classes(cfg0) == k and tables.is_classification(cfg0.data)
    s0, s1 = splits.split_arrays(cfg0), splits.split_arrays(cfg1)
    sizes = tables.split_sizes(rows, 0.2, 0.2)
    assert tables.shapes(cfg0) == tables.shapes(cfg1) == (*sizes, dim)
    assert tuple(len(getattr(s0, p)) for p in PARTS) == sizes
    # stratified: each class's count in each part is fixed by the table and the fractions
    expected = [c.tolist() for c in classes.stratified_counts(np.bincount(table.y), sizes[1], sizes[2])]
    assert _split_counts(s0, k) == _split_counts(s1, k) == expected
    assert not np.array_equal(s0.y_test, s1.y_test) or not np.array_equal(s0.x_test, s1.x_test)
    assert s0.info["task"] == "classification" and s0.info["n_classes"] == k
    assert s0.info["classes"] == list(table.classes)
    assert "target_scale" not in s0.info and s0.info["n_test"] == sizes[2]


def test_split_is_a_partition_with_labels_kept_and_features_standardised_on_training_rows():
    on, off = compose_many([["data=wine", "seed=3"], ["data=wine", "seed=3", "data.standardize=false"]])
    s, raw = splits.split_arrays(on), splits.split_arrays(off)
    table = tables.table_for(on.data)
    rows = {tuple(r): int(label) for r, label in zip(table.x, table.y)}
    seen = [(tuple(x), int(y)) for part in ("", "_val", "_test")
            for x, y in zip(getattr(raw, "x" + part), getattr(raw, "y" + part))]
    assert len(seen) == len(table.y) and all(rows[x] == y for x, y in seen)  # every row once, with its label
    assert sorted(seen) == sorted(rows.items())
    for p in PARTS:  # labels are never scaled
        assert np.array_equal(getattr(s, p), getattr(raw, p)) and getattr(s, p).dtype == np.int64
    np.testing.assert_allclose(s.x.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(s.x.std(0), 1, rtol=1e-12)
    np.testing.assert_allclose(s.x_test, (raw.x_test - raw.x.mean(0)) / raw.x.std(0), rtol=1e-10)
    assert s.info["standardized"] and not raw.info["standardized"]


def test_dataset_labels_are_int64_vectors_and_features_in_the_run_dtype():
    gelu, relu, wide = compose_many([["data=iris", "activation=gelu"], ["data=iris", "activation=relu"],
                                     ["data=iris", "dtype=float64"]])
    a, b, c = train.load_data(gelu), train.load_data(relu), train.load_data(wide)
    for p in PARTS:
        t = getattr(a, p)
        assert t.dtype == torch.int64 and t.ndim == 1 and t.equal(getattr(b, p)) and t.equal(getattr(c, p))
    assert a.x.dtype == torch.float32 and c.x.dtype == torch.float64 and a.x.shape == (90, 4)
    assert plan.data_shapes(gelu) == (90, 30, 30, 4)
    assert tables.n_classes(compose(["data=diabetes"])) == 0 and not tables.is_classification(compose([]).data)


def test_stratified_counts_keep_the_plain_split_sizes_and_never_overdraw_a_class():
    rng = np.random.default_rng(0)
    for _ in range(300):
        counts = rng.integers(1, 40, size=rng.integers(2, 12))
        n = int(counts.sum())
        vf, tf = rng.uniform(0.05, 0.45, size=2)
        n_train, n_val, n_test = tables.split_sizes(n, vf, tf)
        tr, va, te = classes.stratified_counts(counts, n_val, n_test)
        assert (tr.sum(), va.sum(), te.sum()) == (n_train, n_val, n_test)
        assert (tr >= 0).all() and (va >= 0).all() and (te >= 0).all() and np.array_equal(tr + va + te, counts)
    assert classes.allocate(np.array([1, 1, 1]), 2).tolist() == [1, 1, 0]  # ties to the lower index
    assert classes.allocate(np.array([50, 30, 20]), 10).tolist() == [5, 3, 2]
    labels = np.array([0, 1, 0, 2, 1, 0, 2, 1, 0, 0])
    perm = np.array([9, 8, 7, 6, 5, 4, 3, 2, 1, 0])
    train_, val, test = classes.stratified_parts(labels, 3, 3, 3, perm)
    assert sorted([*train_, *val, *test]) == list(range(10)) and len(val) == len(test) == 3
    assert list(train_) == [i for i in perm if i in set(train_)]  # each part keeps the permutation's order


def test_csv_labels_strings_sorted_as_strings_integers_numerically(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "t.csv"
    kinds = {"word": ["b", "a", "C", "a b"], "int": [10, 2, -1, 2], "flag": ["true", "false", "false", "true"]}
    lines = ["a,b,word,int,flag"] + [
        f"{rng.normal()},{rng.normal()},{kinds['word'][i % 4]},{kinds['int'][i % 4]},{kinds['flag'][i % 4]}"
        for i in range(40)]
    path.write_text("\n".join(lines) + "\n")
    want = {"word": ("C", "a", "a b", "b"), "int": ("-1", "2", "10"), "flag": ("False", "True")}
    for target, names in want.items():
        cfg = compose(["data=csv", f"data.path={path}", f"data.target={target}", "data.features=[a,b]",
                       "data.task=classification"])
        tables.validate(cfg)
        table = tables.table_for(cfg.data)
        assert table.classes == names and table.y.dtype == np.int64
        raw = [str(v) for v in kinds[target]] if target != "flag" else ["True", "False", "False", "True"]
        assert [names[i] for i in table.y[:4]] == raw
        assert splits.split_arrays(cfg).info["classes"] == list(names)


def test_csv_missing_labels_dropped_with_dropna(tmp_path):
    path = tmp_path / "t.csv"
    rows = [f"{i},{i % 3 if i not in (4, 7) else ''}" for i in range(30)]
    path.write_text("a,y\n" + "\n".join(rows) + "\n")
    cfg = compose(["data=csv", f"data.path={path}", "data.target=y", "data.task=classification", "data.dropna=true"])
    tables.validate(cfg)
    table = tables.table_for(cfg.data)
    assert table.dropped == 2 and len(table.y) == 28 and table.classes == ("0", "1", "2")  # 1.0 read as 1


def test_classification_csv_run_records_its_classes(runner, tmp_path):
    path = tmp_path / "fruit.csv"
    rng = np.random.default_rng(2)
    names = ["pear", "apple", "fig"]
    path.write_text("w,h,fruit\n" + "\n".join(f"{rng.normal() + i % 3},{rng.normal()},{names[i % 3]}"
                                              for i in range(45)) + "\n")
    result = runner.invoke(app, ["run", "-q", "--runs-dir", str(tmp_path / "runs"), "--name", "r", "data=csv",
                                 f"data.path={path}", "data.target=fruit", "data.task=classification", *SMALL])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())
    assert summary["data"]["classes"] == ["apple", "fig", "pear"] and summary["data"]["n_classes"] == 3
    assert summary["data"]["n_train"] + summary["data"]["n_val"] + summary["data"]["n_test"] == 45


# ---------------------------------------------------------------------------------------------
# MNIST-1D


@pytest.fixture(autouse=True)
def _the_real_generation(monkeypatch):
    """The module's tests generate with data/mnist1d.py's own _make (conftest shares the arrays it
    generates between the other tests' processes)."""
    monkeypatch.setattr(generated, "_make", getattr(generated._make, "__wrapped__", generated._make))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache directory, and no arrays remembered by this process (before or after)."""
    monkeypatch.setenv("ACTBENCH_CACHE_DIR", str(tmp_path / "cache"))
    generated.mnist1d.cache_clear()
    tables.load_table.cache_clear()
    splits._SPLITS.clear()
    yield tmp_path / "cache"
    generated.mnist1d.cache_clear()
    tables.load_table.cache_clear()
    splits._SPLITS.clear()


def test_mnist1d_generated_once_with_its_test_set_fixed_and_globals_untouched(cache):
    """The one test that really generates MNIST-1D (a few seconds)."""
    random.seed(7)
    np.random.seed(7)
    before = random.random(), np.random.random()
    random.seed(7)
    np.random.seed(7)
    cfg0, cfg1 = compose_many([["data=mnist1d"], ["data=mnist1d", "seed=1"]])
    s0, s1 = splits.split_arrays(cfg0), splits.split_arrays(cfg1)
    assert (random.random(), np.random.random()) == before  # the package's reseeding was undone
    assert tables.shapes(cfg0) == tables.shapes(cfg1) == (3200, 800, 1000, 40) and tables.n_classes(cfg0) == 10
    assert np.array_equal(s0.y_test, s1.y_test) and not np.array_equal(s0.x_test, s1.x_test)  # other scaling
    assert not np.array_equal(s0.y_val, s1.y_val)
    g = generated.mnist1d()
    assert np.array_equal(s0.y_test, g.y_test) and len(g.y_test) == 1000 and g.x.shape == (4000, 40)
    # the validation split is drawn from the 4,000 training rows; the test rows are the canonical ones,
    # re-scaled with the training split's statistics
    raw = splits.split_arrays(compose(["data=mnist1d", "data.standardize=false"]))
    assert sorted(map(tuple, np.vstack([raw.x, raw.x_val]))) == sorted(map(tuple, g.x))
    assert np.array_equal(raw.x_test, g.x_test)
    np.testing.assert_allclose(s0.x_test, (g.x_test - raw.x.mean(0)) / raw.x.std(0), rtol=1e-10)
    np.testing.assert_allclose(s0.x.mean(0), 0, atol=1e-12)
    assert _split_counts(s0, 10)[:2] == _split_counts(s1, 10)[:2]  # stratified, the same counts every seed
    info = s0.info
    assert info["cache_file"] == str(generated.cache_file(g.version, generated.ARGS))
    assert Path(info["cache_file"]).parent == cache and info["mnist1d_version"] == g.version
    assert info["n_test"] == 1000 and info["test_set"].startswith("fixed")
    digest = Path(info["cache_file"] + ".sha256").read_text().strip()
    assert digest == g.sha256 == info["cache_sha256"]
    assert digest == generated.arrays_sha256({"x": g.x, "y": g.y, "x_test": g.x_test, "y_test": g.y_test})
    generated.mnist1d.cache_clear()  # a new process: read back from the file
    again = generated.mnist1d()
    assert np.array_equal(again.x, g.x) and again.sha256 == g.sha256
    import mnist1d.data  # the arguments copied into data/mnist1d.py are the package's defaults

    assert {k: v for k, v in mnist1d.data.get_dataset_args(as_dict=True).items() if k != "url"} == generated.ARGS


def _fake_make(calls: list[int]):
    def make(args):
        calls.append(1)
        rng = np.random.default_rng(len(calls))
        return {"x": rng.normal(size=(20, 3)), "y": np.arange(20) % 2, "x_test": rng.normal(size=(6, 3)),
                "y_test": np.arange(6) % 2}
    return make


def test_mnist1d_cache_is_read_checked_and_regenerated_when_corrupt(cache, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(generated, "_make", _fake_make(calls))
    first = generated.mnist1d()
    path = Path(first.cache_file)
    assert calls == [1] and path.is_file() and path.parent == cache and "mnist1d-" in path.name
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]  # written through a temporary file
    assert generated.mnist1d() is first  # once per process
    generated.mnist1d.cache_clear()
    assert np.array_equal(generated.mnist1d().x, first.x) and calls == [1]  # read from the file
    for damage in (lambda: path.write_bytes(path.read_bytes()[:100]),  # a truncated file
                   lambda: path.with_name(path.name + ".sha256").write_text("0" * 64),  # a mismatching digest
                   lambda: path.with_name(path.name + ".sha256").unlink()):  # no digest
        damage()
        generated.mnist1d.cache_clear()
        fresh = generated.mnist1d()
        assert fresh.sha256 == generated.arrays_sha256({k: getattr(fresh, k) for k in generated.ARRAYS})
        assert Path(fresh.cache_file + ".sha256").read_text().strip() == fresh.sha256
    assert len(calls) == 4


def test_mnist1d_cache_file_keyed_by_version_and_arguments_and_unwritable_dir(cache, monkeypatch, tmp_path):
    args = {"num_samples": 5000, "seed": 42}
    a = generated.cache_file("0.0.2", args)
    assert a != generated.cache_file("0.0.3", args) and a != generated.cache_file("0.0.2", {**args, "seed": 1})
    assert a == generated.cache_file("0.0.2", dict(reversed(args.items())))
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ACTBENCH_CACHE_DIR", str(blocker / "sub"))  # cannot be created: generated, not cached
    monkeypatch.setattr(generated, "_make", _fake_make([]))
    assert generated.mnist1d().cache_file is None


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("ACTBENCH_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert user_cache.cache_dir() == tmp_path / "a"
    monkeypatch.delenv("ACTBENCH_CACHE_DIR")
    assert user_cache.cache_dir() == tmp_path / "x" / "activation-bench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert user_cache.cache_dir() == tmp_path / "h" / ".cache" / "activation-bench"


def test_make_restores_the_global_generators(monkeypatch):
    import mnist1d.data

    def reseeding(args):
        random.seed(args.seed)
        np.random.seed(args.seed)
        return {"x": np.zeros((2, 1)), "y": np.zeros(2), "x_test": np.zeros((1, 1)), "y_test": np.zeros(1)}

    monkeypatch.setattr(mnist1d.data, "make_dataset", reseeding)
    random.seed(3)
    np.random.seed(3)
    want = random.random(), np.random.random()
    random.seed(3)
    np.random.seed(3)
    out = generated._make({"seed": 42})
    assert (random.random(), np.random.random()) == want and out["y"].dtype == np.int64


def run_python(code: str, env: dict[str, str]) -> list[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=env).stdout.split()


def test_importing_the_data_layer_imports_neither_mnist1d_nor_matplotlib(cache, monkeypatch):
    """Nor does reading MNIST-1D from the cache (only generating it does; here a small stand-in is cached)."""
    monkeypatch.setattr(generated, "_make", _fake_make([]))
    assert generated.mnist1d().cache_file is not None
    code = ("import sys; import activation_bench.data.tables, activation_bench.data.mnist1d as g; "
            "print(any(m.split('.')[0] in ('mnist1d', 'matplotlib') for m in sys.modules)); "
            "print(g.mnist1d().x.shape); print(any(m.split('.')[0] in ('mnist1d', 'matplotlib') for m in sys.modules))")
    env = {**os.environ, "ACTBENCH_CACHE_DIR": str(cache)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.splitlines() == ["False", "(20, 3)", "False"]


# ---------------------------------------------------------------------------------------------
# bad input


def _bad_cases(tmp: Path) -> list[tuple[list[str], str]]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=40)

    def table(name: str, labels: list[str]) -> str:
        path = tmp / name
        path.write_text("a,y\n" + "\n".join(f"{x[i]},{v}" for i, v in enumerate(labels)) + "\n")
        return f"data.path={path}"

    floats = table("floats.csv", [f"{v:.6f}" for v in rng.normal(size=40)])
    many = table("many.csv", [str(i) for i in range(40)])
    many_rows = tmp / "many_rows.csv"
    many_rows.write_text("a,y\n" + "\n".join(f"{i},id{i}" for i in range(300)) + "\n")
    one = table("one.csv", ["x"] * 40)
    gap = table("gap.csv", ["a", "b"] * 5 + ["a", ""] + ["b", "a"] * 14)
    lonely = table("lonely.csv", ["a"] * 9 + ["b"])
    strings = table("strings.csv", ["a", "b"] * 20)
    cls = ["data=csv", "data.target=y", "data.task=classification"]
    return [
        ([*cls, floats], "target 'y' is continuous (40 distinct values, not all integers)"),
        (["data=star98", "data.task=classification"], "'math_above' is continuous (295 distinct values"),
        (["data=diabetes", "data.task=classification"], "has 214 distinct values (at most 100 classes)"),
        ([*cls, f"data.path={many_rows}"], "has 300 distinct values (at most 100 classes); is it an identifier?"),
        (["data=randhie", "data.task=classification"], "data=randhie is a regression table (target 'mdvis', 59"),
        ([*cls, one], "target 'y' has only one class ('x'); classification needs at least two"),
        ([*cls, gap], "1 row without a label in target column 'y', first row 11 (line 13 of the file); data.dropna"),
        ([*cls, lonely, "data.val_fraction=0.45", "data.test_fraction=0.45"],
         "class 'b' has 1 row, none left for the training split at val_fraction=0.45"),
        (["data=csv", "data.target=y", strings], "the target 'y' is not numeric; for class labels use data.task"),
        (["data=digits", "data.task=regression"], "data=digits is a classification source"),
        (["data=iris", "data.task=ordinal"], "unknown data.task 'ordinal'; valid: regression, classification"),
        (["data=mnist1d", "data.test_fraction=0.2"], "data.test_fraction does not apply to data=mnist1d"),
        (["data=function", "data.task=classification"], "data.task=classification applies to digits, wine"),
        ([*cls, many], "class '"),  # 40 classes of one row each: some get no training row
    ]


@pytest.fixture(scope="module")
def bad_cases(tmp_path_factory) -> list[tuple[list[str], str]]:
    return _bad_cases(tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize("case", range(14))
def test_bad_classification_data_exits_2_with_one_line_and_writes_nothing(runner, bad_cases, case, tmp_path):
    overrides, message = bad_cases[case]
    assert_refused_by_run_and_sweep(runner, tmp_path / "runs", [*overrides, *SMALL], message)
