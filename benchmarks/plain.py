"""The plain PyTorch loops the benchmarks compare actbench with (one model at a time, as a user or
the seed notebook writes them), and interleaved rounds of a whole `actbench sweep` process against a
plain loop's worker process.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from benchmarks import harness


def train_epochs(model: Any, loader: Any, opt: Any, crit: Any, epochs: int,
                 after_epoch: Callable[[Any], None] | None = None) -> int:
    """The epoch loop every plain baseline runs: per minibatch zero_grad, the loss, backward, step.
    With `after_epoch`, each epoch starts with model.train() and ends with after_epoch(the last
    minibatch's loss): the baseline's record of the epoch (its evaluation sets eval mode itself).
    Returns the optimiser steps taken."""
    steps = 0
    for _ in range(epochs):
        if after_epoch is not None:
            model.train()
        for xb, yb in loader:
            opt.zero_grad()
            loss = crit(model(xb), yb)
            loss.backward()
            opt.step()
            steps += 1
        if after_epoch is not None:
            after_epoch(loss)
    return steps


def naive(acts: list[str], data: list[str], epochs: int, device: str = "cpu") -> int:
    """The seed notebook's loop on the reference grid's 64-64-1 MLP: one model per activation x
    data, 10 samples, a DataLoader, zero_grad/backward/step; returns the model steps taken."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from activation_bench.engine.activations.registry import create

    steps = 0
    for d in data:
        for a in acts:
            torch.manual_seed(0)
            if d == "normal":
                x, y = torch.randn(10, 64), torch.randn(10, 1)
            else:
                x, y = torch.rand(10, 64) * 2 - 1, torch.rand(10, 1) * 2 - 1
            model = nn.Sequential(nn.Linear(64, 64), create(a), nn.Linear(64, 1)).to(device)
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            loader = DataLoader(TensorDataset(x.to(device), y.to(device)), batch_size=10)
            steps += train_epochs(model, loader, opt, nn.MSELoss(), epochs)
            if device == "cuda":
                torch.cuda.synchronize()
    return steps


def fit_classifier(model, x, y, evals, epochs: int, batch: int, lr: float) -> int:  # noqa: ANN001
    """The loop a user would write for one classifier: torch.optim.Adam, nn.CrossEntropyLoss, a
    shuffled DataLoader over (x, y), and after each epoch the loss and accuracy on each (x, y) of
    `evals`. Returns the optimiser steps taken."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True)
    crit = nn.CrossEntropyLoss()
    history = []

    def evaluate(loss: Any) -> None:
        model.eval()
        with torch.no_grad():
            row = [loss.item()]
            for ex, ey in evals:
                out = model(ex)
                row += [crit(out, ey).item(), (out.argmax(1) == ey).float().mean().item()]
            history.append(row)

    return train_epochs(model, loader, opt, crit, epochs, evaluate)


SWEEP, SHORT = "actbench sweep", "actbench sweep, fewer epochs"


def sweep_vs_plain(bench: harness.Bench, sweep_cmd: Callable[[str], list[str]], worker: list[str],
                   sweep_steps: int, repeat: int, plain_label: str,
                   short_cmd: Callable[[str], list[str]] | None = None,
                   around_sweeps: Callable[[], None] | None = None,
                   goal: str | None = None) -> tuple[float, dict[str, list[float]]]:
    """Interleaved rounds of the sweep `sweep_cmd(runs_dir)` (a whole process) and the plain loop's
    worker process, which prints its model-steps as the last word of its output; the figure is the
    median of the rounds' ratios of model-steps per second, judged against `goal`. With `short_cmd` (the same sweep with
    fewer epochs) each round also times that, as SHORT: the difference is the marginal time of the
    extra epochs (roofline.py); `around_sweeps` is called right before and right after each round's
    sweeps (to time the ceiling in the same minutes). Returns (the ratio, each path's seconds)."""
    keep = tempfile.mkdtemp(prefix="actbench-bench-")  # every round's runs kept to the end (sweep_throughput.py)
    plain_steps: list[int] = []

    def sweep(r: int) -> float:
        if around_sweeps is not None:
            around_sweeps()
        seconds = harness.run(sweep_cmd(os.path.join(keep, f"round{r}"))).seconds
        if short_cmd is None and around_sweeps is not None:
            around_sweeps()
        return seconds

    def short(r: int) -> float:
        seconds = harness.run(short_cmd(os.path.join(keep, f"short{r}"))).seconds  # type: ignore[misc]
        if around_sweeps is not None:
            around_sweeps()
        return seconds

    def plain(_r: int) -> float:
        timed = harness.run(worker, capture=True)
        plain_steps.append(int(timed.stdout.split()[-1]))
        return timed.seconds

    paths = {SWEEP: sweep, **({SHORT: short} if short_cmd else {}), plain_label: plain}
    try:
        if short_cmd is not None:  # untimed: fills the compile store (engine=compiled), so no timed run compiles cold
            harness.run(short_cmd(os.path.join(keep, "warm-up")))
        times = harness.interleaved(paths, repeat)
    finally:
        shutil.rmtree(keep)
    rates = [sweep_steps / s for s in times[SWEEP]]
    plain_rates = [n / s for n, s in zip(plain_steps, times[plain_label])]
    for r, (ours, theirs) in enumerate(zip(rates, plain_rates), 1):
        print(f"round {r}: actbench {ours:,.0f} model-steps/s, plain {theirs:,.0f}")
    ratio = bench.figure("actbench / plain loop, model-steps per second", harness.ratios(rates, plain_rates),
                         goal=goal, digits=1)
    return ratio, times
