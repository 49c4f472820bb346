"""The torch.func peer: PyTorch's own ensembling recipe for the grid, run as a whole process.

Per activation: one `nn.Sequential(Linear, activation, Linear)` per member, their parameters
stacked with `torch.func.stack_module_state`, the forward as `vmap(functional_call(...))` over
members, the sum of the members' MSEs backpropagated (each member gets its own gradient), and one
`torch.optim.Adam` over the stacked parameters. Each member's loss is kept every epoch and copied
to a list at the end; nothing is written.

Usage:
    python -m benchmarks.peers.torchfunc_peer [--seeds 30] [--epochs 1000]
    python -m benchmarks.peers.torchfunc_peer --check   # epochs 1-5 of each activation x data vs actbench
"""

from __future__ import annotations

import argparse
import copy
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from benchmarks import provenance
from benchmarks.peers import grid

ACT = {
    "gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU, "elu": nn.ELU, "tanh": nn.Tanh, "mish": nn.Mish,
    "leaky_relu": lambda: nn.LeakyReLU(0.01), "softplus": nn.Softplus,
}


def models(act: str, stack: dict[str, np.ndarray]) -> list[nn.Module]:
    out = []
    for i in range(len(stack["x"])):
        net = nn.Sequential(nn.Linear(grid.INPUT_DIM, grid.HIDDEN), ACT[act](), nn.Linear(grid.HIDDEN, 1))
        with torch.no_grad():
            net[0].weight.copy_(torch.as_tensor(stack["w1"][i]).T), net[0].bias.copy_(torch.as_tensor(stack["b1"][i]))
            net[2].weight.copy_(torch.as_tensor(stack["w2"][i])[None])
            net[2].bias.copy_(torch.as_tensor(stack["b2"][i]).reshape(1))
        out.append(net)
    return out


def train(acts: list[str], stacks: list[dict[str, np.ndarray]], epochs: int) -> list[list[float]]:
    """stacks[i]: the members of activation acts[i]. Returns losses [epochs][members in total]."""
    groups = []
    for act, stack in zip(acts, stacks):
        nets = models(act, stack)
        params, buffers = stack_module_state(nets)
        base = copy.deepcopy(nets[0]).to("meta")

        def loss_fn(p, b, x, y, base=base):
            return ((functional_call(base, (p, b), (x,)) - y) ** 2).mean()

        opt = torch.optim.Adam(list(params.values()), lr=grid.LR)
        x, y = torch.from_numpy(stack["x"]), torch.from_numpy(stack["y"])
        groups.append((vmap(loss_fn), params, buffers, opt, x, y))
    m = sum(len(s["x"]) for s in stacks)
    losses = torch.empty(epochs, m)
    for epoch in range(epochs):
        start = 0
        for fn, params, buffers, opt, x, y in groups:
            opt.zero_grad()
            per = fn(params, buffers, x, y)
            per.sum().backward()
            opt.step()
            losses[epoch, start : start + len(per)] = per.detach()
            start += len(per)
    return losses.tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--epochs", type=int, default=1000)
    ap.add_argument("--check", action="store_true", help="compare epochs 1-5 with actbench")
    args = ap.parse_args()
    if args.check:  # the timed runs print no header: a peer process pays nothing of ours
        print(provenance.header())
        grid.check("torch.func", lambda act, member, epochs: [row[0] for row in train([act], [member], epochs)])
        return
    start = time.perf_counter()
    losses = train(grid.ACTS, grid.stacks(args.seeds), args.epochs)
    print(f"torch.func: {len(losses[0])} members x {args.epochs} epochs in {time.perf_counter() - start:.2f} s "
          f"(after imports); final mean loss {sum(losses[-1]) / len(losses[-1]):.4g}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
