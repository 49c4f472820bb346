"""Image classification data from the standard files, in torchvision's layout: MNIST and
Fashion-MNIST (IDX files) and CIFAR-10 (python batches), read with NumPy; nothing is downloaded.

- The files lie under `data.root` (null: `cache.cache_dir()`) where torchvision's dataset
  classes put them: `<root>/MNIST/raw/` and `<root>/FashionMNIST/raw/` (`train-images-idx3-ubyte`,
  `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, each plain or
  `.gz`), `<root>/cifar-10-batches-py/` (`data_batch_1` .. `_5`, `test_batch`). Missing files: one
  line naming them, their folder, and the torchvision call that fetches them with its checksums.
- IDX: a big-endian uint32 magic (0x00000803 images, 0x00000801 labels), one uint32 per
  dimension, then uint8 data. CIFAR-10: pickles of a dict with b"data" (uint8 [n, 3072], the R, G
  and B planes of a 32x32 image) and b"labels"; they are unpickled by an unpickler that builds NumPy
  arrays and nothing else (a pickle naming any other callable is refused).
- A truncated, corrupt or malformed file (bad magic, wrong sizes, a label count that does not match
  the images, labels outside 0..9, a batch without its keys): one line naming the file.
- The images are kept as uint8, once per process per set of files (path, size, mtime): the training
  images, then the canonical test images, flat in channel, row, column order. A seed's rows become
  floats only when split (`pixels`), through a 256-entry table per channel computed in float64 and
  rounded once to the run's dtype: standardised per channel with the training rows' mean and std,
  or scaled to [0, 1] with data.standardize=false.
"""

from __future__ import annotations

import codecs
import functools
import gzip
import hashlib
import io
import os
import pickle
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from activation_bench.errors import UsageError

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


@dataclass(frozen=True)
class Source:
    title: str
    folder: str  # under data.root
    torchvision: str  # the torchvision.datasets class that downloads the files
    shape: tuple[int, int, int]  # (channels, height, width)
    classes: tuple[str, ...]


SOURCES: dict[str, Source] = {
    "mnist": Source("MNIST", "MNIST/raw", "MNIST", (1, 28, 28), tuple("0123456789")),
    "fashion_mnist": Source("Fashion-MNIST", "FashionMNIST/raw", "FashionMNIST", (1, 28, 28), (
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")),
    "cifar10": Source("CIFAR-10", "cifar-10-batches-py", "CIFAR10", (3, 32, 32), (
        "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")),
}
NAMES = tuple(SOURCES)
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CIFAR_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")


@dataclass(frozen=True)
class Images:
    """A source's images: uint8 [training + test rows, C*H*W], labels int64, and provenance."""

    x: np.ndarray
    y: np.ndarray
    n_test: int  # the last this many rows are the canonical test set
    source: str
    files: dict[str, dict[str, Any]]  # file name -> bytes, sha256


def root_dir(root: str | None) -> Path:
    """data.root, or the user cache directory when it is null."""
    if root is None:
        from activation_bench.data.cache import cache_dir

        return cache_dir()
    return Path(os.path.expanduser(str(root)))


def resolve_root(data: Cfg) -> None:
    """data.root made absolute (against the directory the command started in), as data.path is."""
    if data.get("root") is not None:
        data["root"] = os.path.abspath(os.path.expanduser(str(data.root)))


def files(name: str, root: str | None) -> list[Path]:
    """The source's files under root (an IDX file plain where both are there, else .gz); refuses
    missing ones with the line that says where they go and how to fetch them."""
    src = SOURCES[name]
    top = root_dir(root)
    folder = top / src.folder
    found, missing = [], []
    for base in IDX_FILES if src.torchvision != "CIFAR10" else CIFAR_FILES:
        options = [folder / base] + ([folder / f"{base}.gz"] if base in IDX_FILES else [])
        hit = next((p for p in options if p.is_file()), None)
        (found.append(hit) if hit else missing.append(base))
    if missing:
        gz = " (each plain or .gz)" if src.torchvision != "CIFAR10" else ""
        raise UsageError(
            f"data={name}: missing {src.title} file{'s' if len(missing) > 1 else ''} {', '.join(missing)}{gz} in "
            f"{folder}; put them there (data.root=DIR sets the folder above {src.folder}), or fetch them with "
            f"torchvision's checksums: pip install 'activation-bench[images]' (torchvision), then python -c "
            f"\"from torchvision.datasets import {src.torchvision}; {src.torchvision}({str(top)!r}, download=True)\"")
    return found


def signature(name: str, root: str | None) -> tuple:
    """(path, size, mtime) of each of the source's files: which copy of the files a split came from."""
    out = []
    for p in files(name, root):
        st = p.stat()
        out.append((str(p), st.st_size, st.st_mtime_ns))
    return tuple(out)


def load(name: str, root: str | None) -> Images:
    """The source's images, read and checked once per process per set of files."""
    return _read(name, signature(name, root))


@functools.lru_cache(maxsize=4)
def _read(name: str, sig: tuple) -> Images:
    src = SOURCES[name]
    paths = [Path(p) for p, _, _ in sig]
    info: dict[str, dict[str, Any]] = {}

    def read(path: Path) -> bytes:
        raw = _raw(path)
        info[path.name] = {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
        return raw

    c, h, w = src.shape
    if src.torchvision == "CIFAR10":
        parts = [_cifar_batch(p, read(p), c * h * w) for p in paths]
    else:
        parts = []
        for images, labels in ((paths[0], paths[1]), (paths[2], paths[3])):
            xi = _idx(images, _unzip(images, read(images)), 3, (h, w))
            yi = _idx(labels, _unzip(labels, read(labels)), 1)
            if len(yi) != len(xi):
                raise _bad(labels, f"{len(yi)} labels for the {len(xi)} images of {images.name}")
            parts.append((xi.reshape(len(xi), -1), _labels(labels, yi, len(src.classes))))
    x = np.concatenate([part[0] for part in parts])
    y = np.concatenate([part[1] for part in parts])
    kind = "python batches" if src.torchvision == "CIFAR10" else "IDX files"
    return Images(x, y, len(parts[-1][1]), f"{src.title} {kind} in {paths[0].parent}", info)


def _bad(path: Path, why: str) -> UsageError:
    return UsageError(f"{path}: {why}")


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:120]}" if text else type(exc).__name__


def _raw(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise _bad(path, f"cannot be read ({_short(exc)})") from None


def _unzip(path: Path, raw: bytes) -> bytes:
    """The bytes of an IDX file, decompressed when they are gzip's (whatever the name)."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise _bad(path, f"truncated or corrupt gzip file ({_short(exc)})") from None


def _idx(path: Path, raw: bytes, ndim: int, dims: tuple[int, ...] = ()) -> np.ndarray:
    """An IDX file's uint8 array of `ndim` dimensions (images: each `dims`)."""
    kind = "images" if ndim == 3 else "labels"
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise _bad(path, f"truncated: {len(raw)} bytes, shorter than an IDX {kind} header ({header} bytes)")
    magic, expected = int.from_bytes(raw[:4], "big"), 0x800 + ndim
    if magic != expected:
        raise _bad(path, f"not an IDX {kind} file: magic number 0x{magic:08x}, expected 0x{expected:08x}")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    if dims and shape[1:] != dims:
        raise _bad(path, f"images of {shape[1]}x{shape[2]} pixels, expected {dims[0]}x{dims[1]}")
    size, have = int(np.prod(shape)), len(raw) - header
    if have < size:
        raise _bad(path, f"truncated: {have} data bytes, the header's shape {list(shape)} needs {size}")
    if have > size:
        raise _bad(path, f"corrupt: {have - size} bytes after the data of shape {list(shape)}")
    if shape[0] == 0:
        raise _bad(path, f"no {kind}")
    return np.frombuffer(raw, np.uint8, size, header).reshape(shape)


def _labels(path: Path, labels: np.ndarray, k: int) -> np.ndarray:
    """Labels as int64, each one of the k classes."""
    bad = np.flatnonzero((labels < 0) | (labels >= k))
    if len(bad):
        raise _bad(path, f"{len(bad)} label{'s' if len(bad) > 1 else ''} outside 0..{k - 1}, first {labels[bad[0]]} "
                         f"(row {bad[0]})")
    return labels.astype(np.int64)


# NumPy's own functions for rebuilding an array, under the module names that NumPy 1 and 2 pickle them by
_NUMPY = {
    **{(m, "_reconstruct"): np.array(0).__reduce__()[0] for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(m, "scalar"): np.int64(0).__reduce__()[0] for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(m, "_frombuffer"): np.array(0).__reduce_ex__(5)[0] for m in ("numpy.core.numeric", "numpy._core.numeric")},
    ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype, ("_codecs", "encode"): codecs.encode,
}


class _ArraysOnly(pickle.Unpickler):
    """An unpickler that rebuilds NumPy arrays, Python's containers and scalars, and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _NUMPY:
            return _NUMPY[(module, name)]
        raise pickle.UnpicklingError(f"refused to load {module}.{name} (only NumPy arrays are read)")


def _cifar_batch(path: Path, raw: bytes, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A CIFAR-10 batch's images (uint8 [n, width]) and labels (int64 [n])."""
    try:
        batch = _ArraysOnly(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # noqa: BLE001 - any failure to unpickle is a corrupt file
        raise _bad(path, f"not a readable CIFAR-10 batch: truncated or corrupt pickle ({_short(exc)})") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise _bad(path, "not a CIFAR-10 batch: a pickled dict with keys b'data' and b'labels' expected")
    x, y = batch[b"data"], np.asarray(batch[b"labels"])
    if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != width or not len(x):
        what = f"{x.dtype} array of shape {list(x.shape)}" if isinstance(x, np.ndarray) else type(x).__name__
        raise _bad(path, f"b'data' is a {what}, expected uint8 [n, {width}]")
    if y.ndim != 1 or y.dtype.kind not in "iu" or len(y) != len(x):
        raise _bad(path, f"b'labels' holds {y.size} value(s) of type {y.dtype}, expected {len(x)} integers")
    return x, _labels(path, y, 10)


# ---------------------------------------------------------------------------------------------
# a seed's rows as floats


def pixels(x: np.ndarray, parts: tuple[np.ndarray, ...], channels: int, standardize: bool,
           dtype: Any) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The rows of each part (training first) as `dtype` features, and what was done for the summary:
    standardised per channel with the mean and population std of every pixel of that channel in the
    training rows (a constant channel left unscaled), or divided by 255."""
    train = x[parts[0]]
    width = train.shape[1] // channels
    values = np.arange(256, dtype=np.float64)
    if standardize:
        tables, means, stds = [], [], []
        for c in range(channels):
            hist = sum(np.bincount(rows[:, c * width:(c + 1) * width].ravel(), minlength=256)
                       for rows in _chunks(train)).astype(np.float64)
            mean = float(hist @ values / hist.sum())
            std = float(np.sqrt(hist @ (values - mean) ** 2 / hist.sum())) or 1.0
            tables.append(((values - mean) / std).astype(dtype))
            means.append(mean)
            stds.append(std)
        info = {"standardization": "per channel: the training split's mean and std over its pixels",
                "channel_mean": means, "channel_std": stds}
    else:
        tables = [(values / 255).astype(dtype)] * channels
        info = {"standardization": "none: pixels / 255, in [0, 1]"}

    def convert(rows: np.ndarray) -> np.ndarray:
        out = np.empty(rows.shape, dtype)
        for start, chunk in enumerate(_chunks(rows)):
            for c in range(channels):
                block = slice(c * width, (c + 1) * width)
                out[start * CHUNK:start * CHUNK + len(chunk), block] = tables[c][chunk[:, block]]
        return out

    return [convert(train), *(convert(x[idx]) for idx in parts[1:])], info


CHUNK = 4096  # rows at a time: the index arrays NumPy makes of uint8 pixels stay small


def _chunks(rows: np.ndarray) -> list[np.ndarray]:
    return [rows[i:i + CHUNK] for i in range(0, len(rows), CHUNK)] or [rows]
