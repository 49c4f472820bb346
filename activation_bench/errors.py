"""The one error type for bad user input: the CLI prints its message as one line and exits 2."""


class UsageError(Exception):
    """Bad input from the user (config, override, path, file). Message is one readable line."""
