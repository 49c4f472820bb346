"""Config values as the analysis compares them: a run's config.yaml read safely, flattened to dotted
scalar keys (an activation's name or expression as the key's value, like a sweep's labels), and
each value as a canonical string (1e-3 and 0.001 match, 3 and 3.0 match, null is None). Pure
Python and numpy/pandas, no torch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from activation_bench.cfg import activation_label, load_yaml
from activation_bench.errors import UsageError


def read_yaml(path: Path) -> dict:
    import yaml

    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: cannot read config: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: config is not a mapping")
    return data


def flatten_config(cfg: dict, prefix: str = "") -> dict[str, Any]:
    """Dotted scalar keys; a mapping's `name` (or `_target_`) becomes the value of the key itself,
    so {'activation': {'name': 'gelu'}} gives activation=gelu like a sweep's labels (an expression
    activation gives its text, or activation.name when given)."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            head = value.get("name", value.get("_target_"))
            if name == "activation" and "fn" in value:  # an expression: its text, or its label
                head = activation_label(value)
            if head is not None:
                out[name] = head
            rest = {k: v for k, v in value.items() if k not in ("name", "_target_")}
            out.update(flatten_config(rest, name + "."))
        elif isinstance(value, list):
            out[name] = ",".join(str(v) for v in value)
        else:
            out[name] = value
    return out


_NULLS = {"", "null", "nan"}


def canon(value: Any) -> str | None:
    """A config value as a canonical string: 1e-3 and 0.001 match, 3 and 3.0 match, null is None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    low = text.lower()
    if low in _NULLS or text == "None":  # Python's None; lowercase none is a value (model.norm=none)
        return None
    if low in ("true", "false"):
        return low
    try:
        num = float(text)
    except ValueError:
        return text
    if num.is_integer() and abs(num) < 2**53:
        return str(int(num))
    return repr(num)


def canon_array(values: np.ndarray) -> np.ndarray:
    cache: dict[Any, str | None] = {}
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        key = "nan" if pd.isna(v) else (type(v), v)
        if key not in cache:
            cache[key] = canon(v)
        out[i] = cache[key]
    return out
