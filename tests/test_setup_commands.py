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


def test_ci_runs_them_on_a_fresh_environment_with_an_empty_home():
    """CI starts from nothing: a new venv (not the machine's Python, which may hold packages placed by
    hand) and an empty home without XDG folders or actbench's cache variable (no cached data set, no
    tiny shakespeare), both set before the install; a suite that leans on either fails there."""
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    install = ci.index(readme_commands()[0])
    before = ci[:install]
    assert any(re.fullmatch(r'python3? -m venv "\$\w+/venv"', line) for line in before), before
    assert any(line.startswith(". ") and line.endswith('/venv/bin/activate"') for line in before), before
    assert any(line.startswith('export HOME="$') for line in before), before
    unset = next(line.split()[1:] for line in before if line.startswith("unset "))
    assert {"XDG_CACHE_HOME", "ACTBENCH_CACHE_DIR", "PYTHONPATH"} <= set(unset), unset


def test_the_readme_and_the_performance_page_stay_a_read():
    """The README stays under 15 KB (a first read; details live in docs/) and docs/performance.md a
    page of current figures of at most 400 lines (history lives in git, not in the page)."""
    assert len((ROOT / "README.md").read_bytes()) < 15_000
    assert len((ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()) <= 400
