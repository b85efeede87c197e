"""Issue 43, finding 3: a sweep that prunes history must not lose what the extraction reads from it. Ten turns of a
real agent (scripted model with usage_metadata) in one thread, a sweep with keep_latest=3: the tokens (Tokens and cost
view, the exporter's totals) and the tool calls (Preferences page) equal a count made before any prune, from the
thread's own state as langgraph reads it. And the prune never deletes a checkpoint the extraction has not read."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
from conftest import DIMS
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.history import tool_calls, usage
from core.memory import preferences
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.operations import sweep
from core.storage import prune

THREAD = "cliente-C7-1"
LANGUAGES = ("catalán", "euskera", "gallego", "inglés", "francés", "alemán", "italiano", "portugués", "árabe", "chino")


def _ten_turns(db) -> dict[str, int]:
    """Ten turns, each a preference (one tool call); returns the truth read from the thread's latest state."""
    agent = build_agent(
        "atencion-cliente",
        ScriptedChatModel(),
        store=build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS),
        checkpointer=PostgresSaver(db.pool),
    )
    for language in LANGUAGES:
        run_turn(agent, ContextoCliente("C7"), THREAD, f"Prefiero que me atendáis en {language}.")
    state = PostgresSaver(db.pool).get_tuple({"configurable": {"thread_id": THREAD}})
    ai = [m for m in state.checkpoint["channel_values"]["messages"] if m.type == "ai"]
    return {
        "input": sum(m.usage_metadata["input_tokens"] for m in ai),
        "output": sum(m.usage_metadata["output_tokens"] for m in ai),
        "calls": sum(len(m.tool_calls) for m in ai),
    }


def _counted(db) -> dict[str, int]:
    today = datetime.now(UTC).date()
    per_thread = usage.thread_usage(db, THREAD, ())
    with psycopg.connect(db.dsn, row_factory=dict_row) as conn:  # what the exporter's cost metrics read
        totals = usage.priced_totals(conn.execute(usage.SELECT_TOTALS).fetchall(), ())
    by_tipo = preferences.preference_by_tipo(db, today, today)
    assert int(totals["input_tokens"].sum()) == int(per_thread["input_tokens"].sum())
    return {
        "input": int(per_thread["input_tokens"].sum()),
        "output": int(per_thread["output_tokens"].sum()),
        "calls": int(by_tipo["writes"].sum()),
    }


def test_a_pruning_sweep_counts_every_turn_as_a_count_before_any_prune(db):
    truth = _ten_turns(db)
    assert truth["calls"] == 10 and truth["input"] > 0
    result = sweep.run_sweep(db, trigger="manual", prune=prune.PrunePolicy(keep_latest=3))
    assert result.status == "ok", result.error
    assert result.prune.checkpoints > 0  # the history was pruned
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (THREAD,))["n"] == 3
    assert _counted(db) == truth


def test_the_prune_keeps_every_checkpoint_after_the_extraction_watermark(db):
    """Checkpoints written after the last extraction are kept by a real prune (outside the sweep too), and a later
    sweep extracts them all."""
    _ten_turns(db)
    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn:
        before = conn.execute("SELECT count(*) AS n FROM checkpoints").fetchone()["n"]
        nothing = prune.prune_history(conn, prune.PrunePolicy(keep_latest=3))  # nothing extracted yet
        assert nothing.checkpoints == 0
        assert conn.execute("SELECT count(*) AS n FROM checkpoints").fetchone()["n"] == before
        planned = prune.prune_history(conn, prune.PrunePolicy(keep_latest=3), dry_run=True)
        assert planned.checkpoints > 0  # a dry run plans what a sweep (which extracts first) would delete
        tool_calls.extract(db)
        done = prune.prune_history(conn, prune.PrunePolicy(keep_latest=3))
        assert done.checkpoints == planned.checkpoints
