"""The README's classification example runs as written (slow), and in a shortened form in every run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import run_doc_block

README = Path(__file__).resolve().parents[1] / "README.md"


def run_example(runner, tmp_path: Path, shorten: bool) -> str:
    short = {"seed=range(12)": "seed=range(6)", "epochs=20": "epochs=2"} if shorten else {}
    return run_doc_block(runner, tmp_path, README, "## Classifiers", short)


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


def test_readme_transformer_example_runs_shortened(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    short = {"seed=range(4)": "seed=range(2)", "epochs=5": "epochs=2 data.steps=3 data.eval_windows=4",
             "model.n_embd=64": "model.n_embd=16", "block_size=32": "block_size=8", "warmup_steps=50": "warmup_steps=2"}
    out = run_doc_block(runner, tmp_path, README, "## Transformers", short)
    assert "params" in out and "baseline" in out and "swiglu" in out


def test_readme_stays_under_15_kb():
    assert len(README.read_bytes()) < 15_000  # a user's page: details go to docs/
