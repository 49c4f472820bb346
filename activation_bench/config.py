"""The config schema, override parsing, configs' identity (config_hash) and sweep-grid expansion.

Typer owns the command line; override strings (Hydra's own grammar, parsed by Hydra's own parser)
become validated, resolved configs through compose/compose_many (Hydra's composition, made fast in
activation_bench/compose.py) and activation_bench/validation.py (range checks beyond the schema's
types).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    """Compose and validate many members' configs (activation_bench/compose.py: Hydra's result,
    composed once per distinct set of group choices)."""
    from activation_bench import compose as composition

    return composition.compose_many(members)


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
