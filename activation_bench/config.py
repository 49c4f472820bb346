"""Hydra composition, the config schema, validation and sweep-grid expansion.

Typer owns the command line; this module turns override strings (Hydra's own grammar, parsed by
Hydra's own parser) into validated, resolved configs. Composition is cached per distinct set of
config-group choices, since `hydra.compose` costs about 50 ms a call.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from activation_bench.config_files import config_dir, listing
from activation_bench.errors import UsageError

OPTIMIZERS = ("adam", "sgd")
DEVICES = ("cpu", "cuda", "auto")
DTYPES = ("float32", "float64")
DISTRIBUTIONS = ("normal", "uniform")
TARGETS = ("random", "teacher")
INITS = ("torch_default", "he", "lecun", "xavier", "auto")
SPLICED = ("activation", "data")  # groups whose options only set their own subtree (package = group)
NOT_GLOBBED = {"custom", "csv"}  # group options that need user input (activation=custom a _target_, data=csv a file)


@dataclass
class DataConfig:
    name: str = "normal"
    n_samples: int | None = 10
    input_dim: int | None = 64
    mean: float | None = None
    std: float | None = None
    low: float | None = None
    high: float | None = None
    target: str | None = "random"  # random | teacher; a table's column for real data
    n_val: int = 0
    noise: float = 0.0
    teacher_activation: str = "relu"
    teacher_hidden_dim: int = 64
    # real tables and function tasks (activation_bench.datasets); null for normal/uniform
    path: str | None = None
    sha256: str | None = None
    features: list[str] | None = None
    fn: str | None = None
    val_fraction: float | None = None
    test_fraction: float | None = None
    standardize: bool | None = None
    dropna: bool | None = None


@dataclass
class ModelConfig:
    hidden_dim: int = 64
    depth: int = 1  # hidden layers, each hidden_dim wide with the same activation
    init: str = "torch_default"  # torch_default | he | lecun | xavier | auto (the activation's recommendation)
    init_resolved: str | None = None  # the scheme that ran (model.init with auto resolved); set by validate


@dataclass
class LogConfig:
    grad_norms: bool = False  # write grads.csv: per layer, the weight-gradient and activation-output norms
    every: int = 10  # ... every this many epochs (and at epochs 1 and the last)


@dataclass
class Config:
    activation: dict[str, Any] = field(default_factory=lambda: {"name": "gelu"})
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    log: LogConfig = field(default_factory=LogConfig)
    epochs: int = 1000
    lr: float = 1e-3
    seed: int = 0
    batch_size: int | None = None
    shuffle: bool = False
    optimizer: str = "adam"
    device: str = "cpu"
    dtype: str = "float32"


_registered = False


def _register_schema() -> None:
    global _registered
    if not _registered:
        from hydra.core.config_store import ConfigStore

        ConfigStore.instance().store(name="base_schema", node=Config)
        _registered = True


def groups() -> list[str]:
    return list(listing(str(config_dir()), None))


def group_options(group: str) -> list[str]:
    return list(listing(str(config_dir()), group))


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
            raise UsageError(f"cannot parse override '{text}': {_first_line(exc)}{_hint(text)}") from None
        _PARSED[text] = override
        parsed.append(override)
    return parsed


_PARSED: dict[str, Any] = {}


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _hint(text: str) -> str:
    if "(" in text or "*" in text:
        return " (quote sweep values in the shell: 'seed=range(10)', 'activation=glob(*)')"
    return ""


def _first_line(exc: BaseException) -> str:
    while exc.__cause__ is not None and not str(exc).strip():
        exc = exc.__cause__
    text = str(exc).strip() or (str(exc.__cause__).strip() if exc.__cause__ else type(exc).__name__)
    return text.splitlines()[0] if text else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# composition


class Cfg(dict):
    """A composed, resolved config: a plain dict with attribute access (cfg.data.n_samples).

    Its keys and value types are the schema's (`Config`, `DataConfig`, `ModelConfig`), checked
    when it is composed; code that receives a config is annotated with this type.
    """

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    @classmethod
    def wrap(cls, value: Any) -> Any:
        """A deep copy of plain containers, dicts becoming Cfg (10x faster than copy.deepcopy)."""
        if isinstance(value, dict):
            return cls({k: cls.wrap(v) for k, v in value.items()})
        if isinstance(value, list):
            return [cls.wrap(v) for v in value]
        return value

    def plain(self) -> dict[str, Any]:
        return _plain(self)

    def to_yaml(self) -> str:
        """The same text as dump_yaml(self.plain()), dumped one top-level key at a time and
        memoised: a sweep's members share most subtrees (the activation's, the data's), and
        YAML's representer costs about 0.5 ms per whole config."""
        import json

        parts = []
        for key, value in self.items():
            memo = (key, json.dumps(value, allow_nan=True))
            if memo not in _YAML_PARTS:
                _YAML_PARTS[memo] = dump_yaml({key: _plain(value)})
            parts.append(_YAML_PARTS[memo])
        return "".join(parts)


_YAML_PARTS: dict[tuple[str, str], str] = {}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def dump_yaml(doc: Any) -> str:
    """YAML through libyaml when PyYAML has it (about 20x faster than the pure-Python emitter)."""
    import yaml

    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def compose(overrides: Sequence[str]) -> Cfg:
    """Compose and validate one run's config from override strings."""
    return compose_many([list(overrides)])[0]


def compose_many(members: Sequence[Sequence[str]]) -> list[Cfg]:
    """Compose and validate many members, composing once per distinct set of group choices.

    Overrides of plain keys (seed=3, lr=0.1, activation.negative_slope=0.2) are type-checked once
    per distinct value against the composed config (struct mode refuses unknown keys, the schema
    converts and checks types, as Hydra's own override application does) and then set on plain
    copies: composing or copying an OmegaConf config per member would cost milliseconds each.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    _register_schema()
    group_names = set(groups())
    cache: dict[tuple[str, ...], tuple[dict, DictConfig]] = {}
    typed: dict[tuple[tuple[str, ...], str], Any] = {}
    out: list[Cfg] = []
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for member in members:
            where = " ".join(member)
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
            def composed(overrides: tuple[str, ...], where: str = where) -> tuple[dict, DictConfig]:
                if overrides not in cache:
                    cfg = None
                    if len(overrides) == 1 and () in cache:
                        group, option = overrides[0].split("=", 1)
                        cfg = _compose_option(cache[()][1], group, option)
                    if cfg is None:
                        cfg = _compose_one(hydra_compose, list(overrides))
                    cache[overrides] = (_container(cfg, where), cfg)
                return cache[overrides]

            scratches: dict[str, tuple[tuple[str, ...], DictConfig]] = {}
            groups_chosen = [t.split("=", 1)[0] for t in structural]
            if all(g in SPLICED and "@" not in g for g in groups_chosen) and len(set(groups_chosen)) == len(
                    groups_chosen):
                # Group-local choices compose independently: compose the defaults once and each
                # choice once, and splice the chosen subtrees in (8 activations x 2 data: 11
                # compositions instead of 16; glob(*) x 2 data: 30 instead of 54).
                container, scratch = composed(())
                cfg = Cfg.wrap(container)
                for text, group in zip(structural, groups_chosen):
                    sub, sub_scratch = composed((text,))
                    cfg[group] = Cfg.wrap(sub[group])
                    scratches[group] = ((text,), sub_scratch)
                default = ((), scratch)
            else:
                key = tuple(structural)
                container, scratch = composed(key)
                cfg = Cfg.wrap(container)
                default = (key, scratch)
            for text, ov in scalar:
                key, scratch = scratches.get(ov.key_or_group.split(".")[0], default)
                if (key, text) not in typed:
                    typed[(key, text)] = _typed_value(scratch, text, ov)
                _set(cfg, ov.key_or_group, Cfg.wrap(typed[(key, text)]))
            validate(cfg, where)
            out.append(cfg)
    GlobalHydra.instance().clear()
    return out


def _set(cfg: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = cfg
    for part in parents:
        node = node[part]
    node[last] = value


def _typed_value(scratch: DictConfig, text: str, ov: Any) -> Any:
    """Apply one override to a scratch copy (type checks, unknown keys) and read the value back."""
    from omegaconf.errors import OmegaConfBaseException

    key = ov.key_or_group
    if key.startswith("activation.") and key.count(".") == 1 and key.split(".")[1] not in scratch.activation.keys():
        from activation_bench import activations

        act = scratch.activation
        name = act.get("name") if "_target_" not in act.keys() else None
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
        raise UsageError(f"cannot resolve config ({where}): {_first_line(exc)}") from None


def _check_group_choice(group: str, value: Any) -> None:
    options = group_options(group)
    if value is None and group == "experiment":
        return
    if not isinstance(value, str) or value not in options:
        raise UsageError(f"unknown {group} '{value}'; valid: {', '.join(options)}")


def _compose_option(base: DictConfig, group: str, option: str) -> DictConfig | None:
    """What Hydra composes for `group=option` on top of the defaults, without a Hydra call.

    For a spliced group whose option file is plain (no defaults list, no @package header) and
    which the primary config does not set itself, Hydra's result is the defaults' config with the
    group's node replaced by the schema's node merged with the file; building that directly takes
    about 2 ms instead of a composition's 50-100 ms. Anything else returns None: compose with
    Hydra. (tests/test_config.py checks every option against Hydra's own composition.)
    """
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


@functools.cache
def _schema() -> DictConfig:
    return OmegaConf.structured(Config)


@functools.cache
def _primary_sets(directory: str, group: str) -> bool:
    """Whether config.yaml's own body sets keys under group (it would merge over the option)."""
    import yaml

    doc = yaml.safe_load((Path(directory) / "config.yaml").read_text(encoding="utf-8")) or {}
    return group in doc


def _compose_one(hydra_compose: Any, overrides: list[str]) -> DictConfig:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return hydra_compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise UsageError(_friendly(exc, " ".join(overrides))) from None


def _friendly(exc: BaseException, where: str) -> str:
    cause = exc.__cause__ or exc
    msg = _first_line(cause)
    if "not in struct" in msg or "Could not override" in str(exc) or "Key '" in msg:
        return f"unknown config key in '{where}': {msg} (see `actbench run --help` for the keys)"
    return f"invalid override '{where}': {msg}"


# ---------------------------------------------------------------------------------------------
# validation


def _check(ok: bool, message: str, where: str) -> None:
    if not ok:
        raise UsageError(f"{message}" + (f" (in: {where})" if where else ""))


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate(cfg: Cfg, where: str = "") -> None:
    """Range checks beyond the schema's types; raises UsageError with one clear line."""
    d = cfg.data
    _check(cfg.epochs >= 1, f"epochs must be a positive integer, got {cfg.epochs}", where)
    _check(_finite(cfg.lr) and cfg.lr > 0, f"lr must be a positive number, got {cfg.lr}", where)
    _check(cfg.seed >= 0, f"seed must be >= 0, got {cfg.seed}", where)
    _check(cfg.optimizer in OPTIMIZERS, f"unknown optimizer '{cfg.optimizer}'; valid: {', '.join(OPTIMIZERS)}", where)
    _check(cfg.dtype in DTYPES, f"unknown dtype '{cfg.dtype}'; valid: {', '.join(DTYPES)}", where)
    _check(cfg.device in DEVICES, f"unknown device '{cfg.device}'; valid: {', '.join(DEVICES)}", where)
    _check(cfg.model.hidden_dim >= 1, f"model.hidden_dim must be >= 1, got {cfg.model.hidden_dim}", where)
    _check(cfg.model.depth >= 1, f"model.depth must be a positive integer (hidden layers), got {cfg.model.depth}",
           where)
    _check(cfg.log.every >= 1, f"log.every must be a positive integer, got {cfg.log.every}", where)
    from activation_bench import datasets

    names = (*DISTRIBUTIONS, *datasets.REAL)
    _check(d.name in names, f"unknown data '{d.name}'; valid: {', '.join(sorted(names))}", where)
    _check(_finite(d.noise) and d.noise >= 0, f"data.noise must be >= 0, got {d.noise}", where)
    if d.name in datasets.REAL:
        _check(d.n_val == 0, f"data.n_val does not apply to data={d.name}; use data.val_fraction", where)
        datasets.validate(cfg, where)
    else:
        _validate_synthetic(cfg, where)
    if cfg.device in ("cuda", "auto"):
        import torch

        _check(cfg.device == "auto" or torch.cuda.is_available(),
               "device=cuda but torch sees no GPU (use device=cpu or device=auto)", where)
    from activation_bench import activations

    activations.check_config(cfg.activation, where)
    _resolve_init(cfg, where)
    if d.name in DISTRIBUTIONS and d.target == "teacher":
        activations.check_config({"name": d.teacher_activation}, where)


def _validate_synthetic(cfg: Cfg, where: str) -> None:
    """normal / uniform data."""
    from activation_bench import datasets

    d = cfg.data
    _check(d.n_samples is not None and d.n_samples >= 1, f"data.n_samples must be >= 1, got {d.n_samples}", where)
    _check(d.input_dim is not None and d.input_dim >= 1, f"data.input_dim must be >= 1, got {d.input_dim}", where)
    _check(d.n_val >= 0, f"data.n_val must be >= 0, got {d.n_val}", where)
    _check(d.target in TARGETS, f"unknown data.target '{d.target}'; valid: {', '.join(TARGETS)}", where)
    _check(d.teacher_hidden_dim >= 1, "data.teacher_hidden_dim must be >= 1", where)
    for key in datasets.REAL_KEYS:
        _check(d.get(key) is None, f"data.{key} applies to real and function data "
               f"({', '.join(datasets.REAL)}), not {d.name}", where)
    if d.name == "normal":
        _check(d.mean is not None and _finite(d.mean), "data.mean must be a number for normal data", where)
        _check(d.std is not None and _finite(d.std) and d.std > 0, f"data.std must be > 0, got {d.std}", where)
        _check(d.low is None and d.high is None, "data.low/high apply to uniform data, not normal", where)
    else:
        _check(d.low is not None and d.high is not None and _finite(d.low) and _finite(d.high)
               and d.low < d.high, f"data.low must be < data.high, got [{d.low}, {d.high}]", where)
        _check(d.mean is None and d.std is None, "data.mean/std apply to normal data, not uniform", where)
    if cfg.batch_size is not None:
        _check(1 <= cfg.batch_size <= d.n_samples,
               f"batch_size must be between 1 and data.n_samples={d.n_samples}, got {cfg.batch_size}", where)


def _resolve_init(cfg: Cfg, where: str) -> None:
    """Check model.init and record the scheme that runs in model.init_resolved (auto: the activation's
    registry recommendation), so config.yaml says what ran and re-running it gives the same hash."""
    from activation_bench import activations

    m = cfg.model
    _check(m.init in INITS, f"unknown model.init '{m.init}'; valid: {', '.join(INITS)}", where)
    resolved = m.init
    if m.init == "auto":
        _check(not activations.has_target(cfg.activation),
               "model.init=auto needs a registered activation (a _target_ one has no recommendation); "
               "choose torch_default, he, lecun or xavier", where)
        resolved = activations.get_spec(cfg.activation["name"]).init
    _check(m.get("init_resolved") in (None, resolved),
           f"model.init_resolved is derived from model.init ({resolved} here), got '{m.get('init_resolved')}'",
           where)
    m["init_resolved"] = resolved


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
)


def config_hash(cfg: Cfg) -> str:
    """Identity of a run: a hash of its fully resolved config (what resume matches on), leaving out
    the LEGACY_DEFAULTS groups that hold their backwards-compatible values."""
    import json

    doc = _plain(cfg)
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
