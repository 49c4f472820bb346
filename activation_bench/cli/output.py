"""How the commands that read results hand them out: warnings on stderr, and a result written to
--output (atomically), printed as a rich table, or printed as text. Light: typer only at import."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import typer


def warn(lines: Sequence[str]) -> None:
    """Each line on stderr as `warning: LINE`."""
    for line in lines:
        typer.echo(f"warning: {line}", err=True)


def emit(output: Path | None, fmt: str, text: Callable[[], str], table: Callable[[], None]) -> None:
    """A command's result: written atomically to --output, printed as a rich table, or printed as
    text (csv, markdown, json)."""
    from activation_bench.runs import store

    if output is not None:
        store.atomic_write(output, text())
        typer.echo(f"wrote {output}", err=True)
    elif fmt == "table":
        table()
    else:
        typer.echo(text(), nl=False)
