"""A training stack's whole state for a mid-run checkpoint, and back, bit for bit.

What a stack needs to go on exactly as if it had never stopped: every parameter and buffer (batch
norm's running statistics), the optimiser's step count and moments, every random stream (each
seed's data order, dropout masks, a random activation's draws, torch's global generator), where
in the run it stopped (epochs done, and mid-epoch the steps done, the epoch's loss so far and the
data-order streams as they were when the epoch began, so its permutation is drawn again), the
losses and logs so far, the divergence check's state and the training time spent.

Like the rest of the engine this module takes and returns tensors and numbers: the files, their
checksums and the signals that ask for a checkpoint are runs/checkpoint_files.py's (`Hooks`).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch

from activation_bench.engine.models.user_code import code_change

FORMAT = 1  # bumped when the state's layout changes: an older checkpoint is then not used


class Preempted(Exception):  # noqa: N818 - not an error: the run stopped where asked, its state saved
    """Training stopped at a signal once its checkpoint was written (runs/checkpoint_files.py raises it
    between stacks too)."""

    def __init__(self, signum: int, epoch: int = 0, epochs: int = 0) -> None:
        super().__init__(f"stopped by signal {signum} after epoch {epoch}/{epochs}")
        self.signum, self.epoch, self.epochs = signum, epoch, epochs


class Hooks(Protocol):
    """What the engine asks of the checkpoint files (runs/checkpoint_files.py's StackCheckpoints)."""

    def load(self) -> dict[str, Any] | None:
        """This very stack's saved state (checksum and members' hashes verified), or None."""

    def due(self, epoch: int, step: int) -> bool:
        """Whether to save now: `epoch` epochs done and `step` steps of the next (0: at the end
        of epoch `epoch`)."""

    def save(self, state: dict[str, Any]) -> None:
        """Write the state (atomically)."""

    def stop(self) -> int | None:
        """The signal that asked training to stop once saved, else None."""

    def reject(self, why: str) -> None:
        """The loaded state does not fit this stack (one line says why): it starts over."""


class Attempt:
    """One attempt at training a stack (one process): resume from its saved state, and save when due."""

    # stack, losses, divergence: train.py's _Stack, losses_log.Losses, divergence.Divergence
    # (train.py imports this module)
    def __init__(self, hooks: Hooks, stack: Any, losses: Any, divergence: Any,
                 logs: dict[str, Any], epochs: int, started: float | None = None) -> None:
        self.hooks, self.stack, self.losses, self.divergence = hooks, stack, losses, divergence
        self.logs = {k: v for k, v in logs.items() if v is not None}  # GradLog / PreactLog
        self.epochs = epochs
        self.elapsed = 0.0  # training seconds before this process (from the checkpoint)
        self.started = time.perf_counter() if started is None else started
        self.position: tuple[int, int, torch.Tensor | None] = (0, 0, None)  # (epoch, step, epoch's loss sum)
        self.epoch_shufflers: dict[int, torch.Tensor] = {}

    def resume(self) -> int:
        """Restore the saved state if there is a usable one; returns the epochs already done."""
        state = self.hooks.load()
        if state is None:
            return 0
        if not restore(self, state):
            return 0
        return self.position[0]

    def epoch_start(self) -> None:
        """Before the epoch's permutation is drawn: the data-order streams as they are (a
        mid-epoch checkpoint draws the same permutation again)."""
        if self.stack.shufflers:
            self.epoch_shufflers = {s: g.get_state() for s, g in self.stack.shufflers.items()}

    def start_step(self, epoch: int) -> tuple[int, torch.Tensor | None]:
        """Where this epoch starts: (first step, the loss sum so far); (0, None) but after a
        mid-epoch resume."""
        at_epoch, step, total = self.position
        self.position = (0, 0, None)
        return (step, total) if at_epoch == epoch and step else (0, None)

    def after_step(self, epoch: int, steps_done: int, total: torch.Tensor) -> None:
        """After a step that does not end the epoch: save if due, stop if a signal asked."""
        if self.hooks.due(epoch, steps_done):
            self._save(epoch, steps_done, total)

    def after_epoch(self, done: int) -> None:
        """After an epoch (its losses logged): save if due, stop if a signal asked. The last
        epoch saves nothing: the results are written next."""
        if done < self.epochs and self.hooks.due(done, 0):
            self._save(done, 0, None)

    def wall(self) -> float:
        """Training seconds of this stack, those before a resume included."""
        return self.elapsed + time.perf_counter() - self.started

    def _save(self, epoch: int, step: int, total: torch.Tensor | None) -> None:
        self.hooks.save(capture(self, epoch, step, total))
        signum = self.hooks.stop()
        if signum is not None:
            raise Preempted(signum, epoch, self.epochs)


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().to("cpu", copy=True)


def generators(stack: Any) -> dict[str, torch.Generator]:
    """Every random stream the stack draws from while training, by a stable name."""
    out = {f"shuffle/{s}": g for s, g in stack.shufflers.items()}
    for stream in ("dropout", "attn_dropout"):  # a transformer's attention dropout has its own streams
        dropout = getattr(stack.model, stream, None)
        if dropout is not None:
            out.update({f"{stream}/{s}": g for s, g in dropout.gens.items()})
    for name, module in stack.model.named_modules():
        g = getattr(module, "generator", None)
        if isinstance(g, torch.Generator):
            out[f"module/{name}"] = g
    return out


def capture(attempt: Attempt, epoch: int, step: int, total: torch.Tensor | None) -> dict[str, Any]:
    """The stack's state after `epoch` epochs and `step` steps of the next (CPU copies)."""
    stack, losses, opt = attempt.stack, attempt.losses, attempt.stack.opt
    adam = opt.kind == "adam"
    return {
        "format": FORMAT,
        "engine": stack.engine,
        "epoch": epoch,
        "step": step,
        "total": _cpu(total),
        "epochs": attempt.epochs,
        "elapsed": attempt.wall(),
        "model": {k: _cpu(v) for k, v in stack.model.state_dict().items()},
        "code": code(stack),
        "opt": {
            "step_count": opt.step_count,
            "exp_avgs": [_cpu(t) for t in opt.exp_avgs] if adam else [],
            "exp_avg_sqs": [_cpu(t) for t in opt.exp_avg_sqs] if adam else [],
            "step_tensor": _cpu(opt.step_tensor) if adam else None,
            "momentum_buffers": [_cpu(t) for t in getattr(opt, "momentum_buffers", [])],  # sgd with momentum
        },
        "generators": {k: g.get_state() for k, g in generators(stack).items()},
        "epoch_shufflers": dict(attempt.epoch_shufflers) if step else {},
        "global_rng": torch.get_rng_state(),
        "losses": {k: _cpu(v) for k, v in vars(losses).items()},
        "divergence": {"diverged": _cpu(attempt.divergence.diverged), "at": list(attempt.divergence.at),
                       "checked": attempt.divergence.checked},
        "logs": {k: {a: _cpu(t) for a, t in vars(log).items() if isinstance(t, torch.Tensor)}
                 for k, log in attempt.logs.items()},
    }


def code(stack: Any) -> dict[str, Any] | None:
    """The user's code a model=module stack runs (user_code.code_record), else None: a checkpoint
    continues only under the code that wrote it (user_code.code_change)."""
    return (stack.model.info() or {}).get("code")


def mismatch(attempt: Attempt, state: dict[str, Any]) -> str | None:
    """Why this state cannot continue this stack, or None."""
    stack = attempt.stack
    if state.get("format") != FORMAT:
        return f"written by another checkpoint format ({state.get('format')}, this version reads {FORMAT})"
    if state.get("engine") != stack.engine:
        return f"written by the {state.get('engine')} engine, this stack trains {stack.engine}"
    if state.get("epochs") != attempt.epochs or not 0 <= int(state.get("epoch", -1)) < attempt.epochs:
        return "its epochs do not match the config's"
    if set(state.get("generators", {})) != set(generators(stack)) or set(state.get("logs", {})) != set(attempt.logs):
        return "its random streams or logs do not match this stack's"
    change = code_change(state.get("code"), code(stack))
    if change:
        return f"written by other code of model.target ({change})"
    own = stack.model.state_dict()
    saved = state.get("model", {})
    if set(saved) != set(own) or any(saved[k].shape != v.shape or saved[k].dtype != v.dtype for k, v in own.items()):
        return "its parameters do not match this stack's shapes"
    if len(state.get("opt", {}).get("momentum_buffers", [])) != len(getattr(stack.opt, "momentum_buffers", [])):
        return "its optimiser state does not match this stack's (momentum)"
    return None


@torch.no_grad()
def restore(attempt: Attempt, state: dict[str, Any]) -> bool:
    """Put the saved state into the stack in place (the optimiser, the hand-written gradient and
    a compiled step keep their references to the same tensors). False (and nothing changed)
    where the state does not fit this stack."""
    why = mismatch(attempt, state)
    if why is not None:
        attempt.hooks.reject(why)
        return False
    stack, opt = attempt.stack, attempt.stack.opt
    stack.model.load_state_dict(state["model"], strict=True)
    opt.step_count = int(state["opt"]["step_count"])
    if opt.kind == "adam":
        for mine, saved in zip([*opt.exp_avgs, *opt.exp_avg_sqs, opt.step_tensor],
                               [*state["opt"]["exp_avgs"], *state["opt"]["exp_avg_sqs"], state["opt"]["step_tensor"]]):
            mine.copy_(saved)
    for mine, saved in zip(getattr(opt, "momentum_buffers", []), state["opt"].get("momentum_buffers", [])):
        mine.copy_(saved)
    for name, g in generators(stack).items():
        g.set_state(state["generators"][name])
    for s, rng in state["epoch_shufflers"].items():  # mid-epoch: the permutation is drawn again
        stack.shufflers[s].set_state(rng)
    torch.set_rng_state(state["global_rng"])
    for k, t in state["losses"].items():
        mine = getattr(attempt.losses, k)
        if mine is not None and t is not None:
            mine.copy_(t)
    div = attempt.divergence
    div.diverged.copy_(state["divergence"]["diverged"])
    div.at[:] = state["divergence"]["at"]
    div.checked = int(state["divergence"]["checked"])
    for k, tensors in state["logs"].items():
        for a, t in tensors.items():
            getattr(attempt.logs[k], a).copy_(t)
    total = state["total"]
    attempt.position = (int(state["epoch"]), int(state["step"]),
                        total.to(stack.device) if total is not None else None)
    attempt.elapsed = float(state["elapsed"])
    return True
