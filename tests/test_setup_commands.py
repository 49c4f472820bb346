"""The README's two set-up commands are exactly what CI (.ci/run) runs, in order."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Set-up \(the two commands\)\s+```bash\n(.*?)```", text, re.S)
    assert block, "README.md: no '## Set-up (the two commands)' bash block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_setup_is_what_ci_runs():
    commands = readme_commands()
    assert len(commands) == 2, commands
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    ran = [line for line in ci if line.startswith(("python ", "pip "))]
    assert ran == commands, (ran, commands)


def test_suite_runs_in_parallel():
    test = readme_commands()[1].split()
    assert test[:3] == ["python", "-m", "pytest"] and "-n" in test, test  # pytest-xdist, in the dev extra
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^dev = \[.*"pytest-xdist', pyproject, re.M), "pytest-xdist missing from the dev extra"
