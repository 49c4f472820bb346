"""The report's tuning section (`actbench report --tune KEY`): the sensitivity figure with each
group's chosen value starred, the chosen values, the seeds used, and the tuning budget (the expected
best selection score after k of the grid's values, Dodge et al. 2019)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from activation_bench.analysis.expected_best import budget
from activation_bench.errors import UsageError


def _fmt(x: float, unit: str) -> str:
    """A selection score: an accuracy (in %), else log10 of a loss or of epochs (shown as such)."""
    if x is None or not np.isfinite(x):
        return "-"
    if unit == "accuracy":
        return f"{100 * x:.2f}%"
    return f"{10 ** x:.4g}" if unit == "loss" else f"{10 ** x:.4g} epochs"


def _unit(sel: Any, res: Any) -> str:
    """What the selection score is: "accuracy" (--tune-on val_acc), "epochs" (to=EPS) or "loss"."""
    if not res.metric.is_loss:
        return "epochs"
    return "accuracy" if getattr(sel, "higher_is_better", False) else "loss"


def _stars(sel: Any, loaded: Any, key: str) -> pd.DataFrame:
    """The chosen (panel, line, x) of every kept group, labelled as the sensitivity figure labels them."""
    from activation_bench.render.labels import group_labels as _labels
    from activation_bench.render.sensitivity import layout

    panels, lines = layout(loaded, key)
    chosen = sel.chosen.replace("(none)", None)
    return pd.DataFrame({"panel": _labels(chosen, panels), "line": _labels(chosen, lines),
                         "x": pd.to_numeric(chosen[key], errors="coerce").to_numpy(float)})


def tuning_section(loaded: Any, res: Any, svg: Any) -> dict[str, Any] | None:
    """Everything the template's tuning section shows, or None without --tune. `svg` turns a
    matplotlib figure into inline SVG (report.svg)."""
    sel = res.tuning
    if sel is None:
        return None
    from activation_bench.render.sensitivity import sensitivity_figure

    unit = _unit(sel, res)
    figures, notes = [], []
    for key in sel.keys:
        try:
            stars = _stars(sel, loaded, key) if len(sel.keys) == 1 else None
            fig = sensitivity_figure(loaded, key, res.metric, res.loss, chosen=stars, baseline=res.baseline)
            figures.append({"key": key, "svg": svg(fig, f"sensitivity-{key.replace('.', '-')}")})
        except UsageError as exc:
            notes.append(f"no sensitivity figure for {key}: {exc}")
    cols = [*sel.group_cols, *sel.keys]
    chosen = [[str(r[c]) for c in cols] + [_fmt(r["tune_score"], unit), str(int(r["tune_n"]))]
              for _, r in sel.chosen.iterrows()]
    b = budget(sel)
    n_grid = int(b["k"].max()) if len(b) else 0
    rows = []
    for key, part in (b.groupby(sel.group_cols, sort=False) if sel.group_cols else [((), b)]):
        key = key if isinstance(key, tuple) else (key,)
        cells = [_fmt(v, unit) + (f" (all fail {p:.0%})" if p and p > 0.005 else "")
                 for v, p in zip(part["expected_best"], part["p_all_failed"])]
        rows.append([*map(str, key), *cells])
    return {"keys": sel.keys, "figures": figures, "chosen_headers": [*cols, f"selection score ({sel.selected_on})",
            "tuning runs"], "chosen": chosen, "tune_seeds": ", ".join(sel.tune_seeds),
            "eval_seeds": ", ".join(sel.eval_seeds), "selected_on": sel.selected_on,
            "rule": "the highest mean of the metric" if unit == "accuracy" else "the lowest mean log10 of the metric",
            "budget_headers": [*sel.group_cols, *[f"k={k}" for k in range(1, n_grid + 1)]], "budget": rows,
            "left_out": sel.dropped, "notes": [*sel.notes, *notes]}
