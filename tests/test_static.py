"""Lint, format and type checks, so that the one test command (and .ci/run) runs them too.

The tools and their settings are in pyproject.toml ([tool.ruff], [tool.mypy]); each check runs from the
repository root exactly as a developer would run it alone, e.g. `python -m ruff check .`.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHECKS = {
    "ruff-check": ["ruff", "check", "."],
    "ruff-format": ["ruff", "format", "--check", "."],
    "mypy": ["mypy"],  # the targets are pyproject.toml's [tool.mypy] files
}


@pytest.mark.parametrize("argv", CHECKS.values(), ids=CHECKS.keys())
def test_static_check_is_clean(argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"`{' '.join(argv)}` exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
