"""The budget check: were the runs still improving when the training budget ran out?

Per run: its number of epochs (its last logged epoch), the epoch of its best validation score
(the lowest val_loss, or the highest val_acc where a comparison tunes on val_acc; the earliest
epoch on ties, the rule of metrics.py's early_stop), whether that epoch lies in the last 10% of the
run's epochs (`late`: best > 0.9 * epochs) and whether it is the very last epoch (`last`). A run
without validation values falls back to the compared column (said in a note). Diverged runs (a
non-finite value) are counted apart and never as improving.

Per group: the number of scored runs, the diverged runs, and the shares late and last. Where more
than `LATE_SHARE` of a group's runs had their best score late, one warning names those groups: a
longer budget may change the verdict. Vectorised with numpy (reduceat over the runs' bounds);
pure pandas/numpy, no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from activation_bench.analysis.loading import Loaded, higher_is_better
from activation_bench.analysis.stats import filled

LATE_SHARE = 0.25  # warn where more than this share of a group's runs had their best score late
LATE_FRACTION = 0.9  # "late": the best epoch is past 90% of the run's epochs (its last 10%)
SHOWN = 6  # groups named in the warning; the rest are counted
STATS = ["runs", "diverged", "late", "last"]


def _any(mask: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per run: whether any of its rows is set (False for runs without rows)."""
    if not len(mask):
        return np.zeros(len(starts), bool)
    return np.logical_or.reduceat(mask, np.minimum(starts, len(mask) - 1)) & (counts > 0)


def run_budget(loaded: Loaded, on: str = "val_loss",
               fallback: str = "train_loss") -> tuple[pd.DataFrame, str, list[str]]:
    """Per run (rows in the order of `loaded.runs`): `epochs`, `best_epoch` (of the `on` column, the
    `fallback` column for runs without `on` values), `late`, `last` and `status` (ok | diverged |
    missing). Returns (that frame, the column the best epochs are of, notes)."""
    starts, counts = loaded.bounds[:-1], np.diff(loaded.bounds)
    n, rows = len(starts), len(loaded.epoch)
    run = loaded.run_index()
    val = loaded.losses.get(on)
    has_val = _any(np.isfinite(val), starts, counts) if val is not None else np.zeros(n, bool)
    fb = loaded.losses.get(fallback, np.full(rows, np.nan))
    use_val = has_val[run]
    y = np.where(use_val, val, fb) if val is not None else fb
    sign = np.where(use_val, -1.0 if higher_is_better(on) else 1.0, -1.0 if higher_is_better(fallback) else 1.0)
    with np.errstate(invalid="ignore"):
        z = np.where(np.isfinite(y), sign * y, np.inf)
    safe = np.minimum(starts, max(rows - 1, 0))
    epochs = np.where(counts > 0, loaded.epoch[np.maximum(loaded.bounds[1:] - 1, 0)], 0) if rows \
        else np.zeros(n, np.int64)
    best_epoch = np.full(n, -1, np.int64)
    if rows:
        best = np.minimum.reduceat(z, safe)
        pos = np.where(np.isfinite(z) & (z == best[run]), np.arange(rows), rows)
        first = np.minimum.reduceat(pos, safe)
        found = (first < rows) & (counts > 0)
        best_epoch[found] = loaded.epoch[first[found]]
    # diverged: a non-finite value in the scored column (a run whose values are all NaN has none:
    # missing) or in train_loss, or a summary that says so
    diverged = _any(~np.isfinite(y), starts, counts) & _any(~np.isnan(y), starts, counts)
    if "train_loss" in loaded.losses:
        diverged |= _any(~np.isfinite(loaded.losses["train_loss"]), starts, counts)
    diverged |= (loaded.runs["status"] == "diverged").to_numpy() & (counts > 0)
    status = np.where(diverged, "diverged", np.where(best_epoch < 0, "missing", "ok")).astype(object)
    ok = status == "ok"
    out = pd.DataFrame({"epochs": epochs, "best_epoch": np.where(ok, best_epoch, -1),
                        "late": ok & (best_epoch > LATE_FRACTION * epochs), "last": ok & (best_epoch == epochs),
                        "status": status})
    notes: list[str] = []
    if not has_val.any():
        column = fallback
        notes.append(f"no run logs {on}: the budget check uses the best epoch of {fallback}, the compared column")
    else:
        column = on
        k = int((~has_val & (counts > 0)).sum())
        if k:
            notes.append(f"{k} runs log no {on}: the budget check uses their best epoch of {fallback}")
    return out, column, notes


@dataclass
class BudgetCheck:
    """The budget check of a comparison. `table`: one row per group (group columns, tuned keys at
    their chosen values with --tune), `runs` (scored runs), `diverged`, `late` and `last` (shares of
    the scored runs); with --tune these are the judged runs and `runs_all`, `diverged_all`,
    `late_all`, `last_all` every run of the group the verdict reads (the tuning seeds at every grid
    value, the judging seeds at the chosen: read_runs). `overall`: the same four numbers over those
    runs (without --tune, over the runs counted: every run, or a ranking's ranked tasks). `warning`:
    the one line naming the groups above `threshold`."""

    table: pd.DataFrame
    group_cols: list[str]
    tuned_keys: list[str]
    column: str  # whose best epoch: val_loss, val_acc, or the compared column (fallback)
    judged: str  # which runs the per-group numbers count
    overall: dict[str, Any]
    threshold: float = LATE_SHARE
    warning: str | None = None
    notes: list[str] = field(default_factory=list)
    values_shown: bool = True  # whether the rows carry the tuned keys' chosen values (not in rank)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object `budget_check`: raw shares (fractions), NaN as null."""
        return {"column": self.column, "late_fraction": round(1 - LATE_FRACTION, 10), "threshold": self.threshold,
                "judged": self.judged, "group_columns": self.group_cols, "tuned_keys": self.tuned_keys,
                "rows": [{k: _plain(v) for k, v in r.items()} for r in self.table.to_dict("records")],
                "all_runs": {k: _plain(v) for k, v in self.overall.items()},
                "warning": self.warning, "notes": self.notes}

    def per_group(self, table: pd.DataFrame) -> pd.DataFrame:
        """`late` and `last` for every row of `table` (which has the group columns), in its order."""
        if not self.group_cols:
            first = self.table.iloc[:1]
            return pd.DataFrame({c: [first[c].iloc[0] if len(first) else np.nan] * len(table)
                                 for c in ("late", "last")})
        right = self.table[[*self.group_cols, "late", "last"]]
        left = filled(table, self.group_cols).reset_index(drop=True)
        return left.merge(right, on=self.group_cols, how="left")[["late", "last"]]

    def short(self) -> str:
        """One line without group names (for a terminal table's caption): the share over the
        judged runs, and where the per-group shares are."""
        t = self.table
        runs = int(t["runs"].sum()) if len(t) else 0
        late = float((t["late"].fillna(0) * t["runs"]).sum()) if runs else 0.0
        last = float((t["last"].fillna(0) * t["runs"]).sum()) if runs else 0.0
        what = "judged runs" if self.tuned_keys else "runs"
        share = f"{_pct(late / runs)} ({_pct(last / runs)})" if runs else "-"
        warn = f"above {self.threshold:.0%} in some groups: see the warning" if self.warning else \
            f"no group above {self.threshold:.0%}"
        return (f"Budget check: {share} of {runs} {what} had their best {self.column} in the last "
                f"{1 - LATE_FRACTION:.0%} of their epochs (at the last epoch); {warn}; per group: --format "
                "markdown or json.")

    def line(self) -> str:
        """One line for under a table: each group's share late (at the last epoch) of its runs."""
        parts = [f"{_label(self, r)} {_pct(r['late'])} ({_pct(r['last'])}) of {int(r['runs'])}"
                 for _, r in self.table.iterrows()]
        o = self.overall
        what = "judged runs" if self.tuned_keys else "runs"
        text = (f"Budget check: share of {what} whose best {self.column} came in the last "
                f"{1 - LATE_FRACTION:.0%} of their epochs (at the last epoch): {'; '.join(parts) or 'none'}")
        if self.tuned_keys:
            text += f"; all runs read (tuning seeds at every {', '.join(self.tuned_keys)}, judging seeds at the " \
                    "chosen): " \
                    f"{_pct(o['late'])} ({_pct(o['last'])}) of {int(o['runs'])}"
        diverged = int(self.table["diverged"].sum()) if len(self.table) else 0
        if diverged:
            text += f"; {diverged} diverged run(s) not counted"
        if self.notes:
            text += "; " + "; ".join(self.notes)
        warn = f"above {self.threshold:.0%}: see the warning" if self.warning else f"none above {self.threshold:.0%}"
        return f"{text} ({warn})."


def _plain(x: Any) -> Any:
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def _pct(x: Any) -> str:
    return "-" if x is None or not np.isfinite(float(x)) else f"{100 * float(x):.0f}%"


def _label(check: BudgetCheck, row: Any, owner: bool = False) -> str:
    """gelu, or activation=gelu, data=a; `owner`: gelu's runs; tuned values in brackets (lr 0.01)."""
    if len(check.group_cols) == 1:
        name = str(row[check.group_cols[0]])
    else:
        name = ", ".join(f"{c}={row[c]}" for c in check.group_cols) or "all"
    if owner:
        name = f"{name}'s runs" if len(check.group_cols) == 1 else f"the runs of {name}" if check.group_cols \
            else "all runs"
    tuned = ", ".join(f"{k} {row[k]}" for k in check.tuned_keys) if check.values_shown else ""
    return f"{name} ({tuned})" if tuned else name


def _shares(keys: pd.DataFrame, per: pd.DataFrame, suffix: str = "") -> pd.DataFrame:
    """runs, diverged, late, last per group: `keys` holds the group columns of each run (none: one
    group), `per` the run's budget numbers (run_budget's frame), row for row. Kept apart so that no
    group column (a swept `epochs`, say) can meet a budget column of the same name."""
    status = per["status"].to_numpy()
    ok = status == "ok"
    counts = {"ok": ok, "div": status == "diverged", "late": per["late"].to_numpy(bool) & ok,
              "last": per["last"].to_numpy(bool) & ok}
    cols = list(keys.columns)
    if cols and len(keys):
        codes = keys.groupby(cols, sort=False, dropna=False).ngroup().to_numpy()
        _, first = np.unique(codes, return_index=True)  # groups in order of first appearance
        out = keys.iloc[first].reset_index(drop=True)
        sums = {k: np.bincount(codes, weights=v, minlength=len(first)).astype(int) for k, v in counts.items()}
    else:
        out = keys.iloc[:0].reset_index(drop=True) if cols else pd.DataFrame(index=range(1))
        sums = {k: (np.zeros(0, int) if cols else np.array([int(v.sum())])) for k, v in counts.items()}
    runs = sums["ok"]
    with np.errstate(invalid="ignore", divide="ignore"):
        late = np.where(runs > 0, sums["late"] / np.maximum(runs, 1), np.nan)
        last = np.where(runs > 0, sums["last"] / np.maximum(runs, 1), np.nan)
    out[f"runs{suffix}"], out[f"diverged{suffix}"] = runs, sums["div"]
    out[f"late{suffix}"], out[f"last{suffix}"] = late, last
    return out


def budget_check(loaded: Loaded, group_cols: Sequence[str], judged: Sequence[int] | np.ndarray | None = None,
                 selection: Any = None, on: str = "val_loss", fallback: str = "train_loss",
                 threshold: float = LATE_SHARE, order: pd.DataFrame | None = None,
                 verdict: str = "verdict") -> BudgetCheck:
    """The budget check of `loaded`'s runs grouped by `group_cols`. `judged`: the positions (in
    `loaded.runs`) of the runs the verdict rests on, by default every run; `selection` (a
    selection.Selection): the per-group rows carry the chosen values, and `*_all` columns count every
    run the verdict reads (read_runs). `on`: the validation column (val_loss, or val_acc where tuning
    selects on it); runs without it use `fallback`, the compared column. `order`: rows of group values the table
    follows (a compare table's order). `verdict`: what the warning says may change."""
    group_cols = list(group_cols)
    per, column, notes = run_budget(loaded, on, fallback)
    keys = filled(loaded.runs, group_cols).reset_index(drop=True)
    every = np.arange(len(per)) if judged is None else np.asarray(judged, dtype=np.int64)
    table = _shares(keys.iloc[every], per.iloc[every])
    tuned: list[str] = []
    read = every  # the runs `overall` counts: those judged, or with a selection every run the verdict reads
    if selection is not None:
        tuned = list(selection.keys)
        read = read_runs(loaded, every, selection.tune_seeds)
        chosen = selection.chosen[[*group_cols, *tuned]]
        table = chosen.merge(table, on=group_cols, how="left") if group_cols else \
            pd.concat([chosen.reset_index(drop=True), table], axis=1)
        shares_all = _shares(keys.iloc[read], per.iloc[read], "_all")
        table = table.merge(shares_all, on=group_cols, how="left") if group_cols else \
            pd.concat([table, shares_all], axis=1)
        for c in ("runs", "diverged", "runs_all", "diverged_all"):
            table[c] = table[c].fillna(0).astype(int)
    if order is not None and group_cols and len(table):
        pos = order[group_cols].astype(object).reset_index(drop=True).reset_index()
        table = table.merge(pos, on=group_cols, how="left").sort_values("index", kind="stable") \
            .drop(columns="index")
    total = _shares(keys[[]].iloc[read], per.iloc[read])
    overall = {c: total[c].iloc[0] for c in STATS}
    judged_what = ("the judged runs: each group's evaluation seeds at its chosen " + ", ".join(tuned)) if tuned \
        else "every run of the group"
    check = BudgetCheck(table.reset_index(drop=True), group_cols, tuned, column, judged_what, overall, threshold,
                        None, notes)
    check.warning = _warning(check, verdict)
    return check


def read_runs(loaded: Loaded, judged: np.ndarray, tune_seeds: Sequence[str]) -> np.ndarray:
    """The positions of the runs a tuned verdict reads: every run of the tuning seeds (at every grid
    value) and the judged runs. The `_all` shares count these, not every run trained, so that a
    sweep that trained its judging seeds at the chosen values only (sweep --tune) prints the same
    budget check, byte for byte, as the full grid."""
    tuning = loaded.runs["seed"].astype(str).isin([str(s) for s in tune_seeds]).to_numpy()
    mask = tuning.copy()
    mask[np.asarray(judged, dtype=np.int64)] = True
    return np.flatnonzero(mask)


def _warning(check: BudgetCheck, verdict: str) -> str | None:
    """One line naming every group whose share late exceeds the threshold, highest first."""
    t = check.table
    if not len(t):
        return None
    over = t[(t["late"].astype(float) > check.threshold).to_numpy()]
    if not len(over):
        return None
    over = over.iloc[np.argsort(-over["late"].to_numpy(float), kind="stable")]
    named = [f"{_pct(r['late'])} of {_label(check, r, owner=True)}" for _, r in over.head(SHOWN).iterrows()]
    if len(over) > SHOWN:
        named.append(f"and {len(over) - SHOWN} more groups above {check.threshold:.0%}")
    return (f"budget: {', '.join(named)} had their best {check.column} in the last {1 - LATE_FRACTION:.0%} "
            f"of their epochs: runs were still improving; a longer budget may change this {verdict}")


def validation_column(tune: Any) -> str:
    """The validation column a comparison's budget check reads: val_acc where tuning selects on
    it, else val_loss."""
    return "val_acc" if tune is not None and getattr(tune, "on", "val_loss") == "val_acc" else "val_loss"
