"""The agents' library (agent_memory_runtime/, distribution agent-memory-runtime) installed alone: a clean
virtualenv (no system site packages) gets the package and its own dependencies from PyPI, nothing of the
dashboard's, and an agent turn there goes through the dual saver into a real PostgreSQL without Streamlit, plotly
or pandas ever being imported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow

LIBRARY = ROOT / "agent_memory_runtime"

# Runs inside the clean virtualenv, from a folder outside the checkout (so only the installed package is found).
TURN = """
import importlib.util
import sys
from typing import TypedDict

from langgraph.graph import END, START, StateGraph

import agent_memory_runtime
from agent_memory_runtime.dual_saver import DualCheckpointSaver

DASHBOARD_ONLY = ("streamlit", "plotly", "pandas", "core", "ui")


class State(TypedDict):
    count: int


def step(state: State) -> State:
    return {"count": state["count"] + 1}


dsn, thread_id = sys.argv[1], sys.argv[2]
graph = StateGraph(State)
graph.add_node("step", step)
graph.add_edge(START, "step")
graph.add_edge("step", END)
with DualCheckpointSaver(dsn, replica_id="library-alone") as saver:
    assert not saver.degraded
    app = graph.compile(checkpointer=saver)
    assert app.invoke({"count": 0}, {"configurable": {"thread_id": thread_id}}) == {"count": 1}
loaded = [name for name in DASHBOARD_ONLY if name in sys.modules]
assert not loaded, f"the library imported {loaded}"
for name in ("streamlit", "plotly", "pandas"):
    assert importlib.util.find_spec(name) is None, f"{name} is installed with the library alone"
print(agent_memory_runtime.__file__)
"""


@pytest.mark.timeout(900)  # the virtualenv and its downloads: ~1 min with pip's cache, a few without
def test_the_library_alone_runs_an_agent_turn_through_the_dual_saver(create_database, tmp_path):
    dsn = create_database()
    source = tmp_path / "src" / "agent_memory_runtime"
    # A copy: the build leaves build/ and *.egg-info next to the sources, never in the checkout.
    shutil.copytree(LIBRARY, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}  # nothing of this process's paths
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", str(source)],
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    thread_id = f"library-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "turn.py"
    script.write_text(TURN)
    turn = subprocess.run(
        [str(python), "-I", str(script), dsn, thread_id],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert turn.returncode == 0, turn.stdout[-3000:] + turn.stderr[-3000:]
    assert Path(turn.stdout.strip().splitlines()[-1]).is_relative_to(venv), turn.stdout

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread_id,)).fetchone()
    assert row is not None and row[0] >= 1, row
