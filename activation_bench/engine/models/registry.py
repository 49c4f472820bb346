"""Model families (model=NAME): each family is one registered `Family` object that every other
layer asks, never the family's name or type. Importing this module imports no torch: a family's
configuration side (schema, validation, description, stack key, memory estimate) is plain
arithmetic, and its torch side (building the stacked model, its compiled step) is imported when
asked for.

Adding a family: one module that defines a `Family` subclass (family.py), one config file
`configs/model/NAME.yaml`, and its line in `_builtin` below; a family of a user's or a test's calls
`register` before composing, with or without a file (tests/test_model_family.py); an installed
package's is named by an `activation_bench.families` entry point (docs/extending.md).
"""

from __future__ import annotations

from typing import Any

from activation_bench.engine.models.family import Family, Memory
from activation_bench.errors import UsageError

__all__ = ["FAMILIES", "Family", "Memory", "family", "names", "of", "register", "store_schemas"]


def register(family: Family, config_file: bool = False) -> Family:
    """Make model=NAME this family: the registry, and Hydra's `model` group: its schema as the
    option `NAME_schema` (which configs/model/NAME.yaml extends where the family ships one:
    config_file=True) and, without such a file, as the option NAME itself (a family of a user's or a
    test's). Stored now where Hydra's schemas already are, else with the rest (`store_schemas`)."""
    FAMILIES[family.name] = family
    _FILES[family.name] = config_file
    if _stored:
        _store(family)
    return family


FAMILIES: dict[str, Family] = {}
_FILES: dict[str, bool] = {}  # name -> whether configs/model/NAME.yaml ships
_stored = False


def store_schemas() -> None:
    """Every family's schema in Hydra's ConfigStore (config/schema.py calls this once, when it
    registers the base schema); families registered later are stored as they come."""
    global _stored
    _builtin()
    for family in FAMILIES.values():
        _store(family)
    _stored = True


def _store(family: Family) -> None:
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(group="model", name=f"{family.name}_schema", node=family.schema)
    if not _FILES[family.name]:
        store.store(group="model", name=family.name, node=family.schema)


def _builtin() -> None:
    """The shipped families, registered once (adding one: its module, its configs/model/NAME.yaml,
    and a line here)."""
    if _BUILTIN_DONE:
        return
    _BUILTIN_DONE.append(True)
    from activation_bench.engine.models import cnn, mlp, module, transformer

    for shipped in (mlp.MLP(), cnn.CNN(), transformer.Transformer(), module.Module()):
        register(shipped, config_file=True)
    for entry in _entry_points():
        _load(entry)


ENTRY_POINTS = "activation_bench.families"  # an installed package's families (docs/extending.md)


def _entry_points() -> list[Any]:
    from importlib.metadata import entry_points

    return list(entry_points(group=ENTRY_POINTS))


def _load(entry: Any) -> None:
    """Register the Family (an instance or a class) an installed package names under ENTRY_POINTS;
    UsageError with one line where it does not load or is no Family."""
    try:
        obj = entry.load()
    except Exception as exc:  # noqa: BLE001 - a package's code
        raise UsageError(f"model family '{entry.name}' ({entry.value}, an {ENTRY_POINTS} entry point) does not "
                         f"load: {type(exc).__name__}: {exc}") from None
    family = obj() if isinstance(obj, type) else obj
    if not isinstance(family, Family) or not family.name:
        raise UsageError(f"model family '{entry.name}' ({entry.value}) is not a named "
                         "activation_bench.engine.models.family.Family")
    register(family)


_BUILTIN_DONE: list[bool] = []

def names() -> list[str]:
    _builtin()
    return list(FAMILIES)


def family(name: str) -> Family:
    """The family model=NAME; UsageError naming the valid ones."""
    _builtin()
    if name not in FAMILIES:
        raise UsageError(f"unknown model '{name}'; valid: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def of(cfg: dict[str, Any]) -> Family:
    """The family of a composed config (model.name; mlp for a config saved before model=cnn)."""
    return family(str(cfg["model"].get("name") or "mlp"))
