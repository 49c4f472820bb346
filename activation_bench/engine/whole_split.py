"""A text source's test split judged whole (data.eval_windows null; data/text.py).

After every epoch the validation split is estimated on `data.val_windows` fixed windows (the early-
stopping signal) and the test split is not evaluated. `BestWeights` keeps, per member, a copy of its
parameters at its epoch of lowest validation loss (the earliest on ties, as the early_stop metric
picks it; a NaN loss never counts). When training ends, `judge` evaluates the whole test split (every
non-overlapping window, `text.CHUNK` windows per pass) twice: at the last epoch's weights and at each
member's best-validation weights, and writes the two losses (and accuracies) into the test column at
those two epochs (NaN at every other epoch). So `final` and `early_stop` of test_loss are whole-split
numbers, for about two evaluations of the split per run.

Every operation is per member and per window (the windows pass in the same chunks in any stack), and
the split's mean is taken per member in float64, so a member's numbers are the same in any stack.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from activation_bench.data import text
from activation_bench.engine.optim import member_owners


class BestWeights:
    """Per member [M]: its lowest validation loss so far, the epoch (0-based, -1: none yet) it came at,
    and its state as it was then: every parameter and every floating-point buffer (batch norm's
    running statistics, which evaluation reads), `p0`, `p1`, ... in model.parameters() then
    model.buffers() order. Its tensors are checkpointed with the stack's logs (engine/checkpoint.py
    copies them back on resume)."""

    def __init__(self, model: torch.nn.Module, m: int, dtype: torch.dtype, device: str) -> None:
        tensors = _state(model)
        n_params = len(list(model.parameters()))
        # tensors of one member, without a member axis: parameters, then buffers after the parameters
        self._owners = {**member_owners(model), **{n_params + i: k for i, k in _buffer_owners(model).items()}}
        for i, t in enumerate(tensors):
            if i not in self._owners and (t.dim() == 0 or t.shape[0] != m):
                raise ValueError(f"{'parameter' if i < n_params else 'buffer'} {i} {tuple(t.shape)} has no member "
                                 f"axis of {m}: cannot keep each member's best-validation weights")
            setattr(self, f"p{i}", t.detach().clone())
        self._n = len(tensors)
        self.val = torch.full((m,), float("inf"), dtype=dtype, device=device)
        self.epoch = torch.full((m,), -1, dtype=torch.int64, device=device)

    def _saved(self) -> list[torch.Tensor]:
        return [getattr(self, f"p{i}") for i in range(self._n)]

    @torch.no_grad()
    def update(self, model: torch.nn.Module, val: torch.Tensor, epoch: int) -> None:
        """After epoch `epoch`'s validation losses val [M]: copy the weights of the members that improved."""
        better = val < self.val  # strictly: the earliest epoch keeps a tie; NaN never improves
        if not bool(better.any()):
            return
        self.val = torch.where(better, val, self.val)
        self.epoch[better] = epoch
        for i, (mine, p) in enumerate(zip(self._saved(), _state(model))):
            if i in self._owners:
                if bool(better[self._owners[i]]):
                    mine.copy_(p)
            else:
                mine[better] = p[better]

    @torch.no_grad()
    def swap(self, model: torch.nn.Module) -> None:
        """Exchange the model's parameters with the kept ones (twice: back as they were)."""
        for mine, p in zip(self._saved(), _state(model)):
            tmp = p.detach().clone()
            p.copy_(mine)
            mine.copy_(tmp)


def _state(model: torch.nn.Module) -> list[torch.Tensor]:
    """What a member's best-validation state holds: the parameters, then the floating-point buffers."""
    return [*model.parameters(), *(b for b in model.buffers() if b.is_floating_point())]


def _buffer_owners(model: torch.nn.Module) -> dict[int, int]:
    """The model's buffer_owners() (base.MemberLayers), renumbered over its floating-point buffers."""
    owned = model.buffer_owners()
    floats = [i for i, b in enumerate(model.buffers()) if b.is_floating_point()]
    return {j: owned[i] for j, i in enumerate(floats) if i in owned}


@dataclass
class Judged:
    """Per member (stack order): the whole test split's per-window losses and accuracies [M, W] at the
    last epoch and at the epoch of lowest validation loss, and that epoch (0-based)."""

    final_loss: np.ndarray
    final_acc: np.ndarray
    early_loss: np.ndarray
    early_acc: np.ndarray
    early_epoch: list[int]

    def member(self, pos: int) -> dict[str, list[float]]:
        """Member `pos`'s columns of test_windows.csv."""
        return {"early_stop_loss": self.early_loss[pos].tolist(), "early_stop_acc": self.early_acc[pos].tolist(),
                "final_loss": self.final_loss[pos].tolist(), "final_acc": self.final_acc[pos].tolist()}


@torch.no_grad()
def per_window(predict, x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Each member's mean cross-entropy and accuracy per window [M, W] (float64 arrays of the float32
    values): x, y [M, W, T], passed through `predict` (logits [M, b, T, V]) text.CHUNK windows at a time."""
    losses, accs = [], []
    for xs, ys in zip(x.split(text.CHUNK, dim=1), y.split(text.CHUNK, dim=1)):
        logits = predict(xs)
        nll = logits.log_softmax(dim=-1).gather(-1, ys[..., None]).squeeze(-1).neg()
        losses.append(nll.mean(dim=-1).cpu())
        accs.append((logits.argmax(dim=-1) == ys).to(logits.dtype).mean(dim=-1).cpu())
    return torch.cat(losses, dim=1).double().numpy(), torch.cat(accs, dim=1).double().numpy()


def split_mean(per: np.ndarray) -> list[float]:
    """Each member's mean over its windows (each window scores the same number of characters)."""
    return [float(np.mean(row, dtype=np.float64)) for row in per]


@torch.no_grad()
def judge(model: torch.nn.Module, predict, test: tuple[torch.Tensor, torch.Tensor], best: BestWeights,
          loss: torch.Tensor, acc: torch.Tensor | None, done: int) -> Judged:
    """Evaluate the whole test split at the last epoch (`done` epochs trained) and at each member's
    best-validation weights; write the split's loss (accuracy) into loss (acc) [epochs, M] at those two
    epochs. The model ends with its last weights, in training mode."""
    model.eval()
    final_loss, final_acc = per_window(predict, *test)
    epochs = best.epoch.cpu().tolist()
    if all(e == done - 1 for e in epochs):  # every member's best is its last epoch: the same weights
        early_loss, early_acc = final_loss, final_acc
    else:
        best.swap(model)
        early_loss, early_acc = per_window(predict, *test)
        best.swap(model)
    for values, per_final, per_early in ((loss, final_loss, early_loss), (acc, final_acc, early_acc)):
        if values is None:
            continue
        for pos, (f, e) in enumerate(zip(split_mean(per_final), split_mean(per_early))):
            values[done - 1, pos] = f
            if epochs[pos] >= 0:
                values[epochs[pos], pos] = e
    model.train()
    return Judged(final_loss, final_acc, early_loss, early_acc, epochs)
