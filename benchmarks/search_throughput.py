"""Search throughput: candidates screened per minute by a search's first rung, against training the
same candidates one at a time, measured in one run.

The screen is rung 1 of `actbench search data=function data.fn=exp_sin epochs=30 batch_size=64
--seeds 2`: each candidate trained on seeds 0 and 1 for 30 epochs of 16 minibatches (1,000 training
points), with validation and test losses after every epoch, and its run directories written.
Candidates are the first N distinct ones (after deduplication) of a seeded draw from the core space.

- grouped: every candidate's members planned and trained as a search rung is (orchestrate's
  stacks of up to 256 members; each stack's expressions evaluated by one GroupedExpr).
- one at a time: each candidate's two seeds trained as their own stack, one candidate after
  another (the same engine and writer: the loop a user would write around `actbench sweep`).
  It is timed on a sample of the candidates (--alone, drawn from the same list).

The two run in interleaved rounds (alone, grouped, alone) so that a shared machine's load falls on
both; the ratio is candidates per minute grouped over one at a time. The projection is the time
2,000 candidates would take at the grouped rate. Usage:
    python -m benchmarks.search_throughput [--candidates 512] [--alone 8] [--epochs 30]
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from benchmarks import harness

TASK = ["data=function", "data.fn=exp_sin", "batch_size=64"]


def candidates(n: int) -> list[str]:
    from activation_bench.search import fingerprint, space

    sp = space.core()
    drawn = [sp.candidate(i) for i in space.draw(sp, None, 0)]
    import random

    random.Random(0).shuffle(drawn)
    out: list[str] = []
    for v in fingerprint.dedup(drawn, fingerprint.expr_probe()):
        if v.status == "unique":
            out.append(v.fn)
            if len(out) == n:
                break
    return out


def plan(fns: list[str], epochs: int, directory: Path):
    from activation_bench.config.hashing import config_hash
    from activation_bench.runs import orchestrate

    members, labels = [], []
    for fn in fns:
        for seed in (0, 1):
            members.append([*TASK, f"epochs={epochs}", "activation=expr", f'activation.fn="{fn}"', f"seed={seed}"])
            labels.append({"activation": fn, "seed": str(seed)})
    cfgs = orchestrate.compose_members(members, labels)
    names = [orchestrate.member_name(i, lab) for i, lab in enumerate(labels)]
    return orchestrate.SweepPlan(directory, [], ["activation", "seed"], members, labels, names, cfgs,
                                 [config_hash(c) for c in cfgs])


def grouped(fns: list[str], epochs: int, root: Path) -> None:
    """Every candidate's members planned and trained as a search rung is."""
    from activation_bench.runs import orchestrate

    p = plan(fns, epochs, root / "grouped")
    orchestrate.train_members(p, range(len(p.members)), 1024.0, False)


def alone(fns: list[str], epochs: int, root: Path) -> None:
    """Each candidate's members trained as their own stack, one candidate after another."""
    from activation_bench.runs import orchestrate

    for i, fn in enumerate(fns):
        p = plan([fn], epochs, root / f"alone{i}")
        orchestrate.train_members(p, range(len(p.members)), 1024.0, False)


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--candidates", type=int, default=512)
    ap.add_argument("--alone", type=int, default=8, help="candidates timed one at a time (split over two rounds)")
    ap.add_argument("--epochs", type=int, default=30)
    args = ap.parse_args()
    import torch

    from activation_bench.host import keep_freed_memory

    keep_freed_memory()  # as actbench's training does (for both sides)
    bench = harness.Bench(args)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads")
    fns = candidates(args.candidates + args.alone)
    screened, sample = fns[: args.candidates], fns[args.candidates :]
    root = Path(tempfile.mkdtemp(prefix="search_bench_"))
    half = len(sample) // 2
    try:  # one round of (alone, grouped, alone): the one-at-a-time sample split around the grouped screen
        times = harness.interleaved({
            "one at a time, first half": lambda r: harness.clock(alone, sample[:half], args.epochs, root)[0],
            "grouped": lambda r: harness.clock(grouped, screened, args.epochs, root)[0],
            "one at a time, second half": lambda r: harness.clock(alone, sample[half:], args.epochs,
                                                                  root / "second")[0]}, 1)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    t_grouped = times["grouped"][0]
    t_alone = times["one at a time, first half"][0] + times["one at a time, second half"][0]
    per_min_grouped = len(screened) / t_grouped * 60
    per_min_alone = len(sample) / t_alone * 60
    print(f"task: exp_sin, 2 seeds, {args.epochs} epochs, batch 64 (16 steps/epoch), val+test losses every epoch")
    print(f"grouped:       {len(screened):5d} candidates in {t_grouped:7.1f} s = {per_min_grouped:7.1f} candidates/min")
    print(f"one at a time: {len(sample):5d} candidates in {t_alone:7.1f} s = {per_min_alone:7.1f} candidates/min")
    print(f"2,000 candidates at the grouped rate: {2000 / per_min_grouped:.1f} min")
    bench.figure("grouped / one at a time, candidates per minute", [per_min_grouped / per_min_alone], digits=1)
    bench.note(candidates_per_minute={"grouped": per_min_grouped, "alone": per_min_alone})
    bench.finish(times)


if __name__ == "__main__":
    main()
