"""The Preferences page's reads from the rollups of migration 047 (core/memory/preferences.py) give exactly
what the live queries over core_tool_calls / core_thread_days they replaced give (kept below, verbatim, as
the reference), on a database written by the memory article's agents (stock savers, no metadata: threads
without a cliente_id) and by ours (cliente_id metadata, replayed past days, threads active on several days),
through the extraction step, after a prune of deleted threads, after erasures, and after a TRUNCATE; the
trigger-kept rollups equal the migration's backfill; an erasure leaves no rollup row naming the customer."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import psycopg
from conftest import DIMS
from langgraph.checkpoint.postgres import PostgresSaver

from agent_memory_runtime import clock
from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database
from core.history import tool_calls
from core.memory import preferences
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.privacy import erasure, evidence
from core.privacy import subjects as subj

# --- the live queries the rollups replace (core/memory/preferences.py before migration 047) ----------

OLD_PREF_DAILY = """
WITH days AS (
    SELECT generate_series(%(since)s::date, %(until)s::date, interval '1 day')::date AS day
), conv AS (
    SELECT day, count(*) AS conversations
    FROM core_thread_days
    WHERE day BETWEEN %(since)s AND %(until)s
    GROUP BY 1
), writes AS (
    SELECT (ts AT TIME ZONE 'UTC')::date AS day, count(*) AS writes
    FROM core_tool_calls
    WHERE tool = %(tool)s AND ts >= %(since)s::date AT TIME ZONE 'UTC' AND ts < (%(until)s::date + 1) AT TIME ZONE 'UTC'
    GROUP BY 1
)
SELECT d.day, coalesce(c.conversations, 0) AS conversations, coalesce(w.writes, 0) AS writes
FROM days d LEFT JOIN conv c USING (day) LEFT JOIN writes w USING (day) ORDER BY d.day"""

OLD_CONVERSATIONS = """
SELECT count(DISTINCT thread_id) AS n FROM core_thread_days WHERE day BETWEEN %(since)s AND %(until)s"""

OLD_CLOCKS = """
SELECT clock, count(*) AS calls FROM core_tool_calls
WHERE tool = %(tool)s AND ts >= %(since)s::date AT TIME ZONE 'UTC' AND ts < (%(until)s::date + 1) AT TIME ZONE 'UTC'
GROUP BY 1 ORDER BY 1"""

OLD_PREF_BY_TIPO = """
SELECT coalesce(args ->> 'tipo', '?') AS tipo, count(*) AS writes,
       count(DISTINCT coalesce(cliente_id, 'thread:' || thread_id)) AS customers
FROM core_tool_calls
WHERE tool = %(tool)s AND ts >= %(since)s::date AT TIME ZONE 'UTC' AND ts < (%(until)s::date + 1) AT TIME ZONE 'UTC'
GROUP BY 1 ORDER BY writes DESC, tipo"""

OLD_WRITING_CONVERSATIONS = """
SELECT thread_id, max(cliente_id) AS cliente_id, min(ts) AS first_write, count(*) AS writes,
       string_agg(DISTINCT args ->> 'tipo', ', ') AS tipos, max(agent) AS agent
FROM core_tool_calls
WHERE tool = %(tool)s AND ts >= %(since)s::date AT TIME ZONE 'UTC' AND ts < (%(until)s::date + 1) AT TIME ZONE 'UTC'
GROUP BY thread_id ORDER BY first_write DESC, thread_id LIMIT %(limit)s OFFSET %(offset)s"""

OLD_PROPOSALS_AND_PREFERENCES = """
WITH recent AS (
    SELECT thread_id, max(cliente_id) AS cliente_id FROM core_thread_days
    GROUP BY thread_id ORDER BY max(last_human_at) DESC, thread_id LIMIT %(threads)s
), subjects AS (
    SELECT DISTINCT coalesce(cliente_id, 'thread:' || thread_id) AS subject FROM recent
)
SELECT t.thread_id, coalesce(t.cliente_id, 'thread:' || t.thread_id) AS subject, t.cliente_id, t.ts, t.clock,
       t.tool, t.args, t.thread_id IN (SELECT thread_id FROM recent) AS recent
FROM core_tool_calls t
WHERE t.tool IN ('proponer_entrega', 'recordar_preferencia')
  AND coalesce(t.cliente_id, 'thread:' || t.thread_id) IN (SELECT subject FROM subjects)
ORDER BY t.ts, t.thread_id, t.checkpoint_id, t.task_id, t.idx, t.position, t.call_index"""

OLD_SQL = {
    "SELECT_PREF_DAILY": OLD_PREF_DAILY,
    "SELECT_CONVERSATIONS": OLD_CONVERSATIONS,
    "SELECT_CLOCKS": OLD_CLOCKS,
    "SELECT_PREF_BY_TIPO": OLD_PREF_BY_TIPO,
    "SELECT_WRITING_CONVERSATIONS": OLD_WRITING_CONVERSATIONS,
    "SELECT_PROPOSALS_AND_PREFERENCES": OLD_PROPOSALS_AND_PREFERENCES,
}

ROLLUPS = (
    "core_tool_call_days",
    "core_tool_call_subject_days",
    "core_tool_call_day_pairs",
    "core_tool_call_thread_days",
    "core_thread_last",
    "core_thread_day_pairs",
)
NAMING = ("core_tool_call_subject_days", "core_tool_call_thread_days", "core_thread_last")  # cliente_id / thread_id
MIGRATION = Path(__file__).resolve().parent.parent / "core" / "sql" / "047_preference_rollups.sql"
DEFAULT = subj.Attribution()

TODAY = datetime.now(UTC).date()


def at(days_ago: int, hour: int, minute: int = 0) -> datetime:
    d = TODAY - timedelta(days=days_ago)
    return datetime(d.year, d.month, d.day, hour, minute, tzinfo=UTC)


# Our agents on replayed past days (cliente_id in the metadata): several days, tipos and customers, threads
# active on several days (cliente-C1-1, -C2-1, -C3-1, -C5-1), a customer writing one tipo on several days,
# proposals that follow or override a preference, a chat without any call.
RECOGER, PROPONES = "Prefiero recoger mis pedidos en la tienda {}.", "Quiero recoger un pedido, ¿qué me propones?"
SCRIPT = [
    (at(35, 9), "C1", "cliente-C1-1", RECOGER.format("Diagonal")),
    (at(35, 23, 59), "C2", "cliente-C2-1", "Por favor, contactadme siempre por SMS."),
    (at(20, 0, 0), "C1", "cliente-C1-1", "Las entregas mejor en la franja de tarde."),
    (at(20, 11), "C1", "cliente-C1-2", PROPONES),
    (at(20, 12), "C3", "cliente-C3-1", "Prefiero que me atendáis en gallego."),
    (at(10, 8), "C2", "cliente-C2-1", RECOGER.format("Sierpes")),
    (at(10, 9), "C2", "cliente-C2-2", "Por favor, contactadme siempre por correo."),
    (at(10, 10), "C4", "cliente-C4-1", "Hola, quería saber el estado de mi pedido."),
    (at(10, 11), "C1", "cliente-C1-1", RECOGER.format("Gran Vía")),
    (at(3, 7), "C3", "cliente-C3-1", "Las entregas mejor en la franja de mañana."),
    (at(3, 8), "C5", "cliente-C5-1", RECOGER.format("Diagonal")),
    (at(3, 9), "C1", "cliente-C1-3", PROPONES),
    (at(1, 18), "C2", "cliente-C2-3", PROPONES),
    (at(1, 19), "C5", "cliente-C5-1", "Por favor, contactadme siempre por SMS."),
    (at(1, 20), "C1", "cliente-C1-4", "Solo esta vez, que lo recoja en la tienda Sierpes."),
]

# Windows over those days and today's article agents: whole history, the page's 30 days, windows that start
# inside a thread's or a customer's activity, single days, a day without any call, the future.
WINDOWS = [
    (TODAY - timedelta(days=100), TODAY + timedelta(days=1)),
    (TODAY - timedelta(days=29), TODAY),
    (TODAY - timedelta(days=20), TODAY - timedelta(days=10)),
    (TODAY - timedelta(days=19), TODAY),
    (TODAY - timedelta(days=10), TODAY - timedelta(days=10)),
    (TODAY - timedelta(days=35), TODAY - timedelta(days=35)),
    (TODAY - timedelta(days=9), TODAY - timedelta(days=2)),
    (TODAY - timedelta(days=2), TODAY - timedelta(days=2)),
    (TODAY - timedelta(days=3), TODAY),
    (TODAY, TODAY),
    (TODAY + timedelta(days=1), TODAY + timedelta(days=5)),
]


@contextlib.contextmanager
def live_queries():
    """The module's reads with the live SQL they replaced (the same Python around it)."""
    new = {name: getattr(preferences, name) for name in OLD_SQL}
    try:
        for name, sql in OLD_SQL.items():
            setattr(preferences, name, sql)
        yield
    finally:
        for name, sql in new.items():
            setattr(preferences, name, sql)


def reads(db: Database) -> dict:
    out = {}
    for since, until in WINDOWS:
        w = (since, until)
        out[("daily", w)] = preferences.preference_daily(db, since, until)
        out[("conversations", w)] = preferences.conversations(db, since, until)
        out[("clocks", w)] = preferences.clocks(db, since, until)
        out[("by_tipo", w)] = preferences.preference_by_tipo(db, since, until)
        for limit, offset in ((50, 0), (1, 0), (2, 1), (3, 2), (5, 100)):
            out[("writers", w, limit, offset)] = preferences.writing_conversations(db, since, until, limit, offset)
    for threads in (1, 3, 5, 500):
        applied = preferences.preferences_applied(db, threads)
        out[("applied", threads)] = applied.proposals
        out[("applied counts", threads)] = (applied.with_preference, applied.followed, applied.changed_by_memory)
    return out


def assert_same_as_live(db: Database) -> dict:
    new = reads(db)
    with live_queries():
        old = reads(db)
    assert new.keys() == old.keys()
    for key in new:
        if isinstance(new[key], pd.DataFrame):
            pd.testing.assert_frame_equal(new[key], old[key], check_exact=True, obj=str(key))
        else:
            assert new[key] == old[key], key
    return new


def snapshot(db: Database) -> dict[str, list]:
    return {t: [r["row"] for r in db.fetch(f"SELECT x::text AS row FROM {t} x ORDER BY 1")] for t in ROLLUPS}


def assert_equal_to_backfill(db: Database) -> dict[str, list]:
    """What the triggers kept equals what the migration's backfill computes from the base tables."""
    kept = snapshot(db)
    with psycopg.connect(db.dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(MIGRATION.read_text())  # the file as core.migrate runs it: one transaction
    assert snapshot(db) == kept
    return kept


def naming_rows(db: Database, customer: str, threads: list[str]) -> dict[str, int]:
    return {
        t: db.fetch_one(
            f"SELECT count(*) AS n FROM {t} WHERE cliente_id = %s OR thread_id = ANY(%s)", (customer, threads)
        )["n"]
        for t in NAMING
    }


def our_agents(db: Database, script) -> None:
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for when, cid, thread, text in script:
        with clock.simulated(when):
            run_turn(agent, ContextoCliente(cid), thread, text)


def test_rollup_reads_equal_the_live_queries_on_article_and_our_agents(article_agents):
    foreign = article_agents()  # the article's agents, today, no metadata: every subject is 'thread:<id>'
    db = Database(foreign.dsn)
    try:
        # migrated after the article's agents wrote: nothing extracted yet, the backfill found empty tables
        assert all(not rows for rows in snapshot(db).values())
        our_agents(db, SCRIPT[:5])
        tool_calls.extract(db, batch=3)  # small batches: the triggers see many statements
        our_agents(db, SCRIPT[5:])
        tool_calls.extract(db, batch=7)
        assert tool_calls.checkpoints_behind(db) == 0
        calls = db.fetch_one(
            "SELECT count(*) AS n, count(*) FILTER (WHERE cliente_id IS NULL) AS anonymous, "
            "count(DISTINCT (ts AT TIME ZONE 'UTC')::date) AS days, "
            "count(DISTINCT args ->> 'tipo') AS tipos FROM core_tool_calls "
            "WHERE tool = 'recordar_preferencia'"
        )
        assert calls["anonymous"] == 18 and calls["n"] == 18 + 10 and calls["days"] == 6 and calls["tipos"] == 4
        new = assert_same_as_live(db)
        # the comparison is not vacuous: threads on several days, customers counted once per tipo
        month = (TODAY - timedelta(days=29), TODAY)
        assert new[("conversations", month)] > 0
        by_tipo = new[("by_tipo", WINDOWS[0])].set_index("tipo")
        assert by_tipo.loc["recogida", "writes"] == 4 + 6 and by_tipo.loc["recogida", "customers"] == 3 + 6
        writers = new[("writers", WINDOWS[0], 50, 0)].set_index("thread_id")
        assert (
            writers.loc["cliente-C1-1", "writes"] == 3 and writers.loc["cliente-C1-1", "tipos"] == "horario, recogida"
        )
        assert new[("applied counts", 500)][0] > 0
        before = assert_equal_to_backfill(db)

        # the sweep's prune of a thread the checkpointer deleted
        PostgresSaver(db.pool).delete_thread("cliente-C3-1")
        assert tool_calls.sweep_step(db).pruned > 0
        assert_same_as_live(db)
        assert_equal_to_backfill(db)

        # erasure of one of our customers (cliente_id) and of an article customer (threads without one)
        for customer in ("C1", "C9"):
            threads = evidence.preview(db, customer, DEFAULT)
            everything = threads.thread_ids + threads.residue_threads
            assert all(n > 0 for n in naming_rows(db, customer, everything).values())
            result = erasure.erase(
                db,
                customer,
                operator="dpo@example.com",
                config=DEFAULT,
                decisions={t: "erase" for t in threads.residue_threads},
            )
            assert result.status == "complete", result.report
            counted = {e.table: e.result for e in result.evidence}
            assert {t: counted[t] for t in NAMING} == dict.fromkeys(NAMING, 0)  # the evidence counts them: 0
            assert any(result.counts_before[t] > 0 for t in NAMING)
            assert naming_rows(db, customer, result.thread_ids) == dict.fromkeys(NAMING, 0)
            assert_same_as_live(db)
            assert_equal_to_backfill(db)
        assert db.fetch_one("SELECT count(*) AS n FROM core_tool_calls WHERE cliente_id = 'C1'")["n"] == 0

        # a TRUNCATE empties the rollups; re-extracting everything rebuilds them
        kept = snapshot(db)
        assert kept != before
        db.execute("TRUNCATE core_tool_calls, core_thread_days")
        assert all(not rows for rows in snapshot(db).values())
        tool_calls.extract(db, lookback=timedelta(days=3650))
        assert snapshot(db) == kept
        assert_same_as_live(db)
    finally:
        db.close()


def test_an_update_of_the_base_rows_keeps_the_rollups_exact(db):
    """Nothing in the code updates an extracted row, but a DBA may (e.g. fix a mis-tagged customer):
    the UPDATE triggers keep every rollup equal to the backfill and the reads equal to the live queries."""
    our_agents(db, SCRIPT)
    tool_calls.extract(db)
    db.execute("UPDATE core_tool_calls SET cliente_id = NULL WHERE thread_id = 'cliente-C2-1'")
    db.execute("UPDATE core_tool_calls SET ts = ts - interval '1 day' WHERE thread_id = 'cliente-C5-1'")
    db.execute("UPDATE core_thread_days SET day = day - 1, cliente_id = 'C9' WHERE thread_id = 'cliente-C1-1'")
    assert_same_as_live(db)
    assert_equal_to_backfill(db)
