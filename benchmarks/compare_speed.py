"""compare speed: whole `actbench compare` processes against the pandas + scipy.stats script a user
would write instead, and against a bare `pandas.read_csv` process.

Uses benchmarks/tables.py's long-format results.csv of about 1,000,000 rows (every registered activation x
2 data x 2 targets x 10 seeds x 926 epochs, columns activation,data,data.target,seed,run,epoch,
train_loss as `actbench sweep` writes them) in a temporary directory, then times, each as a fresh
Python process (start-up and imports included), in interleaved rounds:

- script: USER_SCRIPT below, what a user writes without actbench: read the CSV, the last epoch's
  rows (the fastest way, right when every run has every epoch), geometric means per activation x
  data x target, a paired t-test (`scipy.stats.ttest_rel`) and a Wilcoxon signed-rank test
  (`scipy.stats.wilcoxon`) of every group against relu by seed, Holm's correction (by hand;
  `--holm statsmodels`: `statsmodels.stats.multitest.multipletests`), both tables printed as CSV;
- compare: `actbench compare path --format csv` (the same groups and tests, plus each group's
  median, 95% intervals, win rates, Cohen's d_z and the notes);
- read_csv (with `--read-csv`): `python -c "import pandas; pandas.read_csv(path)"`, for reference
  (its ratio is printed against the same goal, which applies to compare only).

actbench's bytecode is compiled first (`provenance.compile_bytecode`), as an installed
tool's is after its first run; an environment with PYTHONDONTWRITEBYTECODE set never writes it, and
then every actbench process compiles its modules again (about 0.1-0.15 s on the 2-core VM).
`--no-compile` leaves the cache as it is (with no `__pycache__` folders under activation_bench/,
that is the cost of compiling included).

Prints the load average, each round, and the median of the rounds' ratios to the script (the goal:
compare at most 1.2x the script). Usage:
    python -m benchmarks.compare_speed [--seeds 10] [--epochs 926] [--rounds 5] [--metric final]
        [--holm hand|statsmodels] [--read-csv] [--no-compile]
"""

from __future__ import annotations

import os
import sys
import tempfile

from benchmarks import harness, provenance, tables

USER_SCRIPT = '''\
import sys

import numpy as np
import pandas as pd
from scipy import stats

df = pd.read_csv(sys.argv[1])
final = df[df["epoch"] == df["epoch"].max()]  # each run's last epoch (every run has them all)
final = final.assign(log10=np.log10(final["train_loss"]))
keys, tasks = ["activation", "data", "data.target"], ["data", "data.target"]
groups = final.groupby(keys)["log10"].agg(["count", "mean", "std"])
groups["geo_mean"] = 10 ** groups["mean"]
base = final[final["activation"] == "relu"].set_index([*tasks, "seed"])["log10"]
rows = []
for (act, data, target), g in final.groupby(keys):
    if act == "relu":
        continue
    x = g["log10"].to_numpy()
    b = base.loc[data, target].reindex(g["seed"]).to_numpy()
    rows.append({"activation": act, "data": data, "data.target": target, "ratio": 10 ** np.mean(x - b),
                 "p_t": stats.ttest_rel(x, b).pvalue, "p_wilcoxon": stats.wilcoxon(x, b).pvalue})
tests = pd.DataFrame(rows)
for col in ["p_t", "p_wilcoxon"]:
    tests[col + "_holm"] = holm(tests[col].to_numpy())
print(groups.to_csv())
print(tests.to_csv(index=False))
'''

HOLM = {
    "hand": '''\
def holm(p):  # Holm's step-down adjusted p-values
    order = np.argsort(p)
    adj = np.empty(len(p))
    adj[order] = np.minimum(1, np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p)))))
    return adj
''',
    "statsmodels": '''\
from statsmodels.stats.multitest import multipletests

def holm(p):
    return multipletests(p, method="holm")[1]
''',
}


def user_script(holm: str) -> str:
    """USER_SCRIPT with its holm function defined before the statistics start."""
    head, sep, rest = USER_SCRIPT.partition("df = pd.read_csv")
    return f"{head}{HOLM[holm]}\n{sep}{rest}"


def main() -> None:
    ap = tables.options(__doc__)
    ap.add_argument("--metric", default="final")
    ap.add_argument("--holm", choices=sorted(HOLM), default="hand")
    ap.add_argument("--read-csv", action="store_true", help="also time a bare pandas.read_csv process")
    ap.add_argument("--no-compile", action="store_true", help="leave actbench's bytecode cache as it is")
    args = ap.parse_args()
    bench = harness.Bench(args, compile_bytecode=not args.no_compile)
    with tempfile.TemporaryDirectory() as tmp:
        path = tables.results_table(tmp, args.seeds, args.epochs)
        script = os.path.join(tmp, "user_compare.py")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(user_script(args.holm))
        cli = [*provenance.actbench(), "compare", path, "--metric", args.metric, "-f", "csv"]
        cmds = {"script": [sys.executable, script, path], "compare": cli}
        if args.read_csv:
            cmds["read_csv"] = [sys.executable, "-c", f"import pandas; pandas.read_csv({path!r})"]
        times = tables.against_first(bench, cmds, args.rounds, {"compare": "<= 1.2"})
    bench.finish(times)


if __name__ == "__main__":
    main()
