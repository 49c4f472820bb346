"""Which members of a training stack have diverged, and at which epoch: train.py checks every
CHECK_EVERY epochs and stops a stack once all its members have (resume.py saves the state).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DIVERGENCE_FACTOR = 1e8
CHECK_EVERY = 50


@dataclass
class Divergence:
    """Which members have diverged, and at which epoch (1-based).

    Diverged: the loss is NaN or inf, or has grown DIVERGENCE_FACTOR-fold over epoch 1's (Adam's
    bounded steps make lr=1e6 explode to ~1e27 without ever overflowing). Checked every CHECK_EVERY
    epochs (on a GPU each check waits for the device; on a CPU it is a handful of small ops per
    step), scanning the epochs since the last check so the epoch found is still exact.
    """

    diverged: torch.Tensor  # [M] bool
    at: list[int | None]
    checked: int = 0  # epochs scanned so far

    @classmethod
    def none(cls, m: int, device: str) -> Divergence:
        return cls(torch.zeros(m, dtype=torch.bool, device=device), [None] * m)

    def check(self, train_loss: torch.Tensor, done: int) -> int | None:
        """Scan epochs up to `done`; returns the epoch to stop at once every member has diverged."""
        block = train_loss[self.checked : done]
        bad = ~(block <= train_loss[0] * DIVERGENCE_FACTOR) & ~self.diverged
        if bool(bad.any()):
            rows = torch.where(bad.any(0), bad.float().argmax(0), -1).tolist()
            for i, row in enumerate(rows):
                if row >= 0:
                    self.at[i] = self.checked + row + 1
            self.diverged |= bad.any(0)
            if bool(self.diverged.all()):
                return max(d for d in self.at if d is not None)
        self.checked = done
        return None
