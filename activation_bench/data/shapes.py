"""A member's data shapes in arithmetic on its config (no data read beyond the per-process caches):
its rows per split and features (`data_shapes`), its outputs (`n_outputs`), and each source's
input shape for a convolutional network: (channels, length) for sequences,
(channels, height, width) for images, None for tables, CSV files and synthetic data (whose
features have no order a convolution could use). A member's features are stored flat, in the
order channels, then positions (row-major), so a convnet reshapes them to this shape."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

SHAPES: dict[str, tuple[int, ...]] = {
    "mnist1d": (1, 40),  # 40 steps, one channel
    "digits": (1, 8, 8),  # scikit-learn's 8x8 images, pixel columns in row-major order
    "mnist": (1, 28, 28),  # the IDX files' 28x28 images, row-major
    "fashion_mnist": (1, 28, 28),
    "cifar10": (3, 32, 32),  # the python batches' R, G and B planes of 32x32, each row-major
}


def input_shape(cfg: Cfg) -> tuple[int, ...] | None:
    """The data's input shape for a convnet, or None where its features have no spatial order."""
    return SHAPES.get(cfg.data.name)


def data_shapes(cfg: Cfg) -> tuple[int, int, int, int]:
    """(training rows, validation rows, test rows, input features) of a member's data."""
    from activation_bench.data import tables, text

    d = cfg.data
    if text.is_text(d):  # "rows": the windows a member trains on per epoch, and the fixed ones it is judged on
        return d.steps * cfg.batch_size, *text.held_out_rows(cfg), text.block_size(cfg)
    if tables.is_real(d):
        return tables.shapes(cfg)
    return d.n_samples, d.n_val, 0, d.input_dim


def n_outputs(cfg: Cfg) -> int:
    """The model's outputs: 1 for a regressor, K for a classifier of K classes."""
    from activation_bench.data import tables

    return tables.n_classes(cfg) if tables.is_classification(cfg.data) else 1


def model_input_shape(cfg: Cfg) -> tuple[int, ...]:
    """One sample's shape as a user's module (model=module) takes it: images [C, H, W] (digits
    [1, 8, 8]), sequences [C, L] (MNIST-1D), text [T] token ids (T = the window length), tables and
    synthetic data [features]."""
    return input_shape(cfg) or (data_shapes(cfg)[3],)
