"""model=module's user code: importing model.target and model.replace's types (the current
directory first on the path, as `python -m` puts it), one line for what goes wrong there, and what
identifies the code that ran (`code_record`: summary.json's `code`)."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable, Sequence
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


@functools.lru_cache(maxsize=64)
def code_record(target: str) -> tuple[tuple[str, str], ...]:
    """What identifies model.target's code (summary.json's `code`): the file that defines it (its
    path relative to the current directory where it lies below it), that file's SHA-256 and, where
    an installed distribution provides it (timm, torchvision), that distribution's name and version.
    Once per process and target: the module imported once is the code every member runs."""
    import hashlib
    import inspect
    from importlib import metadata
    from pathlib import Path

    obj = import_target(target)
    try:
        source = inspect.getsourcefile(obj) or inspect.getfile(obj)
    except TypeError:  # a functools.partial, an instance, a class defined in C: the module's file
        source = getattr(sys.modules.get(target.partition(":")[0]), "__file__", None)
    if not source or not os.path.isfile(source):
        return (("target", target),)
    path = Path(source).resolve()
    out = [("target", target)]
    try:
        out.append(("file", path.relative_to(Path.cwd().resolve()).as_posix()))
    except ValueError:
        out.append(("file", str(path)))
        top = target.partition(":")[0].split(".")[0]
        dists = metadata.packages_distributions().get(top) or []
        if dists:
            out += [("distribution", dists[0]), ("version", metadata.version(dists[0]))]
    out.append(("sha256", hashlib.sha256(path.read_bytes()).hexdigest()))
    return tuple(out)
