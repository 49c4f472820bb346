"""The package's layers: every import of activation_bench points down (docs/development.md), counting
imports inside functions and under TYPE_CHECKING, and no module imports itself through others."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "activation_bench"
# lowest first; a module may import its own layer's modules and the layers below
LAYERS = ["core", "data", "engine", "config", "runs", "analysis", "render|export|search", "study", "cli"]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names.split("|")}
NO_TORCH = {"analysis"}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    if parts[-1] == "__main__":  # `python -m activation_bench[.cli]`: the entry point, the top layer
        return "cli"
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANK) else "core"


def _imports(path: Path) -> set[str]:
    """Every activation_bench module this file imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("activation_bench")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("activation_bench"):
            for alias in node.names:  # `from pkg import module` imports the module
                sub = f"{node.module}.{alias.name}"
                found.add(sub if (ROOT.parent / sub.replace(".", "/")).with_suffix(".py").is_file()
                          or (ROOT.parent / sub.replace(".", "/")).is_dir() else node.module)
    return found


# the package's modules and their files; each file is parsed when a test first asks (imports), not when
# every xdist worker collects this module
MODULES = {_module(p): p for p in sorted(ROOT.rglob("*.py"))}


@functools.cache
def imports(module: str) -> frozenset[str]:
    """The activation_bench modules that module imports (none for a name that is not a module of the package)."""
    return frozenset(_imports(MODULES[module])) if module in MODULES else frozenset()


def test_every_layer_is_known():
    assert {_layer(m) for m in MODULES} <= set(RANK)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    up = [t for t in imports(module) if RANK[_layer(t)] > RANK[_layer(module)]]
    assert not up, f"{module} imports a higher layer: {up}"


def test_no_import_cycles():
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(imports(m)):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack[stack.index(t):], t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in MODULES:
        if m not in state:
            visit(m)


@pytest.mark.parametrize("path", sorted(p for p in ROOT.rglob("*.py") if _layer(_module(p)) in NO_TORCH),
                         ids=lambda p: _module(p))
def test_analysis_never_imports_torch_or_the_engine(path):
    module = _module(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    if _layer(module) == "analysis":
        assert not {n for n in names if n.split(".")[0] == "torch"}, module
        assert not [t for t in imports(module) if _layer(t) == "engine"], module
