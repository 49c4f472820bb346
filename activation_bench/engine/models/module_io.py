"""model=module's inputs and outputs. What a user's module returns is read as the task's tensor:
a tensor; an object with a `logits` tensor (Hugging Face's ModelOutput, a mapping with "logits");
or a tuple or list whose first element is a tensor (Hugging Face's return_dict=False, models that
return auxiliary outputs beside their prediction). The check forward records which was used
(summary.json's `output`), and the shape is checked against the task's. The data's flat rows are
shaped as the module takes them, a single-channel image repeated to data.channels=3 where asked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

OUTPUTS = ("tensor", "logits", "first element")  # summary.json's `output`: what the module's output was read as


def take_output(out: Any, expected: tuple[int, ...], what: str) -> tuple[torch.Tensor, str]:
    """The output tensor in `out` and what it was read as (OUTPUTS); ValueError naming the
    expected shape where `out` holds none."""
    if isinstance(out, torch.Tensor):
        return out, "tensor"
    logits = getattr(out, "logits", None)
    if logits is None and isinstance(out, Mapping):
        logits = out.get("logits")
    if isinstance(logits, torch.Tensor):
        return logits, "logits"
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0], "first element"
    if hasattr(out, "logits") or (isinstance(out, Mapping) and "logits" in out):
        has = "its logits is None" if logits is None else f"its logits is {_a(type(logits).__name__)}"
    elif isinstance(out, (tuple, list)) and out:
        has = "its first element is None" if out[0] is None else f"its first element is {_a(type(out[0]).__name__)}"
    else:
        has = "neither a logits attribute nor a tensor as its first element"
    raise ValueError(f"the model returned {_a(type(out).__name__)} ({has}), not a tensor of shape {list(expected)} "
                     f"({what}): return a tensor, an object with a logits tensor, or a tuple whose first element "
                     "is the output")


def _a(name: str) -> str:
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def fit_output(out: Any, rows: int, expected: tuple[int, ...], what: str) -> torch.Tensor:
    """The member's output (take_output) in the engine's shape (a regressor's [N] as [N, 1]);
    ValueError naming both shapes otherwise."""
    out, kind = take_output(out, expected, what)
    if expected[1:] == (1,) and tuple(out.shape) == (rows,):
        out = out[:, None]
    if tuple(out.shape) != expected:
        read = "" if kind == "tensor" else f" (its {kind})"
        raise ValueError(f"the model's output{read} has shape {list(out.shape)}; {what} needs {list(expected)}")
    return out


def expected_output(cfg: Cfg, rows: int) -> tuple[tuple[int, ...], str]:
    """The output shape a batch of `rows` must give, and the task in words."""
    from activation_bench.data import tables, text
    from activation_bench.data.shapes import n_outputs

    if text.is_text(cfg.data):
        v = text.vocab_size(cfg)
        return (rows, int(text.block_size(cfg)), v), f"next-token prediction over {v} tokens"
    k = n_outputs(cfg)
    if tables.is_classification(cfg.data):
        return (rows, k), f"{k} classes"
    return (rows, 1), "regression"


def shaped(x: torch.Tensor, lead: int, shape: tuple[int, ...], repeat: bool) -> torch.Tensor:
    """x [*lead axes, features] as the module's input [*lead axes, *shape]; with `repeat`, the
    source's single channel repeated to shape[0] channels (data.channels=3)."""
    dims = x.shape[:lead]
    if not repeat:
        return x.reshape(*dims, *shape)
    return x.reshape(*dims, 1, *shape[1:]).expand(*dims, *shape).contiguous()
