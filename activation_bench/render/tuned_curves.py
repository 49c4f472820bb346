"""Tuned curves (`actbench plot --tune KEY`, `report --tune KEY`): each group's curve at its own
tuned value, the median and interquartile band over the judging (evaluation) seeds only.

The values are chosen exactly as `compare --tune` chooses them (analysis/tune.py: `tuned_values`
on the metric, the same tuning and evaluation seeds); a figure never re-implements the selection.
The legend names each group's chosen value (`gelu (lr 0.003)`) and marks one at an end of its grid
(`lr 0.1, grid max`). Pure pandas/numpy/matplotlib: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from activation_bench.analysis.loading import Loaded
from activation_bench.analysis.metrics import FLOOR, Metric
from activation_bench.analysis.selection import Selection
from activation_bench.analysis.tune import TuneSpec, _seed_list, eval_mask
from activation_bench.render.labels import group_labels as _labels
from activation_bench.render.plots import (
    check_output,
    companion_accuracy,
    curve_layout,
    curve_stats,
    curves_figure,
    save_figure,
)


@dataclass
class TunedCurves:
    """What a tuned-curves figure draws: the Selection (chosen values, tuning and evaluation seeds),
    the panel and line columns, `drawn` (per run of loaded.runs: an evaluation seed at its group's
    chosen values), `legend` (line -> legend text with its chosen value; "tuned per panel" where the
    panels chose differently) and `panel_legends` (panel -> line -> text, only then); `notes` are
    the selection's warnings, as compare prints them."""

    selection: Selection
    panels: list[str]
    lines: list[str]
    drawn: np.ndarray
    legend: dict[str, str]
    panel_legends: dict[str, dict[str, str]] | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self, metric_label: str) -> str:
        """`over` for the figure's title: which seeds, and how the values were chosen."""
        sel = self.selection
        return (f"the judging seeds ({_seeds(sel.eval_seeds)}), each group at its tuned {', '.join(sel.keys)} "
                f"(chosen by {metric_label} of {sel.selected_on} on {_seeds(sel.tune_seeds)}, as compare --tune)")


def _seeds(seeds: Sequence[str]) -> str:
    return _seed_list(list(seeds))


def default_metric(loaded: Loaded) -> Metric:
    """early_stop where the runs have val_loss, else final (as `plot --x` and compare's tables)."""
    from activation_bench.analysis.metrics import parse_metric

    return parse_metric("early_stop" if "val_loss" in loaded.losses else "final")


def select_curves(loaded: Loaded, tune: TuneSpec, metric: Metric | str | None = None,
                  by: Sequence[str] | None = None, floor: float = FLOOR) -> TunedCurves:
    """Choose each group's tuned values as `compare --tune` does and say which runs are drawn.

    Groups: every varying config column except seed and the tuned keys (compare's groups without
    --by); panels as `plot` lays them out (per task, or per `by` column, which join the groups).
    `metric` (default `default_metric`) is the metric the selection applies to val_loss (or
    val_acc with tune.on), as `compare --metric`. Bad keys or seeds raise UsageError (one line)."""
    from activation_bench.analysis.compare import resolve_groups
    from activation_bench.analysis.metrics import default_loss, parse_metric, run_values
    from activation_bench.analysis.tasks import check_tasks
    from activation_bench.analysis.tune import parse_tune, tuned_values

    parse_tune(tune.keys, tune.tune_seeds, by, tune.on)  # --by naming a tuned key
    m = default_metric(loaded) if metric is None else parse_metric(metric) if isinstance(metric, str) else metric
    panels, lines = curve_layout(loaded, by)
    panels = [c for c in panels if c not in tune.keys]
    lines = [c for c in lines if c not in tune.keys]
    group_cols = [*panels, *[c for c in resolve_groups(loaded, None) if c not in tune.keys and c not in panels]]
    check_tasks(loaded, "train_loss", group_cols)
    notes: list[str] = []
    values = run_values(loaded, m, default_loss(loaded, m, None), floor)
    _, sel = tuned_values(loaded, values, m, group_cols, tune, floor, notes)
    return from_selection(loaded, sel, panels, lines, notes)


def from_selection(loaded: Loaded, sel: Selection, panels: Sequence[str], lines: Sequence[str],
                   notes: Sequence[str] = ()) -> TunedCurves:
    """The TunedCurves of a selection already made (a report's compare result's `tuning`): the
    panel and line columns must together be the selection's group columns."""
    chosen = sel.chosen.replace("(none)", None)
    panel_of = _labels(chosen, list(panels))
    line_of = _labels(chosen, list(lines))
    texts: dict[str, dict[str, str]] = {}
    for i, (panel, line) in enumerate(zip(panel_of, line_of)):
        texts.setdefault(line, {})[panel] = choice_label(sel, chosen.iloc[i])
    legend: dict[str, str] = {}
    per_panel: dict[str, dict[str, str]] = {}
    for line, by_panel in texts.items():
        if len(set(by_panel.values())) == 1:
            legend[line] = f"{line} ({next(iter(by_panel.values()))})"
            continue
        legend[line] = f"{line} ({', '.join(sel.keys)} tuned per panel)"
        for panel, text in by_panel.items():
            per_panel.setdefault(panel, {})[line] = f"{line} ({text})"
    return TunedCurves(sel, list(panels), list(lines), eval_mask(loaded.runs, sel), legend,
                       per_panel or None, list(notes))


def choice_label(sel: Selection, row: Any) -> str:
    """A group's chosen values as the legend says them: `lr 0.003`; at an end of a numeric grid of
    at least two values `lr 0.1, grid max` (or `grid min`); several keys joined by "; "."""
    parts = []
    grids = sel.grid_of(row)
    for key in sel.keys:
        value = str(row[key])
        grid = grids.get(key, [])
        nums = [_number(v) for v in grid]
        text = f"{key} {_short(value)}"
        if len(grid) >= 2 and not any(math.isnan(x) for x in nums):
            text += ", grid min" if value == grid[0] else ", grid max" if value == grid[-1] else ""
        parts.append(text)
    return "; ".join(parts)


def _number(value: object) -> float:
    try:
        return float(str(value))
    except ValueError:
        return math.nan


def _short(value: str) -> str:
    x = _number(value)
    return value if math.isnan(x) else f"{x:g}"


def tuned_curve_stats(loaded: Loaded, tuned: TunedCurves, loss: str = "train_loss",
                      floor: float = FLOOR) -> pd.DataFrame:
    """The numbers behind a tuned-curves figure: per (panel, line, epoch) the quartiles (q25,
    q50, q75) of `loss` over the drawn runs (judging seeds at the chosen values, diverged runs
    left out; accuracies in %) and their count n, with the chosen value of each tuned key."""
    stats = curve_stats(loaded, tuned.panels, tuned.lines, loss, floor, tuned.drawn)[0]
    chosen = tuned.selection.chosen.replace("(none)", None)
    keys = pd.DataFrame({"panel": _labels(chosen, tuned.panels), "line": _labels(chosen, tuned.lines),
                         **{k: chosen[k].to_numpy(object) for k in tuned.selection.keys}})
    return stats.merge(keys, on=["panel", "line"], how="left")


def tuned_curves_figure(loaded: Loaded, tuned: TunedCurves, loss: str = "train_loss", metric_label: str = "",
                        floor: float = FLOOR, accuracy: str | None = None,
                        baseline: tuple[str, str] | None = None) -> Any:
    """The figure (a matplotlib Figure, not saved): plots.curves_figure on the drawn runs, a curve
    per group, the legend naming each group's chosen value. `accuracy`: the companion accuracy
    panel (plots.companion_accuracy)."""
    return curves_figure(loaded, tuned.panels or None, loss, floor, accuracy, lines=tuned.lines, drawn=tuned.drawn,
                         baseline=baseline, legend=tuned.legend, panel_legends=tuned.panel_legends,
                         over=tuned.describe(metric_label or "the metric"))


def plot_tuned_curves(loaded: Loaded, output: Path, tune: TuneSpec, metric: Metric | str | None = None,
                      by: Sequence[str] | None = None, loss: str = "train_loss", floor: float = FLOOR,
                      with_accuracy: bool = True, baseline: tuple[str, str] | None = None) -> TunedCurves:
    """Select (`select_curves`), draw (`tuned_curves_figure`, with the classification accuracy
    panel where `with_accuracy`) and write the figure atomically to `output` (.png, .svg, .pdf).
    Returns the TunedCurves (its `notes`: the selection's warnings)."""
    from activation_bench.analysis.metrics import parse_metric

    check_output(output)
    m = default_metric(loaded) if metric is None else parse_metric(metric) if isinstance(metric, str) else metric
    tuned = select_curves(loaded, tune, m, by, floor)
    accuracy = companion_accuracy(loaded, loss) if with_accuracy else None
    save_figure(tuned_curves_figure(loaded, tuned, loss, m.label, floor, accuracy, baseline), output)
    return tuned
