"""Each seed's train / validation / test split of a real, function or class task, standardised with
the training split's statistics only, computed once per process and seed (`split_arrays`) so a
sweep's members share it; classification splits are stratified (`classes.stratified_parts`) and
their labels are int64 class indices, never scaled; image pixels are standardised per channel
(`images.pixels`). The tables themselves, their validation and split sizes: tables.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from activation_bench.data import images
from activation_bench.data.tables import IMAGES, is_classification, split_sizes, table_for

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


@dataclass(frozen=True)
class Split:
    """One seed's train / validation / test arrays (float64, standardised unless turned off; class
    labels int64, never scaled)."""

    x: np.ndarray
    y: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)  # sizes, target scale, source: for summary.json
    # classification: y, y_val, y_test are int64 class indices (info: task, n_classes, classes)


def split_arrays(cfg: Cfg) -> Split:
    """The seed's split of the task (computed once per process per task and seed)."""
    d = cfg.data
    features = tuple(d.features) if d.features is not None else None
    tf = None if d.test_fraction is None else float(d.test_fraction)  # None: a fixed test set (mnist1d)
    key = (d.name, d.path, d.sha256, d.target, features, bool(d.dropna), d.fn, d.n_samples, float(d.noise or 0),
           float(d.val_fraction), tf, bool(d.standardize), int(cfg.seed), d.get("task", "regression"),
           d.get("n_train"))
    if d.name in IMAGES:  # which copy of the files, and the dtype the pixels are converted to
        key += (images.signature(d.name, d.get("root")), cfg.dtype)
    return _split_cached(key, lambda: _split(cfg))


_SPLITS: dict[tuple, Split] = {}
_MAX_SPLITS = 512
_LOCK = threading.RLock()  # two stacks may load their members' splits at once (runs/beside.py)


def _split_cached(key: tuple, make: Callable[[], Split]) -> Split:
    with _LOCK:
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
    if is_classification(d):
        return _split_classes(cfg, gen)
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


def _split_classes(cfg: Cfg, gen: Any) -> Split:
    """The seed's stratified split of a classification table (the fixed test rows of a generated
    source kept as they are); features standardised, labels left as class indices."""
    from activation_bench.data import classes

    d = cfg.data
    table = table_for(d)
    pool = len(table.y) - table.fixed_test
    n_train, n_val, n_test = split_sizes(pool, d.val_fraction, 0.0 if table.fixed_test else d.test_fraction)
    parts = classes.stratified_parts(table.y[:pool], len(table.classes), n_val, n_test, _permutation(pool, gen))
    if table.fixed_test:
        parts = (*parts[:2], np.arange(pool, len(table.y)))
    subsample = {}
    if d.get("n_train") is not None:  # the first rows of each class in the seed's order
        subsample = {"n_train_available": len(parts[0])}
        parts = (classes.subsample(parts[0], table.y, len(table.classes), int(d.n_train)), *parts[1:])
    x, y = table.x, table.y
    info = {"source": table.source, "target": table.target, "features": list(table.features),
            "rows_dropped": table.dropped, **table.meta, "rows": len(y), "n_train": len(parts[0]), "n_val": n_val,
            **subsample, "n_test": len(parts[2]), "task": "classification", "n_classes": len(table.classes),
            "classes": list(table.classes)}
    if table.fixed_test:
        info["test_set"] = f"fixed: the source's {table.fixed_test} canonical test rows"
    if d.name in IMAGES:  # uint8 pixels: only this seed's rows converted, standardised per channel
        shape = images.SOURCES[d.name].shape
        del info["features"], info["rows_dropped"]
        xs, how = images.pixels(x, parts, shape[0], bool(d.standardize), np.dtype(cfg.dtype))
        info.update(image_shape=list(shape), standardized=bool(d.standardize), **how)
        return Split(xs[0], y[parts[0]], xs[1], y[parts[1]], xs[2], y[parts[2]], info)
    return standardize(*(a for idx in parts for a in (x[idx], y[idx])), enabled=bool(d.standardize), info=info,
                       labels=True)


def _permutation(n: int, gen: Any) -> np.ndarray:
    import torch

    return torch.randperm(n, generator=gen).numpy()


def standardize(x: np.ndarray, y: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, x_test: np.ndarray,
                y_test: np.ndarray, enabled: bool = True, info: dict[str, Any] | None = None,
                labels: bool = False) -> Split:
    """Scale features and target with the training split's mean and standard deviation only
    (population std, constant columns left unscaled: what scikit-learn's StandardScaler computes,
    checked against it in the tests, without its 0.9 s import), so nothing about the held-out rows
    leaks into training. info gains target_mean and target_scale: a loss times target_scale**2 is
    in the target's own units squared. With `labels` (class indices) only the features are scaled
    and info gains no target scale."""
    info = dict(info or {})
    if labels:
        info["standardized"] = enabled
        if not enabled:
            return Split(x, y, x_val, y_val, x_test, y_test, info)
        mx, sx = _moments(x)
        return Split((x - mx) / sx, y, (x_val - mx) / sx, y_val, (x_test - mx) / sx, y_test, info)
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
    """The seed's split as a data.Dataset in the run's features dtype (shared arrays, cached per
    process); for classification y, y_val and y_test are int64 class indices of shape [N]."""
    import torch

    from activation_bench.data.synthetic import DTYPES, Dataset

    s = split_arrays(cfg)
    key = (id(s), cfg.dtype)
    if key not in _TENSORS or _TENSORS[key][0] is not s:
        dtype = DTYPES[cfg.dtype]

        def t(a: np.ndarray, col: bool = False) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a[:, None] if col else a)).to(dtype)

        def target(a: np.ndarray) -> torch.Tensor:  # class indices [N] int64, or a column [N, 1]
            return torch.from_numpy(np.ascontiguousarray(a)).to(torch.int64) if labels else t(a, True)

        labels = is_classification(cfg.data)
        _TENSORS[key] = (s, Dataset(t(s.x), target(s.y), t(s.x_val), target(s.y_val),
                                    t(s.x_test), target(s.y_test), s.info))
        if len(_TENSORS) > _MAX_SPLITS:
            _TENSORS.pop(next(iter(_TENSORS)))
    return _TENSORS[key][1]


_TENSORS: dict[tuple[int, str], tuple[Split, Any]] = {}
