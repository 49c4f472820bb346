"""Each member's per-epoch losses (and a classifier's accuracies) while a stack trains: the
columns of losses.csv, kept as tensors [epochs, M] on the stack's device until the end."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import torch


@dataclass
class Losses:
    """Per epoch and member [epochs, M]: the training loss (mean over the epoch's minibatches) and,
    where the data has those splits, the validation and test losses after the epoch (NaN: not run);
    for a classifier also the validation and test accuracies; with log.train_eval the training
    split's loss after the epoch in evaluation mode (dropout off)."""

    train: torch.Tensor
    val: torch.Tensor | None
    test: torch.Tensor | None
    val_acc: torch.Tensor | None = None
    test_acc: torch.Tensor | None = None
    train_eval: torch.Tensor | None = None

    @classmethod
    def empty(cls, epochs: int, m: int, columns: Collection[str], dtype: torch.dtype, device: str) -> Losses:
        """NaN for every epoch and member of each of `columns` (plan.logged_columns), None for the rest."""
        def nan(column: str) -> torch.Tensor | None:
            return torch.full((epochs, m), float("nan"), dtype=dtype, device=device) if column in columns else None

        return cls(nan("train_loss"), nan("val_loss"), nan("test_loss"), nan("val_acc"), nan("test_acc"),
                   nan("train_eval_loss"))

    def per_member(self, done: int) -> dict[str, list[list[float]] | None]:
        """Each column's values as [member][epoch], up to epoch `done` (None: not logged), by the
        name of its RunResult field (and losses.csv column)."""
        cols = {"train_loss": self.train, "val_loss": self.val, "test_loss": self.test, "val_acc": self.val_acc,
                "test_acc": self.test_acc, "train_eval_loss": self.train_eval}
        return {k: (t[:done].T.cpu().tolist() if t is not None else None) for k, t in cols.items()}
