"""Re-composing a saved run's config.yaml (`actbench run --config FILE [KEY=VALUE ...]`).

The file is checked against the schema first (unknown keys and values of the wrong type are refused
with the key's name), then turned into overrides for Hydra: the saved activation and data options
as group choices, and every saved value as a `++key=value` override, so the composed config is the
saved one and trains to the same losses. The user's overrides come last and win; one that chooses
another option of a group (`activation=relu`) replaces that group's saved values instead of being
merged into them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from activation_bench.cfg import Cfg
from activation_bench.config.compose import compose
from activation_bench.config.files import group_options
from activation_bench.config.grid import first_line, parse_overrides
from activation_bench.config.schema import Config
from activation_bench.errors import UsageError

GROUPS = ("activation", "data", "model")  # the saved config's group choices, by the option named in `name`


def compose_saved(path: Path, overrides: Sequence[str]) -> Cfg:
    """The config saved in `path`, with `overrides` applied on top, composed and validated."""
    saved = _read(path)
    user = parse_overrides(overrides)
    replaced = {ov.key_or_group for ov in user if ov.key_or_group in (*GROUPS, "experiment")}
    derived = [*_choices(saved, replaced), *_leaves(saved, replaced)]
    try:
        return compose([*derived, *overrides])
    except UsageError as exc:  # name the file, not the long list of derived overrides
        raise UsageError(str(exc).replace(" ".join([*derived, *overrides]), f"{path} {' '.join(overrides)}".strip())
                         ) from None


def _read(path: Path) -> dict[str, Any]:
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--config {path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--config {path}: not YAML: {first_line(exc)}") from None
    if not isinstance(doc, dict) or not doc:
        raise UsageError(f"--config {path}: not an actbench config (expected a mapping of config keys)")
    try:  # unknown keys and wrongly typed values, named by their key
        OmegaConf.merge(OmegaConf.structured(Config), doc)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        raise UsageError(f"--config {path}: not an actbench config: {first_line(exc)}"
                         + (f" (key '{key}')" if key and f"'{key}'" not in first_line(exc) else "")) from None
    return doc


def _choices(saved: dict[str, Any], replaced: set[str]) -> Iterator[str]:
    """`activation=NAME` / `data=NAME` where the saved subtree names an option of the group."""
    for group in GROUPS:
        sub = saved.get(group)
        name = sub.get("name") if isinstance(sub, dict) else None
        if group in replaced or not isinstance(name, str):
            continue
        if "_target_" in sub and "custom" in group_options(group):
            yield f"{group}=custom"
        elif group == "activation" and "fn" in sub and "expr" in group_options(group):
            yield f"{group}=expr"  # an expression, whatever its label
        elif name in group_options(group):
            yield f"{group}={name}"


def _leaves(saved: dict[str, Any], replaced: set[str], prefix: str = "") -> Iterator[str]:
    for key, value in saved.items():
        dotted = f"{prefix}{key}"
        if dotted in replaced:
            continue
        if isinstance(value, dict) and value:
            yield from _leaves(value, replaced, f"{dotted}.")
        else:
            yield f"++{dotted}={_value(value)}"


def _value(value: Any) -> str:
    """A value in Hydra's override grammar: strings quoted (so '1' stays a string), floats exact."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_value(v)}" for k, v in value.items()) + "}"
    raise UsageError(f"unsupported value {value!r} in a saved config")
