"""Loss tables in: sweep directories, run directories and long-format CSVs -> one `Loaded`.

`load(paths)` reads every input into a per-run config table (config values as canonical strings)
plus flat epoch arrays and one array per per-epoch column (losses and accuracies), one contiguous
block per run ordered by epoch. Which way a column is better is decided here, once
(`higher_is_better`). Pure pandas/numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from activation_bench.analysis.configs import canon, canon_array, flatten_config, read_yaml
from activation_bench.data.io import read_table
from activation_bench.errors import UsageError
from activation_bench.runs.contents import COLUMNS  # every per-epoch column, in order
from activation_bench.runs.store import finished_summary

# classification runs: the share of correctly classified rows, a fraction in [0, 1], higher is better
ACCURACIES = ("val_acc", "test_acc")
LOSSES = tuple(c for c in COLUMNS if c not in ACCURACIES)  # train_loss, train_eval_loss, val_loss, test_loss
# facts about a run, not config: never group or pair by them (results.csv carries n_params)
INFO_COLS = ("n_params", "status", "wall_time_s", "diverged_epoch", "epochs_run", "stack_size", "config_hash")
RESERVED = ("run", "epoch", *COLUMNS, *INFO_COLS)
RUN_COLS = ("source", "run", "status", "n_params")  # per-run columns of Loaded.runs that are not config


def is_accuracy(column: str) -> bool:
    """An accuracy column (val_acc, test_acc): a fraction in [0, 1], compared in percentage points."""
    return column in ACCURACIES


def higher_is_better(column: str) -> bool:
    """The one place that says which way a per-epoch column is better: accuracies up, losses down."""
    return is_accuracy(column)


def judged_only(loaded: Loaded, column: str) -> np.ndarray:
    """Per run: whether its `column` holds values at some epochs only, NaN at others where the training
    loss is finite: a text's whole test split, judged at the epoch of lowest validation loss and at
    the last (engine/whole_split.py). Such a column has no curve and its NaN is no divergence."""
    if column not in loaded.losses or column == "train_loss" or not len(loaded.epoch):
        return np.zeros(len(loaded.runs), dtype=bool)
    y, train = loaded.losses[column], loaded.losses["train_loss"]
    starts = np.minimum(loaded.bounds[:-1], len(y) - 1)
    counts = np.diff(loaded.bounds) > 0
    gap = np.isnan(y) & np.isfinite(train)
    return np.logical_or.reduceat(gap, starts) & np.logical_or.reduceat(np.isfinite(y), starts) & counts


@dataclass
class Loaded:
    """Runs from all inputs. `runs` has one row per run (config columns as canonical strings,
    None where a source does not define the key, plus `source` and `run`); rows of run i are
    `bounds[i]:bounds[i+1]` of `epoch` and `losses[...]`, ordered by epoch. `losses` holds every
    per-epoch column (COLUMNS) any input has, accuracies included; NaN where an input lacks it."""

    runs: pd.DataFrame
    config_cols: list[str]
    epoch: np.ndarray
    losses: dict[str, np.ndarray]
    bounds: np.ndarray
    warnings: list[str] = field(default_factory=list)

    def run_index(self) -> np.ndarray:
        """Run number of every row."""
        return np.repeat(np.arange(len(self.runs)), np.diff(self.bounds))

    def has_accuracy(self) -> np.ndarray:
        """Per run: whether it has any accuracy value (a classification run; regression runs have
        none, or NaN where a results.csv mixes both)."""
        out = np.zeros(len(self.runs), dtype=bool)
        counts = np.diff(self.bounds)
        if not len(self.epoch):
            return out
        starts = np.minimum(self.bounds[:-1], len(self.epoch) - 1)
        for col in ACCURACIES:
            if col in self.losses:
                out |= np.logical_or.reduceat(np.isfinite(self.losses[col]), starts) & (counts > 0)
        return out

    def long_frame(self, loss: str, columns: Sequence[str]) -> pd.DataFrame:
        """Rows (run, epoch, loss) with the given config columns attached."""
        idx = self.run_index()
        out = {c: self.runs[c].to_numpy(object)[idx] for c in columns}
        out.update(run=idx, epoch=self.epoch, loss=self.losses[loss])
        return pd.DataFrame(out)


@dataclass
class _Part:
    """One input's runs before combining."""

    runs: pd.DataFrame
    epoch: np.ndarray
    losses: dict[str, np.ndarray]
    bounds: np.ndarray


def load(paths: Sequence[str | Path], loss: str = "train_loss") -> Loaded:
    """Read sweep dirs, run dirs and long CSVs; every input must have the `loss` column (any of
    COLUMNS: a loss, or an accuracy of classification runs)."""
    if loss not in COLUMNS:
        raise UsageError(f"unknown loss '{loss}'; valid: {', '.join(COLUMNS)}")
    if not paths:
        raise UsageError("no input: give sweep directories, run directories or CSV files")
    notes: list[str] = []
    parts: list[_Part] = []
    for raw in paths:
        parts.extend(_load_path(Path(raw), loss, notes))
    parts = [p for p in parts if len(p.runs)]
    if not parts:
        raise UsageError(f"no complete runs in {', '.join(str(p) for p in paths)}")
    return _combine(parts, notes)


def _load_path(path: Path, loss: str, notes: list[str]) -> list[_Part]:
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if path.is_file():
        if path.name == "losses.csv" and (path.parent / "config.yaml").is_file():
            return _load_run_dir(path.parent, loss, notes, direct=True)
        if path.suffix.lower() != ".csv":
            raise UsageError(f"{path}: not a CSV file, run directory or sweep directory")
        return [_csv_part(path, loss, str(path))]
    if _is_run_dir(path):
        return _load_run_dir(path, loss, notes, direct=True)
    return _load_sweep_dir(path, loss, notes)


def _is_run_dir(path: Path) -> bool:
    return any((path / f).exists() for f in ("summary.json", "config.yaml", "losses.csv"))


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read directory: {exc.strerror or exc}") from None


def _load_sweep_dir(path: Path, loss: str, notes: list[str]) -> list[_Part]:
    """results.csv when it is there and up to date, else the member run directories."""
    subdirs = _subdirs(path)
    run_dirs = [d for d in subdirs if _is_run_dir(d)]
    done: dict[str, dict] = {}
    for d in run_dirs:
        summary = finished_summary(d)
        if summary is None:
            notes.append(f"incomplete run skipped (no finished summary.json): {d}")
        else:
            done[d.name] = summary
    results = path / "results.csv"
    fixed = _fixed_overrides(path)
    if results.is_file():
        part = _csv_part(results, loss, str(path), seed=_sweep_seed(done))
        listed = set(part.runs["run"])
        if set(done) <= listed:
            known = part.runs["run"].map(lambda r: (done.get(r) or {}).get("status"))
            part.runs["status"] = known.where(known.notna(), part.runs["status"])
            return [_with_fixed(part, fixed)]
        notes.append(f"{results} is out of date: reading the run directories instead")
    if done:
        # a sweep's members carry their swept values as labels; run directories gathered in one
        # folder (`actbench run` into runs/) are no sweep: each one's config.yaml says what it is
        loose = not (path / "sweep.yaml").is_file()
        return [_with_fixed(_run_dir_part(path / name, loss, summary, full_config=loose), fixed)
                for name, summary in done.items()]
    nested = [d for d in subdirs if d not in run_dirs and ((d / "results.csv").is_file() or _subdirs(d))]
    if nested:
        return [p for d in nested for p in _load_sweep_dir(d, loss, notes)]
    if run_dirs:
        return []
    raise UsageError(f"{path}: empty directory: no results.csv, run directories or losses.csv")


def _fixed_overrides(path: Path) -> dict[str, str | None]:
    """The single-valued `KEY=VALUE` overrides of a sweep (sweep.yaml): config values every member
    shares, which results.csv leaves out. Two sweeps at lr 1e-3 and lr 1e-2 then differ in lr."""
    file = path / "sweep.yaml"
    if not file.is_file():
        return {}
    import yaml

    from activation_bench.cfg import load_yaml

    try:
        doc = load_yaml(file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
    return fixed_values(doc.get("overrides") or [] if isinstance(doc, dict) else [])


def fixed_values(overrides: Sequence[object]) -> dict[str, str | None]:
    """The single-valued `KEY=VALUE` items of a sweep's overrides, canonical (what _fixed_overrides
    reads from its sweep.yaml; a study checks its tuned keys with it before the sweep is written);
    `+model.kwargs.width=8` sets model.kwargs.width (config.grid.label_key)."""
    out: dict[str, str | None] = {}
    for item in overrides:
        key, sep, value = str(item).partition("=")
        key = key.lstrip("+")
        if sep and key and key[0].isalpha() and not key.startswith("hydra") \
                and not any(ch in value for ch in ",()[]{}*"):
            out[key] = canon(value)
    return out


def _with_fixed(part: _Part, fixed: dict[str, str | None]) -> _Part:
    for key, value in fixed.items():
        if key not in part.runs.columns:
            part.runs[key] = value
    return part


def _sweep_seed(done: dict[str, dict]) -> str | None:
    """The seed shared by a sweep's members when results.csv has no seed column."""
    seeds = {str(s.get("seed")) for s in done.values() if s.get("seed") is not None}
    return seeds.pop() if len(seeds) == 1 else None


def _load_run_dir(path: Path, loss: str, notes: list[str], direct: bool) -> list[_Part]:
    summary = finished_summary(path)
    if summary is None:
        notes.append(f"incomplete run skipped (no finished summary.json): {path}")
        return []
    return [_run_dir_part(path, loss, summary, full_config=direct)]


def _run_dir_part(path: Path, loss: str, summary: dict, full_config: bool = False) -> _Part:
    """One run directory. Config from config.yaml (flattened) or, inside a sweep, the labels."""
    losses_path = path / "losses.csv"
    if not losses_path.is_file():
        raise UsageError(f"{path}: run directory without losses.csv")
    config: dict[str, Any] = {}
    if full_config and (path / "config.yaml").is_file():
        config = flatten_config(read_yaml(path / "config.yaml"))
    config.update({str(k): v for k, v in (summary.get("labels") or {}).items()})
    if summary.get("seed") is not None:
        config["seed"] = summary["seed"]
    part = _csv_part(losses_path, loss, str(path.parent if not full_config else path), run_name=path.name)
    for key, value in config.items():
        part.runs[key] = canon(value)
    part.runs["status"] = summary.get("status")
    part.runs["n_params"] = summary.get("n_params")
    return part


def _numeric(df: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    """The column as float64; a non-numeric cell is an error naming the file and line."""
    col = df[column]
    if pd.api.types.is_numeric_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype):
        return col.to_numpy(np.float64, na_value=np.nan)
    coerced = pd.to_numeric(col, errors="coerce")
    bad = np.flatnonzero(coerced.isna().to_numpy() & col.notna().to_numpy())
    if len(bad):
        i = int(bad[0])
        raise UsageError(f"{path}, line {i + 2}: non-numeric {column} value '{col.iloc[i]}'")
    return coerced.to_numpy(np.float64, na_value=np.nan)


def _epochs(df: pd.DataFrame, path: Path) -> np.ndarray:
    values = _numeric(df, "epoch", path)
    bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)))
    if len(bad):
        i = int(bad[0])
        raise UsageError(f"{path}, line {i + 2}: epoch must be a whole number, got '{df['epoch'].iloc[i]}'")
    return values.astype(np.int64)


def _csv_part(path: Path, loss: str, source: str, seed: str | None = None, run_name: str | None = None) -> _Part:
    """A long-format CSV: epoch, losses, optional `run` and config columns."""
    df = read_table(path)
    missing = [c for c in ("epoch", "train_loss") if c not in df.columns]
    if missing:
        raise UsageError(f"{path}: not a loss table: missing column {' and '.join(missing)} "
                         f"(has: {', '.join(map(str, df.columns)) or 'nothing'})")
    if loss not in df.columns:
        why = ": accuracy needs classification runs (regression runs have none)" if is_accuracy(loss) else ""
        raise UsageError(f"{path}: no {loss} column{why} (has: {', '.join(map(str, df.columns))})")
    if not len(df):
        return _Part(pd.DataFrame({"source": [], "run": []}), np.zeros(0, np.int64), {loss: np.zeros(0)},
                     np.zeros(1, np.int64))
    epoch = _epochs(df, path)
    losses = {c: _numeric(df, c, path) for c in COLUMNS if c in df.columns}
    for c in ACCURACIES:
        if c in losses:
            _check_fraction(df, c, losses[c], path)
    config_cols = [str(c) for c in df.columns if c not in RESERVED]
    key_cols = ["run"] if "run" in df.columns else config_cols
    order, bounds = _blocks(df, key_cols, epoch, path)
    if order is not None:
        epoch = epoch[order]
        losses = {k: v[order] for k, v in losses.items()}
        df = df.iloc[order]
    starts = bounds[:-1]
    runs = pd.DataFrame({c: canon_array(df[c].iloc[starts].to_numpy(object)) for c in config_cols},
                        index=pd.RangeIndex(len(starts)))
    if seed is not None and "seed" not in runs.columns:
        runs["seed"] = seed
    runs["source"] = source
    runs["status"] = df["status"].iloc[starts].to_numpy(object) if "status" in df.columns else None
    if "n_params" in df.columns:  # a fact about each run (compare's `params` column), never a group
        runs["n_params"] = pd.to_numeric(df["n_params"].iloc[starts], errors="coerce").to_numpy()
    if "run" in df.columns:
        runs["run"] = df["run"].iloc[starts].to_numpy(object).astype(str)
    elif run_name is not None and len(starts) == 1:
        runs["run"] = run_name
    else:
        runs["run"] = [f"{path.name}#{i + 1}" for i in range(len(starts))]
    return _Part(runs, epoch, losses, bounds)


def _check_fraction(df: pd.DataFrame, column: str, values: np.ndarray, path: Path) -> None:
    """Accuracies are fractions in [0, 1]: a percentage (85) or a negative value is an error."""
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(np.isfinite(values) & ((values < 0) | (values > 1)))
    if len(bad):
        i = int(bad[0])
        raise UsageError(f"{path}, line {i + 2}: {column} value '{df[column].iloc[i]}' is outside [0, 1] "
                         "(accuracies are fractions, not percentages)")


def _change_points(df: pd.DataFrame, key_cols: Sequence[str]) -> np.ndarray:
    """Rows (after the first) where any key column differs from the row before. Two missing
    values in a row count as a change; _well_formed then sees a repeated key and sorts properly."""
    n = len(df)
    changed = np.zeros(max(n - 1, 0), dtype=bool)
    for c in key_cols:
        changed |= _changed(df[c])
    return np.flatnonzero(changed) + 1


def _changed(col: pd.Series) -> np.ndarray:
    """Per row after the first: whether it differs from the row before (missing != missing)."""
    dtype = col.dtype
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "python" and dtype.na_value is not pd.NA:
        # pandas 3's 'str' columns (NaN for missing): on their object values, 10x faster than
        # col.ne(col.shift()) (a run's rows share one string object, so most compare by identity)
        values = col.to_numpy(object)
        return values[1:] != values[:-1]
    return col.ne(col.shift()).to_numpy(bool)[1:]


def _blocks(df: pd.DataFrame, key_cols: Sequence[str], epoch: np.ndarray,
            path: Path) -> tuple[np.ndarray | None, np.ndarray]:
    """Row order (None: as is) and block bounds so each run is one block with increasing epochs.

    Fast path: the file is already grouped by run and ordered by epoch (results.csv always is)."""
    n = len(df)
    cuts = _change_points(df, key_cols)
    bounds = np.concatenate([[0], cuts, [n]]).astype(np.int64)
    if _well_formed(df, key_cols, epoch, bounds):
        return None, bounds
    codes = df.groupby(list(key_cols), sort=False, dropna=False, observed=True).ngroup().to_numpy() \
        if key_cols else np.zeros(n, dtype=np.int64)
    order = np.lexsort((epoch, codes))
    sorted_codes, sorted_epoch = codes[order], epoch[order]
    cuts = np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1
    bounds = np.concatenate([[0], cuts, [n]]).astype(np.int64)
    inside = np.ones(n - 1, dtype=bool) if n > 1 else np.zeros(0, dtype=bool)
    inside[cuts - 1] = False
    dup = np.flatnonzero(inside & (np.diff(sorted_epoch) == 0))
    if len(dup):
        line = int(order[dup[0] + 1]) + 2
        hint = "" if "run" in key_cols else "; add a run or seed column to tell runs apart"
        raise UsageError(f"{path}, line {line}: epoch {sorted_epoch[dup[0] + 1]} appears twice for the same run{hint}")
    return order, bounds


def _well_formed(df: pd.DataFrame, key_cols: Sequence[str], epoch: np.ndarray, bounds: np.ndarray) -> bool:
    inside = np.ones(len(epoch) - 1, dtype=bool) if len(epoch) > 1 else np.zeros(0, dtype=bool)
    inside[bounds[1:-1] - 1] = False
    if np.any(np.diff(epoch)[inside] <= 0):
        return False
    if not key_cols or len(bounds) <= 2:
        return True
    starts = bounds[:-1]  # one column at a time: df[list].iloc copies the whole columns first (0.3 s at 1M rows)
    keys = pd.DataFrame({c: df[c].iloc[starts].to_numpy(object) for c in key_cols})
    return not keys.duplicated().any()


def _combine(parts: list[_Part], notes: list[str]) -> Loaded:
    if len(parts) == 1:
        p = parts[0]
        runs = p.runs.reset_index(drop=True)
        epoch, losses, bounds = p.epoch, p.losses, p.bounds
    else:
        runs = pd.concat([p.runs for p in parts], ignore_index=True, sort=False)
        epoch = np.concatenate([p.epoch for p in parts])
        names = [k for k in COLUMNS if any(k in p.losses for p in parts)]
        losses = {k: np.concatenate([p.losses.get(k, np.full(len(p.epoch), np.nan)) for p in parts]) for k in names}
        offsets = np.cumsum([0] + [len(p.epoch) for p in parts[:-1]])
        bounds = np.concatenate([p.bounds[:-1] + o for p, o in zip(parts, offsets)] + [[len(epoch)]])
    config_cols = [c for c in runs.columns if c not in RUN_COLS]
    runs[config_cols] = runs[config_cols].astype(object).where(runs[config_cols].notna(), None)
    return Loaded(runs, config_cols, epoch, losses, bounds.astype(np.int64), notes)



def varying_columns(loaded: Loaded) -> list[str]:
    """Config columns with more than one value (where defined) across all inputs."""
    return [c for c in loaded.config_cols if loaded.runs[c].nunique(dropna=True) > 1]
