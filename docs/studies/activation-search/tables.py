"""The tables and figures of docs/activation-search.md from finished searches (run.sh, known.sh).

For each search directory: counts from candidates.csv; the screen (rung 1) ranking; where the
known functions (trained like rung 1 by known.sh) would have ranked in it; the judgement (last
rung) with `actbench compare` against relu, gelu and silu on the fresh seeds' test loss; the
optimism of selection (the survivors' last-screen scores against their fresh-seed scores); and a
figure of the five best. Usage:
    python docs/studies/activation-search/tables.py RUNS_DIR [TASK ...] > tables.md
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
BASELINES = ("relu", "gelu", "silu")


def screen_scores(sweep: Path) -> pd.Series:
    """Per activation: the geometric mean over seeds of the final validation loss (the selection score)."""
    df = pd.read_csv(sweep / "results.csv")
    last = df.sort_values("epoch").groupby(["activation", "seed"]).tail(1)
    col = "val_loss" if "val_loss" in last else "train_loss"
    return last.groupby("activation")[col].apply(lambda v: float(np.exp(np.log(v).mean())))


def compare(sweep: Path, baseline: str) -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-m", "activation_bench.cli", "compare", str(sweep), "--metric", "final",
                          "--loss", "test_loss", "--baseline", f"activation={baseline}", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    return {row["activation"]: row for row in json.loads(out)["rows"]}


def fmt(row: dict) -> str:
    if row.get("is_baseline"):
        return "baseline"
    star = "*" if row.get("significant") else ""
    return f"{row['ratio']:.2f} ({row['win_rate']:.0%}, p={row['p_t_holm']:.2g}){star}"


def task_tables(root: Path, task: str) -> str:
    d = root / f"search_{task}"
    cands = pd.read_csv(d / "candidates.csv")
    rungs = sorted((p for p in d.iterdir() if p.name.startswith("rung")), key=lambda p: int(p.name[4:]))
    final, last_screen = rungs[-1], rungs[-2]
    counts = cands["status"].value_counts()
    lines = [f"### {task}", "",
             f"{len(cands)} candidates drawn: {counts.get('trained', 0)} distinct, {counts.get('duplicate', 0)} "
             f"duplicates, {counts.get('rejected', 0)} rejected by the probe.", ""]
    screen = screen_scores(rungs[0]).sort_values()
    rank1 = {fn: i + 1 for i, fn in enumerate(screen.index)}
    judged = {b: compare(final, b) for b in BASELINES}
    rows = judged["relu"]
    fresh_val = screen_scores(final)
    cand_rows = sorted((r for a, r in rows.items() if a not in ("relu", "gelu", "silu", "tanh")),
                       key=lambda r: r["geo_mean"])
    lines += [f"Judgement: {len(cand_rows)} survivors and the baselines on {rows['relu']['n']} fresh seeds "
              "(final test MSE; ratio = geometric-mean ratio to the baseline, paired by seed, < 1 better; "
              "win rate; Holm-corrected paired t-test p; * = t and Wilcoxon both < 0.05).", "",
              "| # | activation | screen rank | test MSE (geo mean) | vs relu | vs gelu | vs silu |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for i, r in enumerate(cand_rows[:10], 1):
        a = r["activation"]
        lines.append(f"| {i} | `{a}` | {rank1.get(a, '-')} of {len(screen)} | {r['geo_mean']:.3g} | "
                     + " | ".join(fmt(judged[b][a]) for b in BASELINES) + " |")
    for b in ("relu", "gelu", "silu", "tanh"):
        r = rows[b]
        lines.append(f"| | {b} | | {r['geo_mean']:.3g} | " + " | ".join(fmt(judged[x][b]) for x in BASELINES) + " |")
    better = {b: sum(1 for r in cand_rows if judged[b][r["activation"]].get("significant")
                     and judged[b][r["activation"]]["ratio"] < 1) for b in BASELINES}
    lines += ["", "Survivors significantly better than " + ", ".join(f"{b}: {n}" for b, n in better.items()) + ".", ""]
    lines += optimism(last_screen, final, fresh_val, cand_rows)
    lines += known(root, task, screen)
    plot(task, [r["activation"] for r in cand_rows[:5]])
    lines += [f"![the five best on {task}](studies/activation-search/winners_{task}.svg)", ""]
    return "\n".join(lines)


def optimism(last_screen: Path, final: Path, fresh_val: pd.Series, cand_rows: list[dict]) -> list[str]:
    before = screen_scores(last_screen)
    fns = [r["activation"] for r in cand_rows]
    ratio = np.array([fresh_val[f] / before[f] for f in fns])
    best = min(fns, key=lambda f: before[f])
    order = sorted(fns, key=lambda f: fresh_val[f])
    corr = pd.Series([before[f] for f in fns]).rank().corr(pd.Series([fresh_val[f] for f in fns]).rank())
    return [f"Selection: the survivors' validation MSE on the fresh seeds is {np.exp(np.log(ratio).mean()):.2f}x "
            f"their score in the last screen (geometric mean; {int((ratio > 1).sum())} of {len(fns)} got worse); "
            f"the last screen's best (`{best}`) ranks {order.index(best) + 1} of {len(fns)} on the fresh seeds; "
            f"rank correlation between screen and judgement {corr:.2f}.", ""]


def known(root: Path, task: str, screen: pd.Series) -> list[str]:
    k = root / f"known_{task}"
    if not (k / "results.csv").exists():
        return []
    scores = screen_scores(k)
    values = np.sort(screen.values)
    parts = [f"`{fn}` {int(np.searchsorted(values, s)) + 1} of {len(values) + 1}"
             for fn, s in scores.sort_values().items()]
    return ["Known functions, trained like the screen (seeds 0, 1) and placed in its ranking: "
            + "; ".join(parts) + ".", ""]


def plot(task: str, fns: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from activation_bench.engine import expr

    x = torch.linspace(-4, 4, 401, dtype=torch.float64)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for fn in fns:
        ax.plot(x, expr.parse(fn).evaluate(x).numpy(), label=fn)
    for name, f in (("relu", torch.relu), ("silu", torch.nn.functional.silu)):
        ax.plot(x, f(x).numpy(), "k--" if name == "relu" else "k:", lw=1, label=name)
    ax.set_ylim(-3, 5)
    ax.set_xlabel("x")
    ax.legend(fontsize=7)
    ax.set_title(f"the five best on {task} (fresh seeds)")
    fig.tight_layout()
    fig.savefig(HERE / f"winners_{task}.svg", metadata={"Date": None})
    plt.close(fig)


def main() -> None:
    root = Path(sys.argv[1])
    tasks = sys.argv[2:] or ["exp_sin", "bessel_j0", "diabetes"]
    print("\n\n".join(task_tables(root, t) for t in tasks if (root / f"search_{t}" / "candidates.csv").exists()))


if __name__ == "__main__":
    main()
