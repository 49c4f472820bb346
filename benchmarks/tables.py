"""What the results-table benchmarks (rank_speed, compare_speed, tune_speed) share: a sweep-style
results.csv of about a million rows, their command line, and interleaved rounds of whole processes
judged against the first one's time."""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from benchmarks import harness
from benchmarks.provenance import ROOT

ACTS = sorted(p.stem for p in (ROOT / "configs" / "activation").glob("*.yaml") if p.stem != "custom")
DATA = ["normal", "uniform"]
TARGETS = ["random", "teacher"]


def write_results(path: str, seeds: int, epochs: int, axis: tuple[str, list[str]] = ("data.target", TARGETS)) -> int:
    """A sweep-style results.csv with decaying, floor-hitting losses over activation x data x `axis`
    (a key and its values: data.target by default) x seed; returns the number of rows."""
    key, values = axis
    rng = np.random.default_rng(0)
    ep = np.arange(1, epochs + 1)
    rows = i = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"activation,data,{key},seed,run,epoch,train_loss\n")
        for act in ACTS:
            skill = rng.uniform(0.01, 0.03)
            for data in DATA:
                for target in values:
                    for seed in range(seeds):
                        run = f"{i:04d}_activation={act}_data={data}_{key}={target}_seed={seed}"
                        rate = skill * rng.uniform(0.7, 1.3)
                        loss = np.maximum(np.exp(-rate * ep) * rng.uniform(0.5, 1.5), 1e-14 * rng.uniform(0.5, 2))
                        prefix = f"{act},{data},{target},{seed},{run},"
                        fh.write("".join(f"{prefix}{e},{v!r}\n" for e, v in zip(ep.tolist(), loss.tolist())))
                        rows += epochs
                        i += 1
    return rows


def results_table(folder: str, seeds: int, epochs: int, axis: tuple[str, list[str]] = ("data.target", TARGETS)) -> str:
    """Write write_results' table into folder, print its size and the time taken; returns its path."""
    path = os.path.join(folder, "results.csv")
    t0 = time.perf_counter()
    rows = write_results(path, seeds, epochs, axis)
    print(f"generated {rows:,} rows ({os.path.getsize(path) / 1e6:.0f} MB, {len(ACTS)} activations x "
          f"{len(DATA) * len(axis[1])} tasks x {seeds} seeds) in {time.perf_counter() - t0:.1f} s")
    return path


def options(doc: str | None) -> argparse.ArgumentParser:
    """The options every results-table benchmark takes (the benchmark's own are added to it)."""
    ap = harness.parser(doc)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=926)
    ap.add_argument("--rounds", type=int, default=5)
    return ap


def against_first(bench: harness.Bench, cmds: dict[str, list[str]], rounds: int,
                  goals: dict[str, str]) -> dict[str, list[float]]:
    """Every command once per round, in turn (the first run once before, untimed, to warm the page
    cache and the interpreter's files); each other command's figure is its time over the first's,
    judged against goals[name]. Returns each command's seconds per round."""
    names = list(cmds)
    harness.run(cmds[names[0]])
    times = harness.interleaved({name: lambda r, cmd=cmd: harness.run(cmd).seconds for name, cmd in cmds.items()},
                                rounds)
    for name in names[1:]:
        bench.figure(f"{name} / {names[0]}, its time", harness.ratios(times[name], times[names[0]]),
                     goal=goals.get(name))
    return times
