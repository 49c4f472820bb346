"""The README's classification example runs as written (slow), and in a shortened form in every run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from activation_bench.cli.main import app

README = Path(__file__).resolve().parents[1] / "README.md"


def classification_commands() -> list[list[str]]:
    """The commands of the first bash block under '## Classifiers', continuation lines joined."""
    section = README.read_text(encoding="utf-8").split("## Classifiers", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def run_example(runner, tmp_path: Path, shorten: bool) -> str:
    out = ""
    for argv in classification_commands():
        assert argv[0] == "actbench"
        args = argv[1:]
        if shorten:
            args = [{"seed=range(12)": "seed=range(6)", "epochs=20": "epochs=2"}.get(a, a) for a in args]
        if args[0] == "sweep":
            args[1:1] = ["--runs-dir", str(tmp_path / "runs"), "-q"]
        else:
            args = [str(tmp_path / a) if a.startswith("runs/") else a for a in args]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
        out = result.output
    return out


def test_readme_classification_example_runs_shortened(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    out = run_example(runner, tmp_path, shorten=True)
    assert "test_acc" in out and "Δ pp" in out and "baseline" in out


@pytest.mark.slow
def test_readme_classification_example_runs_as_written(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    out = run_example(runner, tmp_path, shorten=False)
    shown = README.read_text(encoding="utf-8").split("## Classifiers", 1)[1].split("```console\n", 1)[1]
    for line in shown.split("```", 1)[0].strip().splitlines()[1:]:
        name, lr, n, mean = line.split()[:4]
        assert re.search(rf"{name}\s+{lr}\s+{n}\s+{re.escape(mean)}", out), line
