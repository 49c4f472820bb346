"""A run's identity: config_hash, the hash resume matches on, with the table of keys added after the
first release (so sweeps made earlier keep their hashes)."""

from __future__ import annotations

import hashlib
from typing import Any

from activation_bench.cfg import Cfg, plain

# Keys added after the first release, in groups, each key with the value that reproduces what ran
# before it existed. While every key of a group holds that value, config_hash leaves the group out
# (and a subtree it empties), so the hash is the one the config had before the keys existed and
# sweeps made earlier still resume. A key added later goes here with its backwards-compatible value.
LEGACY_DEFAULTS: tuple[dict[str, Any], ...] = (
    # real tables and function tasks (#14), each null for normal/uniform data
    *({f"data.{k}": None} for k in ("path", "sha256", "features", "fn", "val_fraction", "test_fraction",
                                     "standardize", "dropna")),
    {"model.depth": 1},  # one hidden layer (#19)
    {"model.init": "torch_default", "model.init_resolved": "torch_default"},  # torch's own init (#19)
    {"log.grad_norms": False, "log.every": 10},  # no gradient log (#19)
    {"data.task": "regression"},  # classification (#29)
    {"model.dropout": 0.0},  # dropout (#29)
    {"log.train_eval": False},  # the training loss with dropout off (#29)
    {"model.norm": "none"},  # normalization (#31)
    {"model.residual": False},  # residual connections (#31)
    {"log.preact_stats": 0},  # the pre-activation log (#31)
    {"engine": "eager"},  # the compiled engine (#30)
    {"data.root": None},  # image files' folder (#37)
    {"data.n_train": None},  # a subsample of the training rows (#37)
    {"model.name": "mlp"},  # the model family, model=mlp|cnn (#37)
    *({f"data.{k}": None} for k in ("steps", "eval_windows")),  # text data: steps per epoch, fixed eval windows
    {"weight_decay": 0.0},  # AdamW's decoupled weight decay
    {"beta2": 0.999},  # Adam's second-moment decay
    {"momentum": 0.0, "nesterov": False},  # SGD momentum
    {"grad_clip": 0.0},  # per-member gradient clipping
    {"schedule": "constant", "warmup_steps": 0, "decay_steps": None, "min_lr": 0.0},  # the learning-rate schedule
)

# Settings that change no result: never hashed, so a run keeps its identity (and resumes) whatever
# they hold. checkpoint.*: how often a mid-run checkpoint is written (#40).
NOT_HASHED = ("checkpoint",)


def config_hash(cfg: Cfg) -> str:
    """Identity of a run: a hash of its fully resolved config (what resume matches on), leaving out
    NOT_HASHED and the LEGACY_DEFAULTS groups that hold their backwards-compatible values."""
    import json

    doc = plain(cfg)
    for key in NOT_HASHED:
        doc.pop(key, None)
    for group in LEGACY_DEFAULTS:
        if all(_holds(doc, key, value) for key, value in group.items()):
            for key in group:
                _drop(doc, key)
    text = json.dumps(doc, sort_keys=True, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_ABSENT = object()


def _holds(doc: dict, dotted: str, value: Any) -> bool:
    """Whether doc has `value` at the dotted key, or lacks the key (type-exact: False is not 0)."""
    *parents, last = dotted.split(".")
    for part in parents:
        doc = doc.get(part, {})
        if not isinstance(doc, dict):
            return False
    found = doc.get(last, _ABSENT)
    return found is _ABSENT or (type(found) is type(value) and found == value)


def _drop(doc: dict, dotted: str) -> None:
    """Remove the dotted key, and the parents it leaves empty."""
    *parents, last = dotted.split(".")
    nodes = [doc]
    for part in parents:
        node = nodes[-1].get(part)
        if not isinstance(node, dict):
            return
        nodes.append(node)
    nodes[-1].pop(last, None)
    for node, part in reversed(list(zip(nodes[:-1], parents))):
        if not node[part]:
            node.pop(part)
