"""Composing many members' configs quickly, with exactly Hydra's result.

`hydra.compose` costs 50-100 ms a call, so a sweep of 480 members composed one by one takes most
of a minute before any training. compose_many gives the same configs (tests/test_compose.py checks
them against Hydra's own composition) while calling Hydra only where it must:

- Each member's overrides are parsed with Hydra's parser and split into group choices
  (activation=gelu, data=uniform: "structural") and scalar changes of existing keys (seed=3,
  lr=0.1, activation.negative_slope=0.2). Additions and deletions (+key=v, ~key) and choices with a
  package (group@pkg=x) count as structural.
- Structural overrides are composed once per distinct set: members differing only in scalars
  share one composition.
- Group-local choices are spliced: when every structural override chooses an option of a group in
  config.SPLICED (whose options set only their own subtree), at most once per group, the defaults
  are composed once and each chosen option's subtree is put in its place (8 activations x 2 data:
  11 compositions instead of 16; a model family's option, whose file has a defaults list (its
  schema), is composed by Hydra alone, once, and spliced in the same way).
- A chosen option is built without Hydra (about 2 ms instead of 50-100 ms) when its file is plain:
  no defaults list, no @package header, a mapping, and config.yaml's own body does not set that
  group (it would merge over the option). The result is the defaults' config with the group's node
  replaced by the schema's node merged with the file, which is what Hydra composes.
- Scalar overrides are type-checked once per distinct value and composition (struct mode refuses
  unknown keys, the schema converts and checks types, as Hydra's own override application does),
  then set on plain copies: composing or copying an OmegaConf config per member would cost
  milliseconds each.

Everything else falls back to Hydra's own composition: other groups (experiment=...), an option
whose file has a defaults list or a @package header, a group config.yaml sets itself, a group chosen
twice, a file that fails to load (Hydra then reports the problem its own way), and any override
that is neither a group choice nor a plain change. Every member is validated (config/validate.py):

- Members differing only in their seed (most of a grid: seed=range(26) x the rest) are composed and
  validated fully once; validation is a function of the config without the seed but for the
  seed's own checks (validate.check_seed), so the others are copies of the first one's validated
  config (with what validation derived or resolved: model.init_resolved, data.path, ...) with their
  seed set, type-checked and range-checked, an error naming the member as before. "The same but for
  the seed" is the same structural overrides and the same other scalar override texts, and a seed
  override in both or in neither.

Hydra's compositions are kept for the process (`_compose_one`), keyed on the config folder's
contents and the overrides, with their resolved containers: a study plans each sweep in a call of
its own, each needing the defaults' composition. A call type-checks its scalars on a copy of a
kept composition of its own, made only where it has scalars to check there, and a plain value
checked once is kept for the process (_TYPED): with the caches warm, a grid of 8 activations x 2
data x 3 seeds composes in 8 ms, not 67 ms, one run in 4.8 ms, not 11.2.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from activation_bench.cfg import Cfg
from activation_bench.config import validate
from activation_bench.config.files import config_dir, group_options, groups
from activation_bench.config.grid import first_line, parse_overrides, refuse_hydra_settings
from activation_bench.config.schema import SPLICED, Config, _register_schema
from activation_bench.errors import UsageError

Composed = tuple[dict, DictConfig]  # (plain container, the OmegaConf config scalars are checked on)


def compose(overrides: Sequence[str]) -> Cfg:
    """Compose and validate one run's config from override strings."""
    return compose_many([list(overrides)])[0]


def compose_many(members: Sequence[Sequence[str]]) -> list[Cfg]:
    """Compose and validate many members, composing once per distinct set of group choices."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    _register_schema()
    group_names = set(groups())
    cache: dict[tuple[str, ...], Composed] = {}
    typed: dict[tuple[tuple[str, ...], str], Any] = {}
    validated: dict[tuple, tuple[Cfg, tuple[str, ...]]] = {}
    files = _Files(config_dir())
    out: list[Cfg] = []
    owned: set[tuple[str, ...]] = set()

    def scratch(key: tuple[str, ...]) -> DictConfig:
        """Composition `key`'s config, for scalar overrides to be type-checked on in place: the
        kept one is shared with later calls (_kept), so this call changes a copy of its own, made
        when first needed (a deep copy costs about 3 ms; most compositions never need one)."""
        if key not in owned:
            container, cfg = cache[key]
            cache[key] = (container, copy.deepcopy(cfg))
            owned.add(key)
        return cache[key][1]

    def typed_value(key: tuple[str, ...], text: str, ov: Any) -> Any:
        """Override `text`'s value as composition `key` types it, checked once per call, or once
        per process where it is a plain value (_TYPED)."""
        if (key, text) not in typed:
            digest = files.digest()
            kept = None if (digest is None or files.interpolates or "${" in text
                            or isinstance(ov.value(), (list, dict))) else (digest, key, text)
            if kept in _TYPED:
                typed[(key, text)] = _TYPED[kept]
            else:
                typed[(key, text)] = _typed_value(scratch(key), text, ov)
                if kept is not None:
                    _TYPED[kept] = typed[(key, text)]
                    while len(_TYPED) > 64 * _KEEP:
                        del _TYPED[next(iter(_TYPED))]
        return typed[(key, text)]

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for member in members:
            where = " ".join(member)
            structural, scalar = _split(member, group_names)
            seeds = [(text, ov) for text, ov in scalar if ov.key_or_group == "seed"]
            unseeded = (tuple(structural), tuple(text for text, ov in scalar if ov.key_or_group != "seed"),
                        bool(seeds))
            if unseeded in validated:
                # like a member validated already but for its seed (see the module docstring)
                first, key = validated[unseeded]
                cfg = Cfg.wrap(first)
                for text, ov in seeds:
                    _set(cfg, "seed", Cfg.wrap(typed_value(key, text, ov)))
                validate.check_seed(cfg, where)
                out.append(cfg)
                continue

            def composed(overrides: tuple[str, ...], where: str = where) -> Composed:
                if overrides not in cache:
                    done = None
                    if len(overrides) == 1 and () in cache:
                        done = _option(cache[()][1], overrides[0], files, where)
                    if done is None:
                        done = _compose_one(hydra_compose, list(overrides), files, where)
                    cache[overrides] = done
                return cache[overrides]

            cfg, scratches, default = _structural(structural, composed)
            for text, ov in scalar:
                key = scratches.get(ov.key_or_group.split(".")[0], default)
                _set(cfg, ov.key_or_group, Cfg.wrap(typed_value(key, text, ov)))
            validate.validate(cfg, where)
            validated[unseeded] = (cfg, default)
            out.append(cfg)
    GlobalHydra.instance().clear()
    return out


def _split(member: Sequence[str], group_names: set[str]) -> tuple[list[str], list[tuple[str, Any]]]:
    """A member's overrides as (structural texts, [(text, parsed)] of plain key changes)."""
    structural, scalar = [], []
    refuse_hydra_settings(member)
    for text, ov in zip(member, parse_overrides(member)):
        if ov.is_sweep_override():
            raise UsageError(f"'{text}' is a sweep; use `actbench sweep` for grids")
        if ov.key_or_group in group_names:
            if ov.key_or_group == "experiment" and ov.value() is None:
                continue  # experiment=null: no preset, the default
            _check_group_choice(ov.key_or_group, ov.value())
            structural.append(text)
        elif ov.type.name == "CHANGE":
            scalar.append((text, ov))
        else:
            structural.append(text)
    return structural, scalar


def _structural(structural: list[str], composed: Any) -> tuple[Cfg, dict[str, tuple[str, ...]], tuple[str, ...]]:
    """The member's config before its scalar overrides, with the compositions (their keys in
    `composed`'s cache) its scalars are checked on: per spliced group, and the default one."""
    scratches: dict[str, tuple[str, ...]] = {}
    groups_chosen = [t.split("=", 1)[0] for t in structural]
    if all(g in SPLICED for g in groups_chosen) and len(set(groups_chosen)) == len(groups_chosen):
        # group-local choices compose independently: compose the defaults once and each choice
        # once, and splice the chosen subtrees in
        cfg = Cfg.wrap(composed(())[0])
        for text, group in zip(structural, groups_chosen):
            cfg[group] = Cfg.wrap(composed((text,))[0][group])
            scratches[group] = (text,)
        return cfg, scratches, ()
    key = tuple(structural)
    return Cfg.wrap(composed(key)[0]), scratches, key


def _set(cfg: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = cfg
    for part in parents:
        node = node[part]
    node[last] = value


# Scalar overrides' checked values by (the config folder's digest, the composition's overrides,
# the override's text), kept for the process where the value is a plain one (not a list or a
# mapping, which merge into what the scratch holds) and nothing interpolates: type-checking one
# needs a copy of the composition (about 3-5 ms), and the result is a function of the composition's
# type at that key and the text alone. A value that fails its check raises and is not kept.
_TYPED: dict[tuple[str, tuple[str, ...], str], Any] = {}


def _typed_value(scratch: DictConfig, text: str, ov: Any) -> Any:
    """Apply one override to a scratch copy (type checks, unknown keys) and read the value back."""
    from omegaconf.errors import OmegaConfBaseException

    key = ov.key_or_group
    if key.startswith("activation.") and key.count(".") == 1 and key.split(".")[1] not in scratch.activation.keys():
        from activation_bench.engine.activations import registry as activations

        act = scratch.activation
        name = act.get("name") if "_target_" not in act.keys() else None
        if "fn" in act.keys():
            raise UsageError(f"'{text}': parameters of an expression (activation=expr) are added with +{text}")
        if name:
            valid = ", ".join(activations.get_spec(name).params) or "none"
            raise UsageError(f"unknown parameter '{key.split('.')[1]}' for activation '{name}' in '{text}'; "
                             f"valid: {valid}")
        raise UsageError(f"'{text}': constructor arguments of a _target_ activation are added with +{text}")
    try:
        OmegaConf.update(scratch, key, ov.value(), merge=True, force_add=False)
        value = OmegaConf.select(scratch, key, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        raise UsageError(_friendly(exc, text)) from None
    if isinstance(value, (DictConfig, ListConfig)):  # data.features=[a,b]
        value = OmegaConf.to_container(value, resolve=True)
    return value


def _container(cfg: DictConfig, where: str) -> dict:
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise UsageError(f"cannot resolve config ({where}): {first_line(exc)}") from None


def _check_group_choice(group: str, value: Any) -> None:
    options = group_options(group)
    if value is None and group == "experiment":
        return
    if not isinstance(value, str) or value not in options:
        raise UsageError(f"unknown {group} '{value}'; valid: {', '.join(options)}")


def _compose_option(base: DictConfig, group: str, option: str) -> DictConfig | None:
    """What Hydra composes for `group=option` on top of the defaults, without a Hydra call, or None
    where only Hydra gets it right (see the module's docstring)."""
    from omegaconf.errors import OmegaConfBaseException

    root = config_dir()
    if group not in SPLICED or _primary_sets(str(root), group):
        return None
    try:
        text = (root / group / f"{option}.yaml").read_text(encoding="utf-8")
        if "@package" in text:
            return None
        node = OmegaConf.create(text)
        if not isinstance(node, DictConfig) or "defaults" in node:
            return None
        cfg = base.copy()
        cfg[group] = OmegaConf.merge(_schema()[group], node)
    except (OSError, OmegaConfBaseException):
        return None  # let Hydra compose it and report the problem its own way
    return cfg


# _compose_option's results by (the config folder's digest, group=option), kept for the process: one
# costs about 20 ms (OmegaConf's copies and merge), tests compose hundreds of times. Only the group's
# subtree of a result is used (spliced in, and the group's own keys type-checked on it), and that
# subtree is a function of the files alone, whatever the base's other keys hold. None: only Hydra
# composes it.
_OPTIONS: dict[tuple[str, str], Composed | None] = {}


def _option(base: DictConfig, text: str, files: _Files, where: str) -> Composed | None:
    """_compose_option for `group=option` (text), from _OPTIONS when it holds it."""
    digest = None if "${" in text else files.digest()
    group, option = text.split("=", 1)
    return _kept(_OPTIONS, None if digest is None else (digest, text), lambda: _compose_option(base, group, option),
                 files, where)


@functools.cache
def _schema() -> DictConfig:
    return OmegaConf.structured(Config)


@functools.cache
def _primary_sets(directory: str, group: str) -> bool:
    """Whether config.yaml's own body sets keys under group (it would merge over the option)."""
    from activation_bench.cfg import load_yaml

    doc = load_yaml((Path(directory) / "config.yaml").read_text(encoding="utf-8")) or {}
    return group in doc


class _Files:
    """The config folder's files as one digest, read when first asked (once per compose_many):
    what Hydra's compositions depend on besides the overrides. None where a composition could
    depend on more (a file that uses Hydra's own resolver, ${hydra:...}, reads Hydra's state).
    `interpolates`: whether any file holds an interpolation (${...}), whose resolved value may
    change from call to call (${oc.env:...})."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._digest: str | None = ""  # "": not read yet
        self.interpolates = True

    def digest(self) -> str | None:
        if self._digest == "":
            import hashlib

            h = hashlib.sha256(str(self.root).encode())
            interpolates = False
            for path in sorted(p for p in self.root.rglob("*") if p.is_file()):
                data = path.read_bytes()
                interpolates = interpolates or b"${" in data
                if b"${hydra:" in data:
                    self._digest = None
                    break
                h.update(f"\0{path.relative_to(self.root).as_posix()}\0{len(data)}\0".encode() + data)
            else:
                self._digest = h.hexdigest()
                self.interpolates = interpolates
        return self._digest


# Hydra's compositions by (the config folder's digest, overrides), kept for the process: one costs
# 50-150 ms, and a study plans each sweep in a compose_many call of its own (tests call compose()
# hundreds of times).
_HYDRA: dict[tuple[str, tuple[str, ...]], Composed | None] = {}
_KEEP = 64  # compositions kept in each store (_HYDRA, _OPTIONS); the oldest are dropped past it


def _kept(store: dict, key: Any, build: Callable[[], DictConfig | None], files: _Files,
          where: str) -> Composed | None:
    """build()'s result and its resolved container (None where build gives None), kept in `store`
    under `key` (None: not kept) for the rest of the process. Every use gets the kept objects
    themselves, which nothing may change (compose_many copies the containers and type-checks scalar
    overrides on a copy of the config of its own); the container is resolved again at each use
    where a config file interpolates. A build that raises keeps nothing."""
    if key is not None and key in store:
        held = store[key]
        return held if held is None or not files.interpolates else (_container(held[1], where), held[1])
    cfg = build()
    held = None if cfg is None else (_container(cfg, where), cfg)
    if key is not None:
        store[key] = held
        while len(store) > _KEEP:
            del store[next(iter(store))]
    return held


def _compose_one(hydra_compose: Any, overrides: list[str], files: _Files, where: str) -> Composed:
    """Hydra's composition of the overrides (over config.yaml), from _HYDRA when it holds it: the
    same files and overrides compose to the same config. Overrides with an interpolation (${...})
    are composed afresh every time, as are compositions that failed."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    def composed() -> DictConfig:
        try:
            return hydra_compose(config_name="config", overrides=overrides)
        except (HydraException, OmegaConfBaseException) as exc:
            raise UsageError(_friendly(exc, " ".join(overrides))) from None

    digest = None if any("${" in text for text in overrides) else files.digest()
    return _kept(_HYDRA, None if digest is None else (digest, tuple(overrides)), composed, files,  # type: ignore[return-value]
                 where)


def _friendly(exc: BaseException, where: str) -> str:
    cause = exc.__cause__ or exc
    msg = first_line(cause)
    if "not in struct" in msg or "Could not override" in str(exc) or "Key '" in msg:
        return f"unknown config key in '{where}': {msg} (see `actbench run --help` for the keys)"
    return f"invalid override '{where}': {msg}"
