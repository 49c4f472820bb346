"""`actbench compare`: loss tables in, paired statistics out. Pure pandas/numpy/scipy (no torch, no rich).

Pipeline: `load(paths)` reads sweep directories, run directories and long-format CSVs into one
`Loaded` (per-run config table + flat epoch/loss arrays, one contiguous block per run);
`run_values` extracts one number per run for a `Metric`; `group_stats` summarises groups;
`comparisons` pairs every group with its baseline by seed and the other config values.
`compare(...)` does all of it and returns a `CompareResult`; rendering lives in render.py.

Loss metrics are compared on a log10 scale: losses span orders of magnitude and hit the float floor
(`FLOOR`, about 1e-13 in float32), where they are clipped and tie.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from activation_bench.errors import UsageError
from activation_bench.runs import finished_summary

FLOOR = 1e-13  # losses at or below this are the float floor: clipped, and equal ones tie
ALPHA = 0.05
LOSSES = ("train_loss", "val_loss", "test_loss")
# facts about a run, not config: never group or pair by them (results.csv carries n_params)
INFO_COLS = ("n_params", "status", "wall_time_s", "diverged_epoch", "epochs_run", "stack_size", "config_hash")
RESERVED = ("run", "epoch", *LOSSES, *INFO_COLS)
RUN_COLS = ("source", "run", "status")  # per-run columns of Loaded.runs that are not config
METRIC_HELP = "final, best, epoch=K, to=EPS, auc, early_stop"


# ---------------------------------------------------------------------------------------------
# metrics


@dataclass(frozen=True)
class Metric:
    kind: str  # final | best | epoch | to | auc | early_stop
    param: float | None = None

    @property
    def label(self) -> str:
        if self.kind == "epoch":
            return f"epoch={int(self.param or 0)}"
        if self.kind == "to":
            return f"to={self.param:g}"
        return self.kind

    @property
    def is_loss(self) -> bool:
        """Loss-valued (compared on log10); `to=EPS` is an epoch count."""
        return self.kind != "to"


def parse_metric(text: str) -> Metric:
    """'final' | 'best' | 'auc' | 'early_stop' | 'epoch=K' (K >= 1) | 'to=EPS' (EPS > 0)."""
    t = text.strip().lower()
    if t in ("final", "best", "auc", "early_stop"):
        return Metric(t)
    key, sep, value = t.partition("=")
    if sep and key in ("epoch", "to"):
        try:
            num = float(value)
        except ValueError:
            num = float("nan")
        if key == "epoch" and num >= 1 and num.is_integer():
            return Metric("epoch", float(int(num)))
        if key == "to" and math.isfinite(num) and num > 0:
            return Metric("to", num)
        need = "a positive integer" if key == "epoch" else "a positive number"
        raise UsageError(f"--metric {text}: {key}= needs {need}")
    raise UsageError(f"unknown metric '{text}'; valid: {METRIC_HELP}")


# ---------------------------------------------------------------------------------------------
# loading


@dataclass
class Loaded:
    """Runs from all inputs. `runs` has one row per run (config columns as canonical strings,
    None where a source does not define the key, plus `source` and `run`); rows of run i are
    `bounds[i]:bounds[i+1]` of `epoch` and `losses[...]`, ordered by epoch."""

    runs: pd.DataFrame
    config_cols: list[str]
    epoch: np.ndarray
    losses: dict[str, np.ndarray]
    bounds: np.ndarray
    warnings: list[str] = field(default_factory=list)

    def run_index(self) -> np.ndarray:
        """Run number of every row."""
        return np.repeat(np.arange(len(self.runs)), np.diff(self.bounds))

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
    """Read sweep dirs, run dirs and long CSVs; every input must have the `loss` column."""
    if loss not in LOSSES:
        raise UsageError(f"unknown loss '{loss}'; valid: {', '.join(LOSSES)}")
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
    if results.is_file():
        part = _csv_part(results, loss, str(path), seed=_sweep_seed(done))
        listed = set(part.runs["run"])
        if set(done) <= listed:
            known = part.runs["run"].map(lambda r: (done.get(r) or {}).get("status"))
            part.runs["status"] = known.where(known.notna(), part.runs["status"])
            return [part]
        notes.append(f"{results} is out of date: reading the run directories instead")
    if done:
        return [_run_dir_part(path / name, loss, summary) for name, summary in done.items()]
    nested = [d for d in subdirs if d not in run_dirs and ((d / "results.csv").is_file() or _subdirs(d))]
    if nested:
        return [p for d in nested for p in _load_sweep_dir(d, loss, notes)]
    if run_dirs:
        return []
    raise UsageError(f"{path}: empty directory: no results.csv, run directories or losses.csv")


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
        config = flatten_config(_read_yaml(path / "config.yaml"))
    config.update({str(k): v for k, v in (summary.get("labels") or {}).items()})
    if summary.get("seed") is not None:
        config["seed"] = summary["seed"]
    part = _csv_part(losses_path, loss, str(path.parent if not full_config else path), run_name=path.name)
    for key, value in config.items():
        part.runs[key] = _canon(value)
    part.runs["status"] = summary.get("status")
    return part


def _read_yaml(path: Path) -> dict:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 (safe loader)
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: cannot read config: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: config is not a mapping")
    return data


def flatten_config(cfg: dict, prefix: str = "") -> dict[str, Any]:
    """Dotted scalar keys; a mapping's `name` (or `_target_`) becomes the value of the key itself,
    so {'activation': {'name': 'gelu'}} gives activation=gelu like a sweep's labels."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            head = value.get("name", value.get("_target_"))
            if head is not None:
                out[name] = head
            rest = {k: v for k, v in value.items() if k not in ("name", "_target_")}
            out.update(flatten_config(rest, name + "."))
        elif isinstance(value, list):
            out[name] = ",".join(str(v) for v in value)
        else:
            out[name] = value
    return out


_NULLS = {"", "none", "null", "nan"}


def _canon(value: Any) -> str | None:
    """A config value as a canonical string: 1e-3 and 0.001 match, 3 and 3.0 match, null is None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    low = text.lower()
    if low in _NULLS:
        return None
    if low in ("true", "false"):
        return low
    try:
        num = float(text)
    except ValueError:
        return text
    if num.is_integer() and abs(num) < 2**53:
        return str(int(num))
    return repr(num)


def _canon_array(values: np.ndarray) -> np.ndarray:
    cache: dict[Any, str | None] = {}
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        key = "nan" if pd.isna(v) else (type(v), v)
        if key not in cache:
            cache[key] = _canon(v)
        out[i] = cache[key]
    return out


def _read_table(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, engine="c")
    except pd.errors.EmptyDataError:
        raise UsageError(f"{path}: empty file") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: cannot parse CSV: {str(exc).splitlines()[0]}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


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
    df = _read_table(path)
    missing = [c for c in ("epoch", "train_loss") if c not in df.columns]
    if missing:
        raise UsageError(f"{path}: not a loss table: missing column {' and '.join(missing)} "
                         f"(has: {', '.join(map(str, df.columns)) or 'nothing'})")
    if loss not in df.columns:
        raise UsageError(f"{path}: no {loss} column (has: {', '.join(map(str, df.columns))})")
    if not len(df):
        return _Part(pd.DataFrame({"source": [], "run": []}), np.zeros(0, np.int64), {loss: np.zeros(0)},
                     np.zeros(1, np.int64))
    epoch = _epochs(df, path)
    losses = {c: _numeric(df, c, path) for c in LOSSES if c in df.columns}
    config_cols = [str(c) for c in df.columns if c not in RESERVED]
    key_cols = ["run"] if "run" in df.columns else config_cols
    order, bounds = _blocks(df, key_cols, epoch, path)
    if order is not None:
        epoch = epoch[order]
        losses = {k: v[order] for k, v in losses.items()}
        df = df.iloc[order]
    starts = bounds[:-1]
    runs = pd.DataFrame({c: _canon_array(df[c].iloc[starts].to_numpy(object)) for c in config_cols},
                        index=pd.RangeIndex(len(starts)))
    if seed is not None and "seed" not in runs.columns:
        runs["seed"] = seed
    runs["source"] = source
    runs["status"] = df["status"].iloc[starts].to_numpy(object) if "status" in df.columns else None
    if "run" in df.columns:
        runs["run"] = df["run"].iloc[starts].to_numpy(object).astype(str)
    elif run_name is not None and len(starts) == 1:
        runs["run"] = run_name
    else:
        runs["run"] = [f"{path.name}#{i + 1}" for i in range(len(starts))]
    return _Part(runs, epoch, losses, bounds)


def _change_points(df: pd.DataFrame, key_cols: Sequence[str]) -> np.ndarray:
    """Rows (after the first) where any key column differs from the row before. Two missing
    values in a row count as a change; _well_formed then sees a repeated key and sorts properly."""
    n = len(df)
    changed = np.zeros(max(n - 1, 0), dtype=bool)
    for c in key_cols:  # pandas' own comparison: 3.5x faster than on an object array for string columns
        col = df[c]
        changed |= col.ne(col.shift()).to_numpy(bool)[1:]
    return np.flatnonzero(changed) + 1


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
    keys = df[list(key_cols)].iloc[bounds[:-1]]
    return not keys.duplicated().any()


def _combine(parts: list[_Part], notes: list[str]) -> Loaded:
    if len(parts) == 1:
        p = parts[0]
        runs = p.runs.reset_index(drop=True)
        epoch, losses, bounds = p.epoch, p.losses, p.bounds
    else:
        runs = pd.concat([p.runs for p in parts], ignore_index=True, sort=False)
        epoch = np.concatenate([p.epoch for p in parts])
        names = [k for k in LOSSES if any(k in p.losses for p in parts)]
        losses = {k: np.concatenate([p.losses.get(k, np.full(len(p.epoch), np.nan)) for p in parts]) for k in names}
        offsets = np.cumsum([0] + [len(p.epoch) for p in parts[:-1]])
        bounds = np.concatenate([p.bounds[:-1] + o for p, o in zip(parts, offsets)] + [[len(epoch)]])
    config_cols = [c for c in runs.columns if c not in RUN_COLS]
    runs[config_cols] = runs[config_cols].astype(object).where(runs[config_cols].notna(), None)
    return Loaded(runs, config_cols, epoch, losses, bounds.astype(np.int64), notes)


# ---------------------------------------------------------------------------------------------
# one value per run


def varying_columns(loaded: Loaded) -> list[str]:
    """Config columns with more than one value (where defined) across all inputs."""
    return [c for c in loaded.config_cols if loaded.runs[c].nunique(dropna=True) > 1]


def run_values(loaded: Loaded, metric: Metric, loss: str = "train_loss", floor: float = FLOOR) -> pd.DataFrame:
    """Per run: `value` of the metric and `status`: ok | diverged | not_reached | missing.

    Diverged runs (any NaN/inf loss) never get a value. For loss metrics `log10` is the log10 of
    the value clipped at the floor (for auc the value is already a mean log10 loss)."""
    if loss not in loaded.losses:
        raise UsageError(f"no input has a {loss} column")
    if metric.kind == "early_stop" and "val_loss" not in loaded.losses:
        raise UsageError("--metric early_stop needs a val_loss column (real or function data, or data.n_val > 0)")
    y, starts = loaded.losses[loss], loaded.bounds[:-1]
    counts = np.diff(loaded.bounds)
    nonfinite = ~np.isfinite(y)
    empty = counts == 0
    diverged = np.logical_or.reduceat(nonfinite, starts) if len(y) else np.zeros(len(starts), bool)
    # the trainer stops a run when it diverges; its summary says so even if the last loss written is finite
    diverged |= (loaded.runs["status"] == "diverged").to_numpy()
    diverged &= ~empty
    all_nan = np.logical_and.reduceat(np.isnan(y), starts) if len(y) else np.ones(len(starts), bool)
    value, log10 = _metric_values(loaded, metric, y, floor)
    status = np.where(diverged, "diverged", np.where(np.isnan(value), "missing", "ok")).astype(object)
    if metric.kind == "to":
        status[(status == "missing")] = "not_reached"
    # a run whose loss is all NaN: diverged at epoch 1 (train_loss), or no values in that column (val_loss)
    status[empty | (all_nan if loss != "train_loss" else False)] = "missing"
    bad = status != "ok"
    value[bad], log10[bad] = np.nan, np.nan
    out = loaded.runs.copy()
    out["value"], out["log10"], out["status"] = value, log10, status
    return out


def _metric_values(loaded: Loaded, metric: Metric, y: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    starts, ends = loaded.bounds[:-1], loaded.bounds[1:]
    n = len(starts)
    counts = ends - starts
    if len(y) == 0:
        return np.full(n, np.nan), np.full(n, np.nan)
    safe_starts = np.minimum(starts, len(y) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        logy = np.log10(np.maximum(y, floor))
        if metric.kind == "final":
            value = np.where(counts > 0, y[np.maximum(ends - 1, 0)], np.nan)
        elif metric.kind == "best":
            value = np.fmin.reduceat(y, safe_starts)
        elif metric.kind == "epoch":
            value = np.full(n, np.nan)
            hit = np.flatnonzero(loaded.epoch == int(metric.param or 0))
            value[loaded.run_index()[hit]] = y[hit]
        elif metric.kind == "early_stop":
            value = _early_stop(loaded, y)
        elif metric.kind == "to":
            reached = np.where(y <= (metric.param or 0.0), loaded.epoch.astype(np.float64), np.inf)
            value = np.minimum.reduceat(reached, safe_starts)
            value[~np.isfinite(value)] = np.nan
            return np.where(counts > 0, value, np.nan), value.copy()
        else:  # auc: mean log10 loss over the epochs
            value = np.add.reduceat(np.where(np.isfinite(logy), logy, 0.0), safe_starts) / np.maximum(counts, 1)
            return value, value.copy()
        value = np.where(counts > 0, value, np.nan)
        return value, np.log10(np.maximum(value, floor))


def _early_stop(loaded: Loaded, y: np.ndarray) -> np.ndarray:
    """Per run: y at the epoch of the lowest val_loss (earliest on ties); NaN without val_loss."""
    val = loaded.losses["val_loss"]
    starts, n = loaded.bounds[:-1], len(val)
    safe = np.minimum(starts, n - 1)
    with np.errstate(invalid="ignore"):
        best = np.fmin.reduceat(np.where(np.isfinite(val), val, np.nan), safe)
    run = loaded.run_index()
    pos = np.where(val == best[run], np.arange(n), n)  # NaN never equals: runs without val_loss stay at n
    first = np.minimum.reduceat(pos, safe)
    first[np.diff(loaded.bounds) == 0] = n
    return np.where(first < n, y[np.minimum(first, n - 1)], np.nan)


def default_loss(loaded: Loaded, metric: Metric, loss: str | None) -> str:
    """--loss when given; else test_loss for early_stop where the inputs have it; else train_loss."""
    if loss is not None:
        return loss
    return "test_loss" if metric.kind == "early_stop" and "test_loss" in loaded.losses else "train_loss"


# ---------------------------------------------------------------------------------------------
# groups


def resolve_groups(loaded: Loaded, by: Sequence[str] | None) -> list[str]:
    """--by columns (checked), else every varying config column except seed."""
    if by:
        cols = [c.strip() for item in by for c in str(item).split(",") if c.strip()]
        unknown = [c for c in cols if c not in loaded.config_cols]
        if unknown:
            have = ", ".join(loaded.config_cols) or "none"
            raise UsageError(f"--by {','.join(unknown)}: no such config column (columns: {have})")
        return list(dict.fromkeys(cols))
    return [c for c in varying_columns(loaded) if c != "seed"]


def _t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    n = len(x)
    if n < 2:
        return (float("nan"), float("nan"))
    m, se = float(np.mean(x)), float(np.std(x, ddof=1)) / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return (m - half, m + half)


def group_stats(values: pd.DataFrame, group_cols: Sequence[str], metric: Metric) -> pd.DataFrame:
    """One row per group: n, mean, std, median, geo_mean, ci_low, ci_high, n_diverged, n_not_reached,
    n_missing. Loss metrics: geo_mean and CI are 10**(mean log10 and its 95% t interval).
    Epoch counts (to=EPS): the CI is the t interval of the mean epochs of runs that reached EPS."""
    value, log10 = values["value"].to_numpy(float), values["log10"].to_numpy(float)
    status = values["status"].to_numpy(object)
    rows = []
    for key, idx in group_index(values, group_cols):
        st = status[idx]
        ok = idx[st == "ok"]
        v, lg = value[ok], log10[ok]
        row: dict[str, Any] = dict(zip(group_cols, key))
        row.update(metric=metric.label, n=len(ok), mean=_safe(np.mean, v), std=_safe(np.std, v, ddof=1, need=2),
                   median=_safe(np.median, v))
        if metric.is_loss:
            lo, hi = _t_interval(lg)
            row.update(geo_mean=10 ** _safe(np.mean, lg), ci_low=10**lo, ci_high=10**hi)
        else:
            lo, hi = _t_interval(v)
            row.update(geo_mean=float("nan"), ci_low=lo, ci_high=hi)
        row.update(n_diverged=int(np.sum(st == "diverged")), n_not_reached=int(np.sum(st == "not_reached")),
                   n_missing=int(np.sum(st == "missing")))
        rows.append(row)
    return pd.DataFrame(rows, columns=[*group_cols, *STAT_COLS])


def _safe(fn: Any, x: np.ndarray, need: int = 1, **kw: Any) -> float:
    return float(fn(x, **kw)) if len(x) >= need else float("nan")


def _filled(df: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """The columns with missing values spelled '(none)' (so they group and join)."""
    return pd.DataFrame({c: df[c].astype(object).where(df[c].notna(), "(none)") for c in cols}, index=df.index)


def group_index(df: pd.DataFrame, cols: Sequence[str]) -> list[tuple[tuple, np.ndarray]]:
    """(key, row positions) per group, groups in order of first appearance; missing = '(none)'."""
    if not cols:
        return [((), np.arange(len(df)))]
    if not len(df):
        return []
    filled = _filled(df, cols)
    codes = filled.groupby(list(cols), sort=False).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    parts = np.split(order, cuts)
    keys = filled.to_numpy(object)
    return [(tuple(keys[p[0]]), p) for p in parts]


# ---------------------------------------------------------------------------------------------
# paired comparisons


def parse_baseline(text: str | None, group_cols: Sequence[str], values: pd.DataFrame) -> tuple[str, str] | None:
    """KEY=VALUE, checked against the groups; default: the first value of the first group column."""
    if not group_cols:
        if text:
            raise UsageError(f"--baseline {text}: nothing varies between the runs, so there are no groups")
        return None
    if not text:
        first = values[group_cols[0]].dropna()
        return (group_cols[0], str(first.iloc[0])) if len(first) else None
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"--baseline {text}: expected KEY=VALUE, e.g. activation=relu")
    if key not in group_cols:
        raise UsageError(f"--baseline {text}: '{key}' is not a group column (group columns: {', '.join(group_cols)})")
    want = _canon(raw)
    present = [str(v) for v in values[key].dropna().unique()]
    if want not in present:
        raise UsageError(f"--baseline {text}: no runs with {key}={raw} (values: {', '.join(present)})")
    return key, str(want)


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values; NaN entries are left out of the family and stay NaN."""
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = len(idx)
    if not m:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = adj
    return out


def paired_test(d: np.ndarray) -> dict[str, Any]:
    """Statistics of paired differences d (candidate - baseline; negative = candidate better):
    mean_diff, sd_diff, win_rate (share of pairs with d < 0), n_ties, paired t-test p (two-sided, equal to
    scipy.stats.ttest_rel), Wilcoxon signed-rank p (scipy, Pratt's zero handling), Cohen's d_z,
    and a note for degenerate cases (all pairs tie: p = 1)."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    out: dict[str, Any] = dict(n_pairs=n, n_ties=int(np.sum(d == 0)), mean_diff=_safe(np.mean, d),
                               sd_diff=_safe(np.std, d, ddof=1, need=2),
                               win_rate=float(np.mean(d < 0)) if n else float("nan"),
                               p_t=float("nan"), p_wilcoxon=float("nan"), d_z=float("nan"), note="")
    if n < 2:
        out["note"] = f"{n} pair{'s' if n != 1 else ''}: no test"
        return out
    if np.all(d == 0):
        out.update(p_t=1.0, p_wilcoxon=1.0, d_z=0.0, note=f"all {n} pairs tie: every paired difference is exactly zero")
        return out
    sd = float(np.std(d, ddof=1))
    if sd <= 1e-12 * max(abs(out["mean_diff"]), 1e-300):
        out["note"] = "paired differences are all equal: no t-test"
    else:
        out["d_z"] = out["mean_diff"] / sd
        t = out["d_z"] * math.sqrt(n)
        out["p_t"] = float(min(1.0, 2 * stats.t.sf(abs(t), n - 1)))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out["p_wilcoxon"] = float(stats.wilcoxon(d, zero_method="pratt").pvalue)
    if out["n_ties"] and not out["note"]:
        out["note"] = f"{out['n_ties']} tied pair{'s' if out['n_ties'] != 1 else ''}"
    return out


_KEEP = ["log10", "value", "status"]


def pair_up(values: pd.DataFrame, group_cols: Sequence[str], baseline: tuple[str, str], pair_cols: Sequence[str],
            notes: list[str]) -> pd.DataFrame:
    """Every non-baseline run joined to the baseline run with the same pair_cols values (seed and
    every other varying config value), in one merge. Columns: group columns, then log10/value/status
    with suffixes _c (candidate) and _b (baseline)."""
    key, base_value = baseline
    cols = list(dict.fromkeys([*group_cols, *pair_cols]))
    frame = pd.concat([_filled(values, cols), values[_KEEP]], axis=1)
    is_base = (frame[key] == base_value).to_numpy()
    base = _dedupe(frame[is_base], pair_cols, notes, f"baseline {key}={base_value}")
    cand = _dedupe(frame[~is_base], cols, notes, "compared groups")
    if not pair_cols:  # one run per group and nothing to pair by: pair with the single baseline run
        if len(base) != 1:
            return cand.iloc[:0].assign(**{f"{k}_b": [] for k in _KEEP}).rename(columns={k: f"{k}_c" for k in _KEEP})
        return cand.rename(columns={k: f"{k}_c" for k in _KEEP}).assign(
            **{f"{k}_b": base[k].iloc[0] for k in _KEEP})
    right = base[[*pair_cols, *_KEEP]]
    return cand.merge(right, on=list(pair_cols), how="inner", suffixes=("_c", "_b"))


def _dedupe(df: pd.DataFrame, cols: Sequence[str], notes: list[str], label: str) -> pd.DataFrame:
    if not cols:
        return df
    dup = df.duplicated(subset=list(cols), keep="first")
    if dup.any():
        notes.append(f"{label}: {int(dup.sum())} runs share seed and config with another run; "
                     "only the first of each is paired")
    return df[~dup.to_numpy()]


def compare_one(pairs: pd.DataFrame, metric: Metric) -> dict[str, Any]:
    """Paired statistics for one candidate group against its baseline.

    Loss metrics: differences of log10 loss, ratio = 10**mean_diff (geometric-mean ratio).
    to=EPS: differences of epochs over pairs where both reached EPS, ratio = mean epochs ratio;
    the win rate counts a run that reached EPS against one that did not as a win."""
    sc, sb = pairs["status_c"].to_numpy(object), pairs["status_b"].to_numpy(object)
    both_ok = (sc == "ok") & (sb == "ok")
    if metric.is_loss:
        d = (pairs["log10_c"].to_numpy(float) - pairs["log10_b"].to_numpy(float))[both_ok]
        out = paired_test(d)
        out["ratio"] = 10 ** out["mean_diff"] if out["n_pairs"] else float("nan")
        if out["n_pairs"] >= 2 and out["n_ties"] == out["n_pairs"]:
            vc, vb = pairs["value_c"].to_numpy(float), pairs["value_b"].to_numpy(float)
            out["note"] = _tie_note(vc[both_ok], vb[both_ok])
        return out
    vc, vb = pairs["value_c"].to_numpy(float), pairs["value_b"].to_numpy(float)
    out = paired_test(vc[both_ok] - vb[both_ok])
    out["ratio"] = float(vc[both_ok].mean() / vb[both_ok].mean()) if both_ok.any() else float("nan")
    usable = np.isin(sc, ["ok", "not_reached"]) & np.isin(sb, ["ok", "not_reached"])
    ec, eb = np.where(sc == "ok", vc, np.inf)[usable], np.where(sb == "ok", vb, np.inf)[usable]
    out["win_rate"] = float(np.mean(ec < eb)) if len(ec) else float("nan")
    return out


def _tie_note(vc: np.ndarray, vb: np.ndarray) -> str:
    """Why every pair of a loss metric ties: the same losses (identical functions on these inputs,
    e.g. relu6 and relu below 6, celu and elu at alpha 1), or both runs clipped at the float floor."""
    n, same = len(vc), int(np.sum(vc == vb))
    if same == n:
        return f"all {n} pairs tie: identical losses (every paired difference is exactly zero)"
    if same == 0:
        return f"all {n} pairs tie: both runs at or below the float floor in every pair"
    return f"all {n} pairs tie: identical losses in {same}, both at or below the float floor in {n - same}"


COMPARE_COLS = ["baseline", "n_pairs", "n_ties", "mean_diff", "sd_diff", "ratio", "win_rate", "p_t", "p_wilcoxon",
                "p_t_holm", "p_wilcoxon_holm", "d_z", "significant", "note"]


def comparisons(values: pd.DataFrame, group_cols: Sequence[str], baseline: tuple[str, str], metric: Metric,
                pair_cols: Sequence[str], notes: list[str]) -> pd.DataFrame:
    """One row per non-baseline group: paired statistics against the baseline runs that share seed
    and the other config values (so the other group columns match too); Holm-corrected across rows."""
    key, base_value = baseline
    pairs = pair_up(values, group_cols, baseline, pair_cols, notes)
    by_group = {k: idx for k, idx in group_index(pairs, group_cols)}
    rows = []
    for gkey, _ in group_index(values, group_cols):
        labels = dict(zip(group_cols, gkey))
        if labels[key] == base_value:
            continue
        res = compare_one(pairs.iloc[by_group.get(gkey, np.zeros(0, np.int64))], metric)
        if res["n_pairs"] < 2:
            desc = ", ".join(f"{k}={v}" for k, v in labels.items())
            notes.append(f"{desc}: only {res['n_pairs']} pair(s) with the baseline {key}={base_value}; no test")
        rows.append({**labels, "baseline": f"{key}={base_value}", **res})
    out = pd.DataFrame(rows, columns=[*group_cols, *COMPARE_COLS])
    if len(out):
        out["p_t_holm"] = holm(out["p_t"].to_numpy(float))
        out["p_wilcoxon_holm"] = holm(out["p_wilcoxon"].to_numpy(float))
        out["significant"] = (out["p_t_holm"] < ALPHA) & (out["p_wilcoxon_holm"] < ALPHA)
    return out


# ---------------------------------------------------------------------------------------------
# everything


@dataclass
class CompareResult:
    table: pd.DataFrame  # group columns, metric, n, mean, std, median, geo_mean, ci_low, ci_high, ...
    group_cols: list[str]
    metric: Metric
    loss: str
    baseline: tuple[str, str] | None
    pair_cols: list[str]
    warnings: list[str]
    floor: float = FLOOR
    power: Any = None  # a power.PowerSpec when --power was given

    @property
    def methods(self) -> list[str]:
        """Footer lines: how the numbers were computed."""
        return method_notes(self)


def method_notes(res: CompareResult) -> list[str]:
    m = res.metric
    lines = []
    if m.is_loss:
        scale = "mean log10 loss per run (auc)" if m.kind == "auc" else f"{res.loss} ({m.label})"
        if m.kind == "early_stop":
            scale = f"{res.loss} at each run's epoch of lowest val_loss (early_stop; earliest on ties)"
        lines.append(f"Metric: {scale}. Loss metrics are compared on a log10 scale; losses <= {res.floor:g} "
                     "(float floor) are clipped there, so runs at the floor tie.")
        lines.append("geo_mean = 10^(mean log10); 95% CI: t interval of the mean log10 value, converted back.")
    else:
        lines.append(f"Metric: first epoch with {res.loss} <= {m.param:g}; runs that never get there are counted "
                     "as not reached; 95% CI: t interval of the mean epochs of the runs that reached it.")
        if res.baseline is not None:
            lines.append("Tests use the pairs where both runs reached it (n_pairs); the win rate also counts "
                         "reaching it against not reaching it as a win.")
    lines.append("Diverged runs (NaN/inf loss) are counted apart and left out of every statistic.")
    if res.baseline is not None:
        pair = ", ".join(res.pair_cols) or "nothing (one run per group)"
        diff = "log10 loss (ratio = geometric-mean ratio)" if m.is_loss else "epochs (ratio = ratio of mean epochs)"
        lines.append(f"Paired vs {res.baseline[0]}={res.baseline[1]} by {pair}: differences of {diff}; "
                     "win = share of pairs where the group is strictly better; ratio < 1 is better.")
        lines.append(f"p: paired t-test and Wilcoxon signed-rank (Pratt zeros), Holm-corrected; "
                     f"* = both corrected p < {ALPHA:g}. d_z = mean/sd of paired differences.")
        if res.power is not None:
            from activation_bench.power import method_note

            lines.append(method_note(res.power))
    return lines


EXTRA_COLS = ["seeds_needed", "min_detectable_ratio"]  # with --power (power.POWER_COLS)
STAT_COLS = ["metric", "n", "mean", "std", "median", "geo_mean", "ci_low", "ci_high",
             "n_diverged", "n_not_reached", "n_missing"]


def compare(loaded: Loaded, metric: Metric | str = "final", by: Sequence[str] | None = None,
            baseline: str | None = None, loss: str = "train_loss", floor: float = FLOOR,
            power: Any = None) -> CompareResult:
    """Group, summarise and pair-compare the loaded runs. Rows come best first within each
    combination of the group columns other than the baseline key. `power` (a power.PowerSpec)
    adds the columns seeds_needed and min_detectable_ratio to the comparisons."""
    metric = parse_metric(metric) if isinstance(metric, str) else metric
    if power is not None and not metric.is_loss:
        raise UsageError(f"--power works on loss metrics (log10 ratios), not --metric {metric.label}")
    notes = list(loaded.warnings)
    values = run_values(loaded, metric, loss, floor)
    group_cols = resolve_groups(loaded, by)
    if metric.kind == "epoch" and not (values["status"] != "missing").any():
        raise UsageError(f"--metric {metric.label}: no run has epoch {int(metric.param or 0)}")
    _note_missing(values, metric, notes)
    table = group_stats(values, group_cols, metric)
    base = parse_baseline(baseline, group_cols, values)
    pair_cols: list[str] = []
    if base is not None:
        pair_cols = [c for c in varying_columns(loaded) if c != base[0]]
        comp = comparisons(values, group_cols, base, metric, pair_cols, notes)
        if power is not None:
            from activation_bench.power import add_power

            comp = add_power(comp, power)
        table = table.merge(comp, on=list(group_cols), how="left") if group_cols else table
        table["is_baseline"] = table[base[0]] == base[1]
    table = _order(_tidy(table), group_cols, base, metric)
    extra = [*COMPARE_COLS, *EXTRA_COLS, "is_baseline"]
    cols = [*group_cols, *STAT_COLS] + [c for c in extra if c in table.columns]
    return CompareResult(table[cols].reset_index(drop=True), list(group_cols), metric, loss, base,
                         pair_cols, notes, floor, power)


def _tidy(table: pd.DataFrame) -> pd.DataFrame:
    """Counts as (nullable) integers, flags as (nullable) booleans, empty notes as ''."""
    for c in ("n", "n_diverged", "n_not_reached", "n_missing", "n_pairs", "n_ties", "seeds_needed"):
        if c in table.columns:
            table[c] = table[c].astype("Int64")
    for c in ("significant", "is_baseline"):
        if c in table.columns:
            table[c] = table[c].astype("boolean")
    if "note" in table.columns:
        table["note"] = table["note"].fillna("").astype(object)
    if "baseline" in table.columns:
        table["baseline"] = table["baseline"].fillna("").astype(object)
    return table


def _note_missing(values: pd.DataFrame, metric: Metric, notes: list[str]) -> None:
    n_missing = int((values["status"] == "missing").sum())
    if n_missing:
        why = f"have no epoch {int(metric.param or 0)}" if metric.kind == "epoch" else "have no loss values"
        notes.append(f"{n_missing} runs {why}: left out")


def _order(table: pd.DataFrame, group_cols: Sequence[str], base: tuple[str, str] | None,
           metric: Metric) -> pd.DataFrame:
    """Best first (lowest geo_mean, or most reached then fewest epochs), within blocks of the
    group columns other than the baseline key (e.g. per data distribution)."""
    if not len(table):
        return table
    blocks = [c for c in group_cols if base is None or c != base[0]][: max(len(group_cols) - 1, 0)]
    t = table.copy()
    t["_block"] = t.groupby(blocks, sort=False, dropna=False).ngroup() if blocks else 0
    if metric.is_loss:
        t["_k1"], t["_k2"] = 0.0, t["geo_mean"].fillna(np.inf)
    else:
        t["_k1"] = t["n_not_reached"] / (t["n"] + t["n_not_reached"]).clip(lower=1)
        t["_k2"] = t["mean"].fillna(np.inf)
    t = t.sort_values(["_block", "_k1", "_k2"], kind="stable")
    return t.drop(columns=["_block", "_k1", "_k2"])


def run_compare(paths: Sequence[str | Path], metric: str = "final", by: Sequence[str] | None = None,
                baseline: str | None = None, loss: str | None = None, floor: float = FLOOR) -> CompareResult:
    """load + compare, with the metric checked before any file is read. loss None: train_loss, or
    test_loss for early_stop where the inputs have it (`default_loss`)."""
    m = parse_metric(metric)
    loaded = load(paths, loss or "train_loss")
    return compare(loaded, m, by, baseline, default_loss(loaded, m, loss), floor)

