"""The benchmarks' records: one JSON line per benchmark invocation, appended to a file per machine
(`benchmarks/records/<machine slug>.jsonl`), from which `python -m benchmarks.render` builds the
table of current figures in docs/performance.md. The records are the history; no figure is copied
by hand.

A record (the keys `render` reads are checked by tests/test_benchmarks.py):

    {"benchmark": "benchmarks.sweep_throughput", "argv": ["--repeat", "3"], "date": "2026-12-07 19:50 UTC",
     "commit": "9dd7a22", "dirty": false, "machine": {"name": "2-core AMD EPYC 7B13", "cpu": ..., "cores": 2,
     "gpu": null, "system": "Linux x86_64", "slug": "2-core-amd-epyc-7b13"}, "versions": {"python": ...,
     "torch": ...}, "threads": {"torch": 2}, "load": [0.4, 1.9], "seconds": {"actbench sweep": [5.3, ...],
     ...}, "figures": [{"name": "actbench / naive", "ratio": 46.1, "rounds": [38.5, 47.7, 46.1], "unit": "x",
     "goal": null, "met": null}], "notes": {...}}

`seconds` holds each timed path's seconds per round; a figure's `rounds` its value in each round
(where it has one per round) and `ratio` their median (or the one value); `goal` is a comparison
such as ">= 1.0" and `met` whether the ratio meets it.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Iterator
from pathlib import Path

from benchmarks.provenance import ROOT

DEFAULT = ROOT / "benchmarks" / "records"
ENV = "ACTBENCH_BENCH_RECORDS"  # a folder: where test or trial records go instead of DEFAULT
GOALS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


def folder(given: str | os.PathLike[str] | None = None) -> Path:
    """The records folder: the one given (--records), else $ACTBENCH_BENCH_RECORDS, else DEFAULT."""
    return Path(given or os.environ.get(ENV) or DEFAULT)


def met(ratio: float, goal: str | None) -> bool | None:
    """Whether `ratio` meets `goal` (">= 1.0", "<= 1.2"); None without a goal."""
    if not goal:
        return None
    op, _, value = goal.partition(" ")
    if op not in GOALS:
        raise ValueError(f"a goal is one of {', '.join(GOALS)} and a number, not {goal!r}")
    return GOALS[op](ratio, float(value))


def append(record: dict, where: str | os.PathLike[str] | None = None) -> Path:
    """Append one record to its machine's file in the records folder; returns the file."""
    path = folder(where) / f"{record['machine']['slug']}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
    return path


def read(where: str | os.PathLike[str] | None = None) -> Iterator[dict]:
    """Every record of every machine's file in the folder, in file order."""
    for path in sorted(folder(where).glob("*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    yield json.loads(line)


def command(record: dict) -> str:
    """The command line that made a record: 'python -m benchmarks.sweep_throughput --repeat 3'."""
    return " ".join(["python", "-m", record["benchmark"], *record["argv"]])


def current(records: list[dict]) -> dict[str, list[dict]]:
    """Each machine's newest record per command line (the current figures), by machine name, in the
    order of the commands' first records."""
    out: dict[str, dict[str, dict]] = {}
    for rec in records:
        out.setdefault(rec["machine"]["name"], {})[command(rec)] = rec
    return {m: list(by_command.values()) for m, by_command in out.items()}
