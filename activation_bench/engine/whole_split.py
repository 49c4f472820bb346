"""A test split judged whole, once at the end, where the data's feed asks for it (`Feed.judged_at_end`,
data/feed.py: a text's whole test split, data/text_feed.py).

After every epoch the validation split is evaluated (the early-stopping signal) and the test split is
not. `BestWeights` keeps, per member, a copy of its parameters at its epoch of lowest validation loss
(the earliest on ties, as the early_stop metric picks it; a NaN loss never counts). When training ends,
`judge` evaluates the test split item by item (the feed's `judge`: a text's windows) twice: at the last
epoch's weights and at each member's best-validation weights, and writes the split's two losses (and
accuracies), each member's mean over the items, into the test column at those two epochs (NaN at every
other epoch). So `final` and `early_stop` of test_loss are whole-split numbers, for about two
evaluations of the split per run.

The feed's evaluation is per member and per item, and the split's mean is taken per member in
float64, so a member's numbers are the same in any stack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from activation_bench.engine.optim import member_owners

# the test split's per-item losses and accuracies [M, items] (float64) of the model's predictions:
# the data feed's `judge` (data/feed.py)
Evaluate = Callable[[Callable[[torch.Tensor], torch.Tensor], torch.Tensor, torch.Tensor],
                    tuple[np.ndarray, np.ndarray | None]]


class BestWeights:
    """Per member [M]: its lowest validation loss so far, the epoch (0-based, -1: none yet) it came at,
    and its state as it was then: every parameter and every floating-point buffer (batch norm's
    running statistics, which evaluation reads), `p0`, `p1`, ... in model.parameters() then
    model.buffers() order. Its tensors are checkpointed with the stack's logs (engine/resume.py
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
    """Per member (stack order): the whole test split's per-item losses and accuracies [M, items] at the
    last epoch and at the epoch of lowest validation loss (accuracies None: a regressor's), and that
    epoch (0-based)."""

    final_loss: np.ndarray
    final_acc: np.ndarray | None
    early_loss: np.ndarray
    early_acc: np.ndarray | None
    early_epoch: list[int]

    def member(self, pos: int) -> dict[str, list[float]]:
        """Member `pos`'s table: a column per number, a row per item of the split (RunResult.test_items)."""
        cols = {"early_stop_loss": self.early_loss, "early_stop_acc": self.early_acc,
                "final_loss": self.final_loss, "final_acc": self.final_acc}
        return {name: values[pos].tolist() for name, values in cols.items() if values is not None}


def split_mean(per: np.ndarray) -> list[float]:
    """Each member's mean over the split's items (each item of equal weight: a text's windows score
    the same number of characters)."""
    return [float(np.mean(row, dtype=np.float64)) for row in per]


@torch.no_grad()
def judge(model: torch.nn.Module, predict: Callable[[torch.Tensor], torch.Tensor], evaluate: Evaluate,
          test: tuple[torch.Tensor, torch.Tensor], best: BestWeights, loss: torch.Tensor, acc: torch.Tensor | None,
          done: int) -> Judged:
    """Evaluate the whole test split item by item (`evaluate`, the feed's) at the last epoch (`done`
    epochs trained) and at each member's best-validation weights; write the split's loss (accuracy)
    into loss (acc) [epochs, M] at those two epochs. The model ends with its last weights, in training
    mode."""
    model.eval()
    final_loss, final_acc = evaluate(predict, *test)
    epochs = best.epoch.cpu().tolist()
    if all(e == done - 1 for e in epochs):  # every member's best is its last epoch: the same weights
        early_loss, early_acc = final_loss, final_acc
    else:
        best.swap(model)
        early_loss, early_acc = evaluate(predict, *test)
        best.swap(model)
    for values, per_final, per_early in ((loss, final_loss, early_loss), (acc, final_acc, early_acc)):
        if values is None or per_final is None or per_early is None:
            continue
        for pos, (f, e) in enumerate(zip(split_mean(per_final), split_mean(per_early))):
            values[done - 1, pos] = f
            if epochs[pos] >= 0:
                values[epochs[pos], pos] = e
    model.train()
    return Judged(final_loss, final_acc, early_loss, early_acc, epochs)
