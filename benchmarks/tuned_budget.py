"""Tune, then judge, against the full grid: the members, member-epochs and wall time a tuned verdict costs.

A small grid (default: digits, the default MLP, 3 activations x 4 learning rates x 12 seeds, 9 epochs of
batch 64), each path trained by a fresh `actbench sweep` process into a folder of its own, in
interleaved rounds (`--repeat`):

- full: the whole grid, every activation at every learning rate on every seed;
- plan: `--tune lr --tune-seeds K --tune-on val_acc --metric early_stop` (docs/tuning.md): the K
  tuning seeds over the grid, then the judging seeds at each activation's chosen rate only;
- halving: the plan with `--halving ETA` (successive halving in the tuning stage);
- sequential: the plan with `--judge-seeds-max J --look-every L --margin M` (judging seeds added L at
  a time until every comparison with ReLU is decided, on the test log loss; J: every judging seed).

halving and sequential run where `actbench sweep --help` offers their options; otherwise one line says
so. Per path: the members and member-epochs trained, counted from what the sweep folder logged (each
run's losses.csv and the halving rungs' tables in .rungs/: every (run, epoch) once), and the wall
seconds of the whole process. Then `actbench compare --tune lr ... -f csv` (the same choice options,
`--loss test_loss`) on each path's folder: the plan's CSV must be byte for byte the full grid's (a member
is bit for bit its run alone); halving's may choose otherwise (it is compared with `--tune-grid own`)
and sequential's judges on the seeds it trained (with its recorded verdicts' columns), so for those the
chosen rates are printed beside the full grid's. The figures: full / path, in member-epochs and in wall
time, and the byte identity (1 = yes).

Usage:
    python -m benchmarks.tuned_budget [--repeat 1] [--seeds 12] [--epochs 9] [--paths full,plan,halving,sequential]
"""

from __future__ import annotations

import argparse
import csv
import io
import tempfile
from pathlib import Path

from benchmarks import harness, provenance

PATHS = ("full", "plan", "halving", "sequential")
OPTION = {"halving": "--halving", "sequential": "--judge-seeds-max"}  # the sweep option each path needs


def options() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__)
    ap.add_argument("--data", default="digits", help="a classification source (default: digits)")
    ap.add_argument("--activations", default="gelu,relu,tanh")
    ap.add_argument("--lrs", default="1e-3,3e-3,1e-2,3e-2")
    ap.add_argument("--seeds", type=int, default=12, help="seeds 0..N-1 (default: 12)")
    ap.add_argument("--tune-seeds", type=int, default=4, help="the K smallest seeds tune (default: 4)")
    ap.add_argument("--epochs", type=int, default=9)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--eta", type=int, default=3, help="halving's ETA (default: 3)")
    ap.add_argument("--look-every", type=int, default=2, help="sequential: judging seeds per look (default: 2)")
    ap.add_argument("--margin", default="1.05",
                    help="sequential: the margin, a ratio of the judged test log loss (default: 1.05)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (default: 1)")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"which of {','.join(PATHS)} (default: all)")
    return ap


def grid(args: argparse.Namespace) -> list[str]:
    return [f"activation={args.activations}", f"lr={args.lrs}", f"seed=range({args.seeds})", f"data={args.data}",
            f"epochs={args.epochs}", f"batch_size={args.batch_size}"]


def choice(args: argparse.Namespace) -> list[str]:
    """The options of the choice, the same for `sweep --tune` and `compare --tune`."""
    return ["--tune", "lr", "--tune-seeds", str(args.tune_seeds), "--tune-on", "val_acc", "--metric", "early_stop"]


def sweep_options(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each path's options beyond the grid."""
    judging = args.seeds - args.tune_seeds
    return {"full": [], "plan": choice(args), "halving": [*choice(args), "--halving", str(args.eta)],
            "sequential": [*choice(args), "--judge-seeds-max", str(judging), "--look-every", str(args.look_every),
                           "--margin", args.margin]}


def offered(paths: list[str], sweep_help: str) -> tuple[list[str], list[str]]:
    """(the paths `actbench sweep --help` has the options of, one line for each it has not)."""
    have, lines = [], []
    for name in paths:
        if name in OPTION and OPTION[name] not in sweep_help:
            lines.append(f"{name}: not measured: `actbench sweep --help` has no {OPTION[name]} in this checkout")
        else:
            have.append(name)
    return have, lines


def logged(folder: Path) -> tuple[int, int]:
    """(members, member-epochs) a sweep folder logged: the distinct runs and (run, epoch) pairs of its
    runs' losses.csv and of the halving rungs' tables (.rungs/*.csv), each pair once."""
    pairs: set[tuple[str, str]] = set()
    for path in folder.glob("*/losses.csv"):
        with open(path, encoding="utf-8") as fh:
            pairs.update((path.parent.name, row["epoch"]) for row in csv.DictReader(fh))
    for path in folder.glob(".rungs/*.csv"):
        with open(path, encoding="utf-8") as fh:
            pairs.update((row["run"], row["epoch"]) for row in csv.DictReader(fh))
    return len({run for run, _ in pairs}), len(pairs)


def compared(args: argparse.Namespace, folder: Path, name: str) -> str:
    """compare --tune's CSV of a path's folder, on the test loss, by the sweep's own choice options."""
    own = ["--tune-grid", "own"] if name == "halving" else []
    cmd = [*provenance.actbench(), "compare", str(folder), *choice(args), *own, "--loss", "test_loss", "-f", "csv"]
    return harness.run(cmd, capture=True).stdout


def chosen(table: str) -> str:
    """'gelu 0.01, relu 0.003, ...': each activation's chosen lr in a compare --tune CSV."""
    rows = csv.DictReader(io.StringIO(table))
    return ", ".join(f"{row['activation']} {row['lr']}" for row in sorted(rows, key=lambda r: r["activation"]))


def main(argv: list[str] | None = None) -> dict:
    args = options().parse_args(argv)
    asked = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not asked or set(asked) - set(PATHS) or "full" not in asked:
        raise SystemExit(f"--paths: some of {', '.join(PATHS)}, full among them")
    bench = harness.Bench(args)
    sweep_help = harness.run([*provenance.actbench(), "sweep", "--help"], capture=True).stdout \
        if set(asked) & set(OPTION) else ""
    paths, missing = offered(asked, sweep_help)
    for line in missing:
        print(line, flush=True)
    extra = sweep_options(args)
    with tempfile.TemporaryDirectory() as tmp:
        def train(name: str):
            def timed(r: int) -> float:
                cmd = [*provenance.actbench(), "sweep", *grid(args), *extra[name], "--name", f"{name}-{r}",
                       "--runs-dir", tmp, "-q"]
                return harness.run(cmd).seconds
            return timed

        times = harness.interleaved({name: train(name) for name in paths}, args.repeat)
        last = {name: Path(tmp) / f"{name}-{args.repeat}" for name in paths}
        counts = {name: logged(last[name]) for name in paths}
        tables = {name: compared(args, last[name], name) for name in paths}
    full_members, full_epochs = counts["full"]
    for name in paths:
        members, epochs = counts[name]
        print(f"{name}: {members} members, {epochs:,} member-epochs ({epochs / full_epochs:.0%} of the full grid's), "
              f"chosen lr: {chosen(tables[name])}", flush=True)
        if name != "full":
            bench.figure(f"full / {name}, member-epochs", [full_epochs / epochs])
            bench.figure(f"full / {name}, wall time", harness.ratios(times["full"], times[name]))
    same = {name: tables[name] == tables["full"] for name in paths if name != "full"}
    for name, yes in same.items():
        print(f"compare --tune CSV of {name} byte for byte the full grid's: {'yes' if yes else 'no'}", flush=True)
    if "plan" in same:
        bench.figure("compare --tune CSV, plan == full grid (1 = yes)", [float(same["plan"])], unit="", goal=">= 1")
    bench.note(grid=" ".join(grid(args)), choice=" ".join(choice(args)), not_measured=missing,
               members={k: v[0] for k, v in counts.items()}, member_epochs={k: v[1] for k, v in counts.items()},
               chosen={k: chosen(v) for k, v in tables.items()}, identical_to_full=same)
    return bench.finish(times)


if __name__ == "__main__":
    main()
