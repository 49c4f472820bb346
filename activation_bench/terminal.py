"""Printing rich tables so that identifiers stay whole.

In a terminal a table fits the window: only prose columns wrap (identifier columns are created
with `no_wrap=True`). Anywhere else (a pipe, a file) a table is printed at its natural width, so
`actbench activations | grep stochastic_gelu` finds the whole name on one line.

rich is imported inside the functions, so importing this module costs nothing.
"""

from __future__ import annotations

import io
from typing import Any

MIN_WIDTH = 80


def natural_width(table: Any) -> int:
    """The width at which nothing in the table wraps: its cells, its title and its caption lines."""
    from rich.cells import cell_len
    from rich.console import Console

    cells = Console(width=100_000, file=io.StringIO()).measure(table).maximum
    text = [str(t) for t in (table.title, table.caption) if t is not None]
    lines = [cell_len(line) for t in text for line in t.splitlines()]
    return max(MIN_WIDTH, cells, *lines)


def print_table(table: Any) -> None:
    """Print a rich table on stdout: the terminal's width in a terminal, its natural width elsewhere."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=natural_width(table))
    console.print(table)


def table_text(table: Any) -> str:
    """A rich table as plain text at its natural width (for files)."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=natural_width(table), record=True, color_system=None)
    console.print(table)
    return console.export_text()
