"""A sweep member's labels (its varying values, the columns of results.csv): how expressions
(activation=expr) and the activation.* keys only some members take are labelled, so that every
activation of a sweep is a group of its one `activation` column."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from activation_bench.cfg import Cfg, activation_label


def sweep_labels(keys: list[str], labels: list[dict[str, str]], cfgs: Sequence[Cfg]
                 ) -> tuple[list[str], list[dict[str, str]]]:
    """Expression members (activation=expr) are labelled by `activation`, as registered activations
    are: the expression's text (unquoted), or activation.name where that is swept too (or where the
    expression is not swept). That covers a sweep over activation.fn and one mixing registered
    activations with expressions ('activation=relu,expr'); then `_fold_partial_keys`. Other sweeps'
    labels are the grid's (config.grid.expand)."""
    mixed = "activation" in keys and any(_is_expression(c) for c in cfgs)
    if "activation.fn" not in keys and not mixed:
        return _fold_partial_keys(keys, labels, cfgs)
    by_name = "activation.name" in keys or "activation.fn" not in keys
    out = []
    for lab, cfg in zip(labels, cfgs):
        if not _is_expression(cfg):
            out.append(lab)
            continue
        text = activation_label(cfg.activation) if by_name else str(cfg.activation["fn"]).strip()
        renamed = {("activation" if k == "activation.fn" else k): v for k, v in lab.items()}
        renamed["activation"] = text
        out.append(renamed)
    new_keys = [k for k in keys if not (mixed and k == "activation.fn")]
    return _fold_partial_keys(["activation" if k == "activation.fn" else k for k in new_keys], out, cfgs)


def _fold_partial_keys(keys: list[str], labels: list[dict[str, str]], cfgs: Sequence[Cfg]
                       ) -> tuple[list[str], list[dict[str, str]]]:
    """A swept activation.* key that only some members take (config.grid.takes: 'activation=relu,leaky_relu'
    with 'activation.negative_slope=0.01,0.1') joins the `activation` label of the members that take it,
    in `actbench plot-activations`'s spelling ('leaky_relu:negative_slope=0.1'), instead of a column blank
    for the others: every activation is then a group of the one `activation` column, and compare pairs
    relu with each by seed. activation.name is the label already."""
    partial = [k for k in keys if any(k not in lab for lab in labels)]
    if not partial:
        return keys, labels
    out = []
    for lab, cfg in zip(labels, cfgs):
        subs = [k.lstrip("+").split(".", 1)[1] for k in partial if k in lab]
        extra = [f"{sub}={_text(cfg.activation[sub])}" for sub in subs if sub != "name"]
        kept = {k: v for k, v in lab.items() if k not in partial}
        if extra:
            kept["activation"] = kept["activation"] + ":" + ",".join(extra)
        out.append(kept)
    return [k for k in keys if k not in partial], out


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _is_expression(cfg: Cfg) -> bool:
    return "fn" in cfg.activation and not cfg.activation.get("_target_")
