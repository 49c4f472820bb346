"""The tables of docs/depth.md from the depth study's sweep directory (see docs/depth_study.sh).

Prints markdown: per metric (final and best val_loss, final train_loss) the geometric mean over
seeds for every activation x init x depth, each column's ranking, and the share of dead and
saturated hidden units at the end of training (mean over seeds and layers), from summary.json.

Usage: python docs/depth_tables.py runs/depth-study
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from activation_bench.compare import Metric, load, run_values

ACTS = ["gelu", "relu", "tanh", "sigmoid", "selu", "silu"]
DEPTHS = ["1", "2", "4", "8"]
INITS = ["torch_default", "auto"]


def geo_table(sweep: Path, loss: str, metric: str) -> pd.DataFrame:
    values = run_values(load([sweep], loss), Metric(metric), loss)
    ok = values[values["status"] == "ok"]
    geo = ok.groupby(["activation", "model.init", "model.depth"])["log10"].mean().map(lambda v: 10**v)
    diverged = values.groupby(["activation", "model.init", "model.depth"])["status"].apply(
        lambda s: int((s == "diverged").sum()))
    table = geo.unstack(["model.init", "model.depth"]).reindex(ACTS)
    cols = [(i, d) for i in INITS for d in DEPTHS]
    return table.reindex(columns=cols), diverged


def markdown(table: pd.DataFrame, fmt: str = "{:.3g}") -> str:
    head = "| activation | " + " | ".join(f"{i} d={d}" for i, d in table.columns) + " |"
    sep = "|:---|" + "---:|" * len(table.columns)
    ranks = table.rank(axis=0, method="min")
    rows = []
    for act, row in table.iterrows():
        cells = [f"{fmt.format(v)} ({int(ranks.loc[act, c])})" if np.isfinite(v) else "-" for c, v in row.items()]
        rows.append(f"| {act} | " + " | ".join(cells) + " |")
    return "\n".join([head, sep, *rows])


def unit_table(sweep: Path, key: str) -> pd.DataFrame:
    rows = []
    for summary_path in sweep.glob("*/summary.json"):
        s = json.loads(summary_path.read_text())
        lab = s["labels"]
        shares = [v for v in s.get(key) or [] if v is not None]
        rows.append((lab["activation"], lab["model.init"], lab["model.depth"], float(np.mean(shares)) * 100))
    df = pd.DataFrame(rows, columns=["activation", "model.init", "model.depth", "share"])
    table = df.groupby(["activation", "model.init", "model.depth"])["share"].mean().unstack(["model.init",
                                                                                            "model.depth"])
    return table.reindex(ACTS).reindex(columns=[(i, d) for i in INITS for d in DEPTHS])


def main() -> None:
    sweep = Path(sys.argv[1])
    for loss, metric, title in (("val_loss", "final", "final val_loss"),
                                ("val_loss", "best", "best val_loss (early stopping on the validation set)"),
                                ("train_loss", "final", "final train_loss")):
        table, diverged = geo_table(sweep, loss, metric)
        seeds = len(diverged) and int(load([sweep], loss).runs.groupby(["activation", "model.init", "model.depth"])
                                      .size().max())
        print(f"### {title}: geometric mean over {seeds} seeds (rank within the column)\n")
        print(markdown(table))
        n_div = int(diverged.sum())
        print(f"\n{n_div} diverged runs left out.\n" if n_div else "")
    for key, title in (("dead_units", "dead units (output 0 on every training sample)"),
                       ("saturated_units", "saturated units (|f'| < 1e-3 on every training sample)")):
        print(f"### {title}: % of hidden units, mean over layers and seeds (rank: fewest first)\n")
        print(markdown(unit_table(sweep, key), "{:.1f}"))
        print()


if __name__ == "__main__":
    main()
