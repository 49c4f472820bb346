"""The tables of the depth study (README.md here) from the depth study's sweep directory (docs/studies/depth/study.yaml;
extras.sh runs this).

Prints markdown: per metric (final and best val_loss, final train_loss) the geometric mean over
seeds for every activation x init x depth, each column's ranking, and the share of dead and
saturated hidden units at the end of training (mean over seeds and layers), from summary.json.

With --real (a sweep of docs/studies/depth/real.yaml) the loss tables are the test loss at
each run's epoch of lowest val_loss (early_stop), the final test loss and the final train loss, and
the median early-stopping epoch replaces the saturated units.

Usage: python docs/studies/depth/depth_tables.py runs/depth-study
       python docs/studies/depth/depth_tables.py runs/depth-real-diabetes --real
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from activation_bench.analysis.compare import Metric, load, run_values

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
    """Mean over seeds of a per-layer share in summary.json (in %), or for early_stop_epoch the median."""
    rows = []
    for summary_path in sweep.glob("*/summary.json"):
        s = json.loads(summary_path.read_text())
        lab = s["labels"]
        if key == "early_stop_epoch":
            value = float(s[key])
        else:
            value = float(np.mean([v for v in s.get(key) or [] if v is not None])) * 100
        rows.append((lab["activation"], lab["model.init"], lab["model.depth"], value))
    df = pd.DataFrame(rows, columns=["activation", "model.init", "model.depth", "share"])
    groups = df.groupby(["activation", "model.init", "model.depth"])["share"]
    table = (groups.median() if key == "early_stop_epoch" else groups.mean()).unstack(["model.init", "model.depth"])
    return table.reindex(ACTS).reindex(columns=[(i, d) for i in INITS for d in DEPTHS])


LOSS_TABLES = (("val_loss", "final", "final val_loss"),
               ("val_loss", "best", "best val_loss (early stopping on the validation set)"),
               ("train_loss", "final", "final train_loss"))
REAL_LOSS_TABLES = (("test_loss", "early_stop", "test_loss at the epoch of lowest val_loss (early_stop)"),
                    ("test_loss", "final", "final test_loss"),
                    ("train_loss", "final", "final train_loss"))
UNIT_TABLES = (("dead_units", "dead units (output 0 on every training sample): % of hidden units, mean over "
                              "layers and seeds (rank: fewest first)", "{:.1f}"),
               ("saturated_units", "saturated units (|f'| < 1e-3 on every training sample): % of hidden units, "
                                   "mean over layers and seeds (rank: fewest first)", "{:.1f}"))
REAL_UNIT_TABLES = (UNIT_TABLES[0],
                    ("early_stop_epoch", "epoch of lowest val_loss: median over seeds (rank: earliest first)",
                     "{:.0f}"))


def main() -> None:
    sweep = Path(sys.argv[1])
    real = "--real" in sys.argv[2:]
    for loss, metric, title in REAL_LOSS_TABLES if real else LOSS_TABLES:
        table, diverged = geo_table(sweep, loss, metric)
        seeds = len(diverged) and int(load([sweep], loss).runs.groupby(["activation", "model.init", "model.depth"])
                                      .size().max())
        print(f"### {title}: geometric mean over {seeds} seeds (rank within the column)\n")
        print(markdown(table))
        n_div = int(diverged.sum())
        print(f"\n{n_div} diverged runs left out.\n" if n_div else "")
    for key, title, fmt in REAL_UNIT_TABLES if real else UNIT_TABLES:
        print(f"### {title}\n")
        print(markdown(unit_table(sweep, key), fmt))
        print()


if __name__ == "__main__":
    main()
