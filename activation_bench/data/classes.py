"""Class labels for the classification sources: encoding, the rules a label column must pass, and
the stratified split (MNIST-1D itself is made in mnist1d.py).

- Labels are encoded as int64 indices 0..K-1 into a fixed order of classes: integer (and boolean)
  labels sorted numerically, any other labels sorted as strings; the classes are recorded as strings.
- A label column is refused when it looks continuous: a numeric column with a value that is not an
  integer, or any column with more than `MAX_CLASSES` distinct values; also with one class only.
- The stratified split gives every class a share of the held-out rows by the largest-remainder rule
  (`stratified_counts`), so each part's size, and each class's count in it, depend on the table and
  the fractions only, never on the seed; the seed's permutation picks which rows.

tables.py builds on this module (it never imports tables.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from activation_bench.errors import UsageError

TASKS = ("regression", "classification")
MAX_CLASSES = 100  # more distinct values than this: a continuous target or an identifier, not classes


# ---------------------------------------------------------------------------------------------
# labels


def missing_labels(col: Any, where: str, target: str, csv: bool, dropna: bool) -> np.ndarray:
    """Rows whose label is missing (NaN, None, an empty cell) or, in a numeric column, infinite:
    refused unless dropna (then the caller drops them)."""
    import pandas as pd

    if _numeric(col):
        missing = ~np.isfinite(col.to_numpy(np.float64, na_value=np.nan))
    else:
        missing = np.asarray(pd.isna(col), dtype=bool)
    if missing.any() and not dropna:
        n, row = int(missing.sum()), int(np.flatnonzero(missing)[0])
        line = f" (line {row + 2} of the file)" if csv else ""
        raise UsageError(f"{where}: {n} row{'s' if n > 1 else ''} without a label in target column '{target}', "
                         f"first row {row}{line}; data.dropna=true drops such rows")
    return missing


def encode(col: Any, where: str, target: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """(int64 class indices, the classes as strings in their fixed order) of a label column with
    no missing values; refuses a continuous column and a column with one class only."""
    if _numeric(col):
        import pandas as pd

        boolean = pd.api.types.is_bool_dtype(col.dtype)
        as_float = col.to_numpy(np.float64)
        distinct = len(np.unique(as_float))
        if not np.array_equal(as_float, np.round(as_float)):
            raise UsageError(f"{where}: data.task=classification needs class labels, but target '{target}' is "
                             f"continuous ({distinct} distinct values, not all integers); use data.task=regression")
        uniq, idx = np.unique(as_float, return_inverse=True)
        names = tuple(str(bool(v)) if boolean else str(int(v)) for v in uniq)
    else:
        uniq, idx = np.unique(col.astype(str).to_numpy(dtype=str), return_inverse=True)
        names, distinct = tuple(str(v) for v in uniq), len(uniq)
    if distinct > MAX_CLASSES:
        hint = "use data.task=regression" if _numeric(col) else "is it an identifier?"
        raise UsageError(f"{where}: data.task=classification needs class labels, but target '{target}' has "
                         f"{distinct} distinct values (at most {MAX_CLASSES} classes); {hint}")
    if distinct < 2:
        only = f" ('{names[0]}')" if names else ""
        raise UsageError(f"{where}: target '{target}' has only one class{only}; classification needs at least two")
    return idx.astype(np.int64).reshape(-1), names


def _numeric(col: Any) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(col.dtype) or pd.api.types.is_bool_dtype(col.dtype))


# ---------------------------------------------------------------------------------------------
# the stratified split


def allocate(counts: np.ndarray, total: int) -> np.ndarray:
    """Integer shares of `total` proportional to `counts`, summing to `total` (the largest-remainder
    rule in exact integer arithmetic; equal remainders go to the lower class index)."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        return np.zeros_like(counts)
    share, rem = np.divmod(total * counts, n)
    order = np.lexsort((np.arange(len(counts)), -rem))
    share[order[: total - int(share.sum())]] += 1
    return share


def stratified_counts(counts: np.ndarray, n_val: int, n_test: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per class, its (train, validation, test) rows: the test rows shared by class size, then the
    validation rows by what each class has left. With n_val + n_test below the total, no class gives
    more rows than it has."""
    test = allocate(counts, n_test)
    rest = np.asarray(counts, dtype=np.int64) - test
    val = allocate(rest, n_val)
    return rest - val, val, test


def stratified_parts(labels: np.ndarray, n_classes: int, n_val: int, n_test: int,
                     perm: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row indices of the (train, validation, test) parts: walking the permutation, each class's
    first rows go to training, its next ones to validation, the rest to test, by
    `stratified_counts`. Each part keeps the permutation's order."""
    counts = np.bincount(labels, minlength=n_classes)
    n_train_c, n_val_c, _ = stratified_counts(counts, n_val, n_test)
    lab = labels[perm]
    rank = _ranks(lab, counts)
    part = np.where(rank < n_train_c[lab], 0, np.where(rank < (n_train_c + n_val_c)[lab], 1, 2))
    return perm[part == 0], perm[part == 1], perm[part == 2]


def _ranks(lab: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each row's place among the rows of its class, in the order given."""
    order = np.argsort(lab, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(len(lab), dtype=np.int64)
    rank[order] = np.arange(len(lab)) - starts[lab[order]]
    return rank


def subsample(rows: np.ndarray, labels: np.ndarray, n_classes: int, n: int) -> np.ndarray:
    """A stratified subsample of n of `rows` (indices into labels): each class's share by
    `allocate`, its first rows in the order given (a seed's permutation), kept in that order; so a
    smaller n's rows are a subset of a larger one's."""
    lab = labels[rows]
    counts = np.bincount(lab, minlength=n_classes)
    return rows[_ranks(lab, counts) < allocate(counts, n)[lab]]


def check_subsample(labels: np.ndarray, classes: tuple[str, ...], n_val: int, n_test: int, n: int,
                    where: str) -> None:
    """Refuse a data.n_train that leaves a class without training rows (seed-independent, as the split)."""
    n_train_c = stratified_counts(np.bincount(labels, minlength=len(classes)), n_val, n_test)[0]
    empty = np.flatnonzero(allocate(n_train_c, n) == 0)
    if len(empty):
        raise UsageError(f"{where}: data.n_train={n} leaves class '{classes[int(empty[0])]}' without training rows "
                         f"(its share of {n} by class size rounds to 0); raise data.n_train")


def check_training_classes(labels: np.ndarray, classes: tuple[str, ...], n_val: int, n_test: int, where: str,
                           fractions: str) -> None:
    """Refuse a split that leaves a class without training rows (the same for every seed: the
    stratified counts depend on the table and the fractions only)."""
    counts = np.bincount(labels, minlength=len(classes))
    n_train_c = stratified_counts(counts, n_val, n_test)[0]
    empty = np.flatnonzero(n_train_c == 0)
    if len(empty):
        c = int(empty[0])
        more = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
        raise UsageError(f"{where}: class '{classes[c]}' has {counts[c]} row{'s' if counts[c] != 1 else ''}, none "
                         f"left for the training split at {fractions}{more}; every class needs a training row")
