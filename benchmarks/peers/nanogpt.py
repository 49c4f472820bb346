"""The nanoGPT peer: karpathy/nanoGPT's own `train.py`, from a clone the user names (never a
dependency), at its README's CPU configuration. benchmarks/nanogpt_peer.py times it against actbench.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

EVAL_EVERY = 250  # nanoGPT's README CPU command evaluates every 250 steps
FILES = ["train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py",
         "data/shakespeare_char/prepare.py"]


def prepare(clone: Path, text: Path, work: Path) -> Path:
    """nanoGPT's files and its prepared shakespeare_char data in work/nanogpt (the clone is left as
    it is; with the text beside `prepare.py` it downloads nothing); returns that folder."""
    dest = work / "nanogpt"
    for name in FILES:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(clone / name, dest / name)
    data = dest / "data" / "shakespeare_char"
    shutil.copy(text, data / "input.txt")
    subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True)
    return dest


def command(steps: int) -> list[str]:
    """`python train.py config/train_shakespeare_char.py` at the README's CPU settings (4 x 128, 4
    heads, block 64, batch 12, dropout 0, no compile, float32), AdamW 1e-3 with beta2 0.99 and decay
    0.1, 100 warmup steps, cosine to 1e-4 over `steps`, clip 1.0; run it in prepare()'s folder."""
    return [sys.executable, "train.py", "config/train_shakespeare_char.py", "--device=cpu", "--compile=False",
            "--dtype=float32", "--eval_iters=20", f"--eval_interval={EVAL_EVERY}", "--log_interval=50",
            "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--dropout=0.0",
            f"--max_iters={steps}", f"--lr_decay_iters={steps}", "--warmup_iters=100", "--learning_rate=1e-3",
            "--min_lr=1e-4", "--beta2=0.99", "--weight_decay=0.1", "--grad_clip=1.0", "--out_dir=out"]
