"""What the seed notebook's output-shape bug did to its numbers, over 30 seeds.

The notebook's second layer was nn.Linear(64, 64) (it passed input_size, hidden_size), so the model
returned 64 values per sample against a 1-column target and nn.MSELoss broadcast the target over
the 64 columns without a word. This script re-runs the notebook's own code path (torch.manual_seed
per seed; data drawn as the notebook draws it; Adam lr 1e-3; whole-batch DataLoader) for 10 epochs
with the buggy model and with the fixed one (one output), for GELU and ReLU, and prints the
epoch-10 losses and the GELU/ReLU ratio per seed. Run: python docs/studies/gelu-vs-relu/seed_notebook_bug.py
"""

from __future__ import annotations

import math
import statistics

import torch
from torch import nn


def run(seed: int, act: str, data: str, out_dim: int, epochs: int = 10) -> float:
    torch.manual_seed(seed)
    normal_x, normal_y = torch.randn(10, 64), torch.randn(10, 1)
    uniform_x, uniform_y = torch.rand(10, 64) * 2 - 1, torch.rand(10, 1) * 2 - 1
    x, y = (normal_x, normal_y) if data == "normal" else (uniform_x, uniform_y)
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU() if act == "gelu" else nn.ReLU(), nn.Linear(64, out_dim))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.MSELoss()
    loss = torch.tensor(0.0)
    for _ in range(epochs):
        opt.zero_grad()
        loss = crit(model(x), y)  # out_dim=64: broadcasts [10, 1] over [10, 64], as in the notebook
        loss.backward()
        opt.step()
    return loss.item()


def main() -> None:
    import warnings

    warnings.filterwarnings("ignore", message="Using a target size")  # the very warning the notebook hid
    print("| model | data | median GELU/ReLU at epoch 10 | seeds where GELU < ReLU | range of the ratio |")
    print("| --- | --- | --- | --- | --- |")
    for out_dim, label in ((64, "seed notebook (64 outputs, broadcast)"), (1, "fixed (1 output)")):
        for data in ("normal", "uniform"):
            ratios = [run(s, "gelu", data, out_dim) / run(s, "relu", data, out_dim) for s in range(30)]
            wins = sum(r < 1 for r in ratios)
            print(f"| {label} | {data} | {statistics.median(ratios):.3f} | {wins}/30 | "
                  f"{min(ratios):.2f} to {max(ratios):.2f} |")
    gm = math.exp(statistics.mean(math.log(run(s, "gelu", "normal", 64)) for s in range(30)))
    print(f"\ngeometric mean of the buggy GELU/normal epoch-10 loss over 30 seeds: {gm:.4f}")


if __name__ == "__main__":
    main()
