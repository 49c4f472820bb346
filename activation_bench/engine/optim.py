"""The optimiser of a training stack: Adam or SGD over the stacked tensors, without torch.optim."""

from __future__ import annotations

import math

import torch


class StackedOptimizer:
    """Adam or SGD over the stacked tensors, the same kernels as torch.optim.Adam(fused=True).

    Written out because constructing any torch.optim optimizer imports torch._dynamo, which costs
    about 2.5 s of every process on this CPU build: more than most runs' training. Adam calls the
    fused kernel torch.optim uses (`torch._fused_adam_`, one pass over each tensor, about 3x
    faster than the foreach path here) and falls back to the foreach arithmetic where a torch
    build lacks it.
    """

    def __init__(self, params: list[torch.Tensor], kind: str, lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params, self.kind, self.lr = params, kind, lr
        self.beta1, self.beta2 = betas
        self.eps, self.step_count = eps, 0
        if kind == "adam":
            self.exp_avgs = [torch.zeros_like(p) for p in params]
            self.exp_avg_sqs = [torch.zeros_like(p) for p in params]
            # one step counter shared by every tensor (fused Adam only reads it): one increment a step
            self.step_tensor = torch.zeros((), dtype=torch.float32, device=params[0].device)
            self.steps = [self.step_tensor] * len(params)
            self.fused = hasattr(torch, "_fused_adam_")

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        grads = [p.grad for p in self.params]
        if self.kind == "sgd":
            torch._foreach_add_(self.params, grads, alpha=-self.lr)
            return
        self.step_count += 1
        if self.fused:
            self.step_tensor += 1
            torch._fused_adam_(
                self.params, grads, self.exp_avgs, self.exp_avg_sqs, [], self.steps, lr=self.lr,
                beta1=self.beta1, beta2=self.beta2, weight_decay=0.0, eps=self.eps, amsgrad=False,
                maximize=False,
            )
            return
        bias1 = 1 - self.beta1**self.step_count
        bias2_sqrt = math.sqrt(1 - self.beta2**self.step_count)
        torch._foreach_lerp_(self.exp_avgs, grads, 1 - self.beta1)
        torch._foreach_mul_(self.exp_avg_sqs, self.beta2)
        torch._foreach_addcmul_(self.exp_avg_sqs, grads, grads, 1 - self.beta2)
        denom = torch._foreach_sqrt(self.exp_avg_sqs)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(self.params, self.exp_avgs, denom, -self.lr / bias1)
