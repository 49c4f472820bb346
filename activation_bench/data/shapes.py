"""A member's data shapes in arithmetic on its config (no data read beyond the per-process caches):
its rows per split and features (`data_shapes`), its outputs (`n_outputs`), and each source's
input shape for a convolutional network: (channels, length) for sequences,
(channels, height, width) for images, None for tables, CSV files and synthetic data (whose
features have no order a convolution could use). A member's features are stored flat, in the
order channels, then positions (row-major), so a convnet reshapes them to this shape."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from activation_bench.errors import at

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
    [1, 8, 8]; C = data.channels where set: a single channel repeated), sequences [C, L]
    (MNIST-1D), text [T] token ids (T = the window length), tables and synthetic data [features]."""
    shape = input_shape(cfg)
    channels = cfg.data.get("channels")
    if shape is not None and channels:
        return (int(channels), *shape[1:])
    return shape or (data_shapes(cfg)[3],)


# ${data:NAME} in a config (model.kwargs above all): the data's sizes, filled in once the data is
# checked (`resolve_sizes`), so one study file fits every source
SIZES = {
    "classes": "the number of classes (classification)",
    "outputs": "the model's output width: K classes, 1 for a regression, the vocabulary on text",
    "features": "one sample's input values (a table's features; C*H*W for an image)",
    "channels": "an image's or a sequence's channels, data.channels where set",
    "height": "an image's height",
    "width": "an image's width",
    "length": "a sequence's length (MNIST-1D's 40; text: the window, data.block_size)",
    "vocab": "text's vocabulary size",
}
_INTERPOLATION = re.compile(r"\$\{data:\s*([A-Za-z_]\w*)\s*\}")


def register_resolver() -> None:
    """OmegaConf's `data` resolver: ${data:NAME} resolves to its own text while a config (or a study
    file) is composed, before any data is read; validation fills it in once the data is checked
    (`resolve_sizes`)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("data"):
        OmegaConf.register_new_resolver("data", lambda name: "${data:" + str(name) + "}")


def sizes(cfg: Cfg) -> dict[str, int]:
    """The sizes of SIZES that the member's data has (a table has no channels, an image no
    vocabulary)."""
    from activation_bench.data import tables, text

    if text.is_text(cfg.data):
        v = text.vocab_size(cfg)
        return {"outputs": v, "vocab": v, "length": int(text.block_size(cfg))}
    shape = model_input_shape(cfg)
    out = {"outputs": n_outputs(cfg), "features": math.prod(shape)}
    if tables.is_classification(cfg.data):
        out["classes"] = out["outputs"]
    if len(shape) == 3:
        out.update(channels=shape[0], height=shape[1], width=shape[2])
    elif len(shape) == 2:
        out.update(channels=shape[0], length=shape[1])
    return out


def check_channels(cfg: Cfg, where: str = "") -> None:
    """data.channels: null (the source's own), the source's own count, or 3 for a single-channel
    image with model=module (an ImageNet-style model's input, the gray channel repeated)."""
    from activation_bench.errors import check

    d = cfg.data
    channels = d.get("channels")
    if channels is None:
        return
    shape = input_shape(cfg)
    check(shape is not None and len(shape) == 3, f"data.channels applies to images (digits, mnist, fashion_mnist, "
          f"cifar10); data={d.name} is not an image source", where)
    assert shape is not None
    if channels == shape[0]:
        return
    check(shape[0] == 1 and channels == 3, f"data.channels={channels}: data={d.name} has {shape[0]} channel"
          f"{'s' if shape[0] != 1 else ''}; data.channels=3 repeats a single-channel image to 3", where)
    check(cfg.model.get("name") == "module", f"data.channels=3 repeats data={d.name}'s single channel for "
          f"model=module (an ImageNet-style model of your own); model={cfg.model.get('name')} takes the source's "
          "1 channel: leave data.channels null", where)


def resolve_sizes(cfg: Cfg, where: str = "") -> None:
    """Replace every ${data:NAME} left in the config (compose.py keeps them as written) by the data's
    size NAME, in place: a config that is saved resolved. UsageError with one line for an unknown
    NAME, one the data lacks, or an interpolation inside a longer text."""
    found: dict[str, int] = {}

    def size(text: str, key: str) -> int:
        m = _INTERPOLATION.fullmatch(text.strip())
        from activation_bench.errors import UsageError

        if m is None:
            raise UsageError(f"{key}='{text}': ${{data:NAME}} stands alone as a value (e.g. "
                             f"+model.kwargs.num_classes=${{data:classes}}){at(where)}")
        name = m.group(1)
        if name not in SIZES:
            raise UsageError(f"{key}=${{data:{name}}}: unknown size '{name}'; valid: {', '.join(SIZES)}{at(where)}")
        if not found:
            found.update(sizes(cfg))
        if name not in found:
            has = ", ".join(f"{k} ({found[k]})" for k in SIZES if k in found)
            raise UsageError(f"{key}=${{data:{name}}}: data={cfg.data.name} has no {name} (${{data:{name}}}: "
                             f"{SIZES[name]}); it has {has}{at(where)}")
        return found[name]

    def walk(node: Any, key: str) -> Any:
        if isinstance(node, str):
            return size(node, key) if "${data:" in node.replace(" ", "") else node
        if isinstance(node, dict):
            for k in list(node):
                node[k] = walk(node[k], f"{key}.{k}" if key else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                node[i] = walk(v, f"{key}[{i}]")
        return node

    for k in list(cfg):
        if k != "data":
            cfg[k] = walk(cfg[k], k)


def filled_keys(overrides: list[str]) -> list[str]:
    """The dotted keys that overrides set from the data's sizes (`+model.kwargs.n=${data:classes}`
    gives model.kwargs.n), for a dry run to show their values."""
    out = []
    for text in overrides:
        key, sep, value = text.partition("=")
        if sep and "${data:" in value.replace(" ", ""):
            key = key.lstrip("+~")
            if key not in out:
                out.append(key)
    return out


def value_at(cfg: Cfg, dotted: str) -> str:
    """A composed config's value at a dotted key, as text ('' where absent)."""
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return ""
        node = node[part]
    return str(node)
