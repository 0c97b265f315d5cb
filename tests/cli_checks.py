"""Running the `mneme` command as an operator does, and what a refusal looks like."""

from __future__ import annotations

import os
import subprocess

from tests.harness import MNEME, free_port  # noqa: F401 - re-exported for the CLI tests

ENV = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}


def mneme(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MNEME, *args], env={**ENV, **(env or {})}, input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def refused(res: subprocess.CompletedProcess[str], *words: str) -> str:
    """A refusal: exit 1, one line on stderr naming `words`, no traceback."""
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mneme: "), res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]
