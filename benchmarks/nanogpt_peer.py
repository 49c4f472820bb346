"""actbench against nanoGPT's own `train.py` at nanoGPT's README CPU configuration, whole processes.

The peer is karpathy/nanoGPT itself, never a dependency: clone it anywhere and name the folder,

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT
    python benchmarks/nanogpt_peer.py --nanogpt /tmp/nanoGPT --text PATH/TO/shakespeare_char/input.txt

The script copies what nanoGPT needs (`train.py`, `model.py`, `configurator.py`, the shakespeare_char
config and `prepare.py`) into a temporary folder, puts the text beside `prepare.py` (which then
downloads nothing) and runs it once; the clone is left as it is. Then, interleaved, `--repeat` rounds of:

- nanoGPT: `python train.py config/train_shakespeare_char.py` at the README's CPU settings (4 x 128,
  4 heads, block 64, batch 12, dropout 0, no compile, float32), AdamW 1e-3 with beta2 0.99 and decay
  0.1, 100 warmup steps, cosine to 1e-4 over `--steps`, clip 1.0; it evaluates 20 batches of each split
  at step 0, every 250 steps and at the end (as its README's CPU command does), and saves a checkpoint
  when the validation loss improves;
- actbench, one run: `actbench run model=transformer data=shakespeare` with the same model and recipe,
  `--steps` steps as epochs of 250, evaluating 240 fixed windows (20 batches of 12) of each split after
  each epoch (`data.eval_windows=240`, the sampled evaluation of nanoGPT's size);
- actbench, `--seeds` seeds as one sweep (`seed=range(N)`), against nanoGPT run that many times.

Each time is the median wall time of the rounds, start-up included; each ratio is nanoGPT's time over
ours in the same round (above 1: actbench is faster), and the figure is their median. Measure on a
quiet machine (load below 1.5).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVAL_EVERY = 250
NANOGPT_FILES = ["train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py",
                 "data/shakespeare_char/prepare.py"]


def prepare_nanogpt(clone: Path, text: Path, work: Path) -> Path:
    """nanoGPT's files and its prepared shakespeare_char data in work/nanogpt; returns that folder."""
    dest = work / "nanogpt"
    for name in NANOGPT_FILES:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(clone / name, dest / name)
    data = dest / "data" / "shakespeare_char"
    shutil.copy(text, data / "input.txt")
    subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True)
    return dest


def nanogpt_command(steps: int) -> list[str]:
    return [sys.executable, "train.py", "config/train_shakespeare_char.py", "--device=cpu", "--compile=False",
            "--dtype=float32", "--eval_iters=20", f"--eval_interval={EVAL_EVERY}", "--log_interval=50",
            "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--dropout=0.0",
            f"--max_iters={steps}", f"--lr_decay_iters={steps}", "--warmup_iters=100", "--learning_rate=1e-3",
            "--min_lr=1e-4", "--beta2=0.99", "--weight_decay=0.1", "--grad_clip=1.0", "--out_dir=out"]


def actbench_command(steps: int, seeds: int, text_root: Path, runs: Path) -> list[str]:
    command = "sweep" if seeds > 1 else "run"
    grid = [f"seed=range({seeds})"] if seeds > 1 else ["seed=0"]
    return [sys.executable, "-m", "activation_bench", command, "--runs-dir", str(runs), "-q",
            "model=transformer", "data=shakespeare", f"data.root={text_root}", "data.sha256=null",
            "batch_size=12", "model.n_layer=4", "model.n_head=4", "model.n_embd=128", "model.block_size=64",
            "model.dropout=0", "activation=gelu", "lr=1e-3", "weight_decay=0.1", "beta2=0.99", "schedule=cosine",
            "warmup_steps=100", f"decay_steps={steps}", "min_lr=1e-4", "grad_clip=1.0",
            f"epochs={steps // EVAL_EVERY}", f"data.steps={EVAL_EVERY}", "data.eval_windows=240", *grid]


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nanogpt", type=Path, required=True, help="a clone of karpathy/nanoGPT")
    parser.add_argument("--text", type=Path, required=True, help="tiny shakespeare's input.txt")
    parser.add_argument("--steps", type=int, default=500, help="optimiser steps (a multiple of 250)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds of the sweep against nanoGPT run that often")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.steps % EVAL_EVERY:
        parser.error(f"--steps must be a multiple of {EVAL_EVERY}")
    from provenance import compile_bytecode, header  # benchmarks/ is on sys.path when a script there runs

    print(header(), flush=True)
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="nanogpt-peer-") as tmp:
        work = Path(tmp)
        peer = prepare_nanogpt(args.nanogpt, args.text, work)
        text_root = work / "text"
        (text_root / "shakespeare_char").mkdir(parents=True)
        shutil.copy(args.text, text_root / "shakespeare_char" / "input.txt")
        times: dict[str, list[float]] = {"nanogpt": [], "one": [], "sweep": []}
        for r in range(args.repeat):
            times["nanogpt"].append(timed(nanogpt_command(args.steps), peer))
            times["one"].append(timed(actbench_command(args.steps, 1, text_root, work / f"runs{r}"), ROOT))
            times["sweep"].append(timed(actbench_command(args.steps, args.seeds, text_root, work / f"sweep{r}"), ROOT))
            print(f"round {r + 1}: nanoGPT {times['nanogpt'][-1]:.1f} s, actbench run {times['one'][-1]:.1f} s, "
                  f"sweep of {args.seeds} {times['sweep'][-1]:.1f} s", flush=True)
    nano, one, sweep = (statistics.median(times[k]) for k in ("nanogpt", "one", "sweep"))
    # each round's ratio against the nanoGPT run of that round (a slow spell of a shared machine hits
    # the neighbours alike), and their median, as peer_throughput.py reports
    ones = [n / o for n, o in zip(times["nanogpt"], times["one"])]
    sweeps = [args.seeds * n / s for n, s in zip(times["nanogpt"], times["sweep"])]
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print(f"one run, {args.steps} steps: nanoGPT {nano:.1f} s, actbench {one:.1f} s (medians): "
          f"{statistics.median(ones):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in ones)})")
    print(f"{args.seeds} seeds: nanoGPT {args.seeds} x {nano:.1f} s, actbench sweep {sweep:.1f} s (medians): "
          f"{statistics.median(sweeps):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in sweeps)})")


if __name__ == "__main__":
    main()
