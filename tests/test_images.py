"""Image data from the standard files (data=mnist, fashion_mnist, cifar10): small files written in
the exact formats (IDX, plain and .gz; CIFAR-10's pickled batches) and read back; the fixed test
set, each seed's stratified validation split, per-channel standardisation, data.n_train, and
missing, truncated or corrupt files refused with one line, exit 2, nothing written."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import yaml

from activation_bench.cli.main import app
from activation_bench.config.compose import compose, compose_many
from activation_bench.data import classes, images, shapes, splits, tables
from activation_bench.data.keys import used_keys
from activation_bench.errors import UsageError
from tests.conftest import assert_refused_by_run_and_sweep, files_under

N_TRAIN, N_TEST = 30, 20  # 3 and 2 images per class
FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}


def _idx_bytes(a: np.ndarray, magic: int | None = None) -> bytes:
    head = (magic if magic is not None else 0x800 + a.ndim).to_bytes(4, "big")
    return head + b"".join(int(d).to_bytes(4, "big") for d in a.shape) + a.astype(np.uint8).tobytes()


def _images(labels: np.ndarray, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Noisy images whose brightness pattern gives the class away (so a network can learn them)."""
    size = int(np.prod(shape))
    template = (np.arange(size) * 7919 % 10)  # each pixel bright for one class
    bright = (template[None, :] == labels[:, None]) * 150
    return (bright + rng.integers(0, 100, (len(labels), size))).astype(np.uint8).reshape(len(labels), *shape)


def write_mnist(root: Path, name: str = "mnist", gz: bool = False, seed: int = 0,
                n_train: int | None = None) -> dict[str, np.ndarray]:
    """The four IDX files of a tiny MNIST (or Fashion-MNIST) under root, as torchvision lays them out."""
    rng = np.random.default_rng(seed)
    folder = root / FOLDERS[name] / "raw"
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for prefix, part, n in (("train", "train", n_train or N_TRAIN), ("t10k", "test", N_TEST)):
        y = np.arange(n) % 10
        x = _images(y, (28, 28), rng)
        for kind, a in (("images-idx3", x), ("labels-idx1", y)):
            path = folder / f"{prefix}-{kind}-ubyte"
            raw = _idx_bytes(a)
            (path.with_name(path.name + ".gz").write_bytes(gzip.compress(raw)) if gz else path.write_bytes(raw))
        out[f"x_{part}"], out[f"y_{part}"] = x, y
    return out


def write_cifar(root: Path, per_batch: int = 6, n_test: int = 10, protocol: int = 2) -> dict[str, np.ndarray]:
    """The six pickled batches of a tiny CIFAR-10 under root/cifar-10-batches-py."""
    rng = np.random.default_rng(1)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for i, name in enumerate([*(f"data_batch_{b}" for b in range(1, 6)), "test_batch"]):
        n = per_batch if i < 5 else n_test
        y = (np.arange(n) + i) % 10
        x = _images(y, (3072,), rng)
        x[:, :1024] //= 2  # the R plane darker than G and B: each channel its own statistics
        batch = {b"batch_label": name.encode(), b"labels": [int(v) for v in y], b"data": x,
                 b"filenames": [b"f%d.png" % j for j in range(n)]}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=protocol))
        xs.append(x)
        ys.append(y)
    return {"x_train": np.concatenate(xs[:5]), "y_train": np.concatenate(ys[:5]), "x_test": xs[5], "y_test": ys[5]}


def _py2_batch(x: np.ndarray, labels: np.ndarray) -> bytes:
    """A batch pickled as CIFAR-10's own files are: Python 2's cPickle, protocol 2, str as bytes, the
    array rebuilt through numpy.core.multiarray._reconstruct (written opcode by opcode)."""
    def s(b: bytes) -> bytes:
        return (b"U" + bytes([len(b)]) if len(b) < 256 else b"T" + len(b).to_bytes(4, "little")) + b

    def k(i: int) -> bytes:
        return b"M" + int(i).to_bytes(2, "little")

    array = (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + s(b"b") + b"\x87R("
             + k(1) + k(x.shape[0]) + k(x.shape[1]) + b"\x86cnumpy\ndtype\n" + s(b"u1") + b"K\x00K\x01\x87R(K\x03"
             + s(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89" + s(x.tobytes()) + b"tb")
    items = b"".join(k(v) for v in labels)
    return b"\x80\x02}(" + s(b"data") + array + s(b"labels") + b"](" + items + b"eu."


def _counts(y: np.ndarray) -> list[int]:
    return np.bincount(y, minlength=10).tolist()


@pytest.mark.parametrize(("name", "gz"), [("mnist", False), ("mnist", True), ("fashion_mnist", True)])
def test_idx_files_split_with_fixed_test_set_stratified_validation_and_per_channel_standardisation(
        tmp_path, name, gz):
    data = write_mnist(tmp_path, name, gz)
    cfg0, cfg1, raw = compose_many([[f"data={name}", f"data.root={tmp_path}"],
                                    [f"data={name}", f"data.root={tmp_path}", "seed=1"],
                                    [f"data={name}", f"data.root={tmp_path}", "data.standardize=false"]])
    assert tables.shapes(cfg0) == (24, 6, 20, 784) and tables.n_classes(cfg0) == 10
    assert shapes.input_shape(cfg0) == (1, 28, 28)
    s0, s1, r = splits.split_arrays(cfg0), splits.split_arrays(cfg1), splits.split_arrays(raw)
    train_c, val_c, _ = classes.stratified_counts(np.bincount(data["y_train"]), 6, 0)
    for s in (s0, s1):
        assert (s.x.shape, s.x_val.shape, s.x_test.shape) == ((24, 784), (6, 784), (20, 784))
        assert _counts(s.y) == train_c.tolist() and _counts(s.y_val) == val_c.tolist()
        assert np.array_equal(s.y_test, data["y_test"]) and s.y.dtype == np.int64  # the file's test set, in order
    assert not np.array_equal(s0.y, s1.y)  # each seed its own validation rows
    assert s0.x.dtype == np.float32
    # unstandardised: pixels / 255 in C, H, W order; standardised: the training pixels' mean 0, std 1
    np.testing.assert_allclose(r.x_test, data["x_test"].reshape(N_TEST, -1) / 255, rtol=1e-6)
    assert abs(float(s0.x.mean())) < 1e-5 and abs(float(s0.x.std()) - 1) < 1e-5
    mean, std = r.x.astype(np.float64).mean() * 255, r.x.astype(np.float64).std() * 255
    np.testing.assert_allclose(s0.x_test, (data["x_test"].reshape(N_TEST, -1) - mean) / std, rtol=1e-5, atol=1e-6)
    assert s0.info["channel_mean"] == pytest.approx([mean]) and s0.info["n_test"] == 20
    files = s0.info["files"]
    assert sorted(files) == sorted(f"{f}{'.gz' if gz else ''}" for f in images.IDX_FILES)
    assert all(len(f["sha256"]) == 64 and f["bytes"] > 0 for f in files.values())
    assert str(tmp_path) in s0.info["source"] and "features" not in s0.info


def test_cifar_batches_are_read_in_plane_order_and_standardised_per_channel(tmp_path):
    data = write_cifar(tmp_path)
    cfg, raw = compose_many([["data=cifar10", f"data.root={tmp_path}"],
                             ["data=cifar10", f"data.root={tmp_path}", "data.standardize=false", "dtype=float64"]])
    assert tables.shapes(cfg) == (24, 6, 10, 3072) and shapes.input_shape(cfg) == (3, 32, 32)
    s, r = splits.split_arrays(cfg), splits.split_arrays(raw)
    assert r.x.dtype == np.float64 and np.array_equal(r.x_test, data["x_test"] / 255)
    assert np.array_equal(s.y_test, data["y_test"])
    planes = s.x.reshape(24, 3, 1024).astype(np.float64)
    np.testing.assert_allclose(planes.mean(axis=(0, 2)), 0, atol=1e-5)
    np.testing.assert_allclose(planes.std(axis=(0, 2)), 1, rtol=1e-5)
    raw_planes = r.x.reshape(24, 3, 1024) * 255
    assert s.info["channel_mean"] == pytest.approx(raw_planes.mean(axis=(0, 2)).tolist())
    assert s.info["channel_mean"][0] < s.info["channel_mean"][1]  # R darker, its own statistics
    assert s.info["classes"][0] == "airplane" and s.info["image_shape"] == [3, 32, 32]


def test_cifar_batches_pickled_by_python_2_as_distributed_are_read(tmp_path):
    data = write_cifar(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    for name in images.CIFAR_FILES:
        batch = pickle.loads((folder / name).read_bytes(), encoding="bytes")
        (folder / name).write_bytes(_py2_batch(batch[b"data"], np.asarray(batch[b"labels"])))
    im = images.load("cifar10", str(tmp_path))
    assert np.array_equal(im.x, np.concatenate([data["x_train"], data["x_test"]]))
    assert np.array_equal(im.y, np.concatenate([data["y_train"], data["y_test"]])) and im.n_test == 10


def test_n_train_is_a_stratified_deterministic_nested_subsample_of_the_training_split(tmp_path):
    write_mnist(tmp_path)
    root = f"data.root={tmp_path}"
    full, ten, ten_again, twenty, other = compose_many([
        ["data=mnist", root], ["data=mnist", root, "data.n_train=10"], ["data=mnist", root, "data.n_train=10"],
        ["data=mnist", root, "data.n_train=20"], ["data=mnist", root, "data.n_train=10", "seed=1"]])
    assert tables.shapes(ten) == (10, 6, 20, 784) and tables.shapes(twenty)[0] == 20
    s_full, s10, s20, s_other = (splits.split_arrays(c) for c in (full, ten, twenty, other))
    splits._SPLITS.clear()
    again = splits.split_arrays(ten_again)
    assert np.array_equal(again.x, s10.x) and np.array_equal(again.y, s10.y)  # the same rows from a fresh split
    assert _counts(s10.y) == [1] * 10 and sorted(_counts(s20.y)) == [2] * 10

    def pixels(s: splits.Split, part: str = "x") -> np.ndarray:  # the standardisation undone (each its own)
        return np.rint(getattr(s, part) * s.info["channel_std"][0] + s.info["channel_mean"][0]).astype(np.uint8)

    def rows(s: splits.Split) -> set[bytes]:
        return {r.tobytes() for r in pixels(s)}

    for s in (s10, s20):  # the validation split is the same whatever data.n_train
        assert np.array_equal(s.y_val, s_full.y_val) and np.array_equal(pixels(s, "x_val"), pixels(s_full, "x_val"))
    assert rows(s10) < rows(s20) < rows(s_full)  # nested: each class's first rows in the seed's order
    assert rows(s_other) != rows(s10)
    assert s10.info["n_train"] == 10 and s10.info["n_train_available"] == 24
    # a class table takes it too: a stratified subsample, standardised on the rows kept
    digits = compose(["data=digits", "data.n_train=100"])
    s = splits.split_arrays(digits)
    assert tables.shapes(digits)[0] == 100 == len(s.y) and min(_counts(s.y)) >= 9
    np.testing.assert_allclose(s.x.mean(0), 0, atol=1e-12)


BAD_SETTINGS = [
    (["data.n_train=9"], "data.n_train must be an integer from 10 (the classes) to 24"),
    (["data.n_train=25"], "data.n_train must be an integer from 10 (the classes) to 24"),
    (["data.test_fraction=0.2"], "data.test_fraction does not apply to data=mnist"),
    (["batch_size=25"], "batch_size must be between 1 and the training split's 24 rows"),
    (["data.n_train=12", "batch_size=13"], "batch_size must be between 1 and the training split's 12 rows"),
    (["data.features=[a]"], "data.features does not apply to data=mnist"),
    (["data.target=y"], "data.target does not apply to data=mnist"),
    (["data.task=regression"], "data=mnist is a classification source"),
]
OTHER_SOURCES = [
    (["data=diabetes", "data.n_train=10"], "data.n_train (a stratified subsample of the training split) applies to"),
    (["data=function", "data.n_train=10"], "applies to classification data"),
    (["data=normal", "data.n_train=10"], "not data=normal"),
    (["data=digits", "data.root=/tmp"], "data.root (the image files' folder) applies to data=mnist"),
    (["data=normal", "data.root=/tmp"], "not data=normal"),
    (["data=digits", "data.n_train=5"], "data.n_train must be an integer from 10 (the classes)"),
]


def test_bad_image_settings_and_image_keys_on_other_sources_are_refused(runner, runs_dir, tmp_path):
    write_mnist(tmp_path)
    mnist = ["data=mnist", f"data.root={tmp_path}"]
    for args, message in [([*mnist, *a], m) for a, m in BAD_SETTINGS] + OTHER_SOURCES:
        with pytest.raises(UsageError) as info:
            compose([*args, "epochs=1"])
        assert message in str(info.value) and "\n" not in str(info.value), (args, str(info.value))
    assert_refused_by_run_and_sweep(runner, runs_dir, [*mnist, "data.n_train=30"], "data.n_train must be")


@pytest.mark.parametrize(("name", "expected"), [
    ("mnist", "MNIST/raw; put them there"), ("fashion_mnist", "FashionMNIST("), ("cifar10", "CIFAR10("),
])
def test_missing_files_name_the_files_the_folder_and_torchvision(runner, runs_dir, tmp_path, name, expected):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", f"data={name}",
                                 f"data.root={tmp_path / 'nothing'}", "epochs=1"])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert expected in err and "pip install 'activation-bench[images]'" in err and "download=True" in err
    assert ("data_batch_1" if name == "cifar10" else "train-images-idx3-ubyte") in err
    assert str(tmp_path / "nothing") in err and files_under(runs_dir) == []


def test_the_default_root_is_the_cache_directory(runner, runs_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ACTBENCH_CACHE_DIR", str(tmp_path / "cache"))
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "data=mnist", "epochs=1"])
    assert result.exit_code == 2 and str(tmp_path / "cache" / "MNIST" / "raw") in result.stderr
    write_mnist(tmp_path / "cache")
    assert tables.shapes(compose(["data=mnist"]))[0] == 24


def _break_idx(folder: Path, file: str, how: str) -> None:
    path = folder / file
    raw = path.read_bytes()
    if how == "truncated":
        path.write_bytes(raw[:-5])
    elif how == "header":
        path.write_bytes(raw[:6])
    elif how == "trailing":
        path.write_bytes(raw + b"\0\0")
    elif how == "magic":
        path.write_bytes(b"\0\0\x08\x02" + raw[4:])
    elif how == "gz":
        path.unlink()
        Path(f"{path}.gz").write_bytes(gzip.compress(raw)[:-12])


IDX_CASES = [
    ("train-images-idx3-ubyte", "truncated", "truncated: 23515 data bytes, the header's shape [30, 28, 28] needs"),
    ("t10k-labels-idx1-ubyte", "header", "shorter than an IDX labels header"),
    ("t10k-images-idx3-ubyte", "trailing", "corrupt: 2 bytes after the data"),
    ("train-labels-idx1-ubyte", "magic", "not an IDX labels file: magic number 0x00000802, expected 0x00000801"),
    ("train-images-idx3-ubyte", "gz", "truncated or corrupt gzip file"),
]


@pytest.mark.parametrize(("file", "how", "message"), IDX_CASES)
def test_truncated_or_corrupt_idx_files_are_refused_naming_the_file(runner, runs_dir, tmp_path, file, how, message):
    write_mnist(tmp_path)
    _break_idx(tmp_path / "MNIST" / "raw", file, how)
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "data=mnist", f"data.root={tmp_path}",
                                 "epochs=1"])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert "\n" not in err and message in err and file in err, err
    assert "Traceback" not in result.output and files_under(runs_dir) == []


def test_idx_label_count_size_and_range_are_checked(tmp_path):
    cases = [
        ("t10k-labels-idx1-ubyte", _idx_bytes(np.arange(19) % 10), "19 labels for the 20 images"),
        ("train-labels-idx1-ubyte", _idx_bytes(np.full(30, 12)), "30 labels outside 0..9, first 12 (row 0)"),
        ("train-images-idx3-ubyte", _idx_bytes(np.zeros((30, 27, 28))), "images of 27x28 pixels, expected 28x28"),
        ("t10k-images-idx3-ubyte", _idx_bytes(np.zeros((0, 28, 28))), "no images"),
    ]
    for i, (file, raw, message) in enumerate(cases):
        write_mnist(tmp_path / str(i))
        folder = tmp_path / str(i) / "MNIST" / "raw"
        (folder / file).write_bytes(raw)
        with pytest.raises(UsageError) as info:
            compose(["data=mnist", f"data.root={tmp_path / str(i)}"])
        assert message in str(info.value) and file in str(info.value) and "\n" not in str(info.value)


class _Evil:
    def __reduce__(self):
        return (print, ("executed",))


@pytest.mark.parametrize(("content", "message"), [
    (lambda raw: raw[: len(raw) // 2], "not a readable CIFAR-10 batch: truncated or corrupt pickle"),
    (lambda raw: b"not a pickle", "not a readable CIFAR-10 batch"),
    (lambda raw: pickle.dumps({b"labels": [1]}), "a pickled dict with keys b'data' and b'labels' expected"),
    (lambda raw: pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}),
     "b'labels' holds 1 value(s) of type int64, expected 2 integers"),
    (lambda raw: pickle.dumps({b"data": np.zeros((2, 1024), np.uint8), b"labels": [1, 2]}),
     "b'data' is a uint8 array of shape [2, 1024], expected uint8 [n, 3072]"),
    (lambda raw: pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 10]}),
     "1 label outside 0..9, first 10 (row 1)"),
    (lambda raw: pickle.dumps({b"data": _Evil(), b"labels": []}), "refused to load builtins.print"),
])
def test_truncated_corrupt_or_unsafe_cifar_batches_are_refused(runner, runs_dir, tmp_path, capfd, content, message):
    write_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    path.write_bytes(content(path.read_bytes()))
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "data=cifar10", f"data.root={tmp_path}",
                                 "epochs=1"])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert "\n" not in err and message in err and "data_batch_3" in err, err
    assert "executed" not in result.output + capfd.readouterr().out and files_under(runs_dir) == []


def test_an_mlp_trains_on_tiny_mnist_end_to_end_and_its_saved_config_reruns(runner, tmp_path, monkeypatch):
    write_mnist(tmp_path / "data", gz=True)
    runs = tmp_path / "runs"
    monkeypatch.chdir(tmp_path)  # a relative data.root is saved absolute
    args = ["data=mnist", "data.root=data", "epochs=2", "batch_size=12", "shuffle=true", "model.hidden_dim=16",
            "lr=0.03"]
    result = runner.invoke(app, ["run", "--runs-dir", str(runs), "-q", "--name", "a", *args])
    assert result.exit_code == 0, result.output
    summary = json.loads((runs / "a" / "summary.json").read_text())
    info = summary["data"]
    assert info["n_train"] == 24 and info["n_test"] == 20 and info["standardized"]
    assert set(info["files"]) == {f"{f}.gz" for f in images.IDX_FILES}
    saved = yaml.safe_load((runs / "a" / "config.yaml").read_text())["data"]
    assert saved["root"] == str(tmp_path / "data") and "n_train" in saved
    assert set(saved) <= set(used_keys(saved)) and "n_samples" not in saved
    losses = (runs / "a" / "losses.csv").read_text().splitlines()
    acc = float(losses[-1].split(",")[losses[0].split(",").index("test_acc")])
    assert acc > 0.5, losses  # the classes are learnable from the pixels
    monkeypatch.chdir(runs)
    again = runner.invoke(app, ["run", "--runs-dir", str(runs), "-q", "--name", "b",
                                "--config", str(runs / "a" / "config.yaml")])
    assert again.exit_code == 0, again.output
    assert (runs / "b" / "losses.csv").read_text() == (runs / "a" / "losses.csv").read_text()
