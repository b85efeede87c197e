"""The layout the README's Architecture section promises, checked on the source itself: core/ by
concern with modules and classes of a readable size, no import cycle, pages that import only `ui` and
core's public functions, no Streamlit in core, no SQL in pages, and the deploy manifests' commands
that still run."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

CORE = ROOT / "core"
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 300


def core_modules() -> dict[str, Path]:
    out = {}
    for path in sorted(CORE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def top_level_imports(path: Path) -> set[str]:
    """Modules imported at module level (imports inside functions are deliberate late imports)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_modules_and_classes_are_a_screen_or_two():
    too_long = {str(p.relative_to(ROOT)): n for p in CORE.rglob("*.py")
                if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"
    big_classes = {}
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                big_classes[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert not big_classes, f"classes over {MAX_CLASS_LINES} lines: {big_classes}"


def test_no_import_cycle_in_core():
    modules = core_modules()
    graph = {name: {m for m in top_level_imports(path) if m in modules and m != name}
             for name, path in modules.items()}
    # A package's __init__ is imported with any of its modules: count that edge too.
    for name in modules:
        parent = name.rsplit(".", 1)[0]
        if parent in modules and parent != name:
            graph[name].add(parent)
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(trail[trail.index(nxt):] + [node, nxt])
                                     if nxt in trail else f"import cycle: {node} -> {nxt}")
            if nxt not in state:
                visit(nxt, trail + [node])
        state[node] = 2

    for name in modules:
        if name not in state:
            visit(name, [])


def test_core_never_imports_streamlit_and_pages_import_only_ui_and_public_core():
    for path in CORE.rglob("*.py"):
        names = {n for node in ast.walk(ast.parse(path.read_text()))
                 for n in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                           [node.module or ""] if isinstance(node, ast.ImportFrom) else [])}
        assert not any(n == "streamlit" or n.startswith("streamlit.") for n in names), path
    pages = sorted((ROOT / "app_pages").glob("*.py"))
    assert pages
    for path in pages:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("core", "ui"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports private names {private} from {node.module}"
                assert not node.module.split(".")[-1].startswith("_"), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value.upper()
                assert not any(f"{kw} " in text and " FROM " in text or f"{kw} INTO" in text
                               for kw in ("SELECT", "INSERT", "DELETE")), f"SQL in {path.name}: {node.value[:60]}"


def manifest_commands() -> list[tuple[str, list[str]]]:
    out = []
    for path in sorted((ROOT / "deploy").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for node in _walk(doc):
                if isinstance(node, dict) and isinstance(node.get("command"), list):
                    out.append((path.name, node["command"]))
    return out


def _walk(node):
    yield node
    if isinstance(node, dict):
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


@pytest.mark.parametrize("manifest,command", manifest_commands(), ids=lambda v: v if isinstance(v, str) else None)
def test_every_manifest_command_runs(manifest, command):
    """Each container's command, from this checkout, answers `--help` (its own parser, its imports)."""
    assert command[:2] == ["python", "-m"], command
    if command[2] == "streamlit":
        assert (ROOT / command[4]).is_file()
        argv = [sys.executable, "-m", "streamlit", "--help"]
    else:
        argv = [sys.executable, "-m", command[2], *command[3:], "--help"]
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "usage" in run.stdout.lower()
