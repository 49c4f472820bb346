"""The one harness of the benchmarks: timing a whole process or a callable, interleaved rounds of
several paths, and a benchmark's invocation, `Bench` (its provenance header, figures and the record
it appends).

A shared machine speeds up and slows down by tens of percent within minutes, so a benchmark never
times one side and then the other: each round runs every path once, in turn (`interleaved`), and a
ratio is the median of the rounds' ratios, so a slow spell falls on both sides of a round.

A benchmark's `main` reads, in outline:

    ap = harness.parser(__doc__)           # its options, plus --records DIR and --no-record
    args = ap.parse_args()
    bench = harness.Bench(args)            # prints the date, commit and machine
    times = harness.interleaved({"actbench": lambda r: harness.run(cmd).seconds,
                                 "plain": lambda r: harness.clock(loop)[0]}, args.repeat)
    bench.figure("plain / actbench", harness.ratios(times["plain"], times["actbench"]), goal=">= 1.0")
    bench.finish(times)                    # prints the load average, appends the record
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, TypeVar

from benchmarks import provenance, records

T = TypeVar("T")


class Timed(NamedTuple):
    seconds: float  # wall seconds, or CPU seconds where asked
    stdout: str
    stderr: str
    cpu: float  # the process's user + system CPU seconds


def run(cmd: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
        cpu_time: bool = False, capture: bool = False) -> Timed:
    """One whole process, timed from start to exit: its wall seconds, or with `cpu_time` its user +
    system CPU seconds (with one thread, what it would take on an idle core: a busy machine's
    scheduler does not inflate it, but time spent waiting for the disk is left out). Runs in the
    checkout (where `python -m benchmarks...` finds this package) unless `cwd` says otherwise; with
    `capture` its output is returned, else dropped. A failure ends the benchmark with the command
    and the end of its error output."""
    start, used = time.perf_counter(), children_cpu()
    done = subprocess.run(list(cmd), cwd=cwd or provenance.ROOT, env=None if env is None else dict(env),
                          stdout=subprocess.PIPE if capture else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall, cpu = time.perf_counter() - start, children_cpu() - used
    if done.returncode != 0:
        sys.exit(f"failed (exit {done.returncode}): {' '.join(map(str, cmd))}\n{done.stderr[-2000:]}")
    return Timed(cpu if cpu_time else wall, done.stdout or "", done.stderr, cpu)


def clock(fn: Callable[..., T], *args: object, cpu_time: bool = False, **kwargs: object) -> tuple[float, T]:
    """(seconds, result) of one call in this process: wall seconds, or with `cpu_time` this
    process's CPU seconds."""
    timer = time.process_time if cpu_time else time.perf_counter
    start = timer()
    out = fn(*args, **kwargs)
    return timer() - start, out


def children_cpu() -> float:
    """The user + system CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def interleaved(paths: Mapping[str, Callable[[int], float]], rounds: int, *,
                show: bool = True) -> dict[str, list[float]]:
    """Every path once per round, in the mapping's order, for `rounds` rounds; each path is called
    with the round's number (from 1) and returns its seconds. Returns each path's seconds per round;
    with `show` prints each as it ends."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    for r in range(1, rounds + 1):
        for name, path in paths.items():
            times[name].append(path(r))
            if show:
                print(f"round {r}: {name} {times[name][-1]:.2f} s", flush=True)
    return times


def ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """num[i] / den[i], round by round."""
    return [a / b for a, b in zip(num, den, strict=True)]


def load() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser described by the benchmark's docstring, with the record options every
    benchmark takes."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", metavar="DIR", default=None,
                    help=f"the folder of the per-machine records files (default: ${records.ENV}, else "
                         "benchmarks/records/ of the checkout)")
    ap.add_argument("--no-record", action="store_true", help="print only; append no record")
    return ap


class Bench:
    """One invocation of a benchmark: prints the provenance header when made, collects the figures,
    and `finish` appends them, with the rounds' seconds, to the machine's records file."""

    def __init__(self, args: argparse.Namespace, *, compile_bytecode: bool = False) -> None:
        self.args = args
        self.load_start = load()
        self.figures: list[dict] = []
        self.notes: dict[str, object] = {}
        print(provenance.header(), flush=True)
        print(f"# load average {self.load_start:.2f} at the start", flush=True)
        if compile_bytecode:
            provenance.compile_bytecode()

    def figure(self, name: str, rounds: Sequence[float], *, goal: str | None = None, unit: str = "x",
               digits: int = 2) -> float:
        """A figure of the benchmark: its value in each round (or one value), their median, and the
        goal it is judged against (">= 1.0"). Printed and kept for the record; returns the median."""
        value = statistics.median(rounds)
        met = records.met(value, goal)
        self.figures.append({"name": name, "ratio": round(value, 4), "rounds": [round(x, 4) for x in rounds],
                             "unit": unit, "goal": goal, "met": met})
        text = ", ".join(f"{x:.{digits}f}" for x in rounds)
        judged = f"; goal {goal}: {'met' if met else 'not met'}" if goal else ""
        print(f"{name} = {value:.{digits}f}{unit} (median of {len(rounds)}: {text}){judged}", flush=True)
        return value

    def note(self, **values: object) -> None:
        """Other facts worth keeping in the record (a marginal rate, the stack size)."""
        self.notes.update(values)

    def record(self, seconds: Mapping[str, Sequence[float]]) -> dict:
        """The record of this invocation (records.py describes it)."""
        head, dirty = provenance.commit()
        main = sys.modules["__main__"]
        name = main.__spec__.name if getattr(main, "__spec__", None) else os.path.basename(sys.argv[0])
        argv = _without_record_options(sys.argv[1:])
        return {"benchmark": name, "argv": argv, "date": provenance.now(), "commit": head, "dirty": dirty,
                "machine": provenance.machine(), "versions": provenance.versions(), "threads": provenance.threads(),
                "load": [self.load_start, load()], "seconds": {k: [round(s, 4) for s in v] for k, v in seconds.items()},
                "figures": self.figures, "notes": self.notes}

    def finish(self, seconds: Mapping[str, Sequence[float]] | None = None) -> dict:
        """Print the load average and append the record (unless --no-record); returns the record."""
        rec = self.record(seconds or {})
        print(f"# load average {rec['load'][1]:.2f} at the end", flush=True)
        if not getattr(self.args, "no_record", False):
            path = records.append(rec, getattr(self.args, "records", None))
            print(f"# recorded in {path}", flush=True)
        return rec


def _without_record_options(argv: list[str]) -> list[str]:
    """argv less --records DIR and --no-record: where a record is written is not part of its command."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--records":
            skip = True
        elif not word.startswith("--records=") and word != "--no-record":
            out.append(word)
    return out
