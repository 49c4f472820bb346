"""Each data source's input shape for a convolutional network: (channels, length) for sequences,
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
