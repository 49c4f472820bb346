"""The tables of the depth study's tuned part (README.md here) from its sweep directory (docs/studies/depth/tuned.yaml;
extras.sh runs this).

Every statistic is `compare --tune lr --tune-seeds 5`: each activation x depth x norm cell at its
own learning rate, chosen on seeds 0-4 by the mean log10 of the metric's val_loss, judged on
seeds 5-19, paired by seed. Prints markdown:

1. per metric (final and best val_loss): the judged geometric mean of every cell with its rank in
   its column and its chosen lr (marked at the grid's edge);
2. against relu in the same depth and norm (ratio, 95% interval, Holm p over all cells);
3. batch norm against none for the same activation and depth, each at its own tuned lr;
4. how much the ranking of the six activations moves between none and batch (Spearman per depth);
5. the premise: how normal the hidden layers' pre-activations are (preact.csv: mean over units of
   the KS distance to the fitted normal, skewness, excess kurtosis) at initialisation and after
   training, median over the judging seeds' runs at each cell's chosen lr, beside the same
   statistics of truly normal samples of the probe's size.

Usage: python docs/studies/depth/tuned_tables.py runs/depth-tuned
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from activation_bench.analysis.compare import load, run_compare
from activation_bench.analysis.tune import TuneSpec

ACTS = ["gelu", "relu", "tanh", "sigmoid", "selu", "silu"]
DEPTHS = ["1", "2", "4", "8"]
NORMS = ["none", "batch"]
TUNE = TuneSpec(("lr",), 5, "val_loss")
PROBE = 64  # the probe batch: the task's 64 training rows


def result(sweep: Path, metric: str, baseline: str):  # noqa: ANN201 - a CompareResult
    return run_compare([sweep], metric, ["activation", "model.depth", "model.norm"], baseline, "val_loss", tune=TUNE)


def cells(sweep: Path, metric: str) -> list[str]:
    res = result(sweep, metric, "activation=relu")
    t = res.table.set_index(["activation", "model.depth", "model.norm"])
    grid = res.tuning.grid["lr"]
    out = [f"### {metric} val_loss: judged geometric mean over seeds 5-19 (rank in the column; chosen lr)", "",
           "| activation | " + " | ".join(f"{n} d={d}" for n in NORMS for d in DEPTHS) + " |",
           "|:---|" + "---:|" * (len(NORMS) * len(DEPTHS))]
    geo = pd.DataFrame({(n, d): [t.loc[(a, d, n), "geo_mean"] for a in ACTS] for n in NORMS for d in DEPTHS},
                       index=ACTS)
    ranks = geo.rank(axis=0, method="min")
    for a in ACTS:
        row = []
        for n in NORMS:
            for d in DEPTHS:
                lr = t.loc[(a, d, n), "lr"]
                edge = "!" if lr in (grid[0], grid[-1]) else ""
                row.append(f"{geo.loc[a, (n, d)]:.3g} ({int(ranks.loc[a, (n, d)])}; {lr}{edge})")
        out.append(f"| {a} | " + " | ".join(row) + " |")
    out += ["", f"`!`: the chosen lr is at the grid's edge ({grid[0]} or {grid[-1]}; grid: {', '.join(grid)}).", ""]
    out += ["#### against relu at the same depth and norm (ratio [95% CI], Holm p; * = t and Wilcoxon < 0.05)", "",
            "| activation | " + " | ".join(f"{n} d={d}" for n in NORMS for d in DEPTHS) + " |",
            "|:---|" + "---:|" * (len(NORMS) * len(DEPTHS))]
    for a in ACTS:
        if a == "relu":
            continue
        row = []
        for n in NORMS:
            for d in DEPTHS:
                r = t.loc[(a, d, n)]
                star = "*" if bool(r["significant"]) else ""
                row.append(f"{r['ratio']:.2f} [{r['ratio_lo']:.2f}, {r['ratio_hi']:.2f}] {r['p_t_holm']:.2g}{star}")
        out.append(f"| {a} | " + " | ".join(row) + " |")
    out.append("")
    out += rank_moves(geo)
    return out


def train_fit(sweep: Path) -> list[str]:
    """The final training loss of the judged runs (each cell at the lr chosen on val_loss): does the
    network fit its 64 training points?"""
    res = run_compare([sweep], "final", ["activation", "model.depth", "model.norm"], None, "train_loss", tune=TUNE)
    t = res.table.set_index(["activation", "model.depth", "model.norm"])
    out = ["### final train_loss of the judged runs (geometric mean over seeds 5-19, at the lr chosen on val_loss)", "",
           "| activation | " + " | ".join(f"{n} d={d}" for n in NORMS for d in DEPTHS) + " |",
           "|:---|" + "---:|" * (len(NORMS) * len(DEPTHS))]
    for a in ACTS:
        cells = [f"{t.loc[(a, d, n), 'geo_mean']:.3g}" for n in NORMS for d in DEPTHS]
        out.append(f"| {a} | " + " | ".join(cells) + " |")
    return [*out, ""]


def rank_moves(geo: pd.DataFrame) -> list[str]:
    out = ["Spearman correlation of the six activations' order, none against batch: " + ", ".join(
        f"depth {d}: {geo[('none', d)].rank().corr(geo[('batch', d)].rank()):.2f}" for d in DEPTHS) + ".", ""]
    return out


def norm_effect(sweep: Path, metric: str) -> list[str]:
    res = result(sweep, metric, "model.norm=none")
    t = res.table.set_index(["activation", "model.depth", "model.norm"])
    out = [f"### batch norm against none ({metric} val_loss; each at its own tuned lr; ratio [95% CI], Holm p)", "",
           "| activation | " + " | ".join(f"d={d}" for d in DEPTHS) + " |", "|:---|" + "---:|" * len(DEPTHS)]
    for a in ACTS:
        row = []
        for d in DEPTHS:
            r = t.loc[(a, d, "batch")]
            star = "*" if bool(r["significant"]) else ""
            row.append(f"{r['ratio']:.3g} [{r['ratio_lo']:.3g}, {r['ratio_hi']:.3g}] {r['p_t_holm']:.2g}{star}")
        out.append(f"| {a} | " + " | ".join(row) + " |")
    return [*out, ""]


def premise(sweep: Path) -> list[str]:
    """Median over the judged runs (seeds 5-19 at each cell's chosen lr) of each layer's mean-over-units
    statistics, at epoch 0 and at the last epoch; layers pooled per depth (first, middle, last shown)."""
    res = result(sweep, "final", "activation=relu")
    chosen = {(r["activation"], r["model.depth"], r["model.norm"]): r["lr"] for _, r in res.table.iterrows()}
    loaded = load([sweep], "val_loss")
    runs = loaded.runs
    frames = []
    for _, r in runs.iterrows():
        key = (r["activation"], r["model.depth"], r["model.norm"])
        if int(r["seed"]) < 5 or chosen.get(key) != r["lr"]:
            continue
        f = sweep / str(r["run"]) / "preact.csv"
        if f.is_file():
            frames.append(pd.read_csv(f).assign(activation=key[0], depth=key[1], norm=key[2]))
    p = pd.concat(frames)
    last = p["epoch"].max()
    p = p[p["epoch"].isin([0, last])]
    med = p.groupby(["norm", "depth", "epoch", "stat", "activation"])["value"].median()
    ref = normal_reference()
    out = ["### the premise: how normal are the pre-activations? (mean over a layer's units, median over runs)", "",
           f"Truly normal samples of {PROBE} values, standardised by their own mean and sd, give a KS distance of "
           f"{ref['ks_normal']:.3f}, skewness {ref['skewness']:+.3f} and excess kurtosis {ref['excess_kurtosis']:+.3f} "
           "(averages over 20,000 samples): the floor of what a finite probe can show.", "",
           "| norm | depth | when | stat | " + " | ".join(ACTS) + " |", "|:---|---:|:---|:---|" + "---:|" * len(ACTS)]
    for n in NORMS:
        for d in DEPTHS:
            for e, when in ((0, "init"), (last, f"epoch {last}")):
                for stat in ("ks_normal", "skewness", "excess_kurtosis"):
                    vals = [med.get((n, d, e, stat, a), np.nan) for a in ACTS]
                    out.append(f"| {n} | {d} | {when} | {stat} | " + " | ".join(f"{v:.3g}" for v in vals) + " |")
    by_layer = p[(p["stat"] == "ks_normal") & (p["depth"] == "8")].groupby(["norm", "epoch", "layer"])["value"].median()
    out += ["", "KS distance by layer at depth 8 (median over the six activations' runs): " + "; ".join(
        f"{n}, {'init' if e == 0 else 'trained'}: " + ", ".join(f"{by_layer.get((n, e, k), np.nan):.2f}"
                                                           for k in range(1, 9))
        for n in NORMS for e in (0, last)) + ".", ""]
    return out


def normal_reference(n: int = PROBE, reps: int = 20000) -> dict[str, float]:
    from scipy.stats import norm

    rng = np.random.default_rng(0)
    v = rng.standard_normal((reps, n))
    z = (v - v.mean(1, keepdims=True)) / v.std(1, keepdims=True)
    cdf = norm.cdf(np.sort(z, axis=1))
    i = np.arange(1, n + 1)
    ks = np.maximum(i / n - cdf, cdf - (i - 1) / n).max(1)
    return {"ks_normal": float(ks.mean()), "skewness": float((z**3).mean(1).mean()),
            "excess_kurtosis": float((z**4).mean(1).mean() - 3)}


def main() -> None:
    sweep = Path(sys.argv[1])
    lines: list[str] = []
    for metric in ("final", "best"):
        lines += cells(sweep, metric)
    lines += train_fit(sweep)
    for metric in ("final", "best"):
        lines += norm_effect(sweep, metric)
    lines += premise(sweep)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
