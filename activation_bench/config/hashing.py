"""A run's identity: config_hash, the hash resume matches on, with the table of keys added after the
first release (so sweeps made earlier keep their hashes)."""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from activation_bench.cfg import Cfg

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
    {"model.attn_dropout": 0.0},  # a transformer's dropout on the attention probabilities
    {"data.val_windows": None},  # text: the validation sample beside a whole test split (null with eval_windows)
    {"data.block_size": None},  # text: the window length as a data key (model=module, #67)
    {"data.channels": None},  # images repeated to 3 channels (model=module, #79)
)

# engine=auto (the default since #68) hashes as engine=eager, the default before it: a sweep made
# then keeps its hash and resumes. auto trains eager unless this machine has the stack's compiled
# step saved (or the stack is long: engine/compiled/choose.py); config.yaml records the engine that
# ran, and a run re-run from it that ran eager keeps this hash.
AUTO = "auto"

# Settings that change no result: never hashed, so a run keeps its identity (and resumes) whatever
# they hold. checkpoint.*: how often a mid-run checkpoint is written (#40).
NOT_HASHED = ("checkpoint",)


def config_hash(cfg: Cfg) -> str:
    """Identity of a run: a hash of its fully resolved config (what resume matches on), leaving out
    NOT_HASHED and the LEGACY_DEFAULTS groups that hold their backwards-compatible values (and the
    subtrees their keys leave empty, or found empty).

    Planning a study hashes thousands of members, so this neither copies the config (only the
    subtrees a key is left out of, shallowly; json writes a Cfg as the plain dict it is) nor walks
    the table key by key: each subtree's legacy keys are read at once, and which groups hold picks
    a cached tree of the keys to leave out. Each group is checked on the config as given, not after
    the earlier groups' keys are left out: the same answers, as no key of the table is in two groups
    or a parent of another (checked at import). tests/test_planning_speed.py compares this with the
    key-by-key algorithm it replaced."""
    import json

    if cfg.get("engine") == AUTO:
        cfg = type(cfg)({**cfg, "engine": "eager"})
    doc = {k: v for k, v in cfg.items() if k not in NOT_HASHED}
    tree = _drop_tree(_held(cfg))
    if tree:
        doc = _without(doc, tree)[0]
    text = json.dumps(doc, sort_keys=True, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_ABSENT = object()
_LEAF = None  # in a drop tree: the key itself is left out

# LEGACY_DEFAULTS' keys in order, and each group's keys as indices in _KEYS
_KEYS: tuple[str, ...] = tuple(key for group in LEGACY_DEFAULTS for key in group)
_GROUP_KEYS: tuple[tuple[int, ...], ...] = tuple(tuple(_KEYS.index(key) for key in group) for group in LEGACY_DEFAULTS)


def _by_parent() -> tuple[tuple[tuple[str, ...], tuple[tuple[int, str, Any], ...]], ...]:
    """The keys by the subtree holding them: (parents, ((index in _KEYS, last part, value), ...))."""
    values = {key: value for group in LEGACY_DEFAULTS for key, value in group.items()}
    out: dict[tuple[str, ...], list[tuple[int, str, Any]]] = {}
    for i, key in enumerate(_KEYS):
        *parents, last = key.split(".")
        out.setdefault(tuple(parents), []).append((i, last, values[key]))
    return tuple((parents, tuple(keys)) for parents, keys in out.items())


_BY_PARENT = _by_parent()


def _check_table() -> None:
    """No key in two groups, none a parent of another, none under NOT_HASHED: config_hash checks
    the groups independently, on the config before anything is left out."""
    assert len(_KEYS) == len(set(_KEYS)), "a LEGACY_DEFAULTS key is in two groups"
    for key in _KEYS:
        assert not any(other.startswith(key + ".") for other in _KEYS), f"LEGACY_DEFAULTS: {key} is a parent"
        assert key.split(".")[0] not in NOT_HASHED, f"LEGACY_DEFAULTS: {key} is never hashed"


_check_table()


def _held(cfg: dict) -> tuple[bool, ...]:
    """Per LEGACY_DEFAULTS group, whether each of its keys has its value in cfg or is absent
    (type-exact: False is not 0). A key under something other than a dict does not hold."""
    holds = [False] * len(_KEYS)
    for parents, keys in _BY_PARENT:
        node: Any = cfg
        for part in parents:
            node = node.get(part, {})
            if not isinstance(node, dict):
                break
        else:
            for i, last, value in keys:
                found = node.get(last, _ABSENT)
                holds[i] = found is _ABSENT or (type(found) is type(value) and found == value)
    return tuple(all(holds[i] for i in group) for group in _GROUP_KEYS)


@functools.cache
def _drop_tree(held: tuple[bool, ...]) -> dict[str, Any]:
    """The keys of the groups that hold, as a tree: {"data": {"path": _LEAF, ...}, "engine": _LEAF};
    built once for each pattern of `held` (callers only read it)."""
    tree: dict[str, Any] = {}
    for group, holds in zip(LEGACY_DEFAULTS, held):
        if holds:
            for key in group:
                *parents, last = key.split(".")
                node = tree
                for part in parents:
                    node = node.setdefault(part, {})
                node[last] = _LEAF
    return tree


def _without(node: dict, tree: dict[str, Any]) -> tuple[dict, bool]:
    """A shallow copy of node without the tree's keys, and whether any of them was reached (every
    dict on its way there). A subtree is left out where a key was reached in it and it ends empty,
    as removing the keys one by one and then their emptied (or empty) parents would."""
    out, reached = dict(node), False
    for name, sub in tree.items():
        if sub is _LEAF:
            out.pop(name, None)
            reached = True
            continue
        child = out.get(name)
        if isinstance(child, dict):
            new, got = _without(child, sub)
            if got:
                reached = True
                if not new:
                    del out[name]
                    continue
            out[name] = new
    return out, reached
