"""Reading a study file: YAML with duplicate keys, endless aliases and oversized documents refused,
merged into the schema (spec.py) with unknown keys and wrong types named, then checked (checks.py).
Every problem is one UsageError line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from activation_bench.errors import UsageError
from activation_bench.study.checks import check
from activation_bench.study.spec import (
    ComparisonSpec,
    FigureSpec,
    RankingSpec,
    Study,
    StudySpec,
    SweepSpec,
    TableSpec,
)

MAX_NODES = 100_000  # values in a study file with its aliases expanded (the largest shipped: a few hundred)
MAX_DEPTH = 50  # nesting levels (a study file uses 4)


def load(path: Path, runs_dir: Path | None = None, output: Path | None = None) -> Study:
    """Read, validate and check a study file; every problem is one UsageError line naming the key."""
    if not path.is_file():
        raise UsageError(f"{path}: no such study file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
    spec = _validated(path, _parse(path, text))
    check(spec, path)
    out = output if output is not None else _output_dir(path, spec.output)
    return Study(spec, path, text, runs_dir if runs_dir is not None else _runs_dir(path, spec.runs_dir), out)


def _parse(path: Path, text: str) -> dict:
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        """YAML that refuses a key given twice (PyYAML keeps the last one silently)."""

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node)
            if key in seen:
                raise UsageError(f"{path}: line {key_node.start_mark.line + 1}: key '{key}' given twice")
            seen.add(key)
        return loader.construct_mapping(node)

    UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        doc = yaml.load(text, Loader=UniqueKeys)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{path}: not a YAML study file: {where}{problem}") from None
    except RecursionError:
        raise UsageError(f"{path}: not a YAML study file: nested too deeply") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: a study file is a YAML mapping (title, sweeps, comparisons, ...), "
                         f"not {type(doc).__name__}")
    _check_size(path, doc)
    return doc


def _check_size(path: Path, doc: Any) -> None:
    """Refuse a document whose aliases refer to themselves (`a: &a [*a]`) or expand past
    MAX_NODES values (aliases of aliases: each expansion multiplies the size): checking either
    against the schema would recurse without end or exhaust memory. Sizes are counted once per
    object, so the count itself is linear in the file."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Any, depth: int) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        key = id(node)
        if key in open_:
            raise UsageError(f"{path}: a YAML alias refers to the value that holds it (an endless value)")
        if key in sizes:
            return sizes[key]
        if depth > MAX_DEPTH:
            raise UsageError(f"{path}: nested more than {MAX_DEPTH} levels deep")
        open_.add(key)
        items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        total = 1 + sum(size(x, depth + 1) for x in items)
        open_.discard(key)
        if total > MAX_NODES:
            raise UsageError(f"{path}: more than {MAX_NODES:,} values once its aliases are expanded")
        sizes[key] = total
        return total

    size(doc, 0)


def _validated(path: Path, doc: dict) -> StudySpec:
    """The document merged into the schema: unknown keys and wrong types refused, naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from activation_bench.data.shapes import register_resolver

    register_resolver()  # overrides' ${data:NAME} stay as written, filled in per member (docs/your-own-model.md)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(StudySpec), doc)
        spec = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or ""
        msg = str(getattr(exc, "msg", None) or exc).splitlines()[0]
        if msg.startswith("Key '") and " not in " in msg:
            msg = f"unknown key (valid: {_valid_keys(key)})"
        raise UsageError(f"{path}: {key or '(top level)'}: {msg}") from None
    assert isinstance(spec, StudySpec)
    return spec


def _valid_keys(full_key: str) -> str:
    """The keys the schema allows where full_key is (its parent's fields)."""
    from dataclasses import fields

    parts = full_key.split(".")
    kinds = {"sweeps": SweepSpec, "comparisons": ComparisonSpec, "tables": TableSpec, "rankings": RankingSpec,
             "figures": FigureSpec}
    cls = kinds.get(parts[0]) if len(parts) == 3 else StudySpec
    return ", ".join(f.name for f in fields(cls or StudySpec))


def _runs_dir(path: Path, runs_dir: str) -> Path:
    """The file's runs_dir, relative to the working directory and under it: a study file (perhaps
    someone else's) writes its runs where a user runs it, as its outputs stay in its own folder;
    --runs-dir trains anywhere."""
    rel = Path(runs_dir)
    if not runs_dir or rel.is_absolute() or ".." in rel.parts or runs_dir.startswith("~"):
        raise UsageError(f"{path}: runs_dir: '{runs_dir}' must be a folder under the working directory "
                         "(relative, no '..'); give --runs-dir DIR to train elsewhere")
    return rel


def _output_dir(path: Path, output: str) -> Path:
    """The output folder, relative to the study file's folder and inside it."""
    rel = Path(output)
    if rel.is_absolute() or ".." in rel.parts:
        raise UsageError(f"{path}: output: '{output}' must be a folder inside the study file's folder "
                         "(relative, no '..'); give --output DIR to write elsewhere")
    return path.parent / rel

