"""Preemption soak: a sweep killed at random moments N times, then finished, against the same sweep
run once without interruption (issue #40).

Each attempt is the real command (`python -m activation_bench.cli sweep ...`, the same every
time) in a fresh process, stopped after a random delay by SIGKILL (nothing saved: the epochs since
its last checkpoint are lost) or SIGTERM (the current step finishes and a checkpoint is written),
chosen at random. After N kills it runs to the end. Every process appends its epochs, checkpoint
saves and resumes to one trace file (ACTBENCH_CHECKPOINT_TRACE).

Prints:
- kills survived: kills that landed before the sweep finished (a SIGTERM in the first second or so,
  before the command has set up its handlers, ends the process as any program's: nothing to save);
- epochs recomputed: epochs trained in all attempts together minus those of the uninterrupted
  sweep (SIGKILL's losses since the last checkpoint; a SIGTERM costs at most the step it finishes);
- checkpoint overhead: the seconds spent writing checkpoints over the training seconds, measured at
  this soak's checkpoint.seconds (the uninterrupted run), and at the default of 300 s (the mean
  checkpoint's write time over 300 s);
- whether every member's losses.csv, config.yaml and summary.json (its wall_time_s and created
  aside) and results.csv equal the uninterrupted sweep's, byte for byte.

Usage:
    python -m tools.soak_preemption [--kills 8] [--seed 0] [--seconds 1.0] [--epochs 150]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = ["activation=gelu,relu,tanh", "seed=range(4)", "data.n_samples=512", "data.input_dim=8",
        "model.hidden_dim=32", "batch_size=32", "shuffle=true", "model.dropout=0.1"]
TIMING = ("wall_time_s", "created")


def command(root: Path, epochs: int, seconds: float) -> list[str]:
    # a budget of about four members a stack: three stacks, resumed as stacks
    return [sys.executable, "-m", "activation_bench.cli", "sweep", "--runs-dir", str(root), "--name", "soak", "-q",
            "--memory-mb", "1.7", *GRID, f"epochs={epochs}", f"checkpoint.seconds={seconds}"]


def trace_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def same_outputs(a: Path, b: Path) -> tuple[bool, int]:
    """(every file equal, files compared): summary.json without its timing fields."""
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(a).parts))
    other = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(b).parts))
    if files != other:
        return False, len(files)
    for rel in files:
        if rel.name == "summary.json":
            left, right = (json.loads((d / rel).read_text()) for d in (a, b))
            for k in TIMING:
                left.pop(k, None), right.pop(k, None)
            if left != right:
                return False, len(files)
        elif (a / rel).read_bytes() != (b / rel).read_bytes():
            return False, len(files)
    return True, len(files)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--seconds", type=float, default=1.0, help="checkpoint.seconds of both sweeps")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    from benchmarks.provenance import header

    print(header(), f"load average {os.getloadavg()[0]:.2f}", flush=True)
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="actbench-soak-"))
    env = dict(os.environ)
    env.pop("ACTBENCH_SIGNAL_AT", None)
    try:
        ref_trace = tmp / "ref.jsonl"
        start = time.perf_counter()
        subprocess.run(command(tmp / "ref", args.epochs, args.seconds), check=True, stdout=subprocess.DEVNULL,
                       env={**env, "ACTBENCH_CHECKPOINT_TRACE": str(ref_trace)})
        ref_s = time.perf_counter() - start
        ref_events = trace_events(ref_trace)
        ref_epochs = sum(e["event"] == "epoch" for e in ref_events)
        saves = [e["seconds"] for e in ref_events if e["event"] == "save"]
        stacks = {(e["stack"]) for e in ref_events}
        summaries = [json.loads(p.read_text()) for p in (tmp / "ref" / "soak").glob("*/summary.json")]
        # each stack's training seconds (its members share one wall_time_s)
        train_s = sum({s["wall_time_s"] for s in summaries})
        startup = max(0.0, ref_s - train_s)
        print(f"uninterrupted: {ref_s:.1f} s whole process, {train_s:.1f} s training in {len(stacks)} stacks, "
              f"{ref_epochs} epochs traced, {len(saves)} checkpoints at checkpoint.seconds={args.seconds:g}")

        trace = tmp / "soak.jsonl"
        cmd = command(tmp / "soak", args.epochs, args.seconds)
        kills, kinds = 0, {"SIGKILL": 0, "SIGTERM": 0}
        attempts = 0
        while kills < args.kills:
            attempts += 1
            proc = subprocess.Popen(cmd, env={**env, "ACTBENCH_CHECKPOINT_TRACE": str(trace)},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # past start-up (imports, planning), then a random share of the training: on average
            # 0.8 of 1/(N+1) of it, so N kills land before the sweep is done
            time.sleep(startup + rng.uniform(0.0, 1.6 * train_s / (args.kills + 1)))
            if proc.poll() is not None:
                if proc.returncode == 0:
                    print(f"attempt {attempts}: the sweep finished before its kill; {kills} kills so far")
                    break
                raise SystemExit(f"attempt {attempts} failed: exit {proc.returncode}")
            sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
            proc.send_signal(sig)
            code = proc.wait()
            kills += 1
            kinds[sig.name] += 1
            print(f"attempt {attempts}: {sig.name}, exit {code}")
        final = subprocess.run(cmd, env={**env, "ACTBENCH_CHECKPOINT_TRACE": str(trace)}, capture_output=True,
                               text=True)
        if final.returncode != 0:
            raise SystemExit(f"the last attempt failed: {final.stderr.strip().splitlines()[-1:]}")
        events = trace_events(trace)
        epochs = sum(e["event"] == "epoch" for e in events)
        resumes = sum(e["event"] == "resume" for e in events)
        equal, files = same_outputs(tmp / "ref" / "soak", tmp / "soak" / "soak")
        mean_save = sum(saves) / len(saves) if saves else float("nan")
        print(f"kills survived: {kills} ({kinds['SIGKILL']} SIGKILL, {kinds['SIGTERM']} SIGTERM), "
              f"{resumes} resumes from a checkpoint")
        extra = epochs - ref_epochs
        print(f"epochs recomputed: {extra} of {ref_epochs} ({100 * extra / ref_epochs:.1f}%)")
        if saves:
            print(f"checkpoint overhead at checkpoint.seconds={args.seconds:g}: {sum(saves):.3f} s of {train_s:.1f} s "
                  f"training ({100 * sum(saves) / train_s:.2f}%), {1000 * mean_save:.1f} ms a checkpoint")
            print(f"checkpoint overhead at the default (300 s): {100 * mean_save / 300:.4f}% of training time")
        print(f"results equal to the uninterrupted sweep: {'yes' if equal else 'NO'} ({files} files compared)")
        if not equal:
            raise SystemExit(1)
    finally:
        if args.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
