"""Planning a sweep's training, in arithmetic on configs (nothing is built or trained here): each
member's data shapes and outputs, which members can share a stack (`stack_key`), how much memory a
member takes (`member_bytes`), the stacks a grid is cut into (`plan_stacks`), the engine a stack
will train with (`planned_engine`) and whether it may train beside another (`trains_beside`). The
training engine (train.py), the memory check (runs/memory.py) and the sweep orchestration use these."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from activation_bench.data import registry as sources
from activation_bench.data.feed import shuffles
from activation_bench.data.shapes import data_shapes, n_outputs
from activation_bench.engine.models import registry

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


def resolve_device(name: str) -> str:
    if name == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def act_cfg(cfg: Cfg) -> dict[str, Any]:
    """The activation's config as a plain dict."""
    return dict(cfg.activation)


def act_key(cfg: Cfg) -> str:
    """The activation as one comparable string: members with equal keys share a module slice."""
    return json.dumps(act_cfg(cfg), sort_keys=True)


def classifies(cfg: Cfg) -> bool:
    """Whether the model's outputs are class logits (cross-entropy, accuracy): a classifier's, or a
    language model's over the characters (the data source's answer, data/registry.py)."""
    return sources.of(cfg).classifies(cfg)


def logged_columns(cfg: Cfg) -> set[str]:
    """The per-epoch columns a run of this config writes to losses.csv (the training loop's and the
    study plan's one definition)."""
    _, n_val, n_test, _ = data_shapes(cfg)
    classify = classifies(cfg)
    cols = {"train_loss"}
    if n_val:
        cols |= {"val_loss", "val_acc"} if classify else {"val_loss"}
    if n_test:
        cols |= {"test_loss", "test_acc"} if classify else {"test_loss"}
    if cfg.log.train_eval:
        cols.add("train_eval_loss")
    return cols


def stack_key(cfg: Cfg) -> tuple:
    """Members with equal keys can be trained in one stack."""
    n, n_val, n_test, dim = data_shapes(cfg)
    return (n, n_val, n_test, dim, *registry.of(cfg).stack_key(cfg), cfg.batch_size or n,
            cfg.epochs, float(cfg.lr), cfg.optimizer, cfg.dtype, resolve_device(cfg.device), shuffles(cfg),
            grad_every(cfg), n_outputs(cfg), bool(cfg.log.train_eval),
            int(cfg.log.preact_stats), _engine_key(cfg), _optimizer_key(cfg))


def _optimizer_key(cfg: Cfg) -> tuple:
    """The optimiser settings beyond optimizer and lr (engine/optim.py): one optimiser serves a stack."""
    return tuple(cfg.get(k) for k in ("weight_decay", "beta2", "momentum", "nesterov", "grad_clip", "schedule",
                                      "warmup_steps", "decay_steps", "min_lr"))


def _engine_key(cfg: Cfg) -> tuple[str, str]:
    """The engine asked for, and with compiled|auto a user's module's config: its members get
    stacks of their own, so a module the compiled step cannot take (random draws, a branch on
    values, buffers) sends only its own stacks to eager (compiled_acts.form)."""
    engine = cfg.engine
    user_module = "_target_" in cfg.activation  # activations.has_target, without importing torch
    return engine, act_key(cfg) if engine != "eager" and user_module else ""


def grad_every(cfg: Cfg) -> int | None:
    """Every how many epochs the gradient norms are logged (log.grad_norms), else None."""
    return cfg.log.every if cfg.log.grad_norms else None


def member_bytes(cfg: Cfg) -> int:
    """A generous estimate of one member's memory in a stack: its family's parameters (with
    gradients and optimiser state) and the activations a step and an evaluation keep, the data, the
    per-epoch losses, the gradient-norm and pre-activation logs."""
    from activation_bench.engine.preact import PROBE_ROWS, STATS

    n, n_val, n_test, dim = data_shapes(cfg)
    size = registry.of(cfg).memory(cfg)
    depth = len(size.widths)
    n_data = (n + n_val + n_test) * (dim + 1)
    n_log = 2 * depth * (cfg.epochs // cfg.log.every + 2) if cfg.log.grad_norms else 0
    preact = int(cfg.log.preact_stats)
    if preact:  # float64 values, and the probe pass's sorted copies
        n_log += 2 * depth * len(STATS) * (cfg.epochs // preact + 2) + 4 * min(n, PROBE_ROWS) * max(size.widths)
    itemsize = 8 if cfg.dtype == "float64" else 4
    return itemsize * (5 * size.params + n_data + size.activations + n_log) + itemsize * 3 * cfg.epochs


MAX_STACK = 256  # on CPU larger stacks gain no speed, and smaller ones lose less to a kill


def plan_stacks(cfgs: Sequence[Cfg], memory_mb: float = 1024.0, max_members: int = MAX_STACK) -> list[list[int]]:
    """Group member indices by stack key, in even chunks that stay within memory_mb each."""
    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        groups.setdefault(stack_key(cfg), []).append(i)
    stacks = []
    for idx in groups.values():
        per = member_bytes(cfgs[idx[0]])
        cap = max_members if resolve_device(cfgs[idx[0]].device) == "cpu" else len(idx)  # GPUs want one launch
        size = max(1, min(cap, int(memory_mb * 2**20 // per)))
        n_chunks = -(-len(idx) // size)
        size = -(-len(idx) // n_chunks)
        stacks.extend(idx[i : i + size] for i in range(0, len(idx), size))
    return stacks


def planned_engine(cfgs: Sequence[Cfg], store: bool = True) -> tuple[str, str]:
    """(engine, why) for this stack before it is built (compiled.plan, from the members' shapes)."""
    from activation_bench.engine.compiled import choose as compiled

    first = cfgs[0]
    return compiled.plan(first, len(cfgs), *steps_rows(first), store)


def steps_rows(cfg: Cfg) -> tuple[int, int]:
    """(optimiser steps over the whole run, rows a step)."""
    n = data_shapes(cfg)[0]
    rows = min(cfg.batch_size or n, n)
    return cfg.epochs * -(-n // rows), rows


BESIDE_MIN_S = 1.0  # estimated eager seconds a stack needs before a thread of its own pays for itself


def trains_beside(cfgs: Sequence[Cfg], store: bool = True) -> bool:
    """Whether this stack may train in a thread beside another stack (runs/beside.py): on the CPU,
    eager as planned with `store` (a compiled step is not thread-safe), of a family that allows it
    (Family.trains_beside), without a user's activation module (its code may draw from the global
    RNG), on data that loads in two threads at once (Source.thread_safe: not images or mnist1d), and
    with at least BESIDE_MIN_S seconds of estimated work."""
    from activation_bench.engine.compiled.choose import work_s

    first = cfgs[0]
    family = registry.of(first)
    if resolve_device(first.device) != "cpu" or not family.trains_beside:
        return False
    if not sources.of(first).thread_safe(first.data):
        return False
    if any(c.activation.get("_target_") for c in cfgs):
        return False
    if planned_engine(cfgs, store)[0] != "eager":
        return False
    steps, rows = steps_rows(first)
    return work_s(len(cfgs), steps, rows * family.macs(first)) >= BESIDE_MIN_S
