"""The layout docs/contributor.md's Architecture section promises, checked on the source itself: layers (pages -> ui
-> core -> the agents' library, no import upward), no import cycle between modules (late and type-checking imports
included), no Streamlit in core, nothing of the dashboard (Streamlit, plotly, pandas) in the agents' library, no SQL
in pages, and the deploy manifests' commands that still run. A module's length is
no design rule: a long one is only named in a warning."""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

LONG_MODULE_LINES = 400  # a warning, never a failure
# Lower layers first: a module may import its own layer and those below it, never one above. The agents' library
# (agent_memory_runtime/, its own distribution) is the lowest: it imports nothing of ours.
LAYERS = ("agent_memory_runtime", "core", "ui", "app_pages", "dashboard")
LIBRARY = "agent_memory_runtime"
DASHBOARD_ONLY = ("streamlit", "plotly", "pandas")


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module

    @property
    def layer(self) -> str:
        return self.name.split(".")[0]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    """Every module of the app (the agents' library, core, ui, app_pages, dashboard.py), parsed once."""
    paths = [
        *sorted((ROOT / LIBRARY).glob("*.py")),  # flat: its folder is the package (never its build/)
        *sorted((ROOT / "core").rglob("*.py")),
        *sorted((ROOT / "ui").rglob("*.py")),
        *sorted((ROOT / "app_pages").glob("*.py")),
        ROOT / "dashboard.py",
    ]
    out = {}
    for path in paths:
        text = path.read_text()
        if (n := len(text.splitlines())) > LONG_MODULE_LINES:
            warnings.warn(f"{path.relative_to(ROOT)} has {n} lines: is it still one concern?", stacklevel=1)
        out[module_name(path)] = Module(module_name(path), path, ast.parse(text))
    return out


def imported(tree: ast.AST) -> set[str]:
    """Every module an import anywhere in `tree` names: top-level, inside functions (late imports) and under
    `if TYPE_CHECKING:` alike; `from a import b` names `a` and `a.b`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    graph = {name: {m for m in imported(mod.tree) if m in modules and m != name} for name, mod in modules.items()}
    for name in modules:  # a package's __init__ is imported with any of its modules: count that edge too
        parent = name.rsplit(".", 1)[0]
        if parent in modules and parent != name:
            graph[name].add(parent)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a path that closes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                strongconnect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(_closing_path(graph, set(component)))

    for name in sorted(graph):
        if name not in index:
            strongconnect(name)
    return found


def _closing_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A path inside `component` from its first module back to it (breadth-first: the shortest)."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & component):
            if nxt == start:
                return paths[node] + [start]
            if nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - a component of >1 has one


def test_no_import_cycle(modules):
    found = cycles(import_graph(modules))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_cycle_check_finds_late_and_type_checking_imports():
    """The two ways a cycle hides from a top-level-only check."""
    a = ast.parse("def f():\n    from b import g\n")
    b = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a import f\n")
    graph = {"a": imported(a) & {"b"}, "b": imported(b) & {"a"}}
    assert cycles(graph) == [["a", "b", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_a_layer_above_its_own(modules):
    upward = []
    for name, mod in modules.items():
        rank = LAYERS.index(mod.layer)
        for target in imported(mod.tree):
            top = target.split(".")[0]
            if top in LAYERS and LAYERS.index(top) > rank:
                upward.append(f"{name} imports {target}")
    assert not upward, upward


def test_pages_import_no_other_page_and_only_public_core_and_ui(modules):
    # The agents' library counts as core here: it was core.checkpoints (the Degradation page reads its failure
    # kinds and the guard's risk levels).
    pages = [m for m in modules.values() if m.layer == "app_pages"]
    assert pages
    for page in pages:
        for node in ast.walk(page.tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in LAYERS:
                assert node.module.split(".")[0] in (LIBRARY, "core", "ui"), f"{page.path.name} imports {node.module}"
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{page.path.name} imports private names {private} from {node.module}"
                assert not node.module.split(".")[-1].startswith("_"), f"{page.path.name} imports {node.module}"


def private(name: str) -> bool:
    """`_name`, not a dunder such as `__version__`."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(name: str, tree: ast.AST, modules: dict[str, Module]) -> list[str]:
    """Where `tree` (module `name`) uses another of `modules`' underscore names: `from X import _n`, or `X._n`
    through a name bound to module X (`import X`, `import X as m`, `from P import X`), late imports included."""
    bound: dict[str, str] = {}  # local name -> the module of ours it names
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if f"{node.module}.{a.name}" in modules:
                    bound[a.asname or a.name] = f"{node.module}.{a.name}"
                elif node.module in modules and node.module != name and private(a.name):
                    found.append(f"{name}:{node.lineno} imports {a.name} from {node.module}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and private(node.attr)):
            continue
        parts, value = [], node.value
        while isinstance(value, ast.Attribute):
            parts.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in bound:
            target = ".".join([bound[value.id], *reversed(parts)])
            if target in modules and target != name:
                found.append(f"{name}:{node.lineno} uses {target}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names(modules):
    """A module that needs another's underscore helper shows a seam in the wrong place (STYLE.md, "Private names
    stay private"): the owner makes it public. Checked on core, ui, the pages and dashboard.py (the agents'
    library, its own distribution, keeps its internals among its own modules)."""
    found = [
        use for name, mod in modules.items() if mod.layer != LIBRARY for use in private_uses(name, mod.tree, modules)
    ]
    assert not found, found


@pytest.fixture(scope="module")
def scripts() -> dict[str, Module]:
    """The benchmarks (`bench.x`) and the tests' modules (imported by their file name: tests/ is on the path)."""
    out = {module_name(p): Module(module_name(p), p, ast.parse(p.read_text())) for p in (ROOT / "bench").glob("*.py")}
    out |= {p.stem: Module(p.stem, p, ast.parse(p.read_text())) for p in (ROOT / "tests").glob("*.py")}
    return out


def test_benches_and_tests_use_no_other_modules_private_names(modules, scripts):
    """The same rule for bench/ and tests/: neither another bench's or test module's underscore names nor those of
    the app and the agents' library (the owner makes what they share public; a test checks public behaviour)."""
    everything = {**modules, **scripts}
    assert {"bench.bench_production", "conftest", "test_sweep"} <= set(scripts)
    found = [use for name, mod in scripts.items() for use in private_uses(name, mod.tree, everything)]
    assert not found, found


def test_the_private_name_check_finds_both_forms():
    mods = {n: Module(n, Path(f"{n}.py"), ast.parse("")) for n in ("core.a", "core.pkg", "core.pkg.b")}
    tree = ast.parse(
        "from core.a import _x, y, __version__\n"
        "import core.pkg.b\nimport core.a as a2\nfrom core.pkg import b\n"
        "def f():\n    return core.pkg.b._z, a2._w, b._v, b.ok, self._mine\n"
    )
    assert sorted(private_uses("core.c", tree, mods)) == [
        "core.c:1 imports _x from core.a",
        "core.c:6 uses core.a._w",
        "core.c:6 uses core.pkg.b._v",
        "core.c:6 uses core.pkg.b._z",
    ]
    assert private_uses("core.a", ast.parse("import core.a\ncore.a._own\n"), mods) == []


def test_the_layers_are_all_there(modules):
    assert {m.layer for m in modules.values()} == set(LAYERS)
    assert {"core.history.views", "core.storage.prune", f"{LIBRARY}.dual_saver", f"{LIBRARY}.guard"} <= set(modules)


def test_the_agents_library_imports_nothing_of_the_dashboard(modules):
    """Nothing of ours (the layer rule says it too) and none of the dashboard's libraries, late imports included."""
    library = [m for m in modules.values() if m.layer == LIBRARY]
    assert len(library) > 10
    for mod in library:
        tops = {n.split(".")[0] for n in imported(mod.tree)}
        assert not tops & {*LAYERS[1:], *DASHBOARD_ONLY, "bench", "tests"}, f"{mod.path}: {tops}"


def test_no_streamlit_in_core(modules):
    for mod in modules.values():
        if mod.layer == "core":
            assert not any(n == "streamlit" or n.startswith("streamlit.") for n in imported(mod.tree)), mod.path


def test_no_sql_in_pages(modules):
    for mod in modules.values():
        if mod.layer != "app_pages":
            continue
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value.upper()
                assert not any(
                    f"{kw} " in text and " FROM " in text or f"{kw} INTO" in text
                    for kw in ("SELECT", "INSERT", "DELETE")
                ), f"SQL in {mod.path.name}: {node.value[:60]}"


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


@pytest.mark.slow  # a new Python process per manifest
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
