"""Tables and figure of the GELU-paper MLP study (study.sh runs it).

    python tables.py RUNS_DIR OUT_DIR

For each task (the sweeps RUNS_DIR/TASK and RUNS_DIR/TASK-hi, TASK: mnist1d and digits; written
SWEEPS below) it runs these commands, writing markdown and JSON into OUT_DIR:

    actbench compare SWEEPS --loss train_eval_loss --metric final --tune lr --tune-seeds 5 \
        --baseline activation=relu                   # the paper's claim: the training log loss
    actbench compare SWEEPS --loss test_acc --metric early_stop --tune lr --tune-seeds 5 \
        --baseline activation=relu                   # test accuracy at the epoch of lowest val_loss
    actbench compare SWEEPS --loss test_loss --metric early_stop --tune lr --tune-seeds 5 \
        --baseline activation=relu                   # test log loss there

and draws the paper's Figure 2 again (figure-TASK.png): per dropout setting, the median over the
judging seeds (5-19) of the training log loss with dropout off (train_eval_loss) per epoch, each
activation at the learning rate the first comparison chose for it. It prints the budget facts
(the share of runs still improving at the last epoch) as markdown.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

TASKS = ("mnist1d", "digits")
TUNE = ["--tune", "lr", "--tune-seeds", "5", "--baseline", "activation=relu"]
TABLES = {  # name -> (loss column, metric)
    "train": ("train_eval_loss", "final"),
    "test-acc": ("test_acc", "early_stop"),
    "test-loss": ("test_loss", "early_stop"),
}
FIRST_JUDGE_SEED = 5
ACTBENCH = shutil.which("actbench") or "actbench"


def compare(sweeps: list[Path], task: str, out: Path, name: str) -> dict:
    loss, metric = TABLES[name]
    base = [ACTBENCH, "compare", *map(str, sweeps), "--loss", loss, "--metric", metric, *TUNE]
    for fmt in ("markdown", "json"):
        path = out / f"{task}-{name}.{'md' if fmt == 'markdown' else fmt}"
        done = subprocess.run([*base, "-f", fmt, "-o", str(path)], check=True, capture_output=True, text=True)
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    (out / f"{task}-{name}-warnings.txt").write_text("".join(f"{w}\n" for w in warnings))
    return json.loads((out / f"{task}-{name}.json").read_text())


def chosen_lrs(doc: dict) -> dict[tuple[str, float], float]:
    """(activation, model.dropout) -> the lr the comparison chose."""
    return {(str(g["activation"]), float(g["model.dropout"])): float(g["lr"]) for g in doc["rows"]}


def figure(frame: pd.DataFrame, lrs: dict[tuple[str, float], float], task: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    judge = frame[frame["seed"] >= FIRST_JUDGE_SEED]
    drops = sorted(judge["model.dropout"].astype(float).unique())
    fig, axes = plt.subplots(1, len(drops), figsize=(5.2 * len(drops), 3.8), sharey=True, squeeze=False)
    for ax, drop in zip(axes[0], drops):
        for act in ("gelu", "relu", "elu", "silu"):
            lr = lrs[(act, drop)]
            runs = judge[(judge["activation"] == act) & (judge["model.dropout"].astype(float) == drop)
                         & (judge["lr"].astype(float) == lr)]
            curve = runs.groupby("epoch")["train_eval_loss"].median()
            ax.plot(curve.index, curve.values, label=f"{act} (lr {lr:g})")
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_title(f"{task}, dropout {drop:g}")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("median training log loss (dropout off)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def budget(frame: pd.DataFrame, task: str) -> str:
    """Per dropout setting and lr: runs that stopped early (diverged), and of the runs that trained
    every epoch, the share whose training log loss (dropout off) was still falling at the last
    epoch and the share whose lowest validation loss came in the last 5 epochs."""
    last = frame["epoch"].max()
    rows = []
    for (drop, lr), runs in frame.groupby(["model.dropout", "lr"]):
        per_run = [r.sort_values("epoch") for _, r in runs.groupby("run")]
        whole = [r for r in per_run if r["epoch"].iloc[-1] == last and r["train_eval_loss"].notna().all()]
        falling = sum(r["train_eval_loss"].iloc[-1] < r["train_eval_loss"].iloc[-2] for r in whole)
        late = sum(int(r.loc[r["val_loss"].idxmin(), "epoch"]) > last - 5 for r in whole)
        n = max(len(whole), 1)
        rows.append(f"| {task} | {drop} | {lr:g} | {len(per_run)} | {len(per_run) - len(whole)} | "
                    f"{falling / n:.0%} | {late / n:.0%} |")
    head = (f"| task | dropout | lr | runs | stopped early | training loss still falling at epoch {last} | "
            f"lowest val_loss in epochs {last - 4}-{last} |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    return "\n".join([head, *rows])


def main() -> None:
    runs, out = Path(sys.argv[1]), Path(sys.argv[2])
    for task in TASKS:
        sweeps = [runs / task, runs / f"{task}-hi"]
        docs = {name: compare(sweeps, task, out, name) for name in TABLES}
        frame = pd.concat([pd.read_csv(s / "results.csv") for s in sweeps], ignore_index=True)
        figure(frame, chosen_lrs(docs["train"]), task, out / f"figure-{task}.png")
        (out / f"{task}-budget.md").write_text(budget(frame, task) + "\n")


if __name__ == "__main__":
    main()
