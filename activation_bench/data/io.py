"""Reading a CSV table with one-line errors: shared by the data layer (data.path files) and the
analysis layer (results and loss tables), so it lives in the lower one. pandas only, no torch."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from activation_bench.errors import UsageError


def read_table(path: Path, sep: str = ",", label: str = "", empty: str = "empty file",
               unparsable: str = "cannot parse CSV: {}") -> pd.DataFrame:
    """pandas.read_csv with every failure a one-line UsageError: `{label}{path}: ...`, with the
    `empty` message or the `unparsable` one (given pandas' first line)."""
    try:
        return pd.read_csv(path, sep=sep, engine="c")
    except pd.errors.EmptyDataError:
        raise UsageError(f"{label}{path}: {empty}") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{label}{path}: {unparsable.format(str(exc).splitlines()[0])}") from None
    except OSError as exc:
        raise UsageError(f"{label}{path}: cannot read: {exc.strerror or exc}") from None
