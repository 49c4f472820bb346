from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

# tiny models and few epochs keep the suite fast
TINY = ["epochs=4", "data.n_samples=6", "data.input_dim=3", "model.hidden_dim=5"]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []
