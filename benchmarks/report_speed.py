"""report speed: `actbench report` on a 480-member sweep against `actbench compare --format json`.

Trains the sweep 8 activations x 2 data x 30 seeds x 1000 epochs (480 members, 480,000 rows in
results.csv) with `actbench sweep` into a temporary directory (or reads --sweep DIR), then times,
each as a fresh process and interleaved over --repeat rounds:

- compare: `actbench compare SWEEP --format json` (the baseline: load and statistics, no torch);
- report --no-shapes: the page without the activation shapes (no torch);
- report: the whole page, torch imported for the shapes section.

Prints each command's median wall time and its ratio to compare's. Usage:
    python -m benchmarks.report_speed [--repeat 3] [--sweep runs/existing-sweep]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks import harness, provenance
from benchmarks.peers.grid import ACTS


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sweep", type=Path, default=None, help="an existing sweep directory (default: train one)")
    args = ap.parse_args()
    bench = harness.Bench(args, compile_bytecode=True)
    cli = provenance.actbench()
    with tempfile.TemporaryDirectory() as tmp:
        sweep = args.sweep
        if sweep is None:
            sweep = Path(tmp) / "runs" / "speed"
            harness.run([*cli, "sweep", f"activation={','.join(ACTS)}", "data=normal,uniform", "seed=range(30)",
                         "epochs=1000", "--name", "speed", "--runs-dir", str(Path(tmp) / "runs")])
        members = sum(1 for d in sweep.iterdir() if d.is_dir() and not d.name.startswith("."))
        out = Path(tmp) / "report.html"
        commands = {
            "compare --format json": [*cli, "compare", str(sweep), "--format", "json"],
            "report --no-shapes": [*cli, "report", str(sweep), "-o", str(out), "--no-shapes"],
            "report": [*cli, "report", str(sweep), "-o", str(out)],
        }
        times = harness.interleaved({name: lambda r, cmd=cmd: harness.run(cmd).seconds
                                     for name, cmd in commands.items()}, args.repeat)
        size = out.stat().st_size
    print(f"{members} members; report.html {size / 1e6:.2f} MB")
    for name in ("report --no-shapes", "report"):
        bench.figure(f"{name} / compare --format json, its time", harness.ratios(times[name],
                     times["compare --format json"]))
    bench.note(members=members, report_bytes=size)
    bench.finish(times)


if __name__ == "__main__":
    main()
