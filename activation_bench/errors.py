"""The one error type for bad user input: the CLI prints its message as one line and exits 2."""

import contextlib
from collections.abc import Iterator


class UsageError(Exception):
    """Bad input from the user (config, override, path, file). Message is one readable line."""


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """For CLI commands: a UsageError becomes one line on stderr and exit code 2, no traceback."""
    try:
        yield
    except UsageError as exc:
        import typer

        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
