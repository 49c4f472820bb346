"""Real regression tables and function-fitting tasks: sources, validation, splits, standardisation.

Every source ships inside an installed package or is computed: nothing is downloaded.

- `diabetes`, `star98`, `randhie`: tables bundled with scikit-learn and statsmodels (`TABLES`);
- `csv`: the user's own table (`data.path`, `data.target`, optional `data.features`), read with pandas;
- `function`: a smooth scientific function of uniform inputs on [-1, 1]^d (`data.fn`, see `functions.py`).

A table is read and validated once per process (`load_table`); a seed's train / validation / test
split, standardised with the training split's statistics only, is computed once per process and
seed (`split_arrays`), so a sweep's members share it instead of rebuilding it each.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from activation_bench.errors import UsageError

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

TABLES = ("diabetes", "star98", "randhie")
REAL = (*TABLES, "csv", "function")
# keys that only real and function tasks use; the synthetic data leaves them null
REAL_KEYS = ("path", "sha256", "features", "fn", "val_fraction", "test_fraction", "standardize", "dropna")
MIN_TRAIN = 2  # standardising needs a spread


def is_real(data: Cfg) -> bool:
    return data.name in REAL


# ---------------------------------------------------------------------------------------------
# tables


@dataclass(frozen=True)
class Table:
    """A validated table: float64 features and target, and where they came from."""

    x: np.ndarray  # [rows, features]
    y: np.ndarray  # [rows]
    features: tuple[str, ...]
    target: str
    source: str
    dropped: int = 0  # rows dropped by data.dropna=true


def _builtin(name: str) -> tuple[Any, str]:
    """The bundled table as a DataFrame (features and target only) and a one-line source."""
    import pandas as pd

    if name == "diabetes":
        import sklearn
        from sklearn.datasets import load_diabetes

        bunch = load_diabetes(scaled=False, as_frame=True)
        frame = bunch.frame.rename(columns={"target": "progression"})
        return frame, f"scikit-learn {sklearn.__version__} load_diabetes(scaled=False)"
    import statsmodels

    if name == "star98":
        from statsmodels.datasets import star98

        raw = star98.load_pandas().data
        frame = raw.drop(columns=["NABOVE", "NBELOW"])
        frame["math_above"] = raw["NABOVE"] / (raw["NABOVE"] + raw["NBELOW"])
        return frame, f"statsmodels {statsmodels.__version__} datasets.star98"
    from statsmodels.datasets import randhie

    frame = pd.DataFrame(randhie.load_pandas().data)
    return frame, f"statsmodels {statsmodels.__version__} datasets.randhie"


def read_csv(path: Path) -> Any:
    """The user's file as a DataFrame (comma separated; tab separated for .tsv/.tab)."""
    from activation_bench.data.io import read_table

    sep = "\t" if path.suffix.lower() in (".tsv", ".tab") else ","
    return read_table(path, sep, label="data.path ", empty="empty file, not a table", unparsable="not a table ({})")


@functools.lru_cache(maxsize=32)
def load_table(name: str, path: str | None, target: str, features: tuple[str, ...] | None, dropna: bool,
               sha256: str | None = None) -> Table:
    """Read and validate a table once per process (per file content: sha256): the target and
    feature columns exist and are numeric, and no value is missing or infinite (or, with dropna,
    such rows are dropped)."""
    if name == "csv":
        frame, source = read_csv(Path(path or "")), f"file {path}"
    else:
        frame, source = _builtin(name)
    where = f"data.path {path}" if name == "csv" else f"data={name}"
    columns = [str(c) for c in frame.columns]
    frame.columns = columns
    if len(columns) < 2:
        raise UsageError(f"{where}: not a table: {len(columns)} column(s) ({', '.join(columns)}); "
                         "need a target and at least one feature")
    if target not in columns:
        raise UsageError(f"{where}: no target column '{target}' (columns: {', '.join(columns)})")
    feats = list(features) if features is not None else [c for c in columns if c != target]
    absent = [f for f in feats if f not in columns]
    if absent:
        raise UsageError(f"{where}: no feature column {', '.join(absent)} (columns: {', '.join(columns)})")
    if target in feats:
        raise UsageError(f"{where}: the target '{target}' is also listed in data.features")
    if not feats:
        raise UsageError(f"{where}: data.features is empty")
    bad = [c for c in [*feats, target] if not _numeric(frame[c])]
    if bad:
        raise UsageError(f"{where}: non-numeric column{'s' if len(bad) > 1 else ''} {', '.join(bad)} "
                         "(encode them as numbers, or leave them out with data.features=[...])")
    x = frame[feats].to_numpy(np.float64, na_value=np.nan)
    y = frame[target].to_numpy(np.float64, na_value=np.nan)
    ok = np.isfinite(x).all(axis=1) & np.isfinite(y)
    dropped = int((~ok).sum())
    if dropped and not dropna:
        row = int(np.flatnonzero(~ok)[0])
        cols = [c for c, v in zip([*feats, target], [*x[row], y[row]]) if not np.isfinite(v)]
        line = f" (line {row + 2} of the file)" if name == "csv" else ""
        raise UsageError(f"{where}: {dropped} row{'s' if dropped > 1 else ''} with missing or infinite values, "
                         f"first row {row}{line}, column {cols[0]}; data.dropna=true drops such rows")
    return Table(x[ok], y[ok], tuple(feats), target, source, dropped)


def _numeric(col: Any) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(col.dtype) or pd.api.types.is_bool_dtype(col.dtype))


def table_for(data: Cfg) -> Table:
    """The validated table of a (resolved) data config."""
    features = tuple(data.features) if data.features is not None else None
    return load_table(data.name, data.path, data.target, features, bool(data.dropna), data.sha256)


# ---------------------------------------------------------------------------------------------
# csv paths


@functools.lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of the file's bytes (once per process per unchanged file)."""
    try:
        st = path.stat()
        if not path.is_file():
            raise UsageError(f"data.path {path}: not a file")
        return _file_sha256(str(path), st.st_size, st.st_mtime_ns)
    except FileNotFoundError:
        raise UsageError(f"data.path {path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"data.path {path}: cannot read: {exc.strerror or exc}") from None


def resolve_csv(data: Cfg, where: str = "") -> None:
    """data.path resolved against the directory the command started in, and data.sha256 recorded
    (checked instead, when the config already carries one: a re-run of a saved config.yaml)."""
    if not data.path:
        raise UsageError("data=csv needs data.path=FILE and data.target=COLUMN" + _at(where))
    if not data.target:
        raise UsageError(f"data=csv needs data.target=COLUMN (the column to predict) for {data.path}" + _at(where))
    path = Path(os.path.abspath(os.path.expanduser(str(data.path))))
    digest = file_sha256(path)
    if data.sha256 and data.sha256 != digest:
        raise UsageError(f"data.path {path}: its SHA-256 is {digest}, not the configured data.sha256={data.sha256} "
                         "(the file changed since that config was saved)")
    data["path"], data["sha256"] = str(path), digest


def _at(where: str) -> str:
    return f" (in: {where})" if where else ""


# ---------------------------------------------------------------------------------------------
# checks of a composed config (called by validation.validate; nothing is written before them)


def split_sizes(n: int, val_fraction: float, test_fraction: float) -> tuple[int, int, int]:
    """(train, validation, test) row counts: the held-out parts rounded, the rest for training."""
    n_test, n_val = round(n * test_fraction), round(n * val_fraction)
    return n - n_val - n_test, n_val, n_test


def validate(cfg: Cfg, where: str = "") -> None:
    """Fractions, the function's name, the table (read once per process) and the split sizes.
    For data=csv, data.path is resolved and data.sha256 recorded in cfg."""
    from activation_bench.data import functions

    d = cfg.data
    vf, tf = d.val_fraction, d.test_fraction
    for key, v in (("data.val_fraction", vf), ("data.test_fraction", tf)):
        if not _fraction(v):
            raise UsageError(f"{key} must be between 0 and 1 (exclusive), got {v}" + _at(where))
    if vf + tf >= 1:
        raise UsageError(f"data.val_fraction + data.test_fraction must be below 1, got {vf} + {tf}" + _at(where))
    if d.name == "function":
        functions.get(d.fn)
        n = d.n_samples
        if not isinstance(n, int) or n < 1:
            raise UsageError(f"data.n_samples (points drawn) must be a positive integer, got {n}" + _at(where))
        what = "data.n_samples"
        if d.input_dim is not None:
            raise UsageError(f"data.input_dim does not apply to data=function (data.fn={d.fn} sets it)" + _at(where))
    else:
        if d.noise:
            raise UsageError(f"data.noise applies to function and teacher data, not data={d.name}" + _at(where))
        for key in ("n_samples", "input_dim", "fn"):
            if d[key] is not None:
                raise UsageError(f"data.{key} does not apply to data={d.name} (the table sets it)" + _at(where))
        if d.name == "csv":
            resolve_csv(d, where)
        n = len(table_for(d).y)
        what = f"data={d.name}" if d.name != "csv" else f"data.path {d.path}"
    n_train, n_val, n_test = split_sizes(n, vf, tf)
    if n_train < MIN_TRAIN or n_val < 1 or n_test < 1:
        raise UsageError(f"{what}: {n} rows are too few for val_fraction={vf} and test_fraction={tf} "
                         f"(train {n_train}, validation {n_val}, test {n_test}; need at least "
                         f"{MIN_TRAIN}, 1 and 1)" + _at(where))
    if cfg.batch_size is not None and not 1 <= cfg.batch_size <= n_train:
        raise UsageError(f"batch_size must be between 1 and the training split's {n_train} rows, "
                         f"got {cfg.batch_size}" + _at(where))


def _fraction(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1


def shapes(cfg: Cfg) -> tuple[int, int, int, int]:
    """(n_train, n_val, n_test, input_dim) of a real or function task, without splitting."""
    from activation_bench.data import functions

    d = cfg.data
    if d.name == "function":
        n, dim = d.n_samples, functions.get(d.fn).dim
    else:
        table = table_for(d)
        n, dim = len(table.y), table.x.shape[1]
    return (*split_sizes(n, d.val_fraction, d.test_fraction), dim)


# ---------------------------------------------------------------------------------------------
# splits


@dataclass(frozen=True)
class Split:
    """One seed's train / validation / test arrays (float64, standardised unless turned off)."""

    x: np.ndarray
    y: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)  # sizes, target scale, source: for summary.json


def split_arrays(cfg: Cfg) -> Split:
    """The seed's split of the task (computed once per process per task and seed)."""
    d = cfg.data
    features = tuple(d.features) if d.features is not None else None
    key = (d.name, d.path, d.sha256, d.target, features, bool(d.dropna), d.fn, d.n_samples, float(d.noise or 0),
           float(d.val_fraction), float(d.test_fraction), bool(d.standardize), int(cfg.seed))
    return _split_cached(key, lambda: _split(cfg))


_SPLITS: dict[tuple, Split] = {}
_MAX_SPLITS = 512


def _split_cached(key: tuple, make: Callable[[], Split]) -> Split:
    if key not in _SPLITS:
        if len(_SPLITS) >= _MAX_SPLITS:
            _SPLITS.pop(next(iter(_SPLITS)))
        _SPLITS[key] = make()
    return _SPLITS[key]


def _split(cfg: Cfg) -> Split:
    from activation_bench.data import functions
    from activation_bench.data.synthetic import generator

    d = cfg.data
    gen = generator(cfg.seed, "data")
    if d.name == "function":
        x, y = functions.sample(d.fn, d.n_samples, gen, float(d.noise or 0))
        info = {"source": f"function {d.fn}: {functions.get(d.fn).formula}", "target": "f(x)",
                "features": [f"x{i + 1}" for i in range(x.shape[1])]}
    else:
        table = table_for(d)
        x, y = table.x, table.y
        info = {"source": table.source, "target": table.target, "features": list(table.features),
                "rows_dropped": table.dropped}
    n_train, n_val, n_test = split_sizes(len(y), d.val_fraction, d.test_fraction)
    perm = _permutation(len(y), gen)
    parts = np.split(perm, [n_train, n_train + n_val])
    return standardize(*(a for idx in parts for a in (x[idx], y[idx])), enabled=bool(d.standardize),
                       info={**info, "rows": len(y), "n_train": n_train, "n_val": n_val, "n_test": n_test})


def _permutation(n: int, gen: Any) -> np.ndarray:
    import torch

    return torch.randperm(n, generator=gen).numpy()


def standardize(x: np.ndarray, y: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, x_test: np.ndarray,
                y_test: np.ndarray, enabled: bool = True, info: dict[str, Any] | None = None) -> Split:
    """Scale features and target with the training split's mean and standard deviation only
    (population std, constant columns left unscaled: what scikit-learn's StandardScaler computes,
    checked against it in the tests, without its 0.9 s import), so nothing about the held-out rows
    leaks into training. info gains target_mean and target_scale: a loss times target_scale**2 is
    in the target's own units squared."""
    info = dict(info or {})
    if not enabled:
        info.update(target_mean=0.0, target_scale=1.0, standardized=False)
        return Split(x, y, x_val, y_val, x_test, y_test, info)
    mx, sx = _moments(x)
    my, sy = _moments(y)
    info.update(target_mean=float(my), target_scale=float(sy), standardized=True)
    return Split((x - mx) / sx, (y - my) / sy, (x_val - mx) / sx, (y_val - my) / sy, (x_test - mx) / sx,
                 (y_test - my) / sy, info)


def _moments(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population standard deviation along the rows; a (near-)constant column's scale is 1."""
    mean, std = a.mean(axis=0), a.std(axis=0)
    std = np.where(std < 10 * np.finfo(np.float64).eps * np.maximum(1.0, np.abs(mean)), 1.0, std)
    return mean, std


def make_dataset(cfg: Cfg) -> Any:
    """The seed's split as a data.Dataset in the run's dtype (shared arrays, cached per process)."""
    import torch

    from activation_bench.data.synthetic import DTYPES, Dataset

    s = split_arrays(cfg)
    key = (id(s), cfg.dtype)
    if key not in _TENSORS or _TENSORS[key][0] is not s:
        dtype = DTYPES[cfg.dtype]

        def t(a: np.ndarray, col: bool = False) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a[:, None] if col else a)).to(dtype)

        _TENSORS[key] = (s, Dataset(t(s.x), t(s.y, True), t(s.x_val), t(s.y_val, True),
                                    t(s.x_test), t(s.y_test, True), s.info))
        if len(_TENSORS) > _MAX_SPLITS:
            _TENSORS.pop(next(iter(_TENSORS)))
    return _TENSORS[key][1]


_TENSORS: dict[tuple[int, str], tuple[Split, Any]] = {}
