"""What successive halving in the tuning stage (`sweep --tune ... --halving ETA`) would choose, against
the full tuning's choice, computed exactly from one sweep whose tuning seeds trained the full grid.

A rung is bit for bit the first epochs of the full run (runs/rungs.py), so halving's decisions can be
replayed from a full tuning: a full-grid sweep, or a tune-then-judge sweep's tuning stage. For each
ETA the rungs are runs/rungs.schedule's; at each rung but the last, the live settings' tuning runs are
cut to the rung's epochs (as a rung's table: train_loss, val_loss, val_acc, no status) and ranked by
the sweep's own promotion (analysis/staged.promoted, the code of `sweep --halving`), each group keeping
rungs.survivors of its settings; at the last rung (the full run) each group chooses among the settings
left by the choice's own code (analysis/tune.choose with --tune-grid own, as the halved sweep does).
The full tuning's choice is tune.choose over every tuning run (`compare --tune`'s).

Printed per ETA: the rungs, the tuning member-epochs halving trains against the full tuning's, and
per group the value halving would choose against the full tuning's (same, or k grid steps up/down:
towards larger/smaller values of the tuned key's sorted grid), then how many choices moved. Reads
the sweep only and times nothing; its figures (choices moved, the member-epochs saved) go to the
benchmarks' record as any benchmark's (harness.Bench; --no-record: print only).

Usage:
    python -m benchmarks.halving_agreement SWEEP_DIR --tune lr --tune-seeds 5 --metric early_stop \\
        [--tune-on val_acc] --eta 2 3 5 [--no-record]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from activation_bench.analysis import staged, tune
from activation_bench.analysis.compare import resolve_groups
from activation_bench.analysis.loading import Loaded, load
from activation_bench.analysis.metrics import FLOOR, parse_metric
from activation_bench.analysis.selection import Selection, spelled
from activation_bench.errors import UsageError, one_line
from activation_bench.runs import rungs
from benchmarks import harness


@dataclass
class Sweep:
    """The sweep's runs, the choice rule and its tuning runs grouped into settings."""

    path: Path
    loaded: Loaded
    tuning: staged.Tuning
    tune_s: list[str]
    judge_s: list[str]
    group_cols: list[str]
    settings: dict[tuple, np.ndarray]  # (group values, tuned values) -> its tuning runs (rows of loaded.runs)
    epochs: int  # the tuning runs' full number of epochs
    listed: np.ndarray  # per run of loaded: a member of the sweep (not a run of an earlier grid)


@dataclass
class Outcome:
    """Halving at one ETA: its rungs, member-epochs (its and the full tuning's) and its choice."""

    eta: int
    rungs: list[int]
    member_epochs: int
    full_member_epochs: int
    to_the_end: int  # tuning runs trained to the last rung
    choice: Selection
    live: list[list[tuple]] = field(default_factory=list)  # the settings trained to each rung


def options() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__)
    ap.add_argument("sweep", metavar="SWEEP_DIR", help="a sweep folder whose tuning seeds trained the full grid")
    ap.add_argument("--tune", action="append", required=True, help="the tuned key(s), as compare --tune")
    ap.add_argument("--tune-seeds", required=True, help="the K smallest seeds tune (as compare --tune-seeds)")
    ap.add_argument("--metric", default="final", help="the choice's metric (default: final, as sweep --tune)")
    ap.add_argument("--tune-on", default=None, help="val_loss (default) or val_acc")
    ap.add_argument("--eta", type=int, nargs="+", required=True, help="halving's ETA(s), each 2 or more")
    return ap


def members(path: Path) -> list[dict]:
    """The sweep's members (name, labels) as its sweep.yaml lists them; UsageError where it is no sweep."""
    import yaml

    from activation_bench.cfg import load_yaml

    file = path / "sweep.yaml"
    try:
        doc = load_yaml(file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        doc = None
    found = doc.get("members") if isinstance(doc, dict) else None
    if not isinstance(found, list) or not all(isinstance(m, dict) and "name" in m for m in found):
        raise UsageError(f"{path}: not a sweep folder (no readable {file.name}): give a folder `actbench sweep` wrote")
    return found


def read_sweep(path: Path, keys: Sequence[str], tune_seeds: str, metric: str, on: str | None) -> Sweep:
    """The sweep and its tuning runs (its members on the tuning seeds: compare's and the sweep's split,
    the K smallest); UsageError where it is no sweep or a tuning member has no finished run."""
    spec = tune.parse_tune(keys, tune_seeds, None, on)
    assert spec is not None  # --tune is required
    parse_metric(metric)
    listed = members(path)
    loaded = load([str(path)])
    tune.check_keys(spec, loaded.config_cols, loaded.runs)
    tune_s, judge_s = tune.split_seeds([(m.get("labels") or {}).get("seed") for m in listed], spec.tune_seeds)
    wanted = [m["name"] for m in listed if str((m.get("labels") or {}).get("seed")) in tune_s]
    missing = sorted(set(wanted) - set(loaded.runs["run"]))
    if missing:
        raise UsageError(f"{path}: {len(missing)} of its {len(wanted)} members on the tuning seeds "
                         f"({', '.join(tune_s)}) have no finished run ({missing[0]}, ...): halving is replayed from "
                         "a full tuning (a full-grid sweep, or a tune-then-judge sweep's tuning stage)")
    group_cols = [c for c in resolve_groups(loaded, None) if c not in spec.keys]
    cols = [*group_cols, *spec.keys]
    rows = np.flatnonzero(loaded.runs["run"].isin(wanted).to_numpy())
    settings = {(k if isinstance(k, tuple) else (k,)): rows[np.sort(v)]
                for k, v in spelled(loaded.runs, cols).iloc[rows].groupby(cols, sort=False).indices.items()}
    ends = {int(loaded.epoch[loaded.bounds[i + 1] - 1]) for i in rows
            if loaded.runs["status"].iloc[i] != "diverged" and loaded.bounds[i + 1] > loaded.bounds[i]}
    if len(ends) != 1:
        raise UsageError(f"{path}: the tuning runs train {', '.join(map(str, sorted(ends))) or 'no'} epochs; "
                         "halving's rungs are fractions of one number of epochs")
    listed_runs = loaded.runs["run"].isin([m["name"] for m in listed]).to_numpy()
    return Sweep(path, loaded, staged.Tuning(spec, metric), tune_s, judge_s, group_cols, settings, ends.pop(),
                 listed_runs)


def cut(loaded: Loaded, rows: np.ndarray, upto: int) -> Loaded:
    """These runs' first `upto` epochs as a rung's table holds them (runs/rungs.partial_table: its
    columns, no status), for staged.promoted."""
    keep = np.zeros(len(loaded.runs), bool)
    keep[rows] = True
    run = loaded.run_index()
    at = np.flatnonzero(keep[run] & (loaded.epoch <= upto))
    counts = np.bincount(run[at], minlength=len(keep))[keep]
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    runs = loaded.runs.iloc[np.flatnonzero(keep)].reset_index(drop=True).assign(status=None)
    losses = {c: v[at] for c, v in loaded.losses.items() if c in rungs.COLUMNS.values()}
    return Loaded(runs, list(loaded.config_cols), loaded.epoch[at], losses, bounds, [])


def halve(s: Sweep, eta: int) -> Outcome:
    """Halving at ETA replayed: the rungs, each rung's promotion, the choice among the settings left."""
    groups = {k[:len(s.group_cols)] for k in s.settings}
    values = max(sum(k[:len(s.group_cols)] == g for k in s.settings) for g in groups)
    epochs = rungs.schedule(s.epochs, values, eta)
    live, before, trained, at = dict(s.settings), 0, 0, []
    names = s.loaded.runs["run"].to_numpy(object)
    for upto in epochs:
        at.append(list(live))
        trained += sum(len(m) for m in live.values()) * (upto - before)
        before = upto
        if upto == epochs[-1]:
            break
        rows = np.sort(np.concatenate(list(live.values())))
        going = staged.promoted(cut(s.loaded, rows, upto), s.tuning, s.tune_s, s.judge_s, eta)
        live = {k: m for k, m in live.items() if names[m[0]] in going}
    keep = np.zeros(len(s.loaded.runs), bool)
    keep[np.concatenate(list(live.values()))] = True
    own = staged.Tuning(dataclasses.replace(s.tuning.spec, grid="own"), s.tuning.metric)
    choice = choose(s, own, keep)
    full = sum(len(m) for m in s.settings.values()) * s.epochs
    return Outcome(eta, epochs, trained, full, int(keep.sum()), choice, at)


def choose(s: Sweep, t: staged.Tuning, keep: np.ndarray | None = None) -> Selection:
    """The choice itself (tune.choose, what compare --tune and a tuned sweep call) over the runs kept."""
    return tune.choose(s.loaded, parse_metric(t.metric), s.group_cols, t.spec, s.tune_s, s.judge_s, FLOOR, keep)


def chosen(sel: Selection) -> dict[tuple, tuple]:
    """Group values -> the tuned keys' chosen values (as strings)."""
    rows = spelled(sel.chosen, [*sel.group_cols, *sel.keys]).to_numpy(object).tolist()
    n = len(sel.group_cols)
    return {tuple(map(str, r[:n])): tuple(map(str, r[n:])) for r in rows}


def moved(grid: dict[str, list[str]], keys: Sequence[str], full: tuple, halved: tuple) -> str:
    """'same', or per tuned key that moved: 'k grid step(s) up/down' along its sorted grid."""
    out = []
    for key, a, b in zip(keys, full, halved):
        if a != b:
            k = grid[key].index(b) - grid[key].index(a)
            out.append(f"{key} {abs(k)} grid step{'s' if abs(k) > 1 else ''} {'up' if k > 0 else 'down'}")
    return ", ".join(out) or "same"


def report(s: Sweep, full: Selection, o: Outcome) -> tuple[list[str], int]:
    """An ETA's lines (rungs and member-epochs, each group's two choices, the count that moved) and
    how many of the full tuning's choices halving moves (a group it leaves out counts as moved)."""
    keys = list(s.tuning.spec.keys)
    share = o.member_epochs / max(o.full_member_epochs, 1)
    lines = [f"ETA {o.eta}: rungs at {', '.join(map(str, o.rungs))} epochs "
             f"({' -> '.join(str(len(x)) for x in o.live)} settings); the tuning stage takes {o.member_epochs:,} "
             f"member-epochs instead of {o.full_member_epochs:,} ({share:.0%}), {o.to_the_end} of its members train "
             "to the end"]
    mine, theirs = chosen(o.choice), chosen(full)
    changed = 0
    for group, value in theirs.items():
        label = ", ".join(f"{c}={v}" for c, v in zip(s.group_cols, group)) or "all runs"
        got = mine.get(group)
        if got is None:
            changed += 1
            lines.append(f"  {label}: halving leaves the group out; full tuning {' '.join(value)}")
            continue
        how = moved(full.grid, keys, value, got)
        changed += how != "same"
        pair = " ".join(f"{k} {a}" for k, a in zip(keys, got))
        lines.append(f"  {label}: halving {pair}, full tuning {' '.join(value)}: {how}")
    lines.append(f"  ETA {o.eta}: {changed} of {len(theirs)} choices moved")
    return lines, changed


def recorded(s: Sweep, full: Selection) -> str | None:
    """A line on the sweep's own tuning.json: whether a choice there by the same rule chose the same."""
    t = s.tuning
    for c in (staged.read_choice(s.path) or {}).get("choices", []):
        if (c.get("tune") == list(t.spec.keys) and c.get("tune_on") == t.spec.on and c.get("metric") == t.metric
                and c.get("tune_seeds") == s.tune_s and not c.get("halving")):
            rows = {tuple(str(r.get(g)) for g in full.group_cols): tuple(str(r.get(k)) for k in full.keys)
                    for r in c.get("chosen", [])}
            same = "the same" if rows == chosen(full) else "OTHERWISE"
            return f"the sweep's {staged.CHOICE_FILE} ({c.get('name')}) chose {same}"
    return None


def agreement(args: argparse.Namespace) -> tuple[Sweep, Selection, list[Outcome]]:
    """The sweep, the full tuning's choice and halving at each ETA; UsageError on bad input."""
    bad = [e for e in args.eta if e < 2]
    if bad:
        raise UsageError(f"--eta {bad[0]}: halving keeps the best 1/ETA of each group's settings at each rung; "
                         "ETA is 2 or more")
    s = read_sweep(Path(args.sweep), args.tune, args.tune_seeds, args.metric, args.tune_on)
    full = choose(s, s.tuning, s.listed)  # the members' runs, as the tuned sweep's own choice reads them
    return s, full, [halve(s, eta) for eta in args.eta]


def main(argv: Sequence[str] | None = None) -> int:
    args = options().parse_args(argv)
    try:
        s, full, outcomes = agreement(args)
    except UsageError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    bench = harness.Bench(args)
    spec, theirs = s.tuning.spec, chosen(full)
    print(f"{s.path}: {len(s.settings)} settings x {len(s.tune_s)} tuning seeds ({', '.join(s.tune_s)}), "
          f"{s.epochs} epochs; choice: --tune {' '.join(spec.keys)} by {s.tuning.metric} of {full.selected_on}")
    print("full tuning chose: " + "; ".join(f"{' '.join(g)}: {' '.join(v)}" for g, v in theirs.items()))
    line = recorded(s, full)
    if line:
        print(line)
    for o in outcomes:
        lines, changed = report(s, full, o)
        print("\n".join(lines), flush=True)
        bench.figure(f"choices moved of {len(theirs)}, ETA {o.eta}", [changed], unit="", digits=0)
        bench.figure(f"full / halving tuning member-epochs, ETA {o.eta}", [o.full_member_epochs / o.member_epochs])
    def spelt(sel: Selection) -> dict[str, str]:
        return {" ".join(g): " ".join(v) for g, v in chosen(sel).items()}

    bench.note(full_choice=spelt(full), halving_choice={o.eta: spelt(o.choice) for o in outcomes},
               rungs={o.eta: o.rungs for o in outcomes}, member_epochs={o.eta: o.member_epochs for o in outcomes})
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
