"""actbench against nanoGPT's own `train.py` at nanoGPT's README CPU configuration, whole processes.

The peer is karpathy/nanoGPT itself, never a dependency: clone it anywhere and name the folder,

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT
    python -m benchmarks.nanogpt_peer --nanogpt /tmp/nanoGPT --text PATH/TO/shakespeare_char/input.txt

benchmarks/peers/nanogpt.py copies what nanoGPT needs (`train.py`, `model.py`, `configurator.py`, the shakespeare_char
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
ours in the same round (above 1: actbench is faster), and the figure is their median (goals: one run
>= 1.0x, the sweep >= 1.5x). Measure on a quiet machine (load below 1.5).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from benchmarks import harness, provenance
from benchmarks.peers import nanogpt


def actbench_command(steps: int, seeds: int, text_root: Path, runs: Path) -> list[str]:
    command = "sweep" if seeds > 1 else "run"
    grid = [f"seed=range({seeds})"] if seeds > 1 else ["seed=0"]
    return [*provenance.actbench(), command, "--runs-dir", str(runs), "-q",
            "model=transformer", "data=shakespeare", f"data.root={text_root}", "data.sha256=null",
            "batch_size=12", "model.n_layer=4", "model.n_head=4", "model.n_embd=128", "model.block_size=64",
            "model.dropout=0", "activation=gelu", "lr=1e-3", "weight_decay=0.1", "beta2=0.99", "schedule=cosine",
            "warmup_steps=100", f"decay_steps={steps}", "min_lr=1e-4", "grad_clip=1.0",
            f"epochs={steps // nanogpt.EVAL_EVERY}", f"data.steps={nanogpt.EVAL_EVERY}", "data.eval_windows=240", *grid]


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--nanogpt", type=Path, required=True, help="a clone of karpathy/nanoGPT")
    parser.add_argument("--text", type=Path, required=True, help="tiny shakespeare's input.txt")
    parser.add_argument("--steps", type=int, default=500, help="optimiser steps (a multiple of 250)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds of the sweep against nanoGPT run that often")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.steps % nanogpt.EVAL_EVERY:
        parser.error(f"--steps must be a multiple of {nanogpt.EVAL_EVERY}")
    bench = harness.Bench(args, compile_bytecode=True)
    with tempfile.TemporaryDirectory(prefix="nanogpt-peer-") as tmp:
        work = Path(tmp)
        peer = nanogpt.prepare(args.nanogpt, args.text, work)
        text_root = work / "text"
        (text_root / "shakespeare_char").mkdir(parents=True)
        shutil.copy(args.text, text_root / "shakespeare_char" / "input.txt")
        paths = {
            "nanoGPT": lambda r: harness.run(nanogpt.command(args.steps), cwd=peer).seconds,
            "actbench run": lambda r: harness.run(
                actbench_command(args.steps, 1, text_root, work / f"runs{r}")).seconds,
            f"actbench sweep of {args.seeds}": lambda r: harness.run(
                actbench_command(args.steps, args.seeds, text_root, work / f"sweep{r}")).seconds,
        }
        times = harness.interleaved(paths, args.repeat)
    # each round's ratio against the nanoGPT run of that round (a slow spell of a shared machine hits
    # the neighbours alike), and their median
    bench.figure(f"nanoGPT / actbench, one run of {args.steps} steps", harness.ratios(times["nanoGPT"],
                 times["actbench run"]), goal=">= 1.0")
    bench.figure(f"nanoGPT x {args.seeds} / actbench's sweep of {args.seeds} seeds",
                 harness.ratios([args.seeds * n for n in times["nanoGPT"]], times[f"actbench sweep of {args.seeds}"]),
                 goal=">= 1.5")
    bench.finish(times)


if __name__ == "__main__":
    main()
