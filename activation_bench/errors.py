"""The one error type for bad user input: the CLI prints its message as one line and exits 2."""

import contextlib
from collections.abc import Iterator


class UsageError(Exception):
    """Bad input from the user (config, override, path, file). Message is one readable line."""


def at(where: str) -> str:
    """Where a message comes from, as its one-line errors end: ' (in: WHERE)', or '' where unknown."""
    return f" (in: {where})" if where else ""


def check(ok: bool, message: str, where: str = "") -> None:
    """UsageError(message, and where it comes from) unless ok."""
    if not ok:
        raise UsageError(f"{message}" + at(where))


# what str.splitlines breaks a line at; a message quoting the user's text shows them escaped
_BREAKS = {ch: ch.encode("unicode_escape").decode("ascii") for ch in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(text: str) -> str:
    """text with its line breaks written as escapes (`\\n`): a message that quotes the user's
    input (an override, an expression, a file's value) stays one line whatever that input holds."""
    return "".join(_BREAKS.get(ch, ch) for ch in text)


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """For CLI commands: a UsageError becomes one line on stderr and exit code 2, no traceback."""
    try:
        yield
    except UsageError as exc:
        import typer

        typer.echo(f"error: {one_line(str(exc))}", err=True)
        raise typer.Exit(2) from None
