"""The tables and figures of the activation-search study (README.md beside this file) from finished
searches (run.sh, known.sh).

For each search directory: counts from candidates.csv; the screen (rung 1) ranking, each
candidate at the better of its two learning rates; what the second screening learning rate
changed; where the known functions (trained like rung 1 by known.sh) would have ranked; the
judgement (the last rung) exactly as the search printed it (`actbench compare RUNG --metric
early_stop --loss test_loss --tune lr`) against relu and against the best tuned baseline; the
agreement the search recorded in search.yaml; and a figure of the five best. Usage:
    python docs/studies/activation-search/tables.py RUNS_DIR [TASK ...] > tables.md
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from activation_bench.search import halving, scores

HERE = Path(__file__).resolve().parent
BASELINES = halving.BASELINES
SCREEN_LRS = ("0.003", "0.03")


def screen(sweep: Path) -> pd.DataFrame:
    """Per activation and screening lr: the geometric mean over seeds 0-1 of the early-stopped
    validation loss (the search's selection score), as columns."""
    t = scores.run_table(sweep, "val_loss")
    t = t[t["seed"].isin(["0", "1"])]
    g = t.groupby(["activation", "lr"])["value"].apply(lambda v: halving.score(list(v)))
    return g.unstack("lr")


def compare(sweep: Path, baseline: str) -> dict:
    out = subprocess.run(["actbench", "compare", str(sweep), "--metric", "early_stop", "--loss", "test_loss",
                          "--tune", "lr", "--baseline", f"activation={baseline}", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def fmt(row: dict) -> str:
    if row.get("is_baseline"):
        return "baseline"
    star = "*" if row.get("significant") else ""
    return f"{row['ratio']:.3g} [{row['ratio_lo']:.3g}, {row['ratio_hi']:.3g}] p={row['p_t_holm']:.2g}{star}"


def lr_cell(row: dict, grid: list[str]) -> str:
    lr = row["lr"]
    return f"{lr} (edge)" if lr in (grid[0], grid[-1]) else lr


def task_tables(root: Path, task: str) -> str:
    d = root / f"search_{task}"
    cands = pd.read_csv(d / "candidates.csv", dtype=str)
    doc = yaml.safe_load((d / "search.yaml").read_text())
    rungs = sorted((p for p in d.iterdir() if p.name.startswith("rung")), key=lambda p: int(p.name[4:]))
    final = rungs[-1]
    counts = cands["status"].value_counts()
    lines = [f"### {task}", "",
             f"{len(cands)} candidates drawn: {counts.get('trained', 0)} distinct, {counts.get('duplicate', 0)} "
             f"duplicates, {counts.get('rejected', 0)} rejected by the probe.", ""]
    first = screen(rungs[0])
    best = first.min(axis=1).sort_values(kind="stable")
    rank1 = {fn: i + 1 for i, fn in enumerate(best.index)}
    lines += screen_lrs(first, cands)
    vs_relu = compare(final, "relu")
    grid = vs_relu["tuning"]["grid"]["lr"]
    rows = {r["activation"]: r for r in vs_relu["rows"]}
    base = min(BASELINES, key=lambda b: rows[b]["geo_mean"])
    vs_best = {r["activation"]: r for r in compare(final, base)["rows"]}
    survivors = sorted((r for a, r in rows.items() if a not in BASELINES), key=lambda r: r["geo_mean"])
    lines += [f"Judgement: {len(survivors)} survivors and the 4 baselines, each at its own learning rate "
              f"(chosen on seeds {vs_relu['tuning']['tune_seeds'][0]}-{vs_relu['tuning']['tune_seeds'][-1]} "
              f"from {', '.join(grid)}), judged on {rows['relu']['n']} other fresh seeds: early-stopped test MSE "
              "(geometric mean); ratio = geometric-mean ratio to the baseline at its own chosen lr, paired by seed, "
              "with its 95% interval, < 1 better; Holm-corrected paired t-test p; * = t and Wilcoxon both < 0.05.",
              "", f"| # | activation | screen rank | lr | test MSE | vs relu | vs {base} (best tuned baseline) |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for i, r in enumerate(survivors, 1):
        a = r["activation"]
        lines.append(f"| {i} | `{a}` | {rank1.get(a, '-')} of {len(best)} | {lr_cell(r, grid)} | "
                     f"{r['geo_mean']:.3g} | {fmt(r)} | {fmt(vs_best[a])} |")
    for b in BASELINES:
        r = rows[b]
        lines.append(f"| | {b} | | {lr_cell(r, grid)} | {r['geo_mean']:.3g} | {fmt(r)} | {fmt(vs_best[b])} |")
    n_relu = sum(1 for r in survivors if r.get("significant") and r["ratio"] < 1)
    n_best = sum(1 for r in survivors if vs_best[r["activation"]].get("significant")
                 and vs_best[r["activation"]]["ratio"] < 1)
    edge = sum(1 for r in rows.values() if r["lr"] in (grid[0], grid[-1]))
    lines += ["", f"Survivors significantly better than relu: {n_relu} of {len(survivors)}; than {base}, the best "
              f"tuned baseline: {n_best}. Functions whose chosen lr is at the grid's edge: {edge} of {len(rows)}.", ""]
    a = doc.get("agreement") or {}
    lines += [f"Agreement (search.yaml): Spearman correlation of the last screen's score and the judged test MSE "
              f"over the {a.get('judged')} survivors: {a.get('spearman_screen_vs_judged')}; selection optimism: the "
              f"survivors' validation MSE on the fresh tuning seeds at their screening lr is "
              f"{a.get('optimism')}x their last-screen score ({a.get('optimism_n')} survivors).", ""]
    lines += known(root, task, best)
    plot(task, [r["activation"] for r in survivors[:5]])
    # tables.md lives beside the figures (HERE): the image path is relative to this folder
    lines += [f"![the five best on {task}](winners_{task}.svg)", ""]
    return "\n".join(lines)


def screen_lrs(first: pd.DataFrame, cands: pd.DataFrame) -> list[str]:
    """What the second screening learning rate changed: how many candidates chose each, and how
    many of those that went on would have been cut at either learning rate alone."""
    went_on = set(cands.loc[cands["rung"].isin(["2", "3"]), "fn"])
    n = len(went_on)
    chose = first.idxmin(axis=1).value_counts()
    alone = {lr: set(first[lr].sort_values(kind="stable").index[:n]) for lr in SCREEN_LRS}
    judged = set(cands.loc[cands["rung"] == "3", "fn"])
    return [f"Screen: {chose.get(SCREEN_LRS[0], 0)} candidates did better at lr {SCREEN_LRS[0]}, "
            f"{chose.get(SCREEN_LRS[1], 0)} at {SCREEN_LRS[1]}. Of the {n} that went on to rung 2, "
            f"{len(went_on - alone[SCREEN_LRS[0]])} would have been cut by a screen at {SCREEN_LRS[0]} alone and "
            f"{len(went_on - alone[SCREEN_LRS[1]])} by one at {SCREEN_LRS[1]} alone; of the {len(judged)} judged, "
            f"{len(judged - alone[SCREEN_LRS[0]])} and {len(judged - alone[SCREEN_LRS[1]])}.", ""]


def known(root: Path, task: str, best: pd.Series) -> list[str]:
    k = root / f"known_{task}"
    if not (k / "results.csv").exists():
        return []
    got = screen(k).min(axis=1)
    values = np.sort(best.values)
    parts = [f"`{fn}` {int(np.searchsorted(values, s)) + 1} of {len(values) + 1}"
             for fn, s in got.sort_values().items()]
    return ["Known functions, trained like the screen (seeds 0, 1; lr 0.003 and 0.03) and placed in its ranking: "
            + "; ".join(parts) + ".", ""]


def plot(task: str, fns: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from activation_bench.engine.activations import expr

    x = torch.linspace(-4, 4, 401, dtype=torch.float64)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for fn in fns:
        ax.plot(x, expr.parse(fn).evaluate(x).numpy(), label=fn)
    for name, f in (("relu", torch.relu), ("silu", torch.nn.functional.silu)):
        ax.plot(x, f(x).numpy(), "k--" if name == "relu" else "k:", lw=1, label=name)
    ax.set_ylim(-3, 5)
    ax.set_xlabel("x")
    ax.legend(fontsize=7)
    ax.set_title(f"the five best on {task} (tuned, fresh seeds)")
    fig.tight_layout()
    fig.savefig(HERE / f"winners_{task}.svg", metadata={"Date": None})
    plt.close(fig)


def main() -> None:
    root = Path(sys.argv[1])
    tasks = sys.argv[2:] or ["exp_sin", "bessel_j0", "diabetes"]
    print("\n\n".join(task_tables(root, t) for t in tasks if (root / f"search_{t}" / "candidates.csv").exists()))


if __name__ == "__main__":
    main()
