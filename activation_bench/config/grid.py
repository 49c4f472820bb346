"""Override strings: parsing them with Hydra's own parser, the hydra.* settings that go to a launcher,
and sweep-grid expansion (comma lists, range(), choice(), glob()) to the cartesian product."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from activation_bench.config.files import config_dir, group_options, groups
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
    keys: list[str]  # the varying config keys, in command order (Hydra's `+` of an added key left out: label_key)
    members: list[list[str]]  # full override list of each member
    labels: list[dict[str, str]]  # varying key -> value string, per member (less the activation.* keys
    # its activation does not take, see `takes`)


def expand(overrides: Sequence[str]) -> Grid:
    """Expand sweep overrides (comma lists, range(), choice(), glob()) to the cartesian product.

    Where `activation` is swept, each `activation.*` override goes to the members whose activation
    takes that key (see `takes`): 'activation=relu,expr' with 'activation.fn="a","b"' gives relu once
    and expr once per expression, not relu once per expression. Those members' labels lack the key."""
    refuse_hydra_settings(overrides)
    parsed = parse_overrides(overrides)
    group_names = set(groups())
    common: list[str] = []
    keys: list[str] = []
    axes: list[list[str]] = []
    for text, ov in zip(overrides, parsed):
        key, label = ov.get_key_element(), label_key(ov)
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
        if label in keys:
            raise UsageError(f"'{text}': key '{label}' is swept twice")
        keys.append(label)
        axes.append([f"{key}={v}" for v in values])
    plain = common
    entries = [[([c], {k: c.split("=", 1)[1]}) for c in axis] for k, axis in zip(keys, axes)]
    if "activation" in keys:
        plain, entries = _route_activation_keys(overrides, parsed, keys, entries)
    members, labels = [], []
    for combo in itertools.product(*entries):
        members.append(plain + [text for texts, _ in combo for text in texts])
        lab = {k: v for _, part in combo for k, v in part.items()}
        labels.append({k: lab[k] for k in keys if k in lab})
    return Grid(common=plain, keys=keys, members=members, labels=labels)


Entry = tuple[list[str], dict[str, str]]  # one value of an axis: its override texts and labels


def label_key(ov: Any) -> str:
    """The config key an override sets, as results.csv's column and a member's labels name it:
    `+model.kwargs.width=8,16` (Hydra's `+`, `++`: add the key) varies `model.kwargs.width`."""
    return ov.get_key_element().lstrip("+")


def _route_activation_keys(overrides: Sequence[str], parsed: Sequence[Any], keys: list[str],
                           entries: list[list[Entry]]) -> tuple[list[str], list[list[Entry]]]:
    """The `activation` axis with the `activation.*` overrides folded in: per swept activation, the
    overrides it takes (common ones added, swept ones multiplied out); the other overrides as they are."""
    a = keys.index("activation")
    choices = [texts[0].split("=", 1)[1] for texts, _ in entries[a]]
    plain: list[str] = []
    routed: list[tuple[str, Any, int | None]] = []  # (text, parsed, axis index or None)
    for text, ov in zip(overrides, parsed):
        if not ov.key_or_group.startswith("activation."):
            if not ov.is_sweep_override():
                plain.append(text)
            continue
        axis = keys.index(label_key(ov)) if ov.is_sweep_override() else None
        if not any(takes(c, ov) for c in choices):
            sub = ov.key_or_group.split(".", 1)[1]
            hint = " (activation.fn is for activation=expr: add expr to the list)" if sub == "fn" else ""
            raise UsageError(f"'{text}': none of the swept activations ({', '.join(choices)}) takes "
                             f"activation.{sub}{hint}")
        routed.append((text, ov, axis))
    folded: list[Entry] = []
    for choice, (texts, lab) in zip(choices, entries[a]):
        mine = [r for r in routed if takes(choice, r[1])]
        fixed = [text for text, _, axis in mine if axis is None]
        sub_axes = [entries[axis] for _, _, axis in mine if axis is not None]
        for combo in itertools.product(*sub_axes):
            folded.append((texts + fixed + [t for ts, _ in combo for t in ts],
                           {**lab, **{k: v for _, part in combo for k, v in part.items()}}))
    swept = {axis for _, _, axis in routed if axis is not None}
    kept = [folded if i == a else axis for i, axis in enumerate(entries) if i not in swept]
    return plain, kept


def takes(choice: str, ov: Any) -> bool:
    """Whether `activation=<choice>` takes the override `activation.<key>`: a key its config file
    sets (fn and learnable for expr, negative_slope for leaky_relu); and for the options a user
    completes (expr, custom) also activation.name (their label) and +additions (parameters, or
    constructor arguments). An unknown option takes everything: composing it names the problem."""
    keys = _option_keys(choice)
    if keys is None:
        return True
    sub = ov.key_or_group.split(".", 1)[1]
    open_option = "fn" in keys or "_target_" in keys
    if sub == "name":
        return open_option
    return sub in keys or (open_option and ov.type.name == "ADD")


@functools.cache
def _option_keys(choice: str) -> frozenset[str] | None:
    import yaml

    if choice not in group_options("activation"):
        return None
    path = config_dir() / "activation" / f"{choice}.yaml"
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return frozenset(doc) if isinstance(doc, dict) else None


def describe(labels: Iterable[tuple[str, str]]) -> str:
    return " ".join(f"{k}={v}" for k, v in labels)
