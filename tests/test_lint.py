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
        # files, strictness, the untyped and the skipped libraries come from [tool.mypy]; 8 s with a cold cache
        # (.mypy_cache), 1-2 s after a small change
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_no_findings(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{' '.join(command)} found:\n{done.stdout}{done.stderr}"


def test_no_module_of_ours_imports_a_library_mypy_skips() -> None:
    """[tool.mypy] skips some libraries that only our libraries' libraries import (follow_imports = "skip": their
    names are Any). Our code importing one would lose its types silently: it must not."""
    import ast
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    skipped = {
        m.removesuffix(".*")
        for o in config["overrides"]
        if o.get("follow_imports") == "skip"
        for m in ([o["module"]] if isinstance(o["module"], str) else o["module"])
    }
    assert skipped, "the skip list is gone: drop this test with it"
    found = []
    for folder in config["files"]:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "/build/" in str(path):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in skipped]
    assert not found, found
