"""Override strings: parsing them with Hydra's own parser, the hydra.* settings that go to a launcher,
and sweep-grid expansion (comma lists, range(), choice(), glob()) to the cartesian product."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from activation_bench.config.files import group_options, groups
from activation_bench.config.schema import NOT_GLOBBED
from activation_bench.errors import UsageError


def hydra_settings(overrides: Sequence[str]) -> list[str]:
    """The overrides that configure Hydra itself (hydra.*, hydra/launcher=...), not a run: they
    go to a launcher (`actbench sweep --launcher`) and never into a run's config."""
    return [text for text in overrides if _is_hydra_setting(text)]


def refuse_hydra_settings(overrides: Sequence[str]) -> None:
    """One line, exit 2, for hydra.* settings where no launcher takes them."""
    found = hydra_settings(overrides)
    if found:
        raise UsageError(f"'{found[0]}': hydra.* settings configure a launcher; add --launcher to an `actbench sweep`")


def _is_hydra_setting(text: str) -> bool:
    key = text.lstrip("+~").split("=", 1)[0]
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


# ---------------------------------------------------------------------------------------------
# parsing


def parse_overrides(overrides: Sequence[str]) -> list[Any]:
    """Parse with Hydra's OverridesParser; one readable line on error."""
    from hydra.errors import OverrideParseException

    parser = _parser()
    parsed = []
    for text in overrides:
        if text in _PARSED:
            parsed.append(_PARSED[text])
            continue
        if "=" not in text:
            hint = " (overrides look like key=value, e.g. epochs=30)"
            if text.startswith("-"):
                hint = " (options go before overrides; put overrides after --)"
            raise UsageError(f"malformed override '{text}'{hint}")
        try:
            (override,) = parser.parse_overrides([text])
        except OverrideParseException as exc:
            raise UsageError(f"cannot parse override '{text}': {first_line(exc)}{_hint(text)}") from None
        _PARSED[text] = override
        parsed.append(override)
    return parsed


_PARSED: dict[str, Any] = {}


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _hint(text: str) -> str:
    if text.lstrip("+~").startswith("activation.fn="):
        return " (an expression is a quoted value: 'activation.fn=\"x*sigmoid(x)\"', several as a sweep: " \
            "'activation.fn=\"x*sigmoid(x)\",\"max(x, 0)\"')"
    if "(" in text or "*" in text:
        return " (quote sweep values in the shell: 'seed=range(10)', 'activation=glob(*)')"
    return ""


def first_line(exc: BaseException) -> str:
    while exc.__cause__ is not None and not str(exc).strip():
        exc = exc.__cause__
    text = str(exc).strip() or (str(exc.__cause__).strip() if exc.__cause__ else type(exc).__name__)
    return text.splitlines()[0] if text else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# sweep expansion


@dataclass
class Grid:
    """The expanded cartesian product: per member its override strings and varying values."""

    common: list[str]
    keys: list[str]  # the varying override keys, in command order
    members: list[list[str]]  # full override list of each member
    labels: list[dict[str, str]]  # varying key -> value string, per member


def expand(overrides: Sequence[str]) -> Grid:
    """Expand sweep overrides (comma lists, range(), choice(), glob()) to the cartesian product."""
    refuse_hydra_settings(overrides)
    parsed = parse_overrides(overrides)
    group_names = set(groups())
    common: list[str] = []
    keys: list[str] = []
    axes: list[list[str]] = []
    for text, ov in zip(overrides, parsed):
        key = ov.get_key_element()
        if not ov.is_sweep_override():
            common.append(text)
            continue
        vt = ov.value_type.name
        if vt == "INTERVAL_SWEEP":
            raise UsageError(f"'{text}': interval() is continuous and cannot form a grid")
        if vt == "GLOB_CHOICE_SWEEP":
            if ov.key_or_group not in group_names:
                raise UsageError(f"'{text}': glob() works over a config group ({', '.join(sorted(group_names))})")
            options = [o for o in group_options(ov.key_or_group) if o not in NOT_GLOBBED]
            values = list(ov.value().filter(options))
        else:
            values = list(ov.sweep_string_iterator())
        if not values:
            raise UsageError(f"'{text}' has no members (empty range or a glob matching nothing)")
        if key in keys:
            raise UsageError(f"'{text}': key '{key}' is swept twice")
        keys.append(key)
        axes.append([f"{key}={v}" for v in values])
    members, labels = [], []
    for combo in itertools.product(*axes):
        members.append(common + list(combo))
        labels.append({k: c.split("=", 1)[1] for k, c in zip(keys, combo)})
    return Grid(common=common, keys=keys, members=members, labels=labels)


def describe(labels: Iterable[tuple[str, str]]) -> str:
    return " ".join(f"{k}={v}" for k, v in labels)
