"""The composed config type (a dict with attribute access) and its YAML form. Every layer that
receives a config annotates it with `Cfg`, so it lives at the bottom, beside errors.py."""

from __future__ import annotations

from typing import Any


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
        return plain(self)

    def to_yaml(self) -> str:
        """The same text as dump_yaml(self.plain()), dumped one top-level key at a time and
        memoised: a sweep's members share most subtrees (the activation's, the data's), and
        YAML's representer costs about 0.5 ms per whole config."""
        import json

        parts = []
        for key, value in self.items():
            memo = (key, json.dumps(value, allow_nan=True))
            if memo not in _YAML_PARTS:
                _YAML_PARTS[memo] = dump_yaml({key: plain(value)})
            parts.append(_YAML_PARTS[memo])
        return "".join(parts)


_YAML_PARTS: dict[tuple[str, str], str] = {}


def plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def dump_yaml(doc: Any) -> str:
    """YAML through libyaml when PyYAML has it (about 20x faster than the pure-Python emitter)."""
    import yaml

    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def load_yaml(text: str) -> Any:
    """yaml.safe_load through libyaml when PyYAML has it: a 480-member sweep.yaml (100 KB) loads in
    0.08 s against 0.45 s, and every resumed sweep, `compare` and `report` reads one. The same
    documents and the same yaml.YAMLError subclasses as the pure-Python loader."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (a safe loader)


def activation_label(node: dict[str, Any]) -> str:
    """How tables, plots and reports name an activation config node: its registry name; for a
    `_target_` module, the class path; for an expression (activation=expr, a node with `fn`),
    activation.name when given (anything but the default `expr`), else the expression's text."""
    name = node.get("name")
    if "fn" in node and not node.get("_target_"):
        return str(name) if name not in (None, "", "expr") else str(node["fn"]).strip()
    return str(name or node.get("_target_") or "custom")
