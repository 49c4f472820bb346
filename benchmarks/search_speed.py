"""The README's example search, whole processes: the tuned search of this checkout against the
untuned search of an earlier commit (the judgement at one shared lr), measured in one run.

    actbench search data=function data.fn=exp_sin epochs=30 batch_size=64 --candidates 2000

Each side runs as a fresh `python -m activation_bench.cli search ...` process into its own
temporary runs directory; the baseline imports the package from a `git worktree` of --baseline-rev
(PYTHONPATH comes before the editable install). The time of each phase is read from the moments its
progress lines ("rung 1/3 (screen): ...") reach stderr. Prints the wall time of each side, their
ratio (target: the tuned search in at most 1.5x the untuned one), the phases and the load average
before and after, which must stay below 1.5 for a figure worth recording. Usage:
    python benchmarks/search_speed.py [--candidates 2000] [--baseline-rev c2425b3] [--order new,old]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import header  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TASK = ["data=function", "data.fn=exp_sin", "epochs=30", "batch_size=64"]


def timed_search(runs: Path, candidates: int, pythonpath: str | None) -> tuple[float, list[tuple[float, str]]]:
    """(wall seconds, [(seconds since start, a progress line)]) of one search process."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, "-m", "activation_bench.cli", "search", *TASK, "--candidates", str(candidates),
           "--runs-dir", str(runs), "--name", "speed", "-q"]
    start = time.perf_counter()
    # cwd: `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH
    proc = subprocess.Popen(cmd, env=env, cwd=runs.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    marks = []
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("rung ") or "members done" in line:
            marks.append((time.perf_counter() - start, line.strip()))
    if proc.wait() != 0:
        raise SystemExit(f"search failed: {' '.join(cmd)}")
    return time.perf_counter() - start, marks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=2000)
    ap.add_argument("--baseline-rev", default="c2425b3", help="the commit of the untuned search")
    ap.add_argument("--order", default="new,old", help="which side runs first")
    args = ap.parse_args()
    print(header())
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"load average before: {os.getloadavg()[0]:.2f}; OMP_NUM_THREADS={threads}")
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.baseline_rev], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            sides = {"new": None, "old": str(tree)}
            got = {}
            for side in args.order.split(","):
                got[side] = timed_search(Path(tmp) / f"runs-{side}", args.candidates, sides[side])
                print(f"{side}: {got[side][0]:.0f} s; load average now {os.getloadavg()[0]:.2f}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    for side, (wall, marks) in got.items():
        if side == "old" and any("tuning" in line for _, line in marks):
            raise SystemExit("the baseline ran this checkout's code, not --baseline-rev's")
        print(f"\n{side} ({'this checkout' if side == 'new' else args.baseline_rev}): {wall:.0f} s "
              f"({wall / 60:.1f} min)")
        for at, line in marks:
            print(f"  {at:7.0f} s  {line[:110]}")
    if "new" in got and "old" in got:
        print(f"\ntuned / untuned: {got['new'][0] / got['old'][0]:.2f}x (target <= 1.5x)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
