"""The table of current figures in docs/performance.md, rendered from the benchmarks' records.

For every machine with a records file (benchmarks/records/<machine>.jsonl), the newest record of
each command line: when and where it ran (date, commit, versions, threads, load) and its figures,
each with its rounds and its goal. Nothing here measures anything; no figure is typed by hand.

Usage:
    python -m benchmarks.render                          # print the markdown
    python -m benchmarks.render --write docs/performance.md   # replace the block between the markers
    python -m benchmarks.render --check docs/performance.md   # exit 1 where the page is out of date
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from benchmarks import records

BEGIN = "<!-- rendered by python -m benchmarks.render: begin -->"
END = "<!-- rendered by python -m benchmarks.render: end -->"
SHOWN_VERSIONS = ("torch", "jax", "pandas", "scipy", "mlflow-skinny")


def markdown(recs: list[dict]) -> str:
    """The current figures of every machine as markdown, in lines of at most 120 characters where
    the figures' names allow."""
    current = records.current(recs)
    if not current:
        return "No records yet: run a benchmark (it appends to benchmarks/records/), then this script.\n"
    out: list[str] = []
    for machine, latest in sorted(current.items()):
        out += [f"### {machine}", ""]
        for rec in latest:
            out += _record(rec)
    return "\n".join(out)


def _record(rec: dict) -> list[str]:
    dirty = " with uncommitted changes" if rec["dirty"] else ""
    versions = ", ".join(f"{k} {v}" for k, v in rec["versions"].items() if k in SHOWN_VERSIONS)
    threads = rec["threads"].get("torch")
    facts = [rec["date"], f"commit {rec['commit']}{dirty}", versions,
             f"{threads} threads" if threads else "", f"load {rec['load'][0]:.2f} to {rec['load'][1]:.2f}"]
    lines = [_wrap(f"`{records.command(rec)}`"), "", _wrap("; ".join(f for f in facts if f) + "."), ""]
    if rec["figures"]:
        lines += ["| figure | value | rounds | goal |", "| --- | --- | --- | --- |"]
        for fig in rec["figures"]:
            value = f"{fig['ratio']:.2f}{fig['unit']}"
            rounds = ", ".join(f"{x:.2f}" for x in fig["rounds"]) if len(fig["rounds"]) > 1 else "-"
            goal = f"{fig['goal']}: {'met' if fig['met'] else 'not met'}" if fig["goal"] else "-"
            lines.append(f"| {fig['name']} | **{value}** | {rounds} | {goal} |")
        lines.append("")
    return lines


def _wrap(text: str) -> str:
    """A paragraph in lines of at most 120 characters (a code span may go on over a line end)."""
    return textwrap.fill(text, 120, break_long_words=False, break_on_hyphens=False)


def replace(page: str, block: str) -> str:
    """The page with the text between BEGIN and END replaced by `block`."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"the page has no block between {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n{block.rstrip()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", metavar="DIR", default=None, help="the records folder (default: benchmarks/records)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="PAGE", type=Path, help="replace the rendered block of this page")
    group.add_argument("--check", metavar="PAGE", type=Path, help="exit 1 where this page's block is out of date")
    args = ap.parse_args(argv)
    block = markdown(list(records.read(args.records)))
    if args.write is None and args.check is None:
        sys.stdout.write(block)
        return 0
    page = (args.write or args.check).read_text(encoding="utf-8")
    new = replace(page, block)
    if args.check is not None:
        if new != page:
            print(f"{args.check} is out of date: run python -m benchmarks.render --write {args.check}")
            return 1
        return 0
    args.write.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
