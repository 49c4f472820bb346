"""What the tuned real-data study file (study.yaml) cannot express; run after it.

    python tuned_tables.py fixed RUNS_DIR OUT_DIR            the same seeds at lr 1e-3: fixed-*.md|csv
    python tuned_tables.py fixed-input OUT_CSV SWEEP_DIR...  the lr 1e-3 rows of the evaluation seeds (6-25)
    python tuned_tables.py summary RUNS_DIR OUT_DIR          verdicts, chosen lrs, early stopping, tuning budget

`fixed` compares the lr 1e-3 rows of the judging seeds (6-25) of each part of the study, a filter on
one value of a swept grid that no study part has; it does what these commands do:
    python tuned_tables.py fixed-input FIXED_CSV DIRS
    actbench compare FIXED_CSV --metric early_stop --baseline activation=relu -f FMT

`summary` reads the files study.yaml and `fixed` wrote into OUT_DIR (tuned-*.csv/json and
fixed-*.csv) and the sweeps' results.csv under RUNS_DIR; it prints markdown.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

FIXED_LR = 0.001
FIRST_EVAL_SEED = 6
SWEEPS = {"tables": "data", "functions": "data.fn", "randhie": None}  # sweep -> its task column
EPOCHS = {"tables": 200, "functions": 60, "randhie": 12}
ACTS = ["relu", "gelu", "silu", "elu", "tanh"]


def fixed_all(runs: Path, out: Path) -> None:
    from activation_bench.analysis import compare as cmp
    from activation_bench.render import tables

    m = cmp.parse_metric("early_stop")
    for sweep in SWEEPS:
        dirs = [f.parent for f in results(runs, sweep)]
        if not dirs or not all((d / "results.csv").is_file() for d in dirs):
            print(f"{sweep}: not (yet) complete, skipped", file=sys.stderr)
            continue
        fixed_csv = runs / f"{sweep}-fixed.csv"
        fixed_input(fixed_csv, dirs)
        fixed = cmp.compare(cmp.load([fixed_csv], "test_loss"), m, None, "activation=relu", "test_loss")
        for fmt, ext in (("markdown", "md"), ("csv", "csv")):
            (out / f"fixed-{sweep}.{ext}").write_text(tables.render(fixed, fmt))
        print(f"{sweep}: done", file=sys.stderr)


def fixed_input(out: Path, sweeps: list[Path]) -> None:
    df = pd.concat([pd.read_csv(d / "results.csv") for d in sweeps], ignore_index=True)
    keep = np.isclose(df["lr"], FIXED_LR) & (df["seed"] >= FIRST_EVAL_SEED)
    df[keep].drop(columns=["lr"]).to_csv(out, index=False)


def results(runs: Path, sweep: str) -> list[Path]:
    """The results.csv files of one part of the study (the functions ran as several sweeps)."""
    if sweep == "functions":
        return sorted(d / "results.csv" for d in runs.glob("functions-*") if d.is_dir())
    return [runs / sweep / "results.csv"]


def _task(row: pd.Series, col: str | None, sweep: str) -> str:
    return str(row[col]) if col else sweep


def _verdict(rows: pd.DataFrame) -> tuple[str, str]:
    """(best activation by geometric mean, with '~' when not significantly apart from ReLU; GELU vs ReLU)."""
    best = rows.sort_values("geo_mean").iloc[0]
    relu = rows[rows["activation"] == "relu"].iloc[0]
    if best["activation"] == "relu":
        close = rows[(rows["activation"] != "relu") & ~rows["significant"].astype(bool)]["activation"].tolist()
        text = "relu" + (f" (~ {', '.join(close)})" if close else "")
    else:
        sig = bool(best["significant"])
        text = f"{best['activation']} {best['geo_mean'] / relu['geo_mean']:.3f}x relu" + ("" if sig else " (n.s.)")
    gelu = rows[rows["activation"] == "gelu"].iloc[0]
    if not bool(gelu["significant"]):
        vs = f"no difference ({gelu['ratio']:.3f})"
    else:
        vs = f"{'GELU' if gelu['ratio'] < 1 else 'ReLU'} better ({gelu['ratio']:.3f})"
    return text, vs


def _tasks(frame: pd.DataFrame, sweep: str) -> dict[str, pd.DataFrame]:
    col = SWEEPS[sweep]
    if col is None:
        return {sweep: frame}
    return {str(k): part for k, part in frame.groupby(col, sort=False)}


def verdicts(out: Path) -> str:
    lines = ["| task | best at lr 1e-3 | best, tuned | GELU vs ReLU at 1e-3 | GELU vs ReLU, tuned | flip | "
             "chosen lr: " + ", ".join(ACTS) + " |", "|" + "---|" * 7]
    flips = []
    for sweep in SWEEPS:
        if not (out / f"tuned-{sweep}.csv").is_file():
            continue
        tuned = _tasks(pd.read_csv(out / f"tuned-{sweep}.csv"), sweep)
        fixed = _tasks(pd.read_csv(out / f"fixed-{sweep}.csv"), sweep)
        for task, t in tuned.items():
            f = fixed[task]
            (bf, gf), (bt, gt) = _verdict(f), _verdict(t)
            flip = []
            if bf.split()[0] != bt.split()[0]:
                flip.append("best")
            if gf.split(" (")[0] != gt.split(" (")[0]:
                flip.append("GELU vs ReLU")
            if flip:
                flips.append(task)
            lrs = {r["activation"]: f"{r['lr']:g}" for _, r in t.iterrows()}
            lines.append(f"| {task} | {bf} | {bt} | {gf} | {gt} | {', '.join(flip) or '-'} | "
                         + ", ".join(lrs.get(a, "-") for a in ACTS) + " |")
    lines.append("")
    lines.append(f"Flips: {', '.join(flips) if flips else 'none'}.")
    return "\n".join(lines)


def _read(results_csv: Path, wanted: set) -> pd.DataFrame:
    """A sweep's results.csv; a sweep at one lr has no lr column: its sweep.yaml override gives it."""
    import yaml

    df = pd.read_csv(results_csv, usecols=lambda c: c in wanted)
    df["run"] = results_csv.parent.name + "/" + df["run"]
    if "lr" not in df.columns:
        doc = yaml.safe_load((results_csv.parent / "sweep.yaml").read_text())
        df["lr"] = float(next(o.split("=", 1)[1] for o in doc["overrides"] if o.startswith("lr=")))
    return df


def early_stopping(runs: Path, out: Path) -> str:
    """Median epoch of lowest val_loss at each activation's chosen lr, over the evaluation seeds."""
    lines = ["| task | epochs | " + " | ".join(ACTS) + " | share at the last 10% |", "|" + "---|" * (len(ACTS) + 3)]
    for sweep, col in SWEEPS.items():
        files = results(runs, sweep)
        if not (out / f"tuned-{sweep}.csv").is_file() or not all(f.is_file() for f in files):
            continue
        tuned = pd.read_csv(out / f"tuned-{sweep}.csv")
        wanted = {"run", "activation", "lr", "seed", "epoch", "val_loss", col}
        df = pd.concat([_read(f, wanted) for f in files])
        df = df[df["seed"] >= FIRST_EVAL_SEED]
        best = df.loc[df.groupby("run")["val_loss"].idxmin()]
        keys = ["activation", *([col] if col else [])]
        best = best.merge(tuned[[*keys, "lr"]], on=keys, suffixes=("", "_chosen"))
        best = best[np.isclose(best["lr"], best["lr_chosen"])]
        n_epochs = EPOCHS[sweep]
        for task, part in _tasks(best, sweep).items():
            med = part.groupby("activation")["epoch"].median()
            late = float((part["epoch"] > 0.9 * n_epochs).mean())
            lines.append(f"| {task} | {n_epochs} | " + " | ".join(f"{med.get(a, float('nan')):g}" for a in ACTS)
                         + f" | {late:.0%} |")
    return "\n".join(lines)


def tuning_budget(out: Path) -> str:
    """Per task: how much worse (x) the expected best validation score after k random grid values is
    than the full grid's best, averaged (geometrically) over the five activations."""
    ks = [1, 2, 3, 4, 6, 8]
    lines = ["| task | " + " | ".join(f"k={k}" for k in ks) + " |", "|" + "---|" * (len(ks) + 1)]
    for sweep, col in SWEEPS.items():
        path = out / f"tuned-{sweep}.json"
        if not path.is_file():
            continue
        b = pd.DataFrame(json.loads(path.read_text())["tuning"]["budget"])
        b["task"] = b[col] if col else sweep
        last = b.groupby(["task", "activation"])["expected_best"].transform("last")
        b["gap"] = b["expected_best"] - last
        for task, part in b.groupby("task", sort=False):
            gap = part.groupby("k")["gap"].mean()
            lines.append(f"| {task} | " + " | ".join(f"{10 ** gap.get(k, np.nan):.2f}x" for k in ks) + " |")
    return "\n".join(lines)


def summary(runs: Path, out: Path) -> None:
    print("## Verdicts at lr 1e-3 and tuned\n")
    print(verdicts(out))
    print("\n## Early stopping at the chosen lr (median epoch of lowest val_loss, seeds 6-25)\n")
    print(early_stopping(runs, out))
    print("\n## Tuning budget (expected best val_loss after k random grid values / the full grid's best)\n")
    print(tuning_budget(out))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "fixed":
        fixed_all(Path(sys.argv[2]), Path(sys.argv[3]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "fixed-input":
        fixed_input(Path(sys.argv[2]), [Path(a) for a in sys.argv[3:]])
    elif len(sys.argv) == 4 and sys.argv[1] == "summary":
        summary(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(__doc__)
