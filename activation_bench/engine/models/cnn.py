"""model=cnn: convolution blocks (convolution -> norm -> activation -> pooling -> dropout), then a
linear head, on sequences (data=mnist1d) and images. The geometry is conv_shapes.py (plain
arithmetic), the stacked model stacked_cnn.py, its compiled step engine/compiled/cnn.py."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from activation_bench.engine.models import conv_shapes
from activation_bench.engine.models.family import Family, Memory

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

NORMS = ("none", "batch")  # per-channel batch norm
INITS = ("torch_default", "he", "lecun", "xavier", "auto")
EVAL_ROWS = 1000  # evaluation passes take this many rows at a time (see `CNN.eval_rows`)


@dataclass
class CNNConfig:
    """model=cnn (configs/model/cnn.yaml): convolution blocks, then a linear head (stacked_cnn.py).
    The list keys have one value per block; kernels, strides and paddings are square for images."""

    name: str = "cnn"
    channels: list[int] = field(default_factory=lambda: [25, 25, 25])  # each block's output channels
    kernel: list[int] = field(default_factory=lambda: [5, 3, 3])
    stride: list[int] = field(default_factory=lambda: [2, 2, 2])
    padding: list[int] = field(default_factory=lambda: [1, 1, 1])  # zeros on every side
    pool: str = "none"  # none | max | avg, after each block's activation
    pool_size: int = 2  # the pooling window and its stride
    global_pool: bool = False  # the head reads each channel's mean over positions instead of every value
    norm: str = "none"  # none | batch: per-channel batch norm between each convolution and its activation
    dropout: float = 0.0  # dropout after each block (after pooling); off for validation and test
    init: str = "torch_default"  # torch_default | he | lecun | xavier | auto (as the MLP's)
    init_resolved: str | None = None  # the scheme that ran; set by validate


def _act(cfg: Cfg) -> dict[str, Any]:
    return dict(cfg.activation)


def _geometry(cfg: Cfg) -> list[conv_shapes.Block]:
    from activation_bench.data.shapes import input_shape

    return conv_shapes.blocks(input_shape(cfg) or (), cfg.model)


class CNN(Family):
    name = "cnn"
    schema = CNNConfig
    # one pass over a whole split would hold every position's activations of every row at once:
    # gigabytes for CIFAR-10's 10,000 test images
    eval_rows = EVAL_ROWS

    def validate(self, cfg: Cfg, where: str) -> None:
        """Sequence or image data, and a geometry that leaves every block some positions
        (conv_shapes.blocks names the block and the sizes otherwise)."""
        from activation_bench.data.shapes import SHAPES, input_shape
        from activation_bench.engine.models import checks as v
        from activation_bench.errors import UsageError, at, check

        m = cfg.model
        check(m.norm in NORMS, f"unknown model.norm '{m.norm}' for model=cnn; valid: {', '.join(NORMS)}", where)
        v.check_dropout(m.dropout, where)
        v.resolve_init(cfg, INITS, where)
        shape = input_shape(cfg)
        check(shape is not None, f"model=cnn needs sequence or image data ({', '.join(SHAPES)}); "
                f"data={cfg.data.name}'s features have no positions to convolve over (use model=mlp)", where)
        try:
            conv_shapes.blocks(shape, m)  # type: ignore[arg-type]
        except ValueError as exc:
            raise UsageError(str(exc) + at(where)) from None

    def describe(self, model: dict[str, Any]) -> str:
        def seq(key: str) -> str:
            return "-".join(str(v) for v in model[key])

        parts = [f"CNN {seq('channels')} k{seq('kernel')} s{seq('stride')} p{seq('padding')}"]
        parts += [f"{model['pool']} pool {model['pool_size']}"] if model["pool"] != "none" else []
        parts += ["batch norm"] if model["norm"] == "batch" else []
        parts += [f"dropout {model['dropout']:g}"] if model["dropout"] else []
        parts.append("global-pool head" if model["global_pool"] else "flatten head")
        return ", ".join(parts)

    def layers(self, model: dict[str, Any]) -> int:
        return len(model["channels"])

    def stack_key(self, cfg: Cfg) -> tuple:
        from activation_bench.data.shapes import input_shape
        from activation_bench.engine.activations import registry as activations

        m = cfg.model
        widths = tuple(activations.hidden_width(_act(cfg), c) for c in m.channels)
        return ("cnn", input_shape(cfg), widths, tuple(m.kernel), tuple(m.stride), tuple(m.padding), m.pool,
                m.pool_size, bool(m.global_pool), m.norm, float(m.dropout))

    def memory(self, cfg: Cfg) -> Memory:
        """Parameters; per sample, the values a training step keeps for backward (each block's
        im2col copy, convolution output, norm, activation and pooled output) and the most an
        evaluation pass holds at once (one block's im2col copy and outputs)."""
        from activation_bench.data.shapes import data_shapes, n_outputs
        from activation_bench.engine.activations import registry as activations

        geometry = _geometry(cfg)
        n_par = saved = peak = 0
        widths = []
        for b in geometry:
            h1, h2 = activations.hidden_width(_act(cfg), b.c_out)
            positions = math.prod(b.conv_positions)
            n_par += b.fan_in * h1 + 3 * h1
            saved += positions * (b.fan_in + 5 * h1 + 2 * h2) + math.prod(b.positions_out) * 2 * h2
            peak = max(peak, positions * (b.fan_in + 2 * h1 + h2))
            widths.append(h1)
        last = geometry[-1]
        feats = last.c_out * (1 if cfg.model.global_pool else math.prod(last.positions_out))
        n_par += (feats + 1) * max(n_outputs(cfg), conv_shapes.PAD_OUT)
        n, n_val, n_test, _ = data_shapes(cfg)
        batch = min(cfg.batch_size or n, n)
        n_act = batch * (saved + 4) + min(max(n, n_val, n_test), EVAL_ROWS) * (peak + 4)
        return Memory(n_par, n_act, widths)

    def macs(self, cfg: Cfg) -> int:
        """Each block's convolution as its im2col product (positions x fan_in x output channels)
        and the head."""
        from activation_bench.data.shapes import input_shape, n_outputs
        from activation_bench.engine.activations import registry as activations

        convs = sum(math.prod(b.conv_positions) * b.fan_in * activations.hidden_width(_act(cfg), b.c_out)[0]
                    for b in _geometry(cfg))
        return convs + conv_shapes.head_inputs(input_shape(cfg) or (), cfg.model) * n_outputs(cfg)

    def build(self, ordered: Sequence[Cfg], keys: list[str], device: str, dtype: Any) -> Any:
        from activation_bench.data.shapes import input_shape, n_outputs
        from activation_bench.engine.models import slices, stacked_cnn

        first = ordered[0]
        members = slices.slices_for(ordered, keys, len(first.model.channels), device, dtype)
        return stacked_cnn.build_model(ordered, members, input_shape(first) or (), device, dtype, n_outputs(first))

    def compiled(self) -> Any:
        from activation_bench.engine.compiled import cnn

        return cnn

    def unit_shares(self, model: Any, x: Any) -> tuple[Any, Any]:
        """In chunks of rows (diagnostics.share_rows: a block's im2col copy over every row at once
        would take gigabytes)."""
        from activation_bench.engine.diagnostics import share_rows, unit_shares

        return unit_shares(model, x, share_rows(model, x))

