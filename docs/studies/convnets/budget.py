"""The budget check of the convnet study: per sweep and activation, the share of runs whose lowest
validation loss came in the last 10% of their epochs, and at the very last epoch (runs that were
still improving when the budget ran out), over all learning rates and over each activation's
runs at the lr the tuned comparison chose. Usage: python budget.py SWEEP_DIR [TABLE.md] ...
(TABLE.md: the `compare --tune lr` markdown table whose `lr` column gives the chosen values)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def shares(frame: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in ("activation", "lr", "seed") if c in frame.columns]
    rows = []
    for key, run in frame.groupby(keys):
        run = run.sort_values("epoch")
        epochs = int(run["epoch"].max())
        best = int(run.loc[run["val_loss"].idxmin(), "epoch"])
        rows.append({**dict(zip(keys, key)), "late": best > 0.9 * epochs, "last": best == epochs})
    return pd.DataFrame(rows)


def chosen_lrs(table: Path) -> dict[str, float]:
    """activation -> chosen lr, read from a compare markdown table (its `lr` column)."""
    lines = [ln for ln in table.read_text().splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    col = next(c for c in head if c.split()[0] == "lr")  # "lr (tuned)": "0.01 (grid max)"
    out = {}
    for ln in lines[2:]:
        cells = dict(zip(head, (c.strip() for c in ln.strip("|").split("|"))))
        out[cells["activation"]] = float(cells[col].split()[0])
    return out


def main() -> None:
    sweep = Path(sys.argv[1])
    frame = pd.read_csv(sweep / "results.csv", usecols=lambda c: c in ("epoch", "val_loss", "activation", "lr", "seed"))
    runs = shares(frame)
    chosen = chosen_lrs(Path(sys.argv[2])) if len(sys.argv) > 2 else {}
    print(f"### {sweep.name}: runs still improving when the budget ran out\n")
    print("| activation | runs | best val epoch in the last 10% | at the last epoch | at the chosen lr: last 10% |")
    print("| --- | --- | --- | --- | --- |")
    for act, g in runs.groupby("activation"):
        at = g[g["lr"] == chosen[act]] if act in chosen else g.iloc[0:0]
        tuned = f"{at['late'].mean():.0%} of {len(at)} (lr {chosen[act]:g})" if len(at) else "-"
        print(f"| {act} | {len(g)} | {g['late'].mean():.0%} | {g['last'].mean():.0%} | {tuned} |")
    print(f"\nAll runs: {runs['late'].mean():.0%} in the last 10% of their epochs, "
          f"{runs['last'].mean():.0%} at the last epoch.\n")


if __name__ == "__main__":
    main()
