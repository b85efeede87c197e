"""Lint, format and types in the fast tier: `ruff check`, `ruff format --check` and mypy (configured in
pyproject.toml) over the repository, each failing the test on any finding."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "--no-fix", "."],
        ["ruff", "format", "--check", "."],
        # files, strictness and the untyped libraries come from [tool.mypy]; its cache (.mypy_cache) makes a run
        # after a small change take seconds instead of half a minute
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_no_findings(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{' '.join(command)} found:\n{done.stdout}{done.stderr}"
