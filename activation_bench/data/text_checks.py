"""Checks of a composed config whose data is text (data/text.py's sources): one line each, exit 2
(config/validate.py and tables.check_task call them). Torch-free."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from activation_bench.data.text import (
    OTHER_KEYS,
    TASK,
    TEXT,
    TEXT_KEYS,
    block_size,
    corpus,
    source_file,
    source_label,
    split_sizes_of,
)
from activation_bench.errors import UsageError, at

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


def check_task(data: Cfg, where: str = "") -> None:
    """data.task=language_model is the text sources' task and theirs only; data.root applies to
    data=shakespeare only (tables.check_task's part for text, called for every source)."""
    task = data.get("task", "regression")
    if data.name in TEXT and task != TASK:
        raise UsageError(f"data={data.name} is text (next-character prediction): data.task must be {TASK}, got "
                         f"{task}" + at(where))
    if data.name not in TEXT:
        raise UsageError(f"data.task={TASK} applies to the text sources ({', '.join(TEXT)}), not data={data.name}"
                         + at(where))
    if data.get("root") is not None and data.name != "shakespeare":
        raise UsageError(f"data.root (the folder holding shakespeare_char/input.txt) applies to data=shakespeare, "
                         f"not data={data.name}" + at(where))


def check_not_text(data: Cfg, where: str = "") -> None:
    """data.steps, data.eval_windows and data.val_windows apply to text sources only."""
    for key in TEXT_KEYS:
        if data.get(key) is not None:
            raise UsageError(f"data.{key} applies to the text sources ({', '.join(TEXT)}), not data={data.name}"
                             + at(where))


def _positive(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def validate(cfg: Cfg, where: str = "") -> None:
    """A text source's keys, the window length (model.block_size) against each split's size, and the
    file: present, not empty, UTF-8 (read once per process). data=text's data.path is resolved and,
    for a file, data.sha256 recorded in cfg (checked instead when the config carries one)."""
    d = cfg.data
    for key in OTHER_KEYS:
        if d.get(key) is not None:
            raise UsageError(f"data.{key} does not apply to data={d.name} (text: the characters are the data)"
                             + at(where))
    if d.get("noise"):
        raise UsageError(f"data.noise applies to function and teacher data, not data={d.name}" + at(where))
    if d.get("n_val"):
        raise UsageError(f"data.n_val does not apply to data={d.name} (the last 10% of the text: validation, "
                         "then test)" + at(where))
    if d.name != "text" and d.get("path") is not None:
        raise UsageError(f"data.path applies to data=text, not data={d.name}"
                         + (" (data.root sets its folder)" if d.name == "shakespeare" else "") + at(where))
    if d.name == "python_docs" and d.get("sha256") is not None:
        raise UsageError("data.sha256 does not apply to data=python_docs (no file: the interpreter's own text)"
                         + at(where))
    if d.get("eval_windows") is not None:
        d["val_windows"] = None  # eval_windows=N samples both splits: the validation sample is N windows
    keys = (("steps", "optimiser steps per epoch"),
            ("eval_windows", "fixed windows of the validation and test splits, null: the whole test split")
            if d.get("eval_windows") is not None else ("val_windows", "fixed windows of the validation split"))
    for key, what in keys:
        if not _positive(d.get(key)):
            raise UsageError(f"data.{key} ({what}) must be a positive integer, got {d.get(key)}" + at(where))
    model = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    name = model.get("name") or "mlp"
    own, block = d.get("block_size"), block_size(cfg)
    if own is not None and model.get("block_size") is not None and own != model.get("block_size"):
        raise UsageError(f"data.block_size={own} and model.block_size={model.get('block_size')} disagree: the "
                         "transformer's window is model.block_size (leave data.block_size null)" + at(where))
    if block is None:
        raise UsageError(f"data={d.name} is text: it needs a model with model.block_size, the window length "
                         f"(model=transformer), or data.block_size (model=module); model={name} has none" + at(where))
    key = "data.block_size" if own is not None else "model.block_size"
    if not _positive(block):
        raise UsageError(f"{key} (the window length) must be a positive integer, got {block}" + at(where))
    bs = cfg.get("batch_size")
    if bs is not None and not _positive(bs):
        raise UsageError(f"batch_size (windows per member and step) must be a positive integer, got {bs}"
                         + at(where))
    if d.name == "shakespeare" and d.get("root") is not None:
        d["root"] = os.path.abspath(os.path.expanduser(str(d.root)))
    c = corpus(d)
    if c.sha256 is not None:
        path = str(source_file(d))
        if d.get("sha256") and d.sha256 != c.sha256:
            raise UsageError(f"{source_label(d.name, path)}: its SHA-256 is {c.sha256}, not the configured data.sha256="
                             f"{d.sha256} ("
                             + ("not the tiny shakespeare this config expects; data.sha256=null takes this copy"
                                if d.name == "shakespeare" else "the file changed since that config was saved")
                             + ")" + at(where))
        if d.name == "text":
            d["path"] = path
        d["sha256"] = c.sha256
    sizes = split_sizes_of(len(c.tokens))
    for split, n in zip(("training", "validation", "test"), sizes):
        if n <= block + 1:
            raise UsageError(f"data={d.name}: the text is too short for {key}={block}: its {split} split "
                             f"has {n} characters, and each split needs more than block_size + 1 = {block + 1} "
                             f"({len(c.tokens)} characters: {sizes[0]} training, {sizes[1]} validation, "
                             f"{sizes[2]} test)" + at(where))
