"""The search's last rung: every survivor and every baseline tuned, then judged on fresh seeds.

1. Tuning: each function trains at every value of the learning-rate grid (--lrs) on the tuning
   seeds. Its learning rate is chosen by `analysis.selection.select`, the rule of `compare --tune lr`:
   fewest failed runs, then the best mean early-stopped validation score (log10 of the loss, or
   the accuracy), then the smaller learning rate.
2. Judging: each function trains at its chosen learning rate only, on the judging seeds (the
   DeepOBS / AlgoPerf protocol: re-run the chosen setting on new seeds; training every value there
   too would cost the grid's size again and change no statistic).

Both phases are one sweep directory, so `actbench compare DIR --metric early_stop --tune lr
--baseline activation=relu` finds the tuning seeds (the ones with the grid), judges on the others,
and prints the verdict the search prints: `verdict` calls the same function.
"""

from __future__ import annotations

import math

import numpy as np

from activation_bench.analysis.compare import compare
from activation_bench.analysis.loading import load
from activation_bench.analysis.metrics import FLOOR
from activation_bench.analysis.notes import CompareResult
from activation_bench.analysis.selection import select
from activation_bench.analysis.tune import TuneSpec, selection_values
from activation_bench.runs import orchestrate
from activation_bench.search import driver, halving, scores
from activation_bench.search.driver import Search

BASELINE = "relu"


def functions(search: Search, rung: halving.Rung) -> list[str]:
    """The judged functions: the survivors of the screen, then the baselines."""
    return [*driver.rung_candidates(search, rung), *halving.BASELINES]


def plan(search: Search, rung: halving.Rung, chosen: dict[str, str] | None = None) -> orchestrate.SweepPlan:
    """The final rung as a sweep plan: every function at every grid value on the tuning seeds, and,
    given the chosen learning rates, each function at its own on the judging seeds. The overrides
    (sweep.yaml's identity) are the same in both phases."""
    fns = functions(search, rung)
    grid = [scores.lr_label(x) for x in search.settings.lrs]
    members = [(fn, lr, seed) for fn in fns for lr in grid for seed in rung.tune_seeds]
    if chosen is not None:
        members += [(fn, chosen[fn], seed) for fn in fns if fn in chosen for seed in rung.seeds]
    survivors = [fn for fn in fns if fn not in halving.BASELINES]
    overrides = driver.base_overrides(search, rung) + [
        "activation=expr", "activation.fn=" + ",".join(driver.quoted(f) for f in survivors), "lr=" + ",".join(grid),
        "seed=" + ",".join(map(str, (*rung.tune_seeds, *rung.seeds))), "+baselines=" + ",".join(halving.BASELINES)]
    return driver.sweep_plan(search, rung, overrides, members)


def choose(search: Search, rung: halving.Rung) -> tuple[dict[str, str], dict[str, float], list[str]]:
    """Each function's learning rate, chosen on the tuning seeds' finished runs by the rule of
    `compare --tune lr`; returns (fn -> lr, fn -> its selection score as halving scores it, notes).
    A function missing a grid value on every tuning seed is left out (named in the notes)."""
    loaded = load([driver.rung_dir(search, rung)], "train_loss")
    metric, _ = scores.selection(loaded, search.settings.select_on)
    values, source, notes = selection_values(loaded, metric, FLOOR, search.settings.select_on)
    sel = select(values, ["activation"], ["lr"], [str(s) for s in rung.tune_seeds], score="score",
                 selected_on=source, higher_is_better=halving.higher_is_better(search.settings.select_on))
    chosen = {str(fn): str(lr) for fn, lr in zip(sel.chosen["activation"], sel.chosen["lr"])}
    table = scores.run_table(driver.rung_dir(search, rung), search.settings.select_on)
    at = scores.candidate_scores(table, {fn: [lr] for fn, lr in chosen.items()}, rung.tune_seeds,
                                 search.settings.select_on)
    return chosen, {fn: sc for fn, (sc, _) in at.items()}, [*notes, *sel.notes]


def compared(search: Search) -> tuple[str, str]:
    """(metric, loss) of the verdict: the early-stopped test loss (test accuracy with --select-on
    val_acc) where the task has a validation split, else the final one."""
    loaded = load([driver.rung_dir(search, search.rungs[-1])], "train_loss")
    metric, _ = scores.selection(loaded, search.settings.select_on)
    if search.settings.select_on == "val_acc":
        loss = "test_acc" if "test_acc" in loaded.losses else "val_acc"
    else:
        loss = "test_loss" if "test_loss" in loaded.losses else "train_loss"
    return metric.label, loss


def verdict(search: Search) -> CompareResult:
    """The judgement's table: `compare --tune lr` on the final rung, against relu at its own lr."""
    metric, loss = compared(search)
    loaded = load([driver.rung_dir(search, search.rungs[-1])], loss)
    on = search.settings.select_on
    return compare(loaded, metric, None, f"activation={BASELINE}", loss, tune=TuneSpec(("lr",), None, on))


def command(search: Search) -> str:
    """The compare command that reproduces the verdict from the rung's files."""
    metric, loss = compared(search)
    on = " --tune-on val_acc" if search.settings.select_on == "val_acc" else ""
    return (f"actbench compare {driver.rung_dir(search, search.rungs[-1])} --metric {metric} --loss {loss} "
            f"--tune lr{on} --baseline activation={BASELINE}")


def judged(result: CompareResult) -> dict[str, tuple[str, float]]:
    """fn -> (chosen lr, judged score: the geometric mean of the compared loss over the judging
    seeds, or the mean accuracy), from the verdict's table."""
    col = "mean" if "geo_mean" not in result.table.columns else "geo_mean"
    t = result.table
    return {str(fn): (str(lr), float(v)) for fn, lr, v in zip(t["activation"], t["lr"], t[col])}


def agreement(search: Search, result: CompareResult) -> dict:
    """How well the screen foretold the judgement, over the judged survivors:
    - spearman: rank correlation of the last screening rung's score and the judged score;
    - optimism: the screen's score against the same function at the same learning rate on the
      fresh tuning seeds (the ratio of geometric means, > 1: the screen was optimistic; with
      --select-on val_acc the mean difference in percentage points, < 0: optimistic). Only
      survivors whose screening learning rate is on the grid count."""
    final = search.rungs[-1]
    screen = search.rungs[-2]
    on = search.settings.select_on
    survivors = driver.rung_candidates(search, final)
    before = driver.rung_scores(search, screen, survivors)
    got = judged(result)
    both = [fn for fn in survivors if fn in got]
    rho = scores.spearman([before[fn][0] for fn in both], [got[fn][1] for fn in both])
    grid = {scores.lr_label(x) for x in search.settings.lrs}
    on_grid = {fn: [before[fn][1]] for fn in survivors if before[fn][1] in grid}
    table = scores.run_table(driver.rung_dir(search, final), on)
    fresh = scores.candidate_scores(table, on_grid, final.tune_seeds, on)
    pairs = [(before[fn][0], fresh[fn][0]) for fn in on_grid
             if math.isfinite(before[fn][0]) and math.isfinite(fresh[fn][0])]
    if on == "val_acc":
        optimism = float(np.mean([100 * (b - a) for a, b in pairs])) if pairs else math.nan
        unit = "percentage points of val_acc (fresh minus screen)"
    else:
        ok = [(a, b) for a, b in pairs if a > 0 and b > 0]
        optimism = float(np.exp(np.mean([math.log(b / a) for a, b in ok]))) if ok else math.nan
        unit = "ratio of geometric-mean val_loss (fresh / screen)"
    return {"survivors": len(survivors), "judged": len(both), "spearman_screen_vs_judged": _round(rho),
            "optimism": _round(optimism), "optimism_unit": unit, "optimism_n": len(pairs),
            "screen_rung": screen.number, "tune_seeds": list(final.tune_seeds), "judge_seeds": list(final.seeds)}


def _round(x: float) -> float | None:
    return None if not math.isfinite(x) else float(f"{x:.4g}")


def record(search: Search, result: CompareResult, chosen_scores: dict[str, float]) -> dict:
    """After the judgement: candidates.csv gains each survivor's chosen lr and judged score, and
    search.yaml the agreement and the verdict's budget check (`budget_check`: the judged runs still
    improving when the budget ran out, analysis/budget.py)."""
    final = search.rungs[-1]
    got = judged(result)
    for fn in driver.rung_candidates(search, final):
        search.reached[fn] = (final.number, chosen_scores.get(fn, halving.worst(search.settings.select_on)))
        if fn in got:
            search.judged[fn] = got[fn]
    driver.write_candidates(search)
    agree = agreement(search, result)
    driver.write_agreement(search, agree, result.budget.to_dict() if result.budget is not None else None)
    return agree
