"""Where the config files are, and the options of each group.

The one place that finds the configs folder: inside the installed package (pyproject maps the
repository's `configs/` to `activation_bench.configs`), or the repository's top-level folder when
running from a checkout. Import-light (pathlib only), so `actbench --help` lists the options
without importing Hydra.
"""

from __future__ import annotations

import functools
from pathlib import Path

from activation_bench.errors import UsageError


@functools.cache
def config_dir() -> Path:
    """The configs folder (found once per process)."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "configs", package.parent / "configs"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise UsageError(f"config folder not found next to {package} (broken installation?)")


@functools.cache
def listing(root: str, group: str | None) -> tuple[str, ...]:
    """The groups under root (group=None), or a group's options: read once per process."""
    if group is None:
        return tuple(sorted(p.name for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith("_")))
    return tuple(sorted(p.stem for p in (Path(root) / group).glob("*.yaml")))


def groups() -> list[str]:
    return list(listing(str(config_dir()), None))


def group_options(group: str) -> list[str]:
    options = list(listing(str(config_dir()), group))
    if group == "model":  # a family registered in code (engine/models/registry.py) may have no file
        from activation_bench.engine.models import registry

        options += [name for name in registry.names() if name not in options]
    return options
