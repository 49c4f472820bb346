"""Each member's loss and accuracy in a stack: every op is per row or per member, so a member's
value is the same in any stack."""

from __future__ import annotations

import torch


def member_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-member mean softmax cross-entropy (nats), [M]: logits [M, N, K], labels [M, N] (int64).
    Every op is per row or per member, so a member's loss is the same in any stack."""
    if logits.shape[:2] != labels.shape or labels.dtype != torch.int64:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} ({labels.dtype}) do not "
                         "match: want [M, N, K] and int64 [M, N]")
    return logits.log_softmax(dim=-1).gather(-1, labels[..., None]).squeeze(-1).neg().mean(dim=1)


def member_token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-member mean cross-entropy (nats) over each member's B*T tokens, [M]: logits [M, B, T, V],
    targets [M, B, T] (int64): member_cross_entropy on the tokens laid out as rows."""
    m, b, t, v = logits.shape
    if targets.shape != (m, b, t):
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} do not match: want "
                         "[M, B, T, V] and [M, B, T]")
    return member_cross_entropy(logits.reshape(m, b * t, v), targets.reshape(m, b * t))


def member_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-member share of rows whose largest logit is the label's (the first on ties), [M]."""
    return (logits.argmax(dim=-1) == labels).to(logits.dtype).mean(dim=1)


def member_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-member mean squared error, [M]. Refuses shape mismatches instead of broadcasting.

    The seed notebook's second layer produced 64 outputs against a 1-column target and
    nn.MSELoss broadcast silently; here that is an error.
    """
    if pred.shape != target.shape:
        raise ValueError(
            f"prediction shape {tuple(pred.shape)} does not match target shape "
            f"{tuple(target.shape)}; refusing to broadcast in the loss"
        )
    return (pred - target).square().mean(dim=tuple(range(1, pred.dim())))
