"""actbench's folder in the user's cache (generated data, downloaded image files, tiny shakespeare,
the compiled engine's store), and writing a file there so that a concurrent reader never sees half of it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """$ACTBENCH_CACHE_DIR, else $XDG_CACHE_HOME/activation-bench, else ~/.cache/activation-bench."""
    if os.environ.get("ACTBENCH_CACHE_DIR"):
        return Path(os.environ["ACTBENCH_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "activation-bench"


def write_atomic(path: Path, write: Any) -> None:
    """write(binary file) into a temporary file beside path, then renamed to path: a reader sees the
    old file or the whole new one, never half of one (the temporary file is removed on failure)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
