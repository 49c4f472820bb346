"""MNIST-1D (Greydanus & Kobak, ICML 2024), generated locally by the mnist1d package (Apache-2.0)
and kept once per machine: nothing is downloaded.

- `make_dataset(get_dataset_args())`, the package's default arguments: 4,000 training and 1,000
  test sequences of 40 features, 10 classes (`get_dataset` would try to download a pickle).
- The package reseeds Python's and NumPy's global generators: both are saved and restored around it.
- Importing it imports matplotlib: it is imported only when the arrays are generated.
- The arrays are cached as an .npz in `cache.cache_dir()`, named by the package's version and a hash of
  the arguments, with a SHA-256 of the arrays beside it (`<file>.sha256`); a missing, unreadable,
  corrupt or mismatching file is generated again, and written through a temporary file and
  os.replace, so concurrent processes never read half a file. Within a process, once (`mnist1d`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from activation_bench.data.cache import cache_dir, write_atomic
from activation_bench.errors import UsageError


@dataclass(frozen=True)
class Generated:
    """MNIST-1D's arrays (the package's train and canonical test rows) and where they came from."""

    x: np.ndarray  # [4000, 40] float64
    y: np.ndarray  # [4000] int64
    x_test: np.ndarray  # [1000, 40]
    y_test: np.ndarray  # [1000]
    version: str
    cache_file: str | None  # None: the cache directory could not be written
    sha256: str  # of the arrays (see `arrays_sha256`)


def _mnist1d_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("mnist1d")
    except importlib.metadata.PackageNotFoundError:
        raise UsageError("data=mnist1d needs the mnist1d package (pip install mnist1d)") from None


# mnist1d's default arguments, get_dataset_args() (the published MNIST-1D), less the download
# address; copied so that reading the cache needs no import of the package (it imports matplotlib).
# tests/test_classification_data.py checks them against the installed package.
ARGS: dict[str, Any] = {
    "num_samples": 5000, "train_split": 0.8, "template_len": 12, "padding": [36, 60], "scale_coeff": 0.4,
    "max_translation": 48, "corr_noise_scale": 0.25, "iid_noise_scale": 0.02, "shear_scale": 0.75,
    "shuffle_seq": False, "final_seq_length": 40, "seed": 42,
}


def _make(args: dict[str, Any]) -> dict[str, np.ndarray]:
    """mnist1d.data.make_dataset with Python's and NumPy's global generators saved and restored
    around it (it reseeds both)."""
    import random

    from mnist1d import data

    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        out = data.make_dataset(data.ObjectView(dict(args)))
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    return {"x": np.asarray(out["x"], np.float64), "y": np.asarray(out["y"], np.int64),
            "x_test": np.asarray(out["x_test"], np.float64), "y_test": np.asarray(out["y_test"], np.int64)}


ARRAYS = ("x", "y", "x_test", "y_test")


def arrays_sha256(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over each array's name, dtype, shape and bytes (the same for every copy of the data,
    whatever the .npz file's timestamps)."""
    digest = hashlib.sha256()
    for name in ARRAYS:
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def _read_cached(path: Path) -> tuple[dict[str, np.ndarray], str] | None:
    """The cached arrays and their digest, or None when absent, unreadable or not matching the
    SHA-256 stored beside them."""
    try:
        expected = path.with_name(path.name + ".sha256").read_text().strip()
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in ARRAYS}
    except Exception:  # absent, unreadable, or corrupt (zipfile and numpy raise their own errors)
        return None
    digest = arrays_sha256(arrays)
    return (arrays, digest) if digest == expected else None


def _write_cache(path: Path, arrays: dict[str, np.ndarray], digest: str) -> bool:
    """Write the .npz, then its .sha256, each through a temporary file and os.replace; False when
    the directory cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda fh: np.savez(fh, **arrays))
        write_atomic(path.with_name(path.name + ".sha256"), lambda fh: fh.write(f"{digest}\n".encode()))
    except OSError:
        return False
    return True


def cache_file(version: str, args: dict[str, Any]) -> Path:
    """The .npz for this mnist1d version and these arguments in `cache_dir()`."""
    key = hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return cache_dir() / f"mnist1d-{version}-{key}.npz"


@functools.lru_cache(maxsize=1)
def mnist1d() -> Generated:
    """MNIST-1D with the package's default arguments: read from the cache (once per process),
    generated and cached when the file is absent, corrupt or does not match its SHA-256."""
    version = _mnist1d_version()
    args = ARGS
    path = cache_file(version, args)
    cached = _read_cached(path)
    if cached is not None:
        arrays, digest = cached
        written = True
    else:
        arrays = _make(args)
        digest = arrays_sha256(arrays)
        written = _write_cache(path, arrays, digest)
    return Generated(arrays["x"], arrays["y"], arrays["x_test"], arrays["y_test"], version,
                     str(path) if written else None, digest)


def frame() -> tuple[Any, str, int, dict[str, Any]]:
    """MNIST-1D as a DataFrame (x1..x40 and label: the package's 4,000 training rows, then its
    1,000 canonical test rows), its source, the number of fixed test rows, and provenance for
    the run's summary (package version, cache file, SHA-256 of the arrays)."""
    import pandas as pd

    g = mnist1d()
    out = pd.DataFrame(np.vstack([g.x, g.x_test]), columns=[f"x{i + 1}" for i in range(g.x.shape[1])])
    out["label"] = np.concatenate([g.y, g.y_test])
    meta = {"mnist1d_version": g.version, "cache_file": g.cache_file, "cache_sha256": g.sha256}
    return out, f"mnist1d {g.version} make_dataset(get_dataset_args())", len(g.y_test), meta
