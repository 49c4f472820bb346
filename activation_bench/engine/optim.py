"""The optimiser of a training stack: Adam (AdamW) or SGD (with momentum) over the stacked tensors,
per-member gradient clipping and a learning-rate schedule, without torch.optim."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s: scale = min(1, clip / (norm + 1e-6))


@dataclass(frozen=True)
class Schedule:
    """The learning rate of optimiser step `it` (0, 1, ...): nanoGPT's train.py `get_lr`, exactly:

        if it < warmup_iters: return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters: return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return min_lr + coeff * (learning_rate - min_lr)

    with warmup_iters = warmup_steps and lr_decay_iters = decay_steps. Where decay_steps <= warmup_steps
    (nanoGPT divides by zero at it == decay_steps == warmup_steps) the steps after the warmup take min_lr.
    kind="constant": lr at every step (nanoGPT's decay_lr=False)."""

    kind: str
    lr: float
    warmup_steps: int = 0
    decay_steps: int = 0
    min_lr: float = 0.0

    def __call__(self, it: int) -> float:
        if self.kind == "constant":
            return self.lr
        if it < self.warmup_steps:
            return self.lr * (it + 1) / (self.warmup_steps + 1)
        if it > self.decay_steps or self.decay_steps <= self.warmup_steps:
            return self.min_lr
        decay_ratio = (it - self.warmup_steps) / (self.decay_steps - self.warmup_steps)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return self.min_lr + coeff * (self.lr - self.min_lr)


def default_decay(params: Sequence[torch.Tensor]) -> list[bool]:
    """Which parameters AdamW's weight decay applies to, for the MLP and the convnet: the per-member
    matrices and kernels (dim >= 3: [M, in, out], [M, out, in, k]), not biases, norm weights or an
    activation's parameters (nanoGPT's rule, dim >= 2, with the member axis in front)."""
    return [p.dim() >= 3 for p in params]


def decay_flags(model: Any) -> list[bool]:
    """The model's flags of the parameters AdamW decays (its `decay_flags()`: default_decay's, or a
    family's own, e.g. the transformer's matrices and embeddings)."""
    return list(model.decay_flags())


def member_owners(model: Any) -> dict[int, int]:
    """Parameter index (in model.parameters() order) -> member, for the parameters that belong to one
    member and have no member axis (the model's `owners()`, base.MemberLayers): gradient clipping
    counts them toward that member's norm."""
    return dict(model.owners())


class StackedOptimizer:
    """Adam (AdamW) or SGD (momentum, Nesterov) over the stacked tensors, the same kernels as
    torch.optim.Adam/AdamW(fused=True) and the same arithmetic as torch.optim.SGD.

    Written out because constructing any torch.optim optimizer imports torch._dynamo, which costs
    about 2.5 s of every process on this CPU build: more than most runs' training. Adam calls the
    fused kernel torch.optim uses (`torch._fused_adam_`, one pass over each tensor, about 3x
    faster than the foreach path here; `torch._fused_adamw_` for the tensors that decay) and falls
    back to the foreach arithmetic where a torch build lacks it.

    Every stacked tensor has the member axis first ([M, ...]); a parameter of one member only (no
    member axis) is named in `owners` (index -> member). Per step, in order: this step's learning rate
    from the schedule (step `step_count`, counted from 0, as nanoGPT sets it before the update), each
    member's gradients clipped to its own global norm (`grad_clip` > 0; the parameters' .grad are left
    as the loss gave them), then the update. weight_decay (Adam only) decays the parameters flagged in
    `decay` (default_decay where not given).
    """

    def __init__(self, params: list[torch.Tensor], kind: str, lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, *, weight_decay: float = 0.0,
                 decay: Sequence[bool] | None = None, momentum: float = 0.0, nesterov: bool = False,
                 grad_clip: float = 0.0, owners: dict[int, int] | None = None,
                 schedule: Schedule | None = None) -> None:
        if not params:  # model=module's validation refuses a module without parameters first
            raise ValueError("the optimiser has no parameters to train")
        self.params, self.kind, self.lr = params, kind, lr
        self.beta1, self.beta2 = betas
        self.eps, self.step_count = eps, 0
        self.weight_decay, self.momentum, self.nesterov = float(weight_decay), float(momentum), bool(nesterov)
        self.grad_clip, self.owners = float(grad_clip), dict(owners or {})
        self.schedule = schedule if schedule is not None and schedule.kind != "constant" else None
        self.decay = list(decay) if decay is not None else default_decay(params)
        if len(self.decay) != len(params):
            raise ValueError(f"decay has {len(self.decay)} flags for {len(params)} parameters")
        if kind == "adam":
            self.exp_avgs = [torch.zeros_like(p) for p in params]
            self.exp_avg_sqs = [torch.zeros_like(p) for p in params]
            # one step counter shared by every tensor (fused Adam only reads it): one increment a step
            self.step_tensor = torch.zeros((), dtype=torch.float32, device=params[0].device)
            self.steps = [self.step_tensor] * len(params)
            self.fused = hasattr(torch, "_fused_adam_") and hasattr(torch, "_fused_adamw_")
            # the tensors AdamW decays, and the rest (one fused call each)
            on = [i for i, d in enumerate(self.decay) if d] if self.weight_decay else []
            off = [i for i in range(len(params)) if i not in set(on)]
            self.groups = [(idx, wd) for idx, wd in ((on, self.weight_decay), (off, 0.0)) if idx]
        # SGD's momentum buffers: the first step copies the gradient in (torch.optim.SGD's clone)
        self.momentum_buffers = [torch.zeros_like(p) for p in params] if kind == "sgd" and self.momentum else []

    @classmethod
    def from_config(cls, params: list[torch.Tensor], cfg: Cfg, total_steps: int,
                    decay: Sequence[bool] | None = None, owners: dict[int, int] | None = None) -> StackedOptimizer:
        """The optimiser a config asks for: optimizer, lr, beta2, weight_decay, momentum, nesterov,
        grad_clip and the schedule (decay_steps null: `total_steps`, the run's optimiser steps)."""
        schedule = None
        if cfg.schedule != "constant":
            decay_steps = total_steps if cfg.decay_steps is None else cfg.decay_steps
            schedule = Schedule(cfg.schedule, float(cfg.lr), int(cfg.warmup_steps), int(decay_steps), float(cfg.min_lr))
        return cls(params, cfg.optimizer, float(cfg.lr), (0.9, float(cfg.beta2)), weight_decay=float(cfg.weight_decay),
                   decay=decay, momentum=float(cfg.momentum), nesterov=bool(cfg.nesterov),
                   grad_clip=float(cfg.grad_clip), owners=owners, schedule=schedule)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def current_lr(self) -> float:
        """The learning rate of the next step."""
        return self.lr if self.schedule is None else self.schedule(self.step_count)

    def clipped(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """The gradients scaled per member as torch.nn.utils.clip_grad_norm_(member's parameters,
        grad_clip) scales them: total = the 2-norm of the vector of each parameter's 2-norm,
        scale = min(1, grad_clip / (total + 1e-6)). Returns new tensors (.grad stays as it was)."""
        stacked = {i: g for i, g in enumerate(grads) if i not in self.owners}
        if stacked:
            m = next(iter(stacked.values())).shape[0]
            rows = {i: torch.linalg.vector_norm(g.reshape(m, -1), 2, dim=1) for i, g in stacked.items()}  # [M] each
            total = torch.linalg.vector_norm(torch.stack(list(rows.values()), dim=1), 2, dim=1)  # [M]
        else:  # every parameter one member's (model=module): each member's norm below
            rows, total = {}, grads[0].new_zeros(max(self.owners.values()) + 1)
        for member in sorted(set(self.owners.values())):  # with its own parameters: its norms in parameter order
            norms = [rows[i][member] if i in rows else torch.linalg.vector_norm(grads[i], 2)
                     for i in range(len(grads)) if self.owners.get(i, member) == member]
            total[member] = torch.linalg.vector_norm(torch.stack(norms), 2)
        scale = torch.clamp(self.grad_clip / (total + CLIP_EPS), max=1.0)
        return [g * scale[self.owners[i]] if i in self.owners else g * scale.view(-1, *([1] * (g.dim() - 1)))
                for i, g in enumerate(grads)]

    @torch.no_grad()
    def step(self) -> None:
        grads = [p.grad for p in self.params]
        lr = self.current_lr()
        if self.grad_clip:
            grads = self.clipped(grads)
        self.step_count += 1
        if self.kind == "sgd":
            if self.momentum:  # torch.optim.SGD: buf = g at the first step, then buf * momentum + g
                bufs = self.momentum_buffers
                if self.step_count == 1:
                    torch._foreach_copy_(bufs, grads)
                else:
                    torch._foreach_mul_(bufs, self.momentum)
                    torch._foreach_add_(bufs, grads)
                grads = torch._foreach_add(grads, bufs, alpha=self.momentum) if self.nesterov else bufs
            torch._foreach_add_(self.params, grads, alpha=-lr)
            return
        if self.fused:
            self.step_tensor += 1
            for idx, wd in self.groups:  # without weight decay one group: every tensor, _fused_adam_
                tensors = (self.params, grads, self.exp_avgs, self.exp_avg_sqs, self.steps)
                if len(idx) < len(self.params):
                    tensors = tuple([ts[i] for i in idx] for ts in tensors)
                params, group_grads, exp_avgs, exp_avg_sqs, steps = tensors
                (torch._fused_adamw_ if wd else torch._fused_adam_)(
                    params, group_grads, exp_avgs, exp_avg_sqs, [], steps, lr=lr, beta1=self.beta1,
                    beta2=self.beta2, weight_decay=wd, eps=self.eps, amsgrad=False, maximize=False,
                )
            return
        if self.weight_decay:  # torch.optim.AdamW's foreach path: param *= 1 - lr * weight_decay
            torch._foreach_mul_([p for p, d in zip(self.params, self.decay) if d], 1 - lr * self.weight_decay)
        bias1 = 1 - self.beta1**self.step_count
        bias2_sqrt = math.sqrt(1 - self.beta2**self.step_count)
        torch._foreach_lerp_(self.exp_avgs, grads, 1 - self.beta1)
        torch._foreach_mul_(self.exp_avg_sqs, self.beta2)
        torch._foreach_addcmul_(self.exp_avg_sqs, grads, grads, 1 - self.beta2)
        denom = torch._foreach_sqrt(self.exp_avg_sqs)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(self.params, self.exp_avgs, denom, -lr / bias1)
