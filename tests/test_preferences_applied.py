"""Preferences applied: proposals against the preference in force, read from the canonical
checkpoint views (decoded in SQL) of conversations held by the real agents."""

from __future__ import annotations

from conftest import DIMS
from langgraph.checkpoint.postgres import PostgresSaver
from streamlit.testing.v1 import AppTest

from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.history import tool_calls
from core.memory import preferences
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store


def converse(db, model, script):
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", model, store=store, checkpointer=PostgresSaver(db.pool))
    for cid, thread, text in script:
        run_turn(agent, ContextoCliente(cid), thread, text)


SCRIPT = [
    ("C1", "c1-a", "Prefiero recoger mis pedidos en la tienda Diagonal."),
    ("C1", "c1-b", "Quiero recoger un pedido, ¿qué me propones?"),  # follows: Diagonal
    ("C1", "c1-c", "Solo esta vez, que lo recoja en la tienda Sierpes."),  # does not follow
    ("C2", "c2-a", "Tengo un pedido listo, ¿qué me propones?"),  # no preference: not counted
    ("C_1", "c_1-a", "Por favor, contactadme siempre por SMS."),
    ("C_1", "c_1-b", "Quiero recoger un pedido, ¿qué me propones?"),  # follows: SMS
]


def test_rate_follows_the_preference_in_force(db):
    converse(db, ScriptedChatModel(), SCRIPT)
    tool_calls.extract(db)
    result = preferences.preferences_applied(db)
    assert (result.with_preference, result.followed, result.changed_by_memory) == (3, 2, 2)
    assert result.rate == 2 / 3
    by_thread = result.proposals.set_index("thread_id")
    assert by_thread.loc["c1-b", "tienda"] == "Diagonal" and by_thread.loc["c1-b", "followed"]
    assert by_thread.loc["c1-c", "tienda"] == "Sierpes" and not by_thread.loc["c1-c", "followed"]
    assert by_thread.loc["c_1-b", "canal"] == "SMS" and by_thread.loc["c_1-b", "preferences"] == "canal=SMS"
    assert by_thread.loc["c2-a", "followed"] is None


def test_a_period_counts_only_its_own_conversations(db):
    from datetime import UTC, datetime, timedelta

    converse(db, ScriptedChatModel(), SCRIPT)
    tool_calls.extract(db)
    today = datetime.now(UTC).date()
    everything = preferences.preferences_applied(db)
    assert preferences.preferences_applied(db, 500, today, today).proposals.equals(everything.proposals)
    before = preferences.preferences_applied(db, 500, today - timedelta(days=7), today - timedelta(days=1))
    assert before.proposals.empty and before.with_preference == 0 and before.rate is None


def test_memory_that_changes_nothing_is_called_useless(db, app_env):
    converse(db, ScriptedChatModel(apply_preferences=False), SCRIPT)
    tool_calls.extract(db)
    result = preferences.preferences_applied(db)
    assert (result.with_preference, result.followed, result.changed_by_memory) == (3, 0, 0)
    app_env(db.dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.run()
    at.switch_page("app_pages/preferences.py").run()
    assert not at.exception
    assert any("la memoria no sirve para nada" in e.value for e in at.error)
    assert next(m.value for m in at.metric if m.label == "Siguieron la preferencia") == "0\u00a0%"
