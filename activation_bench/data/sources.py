"""Where the tables come from: the tables bundled with scikit-learn and statsmodels, and the
user's file (`data.path`: read with pandas, resolved, identified by its SHA-256)."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from activation_bench.errors import UsageError, at

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

SKLEARN_CLASSES = {"digits": "digit", "wine": "cultivar", "breast_cancer": "diagnosis", "iris": "species"}


def builtin(name: str) -> tuple[Any, str]:
    """The bundled table as a DataFrame (features and target only) and a one-line source."""
    import pandas as pd

    if name in SKLEARN_CLASSES:
        import sklearn
        from sklearn import datasets

        bunch = getattr(datasets, f"load_{name}")(as_frame=True)
        frame = bunch.frame.rename(columns={"target": SKLEARN_CLASSES[name]})
        return frame, f"scikit-learn {sklearn.__version__} load_{name}()"
    if name == "diabetes":
        import sklearn
        from sklearn.datasets import load_diabetes

        bunch = load_diabetes(scaled=False, as_frame=True)
        frame = bunch.frame.rename(columns={"target": "progression"})
        return frame, f"scikit-learn {sklearn.__version__} load_diabetes(scaled=False)"
    import statsmodels

    if name == "star98":
        from statsmodels.datasets import star98

        raw = star98.load_pandas().data
        frame = raw.drop(columns=["NABOVE", "NBELOW"])
        frame["math_above"] = raw["NABOVE"] / (raw["NABOVE"] + raw["NBELOW"])
        return frame, f"statsmodels {statsmodels.__version__} datasets.star98"
    from statsmodels.datasets import randhie

    frame = pd.DataFrame(randhie.load_pandas().data)
    return frame, f"statsmodels {statsmodels.__version__} datasets.randhie"


def read_csv(path: Path) -> Any:
    """The user's file as a DataFrame (comma separated; tab separated for .tsv/.tab)."""
    from activation_bench.data.io import read_table

    sep = "\t" if path.suffix.lower() in (".tsv", ".tab") else ","
    return read_table(path, sep, label="data.path ", empty="empty file, not a table", unparsable="not a table ({})")



@functools.lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of the file's bytes (once per process per unchanged file)."""
    try:
        st = path.stat()
        if not path.is_file():
            raise UsageError(f"data.path {path}: not a file")
        return _file_sha256(str(path), st.st_size, st.st_mtime_ns)
    except FileNotFoundError:
        raise UsageError(f"data.path {path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"data.path {path}: cannot read: {exc.strerror or exc}") from None


def resolve_csv(data: Cfg, where: str = "") -> None:
    """data.path resolved against the directory the command started in, and data.sha256 recorded
    (checked instead, when the config already carries one: a re-run of a saved config.yaml)."""
    if not data.path:
        raise UsageError("data=csv needs data.path=FILE and data.target=COLUMN" + at(where))
    if not data.target:
        raise UsageError(f"data=csv needs data.target=COLUMN (the column to predict) for {data.path}" + at(where))
    path = Path(os.path.abspath(os.path.expanduser(str(data.path))))
    digest = file_sha256(path)
    if data.sha256 and data.sha256 != digest:
        raise UsageError(f"data.path {path}: its SHA-256 is {digest}, not the configured data.sha256={data.sha256} "
                         "(the file changed since that config was saved)")
    data["path"], data["sha256"] = str(path), digest

