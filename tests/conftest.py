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


def assert_refused_by_run_and_sweep(runner: CliRunner, runs_dir: Path, args: list[str], message: str) -> None:
    """`run` and `sweep` (over two seeds) both refuse args: exit 2, one line on stderr holding
    message, nothing written under runs_dir."""
    from activation_bench.cli.main import app

    for command in ("run", "sweep"):
        extra = ["seed=0,1"] if command == "sweep" else []
        result = runner.invoke(app, [command, "--runs-dir", str(runs_dir), "-q", *args, *extra])
        assert result.exit_code == 2, result.output
        err = result.stderr.strip()
        assert err.startswith("error: ") and "\n" not in err, err
        assert message in err, err
        assert files_under(runs_dir) == []
