"""model=module's user code: importing model.target and model.replace's types (the current
directory first on the path, as `python -m` puts it), one line for what goes wrong there, and what
identifies the code that ran (`code_record`: summary.json's `code`)."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from activation_bench.errors import UsageError, at


def last_line(exc: BaseException) -> str:
    """An exception's last line, with its type: what a one-line error quotes."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1].strip()}" if lines else type(exc).__name__


def _import(path: str) -> Any:
    """`module:attribute` (or a dotted `package.module.Attr`), the current directory on sys.path
    first as `python -m` puts it."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"'{path}' is not module:attribute")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def import_target(path: str, where: str = "") -> Callable[..., Any]:
    """model.target's class or function; UsageError with the import error's last line."""
    if ":" not in path:
        raise UsageError(f"model.target '{path}' is not module:attribute (e.g. mymodels:ResNet20, "
                         f"timm:create_model){at(where)}")
    try:
        obj = _import(path)
    except Exception as exc:  # noqa: BLE001 - user code may raise anything while importing
        raise UsageError(f"model.target '{path}' does not import: {last_line(exc)}{at(where)}") from None
    if not callable(obj):
        raise UsageError(f"model.target '{path}' is a {type(obj).__name__}, not a class or a function returning a "
                         f"torch.nn.Module{at(where)}")
    return obj


def replace_types(names: Sequence[str], where: str = "") -> tuple[type, ...]:
    """model.replace's module types: dotted paths (torch.nn.ReLU), module:attribute, or a bare
    name of torch.nn (ReLU)."""
    out = []
    for name in names:
        text = str(name)
        try:
            cls = getattr(nn, text) if "." not in text and ":" not in text else _import(text)
        except Exception as exc:  # noqa: BLE001
            raise UsageError(f"model.replace entry '{text}' does not import: {last_line(exc)}{at(where)}") from None
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise UsageError(f"model.replace entry '{text}' is not a torch.nn.Module class{at(where)}")
        out.append(cls)
    return tuple(out)


def code_record(target: str) -> dict[str, Any]:
    """What identifies model.target's code (summary.json's `code`): `file`, the file that defines it
    (relative to the working directory where it lies below it) and its `sha256`; `files`, the SHA-256
    of every file of the working directory the model's code runs (the defining file and, following
    import statements, the modules they reach there: read, not run; `importlib` calls are not
    followed); and, where an installed distribution provides the target (timm, torchvision), the
    `distribution` and its `version`. Once per process and target: the module imported once is the
    code every member runs."""
    return json.loads(_code_json(target))


@functools.lru_cache(maxsize=64)
def _code_json(target: str) -> str:
    import hashlib
    import inspect
    from importlib import metadata

    obj = import_target(target)
    module = target.partition(":")[0]
    try:
        source = inspect.getsourcefile(obj) or inspect.getfile(obj)
        module = getattr(inspect.getmodule(obj), "__name__", module)
    except TypeError:  # a functools.partial, an instance, a class defined in C: the module's file
        source = getattr(sys.modules.get(module), "__file__", None)
    if not source or not os.path.isfile(source):
        return json.dumps({"target": target})
    path, root = Path(source).resolve(), Path.cwd().resolve()
    out: dict[str, Any] = {"target": target}
    if _local(path, root):
        out["file"] = path.relative_to(root).as_posix()
        out["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        out["files"] = {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in _local_sources(path, module, root)}
    else:
        out["file"] = str(path)
        out["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        dists = metadata.packages_distributions().get(module.split(".")[0]) or []
        if dists:
            out.update(distribution=dists[0], version=metadata.version(dists[0]))
    return json.dumps(out)


def code_change(old: dict[str, Any] | None, new: dict[str, Any] | None) -> str | None:
    """What differs between two code records (`code_record`) in words ('mymodels/blocks.py changed',
    'timm 1.0.9 -> 1.0.11'), or None where they are the same code; the path a file was imported
    from does not count. A record without files compares its defining file."""
    def files(code: dict[str, Any]) -> dict[str, str]:
        return code.get("files") or ({str(code.get("file")): code["sha256"]} if code.get("sha256") else {})

    old, new = old or {}, new or {}
    if old.get("version") != new.get("version"):
        return f"{old.get('distribution') or new.get('distribution')} {old.get('version')} -> {new.get('version')}"
    a, b = files(old), files(new)
    if a == b or (not a.keys() & b.keys() and sorted(a.values()) == sorted(b.values())):
        return None
    changed = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "") + " changed"


def _local_sources(path: Path, module: str, root: Path) -> list[Path]:
    """The defining file and the files under root that its import statements reach, transitively."""
    seen: dict[Path, None] = {}
    todo = [(path, module)]
    while todo:
        file, name = todo.pop()
        if file in seen:
            continue
        seen[file] = None
        for imported in _imports(file, name):
            found = _local_module(imported, root)
            if found is not None and found[0] not in seen:
                todo.append(found)
    return sorted(seen)


def _imports(file: Path, name: str) -> list[str]:
    """The module names a file's import statements name (relative ones resolved; for `from m import
    x`, both m and m.x, which may be a submodule)."""
    try:
        tree = ast.parse(file.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return []
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            try:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                    if node.level else node.module
            except (ImportError, ValueError):
                continue
            if base:
                out += [base, *(f"{base}.{a.name}" for a in node.names if a.name != "*")]
    return out


def _local_module(name: str, root: Path) -> tuple[Path, str] | None:
    """(file, name) of module `name` where its file lies under root (not actbench itself); found by
    path alone: no module is imported to find it."""
    parts = name.split(".")
    if parts[0] == "activation_bench":
        return None
    try:
        spec = importlib.util.find_spec(parts[0])
        where = [spec.origin if spec and spec.has_location else "", *(spec and spec.submodule_search_locations or [])]
        if spec is None or not any(_local(Path(p).resolve(), root) for p in where if p):
            return None  # a package installed elsewhere: nothing of it is the user's code here
        for i in range(1, len(parts)):
            if spec is None or not spec.submodule_search_locations:
                return None
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]),
                                                            list(spec.submodule_search_locations))
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    path = Path(spec.origin).resolve()
    return (path, name) if _local(path, root) else None


def _local(path: Path, root: Path) -> bool:
    """Whether a file is the user's own code: under root (the working directory) and not in the
    interpreter's library or an installed package's folder (a venv inside the project, or a run
    from the home directory, would otherwise take torch's thousands of modules for the user's)."""
    return path.is_relative_to(root) and not any(path.is_relative_to(d) for d in _library_dirs()) \
        and not {"site-packages", "dist-packages"} & set(path.parts)


@functools.cache
def _library_dirs() -> tuple[Path, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    return tuple({Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)})
