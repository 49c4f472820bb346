"""Planning a sweep's training, in arithmetic on configs (nothing is built or trained here): each
member's data shapes and outputs, which members can share a stack (`stack_key`), how much memory a
member takes (`member_bytes`), and the stacks a grid is cut into (`plan_stacks`). The training
engine (train.py), the memory check (runs/memory.py) and the sweep orchestration use these."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from activation_bench.cfg import model_name
from activation_bench.data import tables
from activation_bench.data.shapes import input_shape
from activation_bench.engine import activations, conv_shapes
from activation_bench.engine.preact import PROBE_ROWS, STATS

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def _act_cfg(cfg: Cfg) -> dict[str, Any]:
    return dict(cfg.activation)


def _act_key(cfg: Cfg) -> str:
    """The activation as one comparable string: members with equal keys share a module slice."""
    return json.dumps(_act_cfg(cfg), sort_keys=True)


def data_shapes(cfg: Cfg) -> tuple[int, int, int, int]:
    """(training rows, validation rows, test rows, input features) of a member's data."""
    d = cfg.data
    if tables.is_real(d):
        return tables.shapes(cfg)
    return d.n_samples, d.n_val, 0, d.input_dim


def n_outputs(cfg: Cfg) -> int:
    """The model's outputs: 1 for a regressor, K for a classifier of K classes."""
    return tables.n_classes(cfg) if tables.is_classification(cfg.data) else 1


def stack_key(cfg: Cfg) -> tuple:
    """Members with equal keys can be trained in one stack."""
    n, n_val, n_test, dim = data_shapes(cfg)
    return (n, n_val, n_test, dim, *_model_key(cfg), cfg.batch_size or n,
            cfg.epochs, float(cfg.lr), cfg.optimizer, cfg.dtype, resolve_device(cfg.device), _shuffles(cfg),
            _grad_every(cfg), n_outputs(cfg), bool(cfg.log.get("train_eval")),
            int(cfg.log.get("preact_stats") or 0), _engine_key(cfg))


def _model_key(cfg: Cfg) -> tuple:
    """The model's shapes and layer settings (everything but its init, drawn per member)."""
    m = cfg.model
    if model_name(cfg) == "cnn":
        widths = tuple(activations.hidden_width(_act_cfg(cfg), c) for c in m.channels)
        return ("cnn", input_shape(cfg), widths, tuple(m.kernel), tuple(m.stride), tuple(m.padding), m.pool,
                m.pool_size, bool(m.global_pool), m.norm, float(m.dropout))
    h1, h2 = activations.hidden_width(_act_cfg(cfg), m.hidden_dim)
    return ("mlp", h1, h2, m.depth, float(m.get("dropout") or 0.0), _norm(cfg), bool(m.get("residual")))


def _engine_key(cfg: Cfg) -> tuple[str, str]:
    """The engine asked for, and with compiled|auto a user's module's config: its members get
    stacks of their own, so a module the compiled step cannot take (random draws, a branch on
    values, buffers) sends only its own stacks to eager (compiled_acts.form)."""
    engine = cfg.get("engine") or "eager"
    act = _act_cfg(cfg)
    return engine, _act_key(cfg) if engine != "eager" and activations.has_target(act) else ""


def _norm(cfg: Cfg) -> str:
    return cfg.model.get("norm") or "none"


def _grad_every(cfg: Cfg) -> int | None:
    return cfg.log.every if cfg.log.grad_norms else None


def _shuffles(cfg: Cfg) -> bool:
    n = data_shapes(cfg)[0]
    return bool(cfg.shuffle) and (cfg.batch_size or n) < n


def member_bytes(cfg: Cfg) -> int:
    """A generous estimate of one member's memory in a stack (params, grads, optimiser, activations,
    per-epoch losses, the gradient-norm and pre-activation logs), for every hidden layer of a deep
    member; normalization adds its scale and shift, running statistics and saved values."""
    n, n_val, n_test, dim = data_shapes(cfg)
    if model_name(cfg) == "cnn":
        n_par, saved, peak, widths = _cnn_sizes(cfg)
        batch = min(cfg.batch_size or n, n)
        n_act = batch * saved + min(max(n, n_val, n_test), EVAL_ROWS) * peak
        depth = len(widths)
    else:
        h1, h2 = activations.hidden_width(_act_cfg(cfg), cfg.model.hidden_dim)
        depth, k = cfg.model.depth, n_outputs(cfg)
        normed = _norm(cfg) != "none"
        n_par = dim * h1 + h1 + (depth - 1) * (h2 * h1 + h1) + (h2 + 1) * k + (depth * 2 * h1 if normed else 0)
        n_act = (n + n_val + n_test) * (depth * (4 * h1 + 2 * h2 + (3 * h1 if normed else 0)) + 4)
        widths = [h1] * depth
    n_data = (n + n_val + n_test) * (dim + 1)
    n_log = 2 * depth * (cfg.epochs // cfg.log.every + 2) if cfg.log.grad_norms else 0
    preact = int(cfg.log.get("preact_stats") or 0)
    if preact:  # float64 values, and the probe pass's sorted copies
        n_log += 2 * depth * len(STATS) * (cfg.epochs // preact + 2) + 4 * min(n, PROBE_ROWS) * max(widths)
    itemsize = 8 if cfg.dtype == "float64" else 4
    return itemsize * (5 * n_par + n_data + n_act + n_log) + itemsize * 3 * cfg.epochs


def cnn_macs(cfg: Cfg) -> int:
    """A convnet member's forward multiply-adds per sample: each block's convolution as its im2col
    product (positions x fan_in x the convolution's output channels) and the head."""
    shape = input_shape(cfg) or ()
    convs = sum(math.prod(b.conv_positions) * b.fan_in * activations.hidden_width(_act_cfg(cfg), b.c_out)[0]
                for b in conv_shapes.blocks(shape, cfg.model))
    return convs + conv_shapes.head_inputs(shape, cfg.model) * n_outputs(cfg)


def _cnn_sizes(cfg: Cfg) -> tuple[int, int, int, list[int]]:
    """A convnet member's parameters; per sample, the values a training step keeps for backward
    (each block's im2col copy, convolution output, norm, activation and pooled output) and the
    most an evaluation pass holds at once (one block's im2col copy and outputs); its blocks'
    pre-activation widths."""
    geometry = conv_shapes.blocks(input_shape(cfg) or (), cfg.model)
    n_par = saved = peak = 0
    widths = []
    for b in geometry:
        h1, h2 = activations.hidden_width(_act_cfg(cfg), b.c_out)
        positions = math.prod(b.conv_positions)
        n_par += b.fan_in * h1 + 3 * h1
        saved += positions * (b.fan_in + 5 * h1 + 2 * h2) + math.prod(b.positions_out) * 2 * h2
        peak = max(peak, positions * (b.fan_in + 2 * h1 + h2))
        widths.append(h1)
    last = geometry[-1]
    feats = last.c_out * (1 if cfg.model.global_pool else math.prod(last.positions_out))
    n_par += (feats + 1) * max(n_outputs(cfg), conv_shapes.PAD_OUT)
    return n_par, saved + 4, peak + 4, widths


EVAL_ROWS = 1000  # a convnet's evaluation passes take this many rows at a time (`_Stack.predict`)
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
