"""Issue 52, cluster C: the extraction (core/history/tool_calls.py) and its rollups live in the dashboard's own
database. With it apart, the extraction reads the keys after its watermark from the change follower's shadow (ours),
decodes on the agents' side and writes in one transaction of ours: the agents' database receives nothing of it, and
every table of ours holds what the default layout (one database) holds for the same agents' rows. The readers
(Preferences, thread search, usage, Degradation, a customer's history, answer context, the exporter, the prune's
"not extracted yet") read ours. Writes come from the real tools: our retail agent (scripted model, stores in checkpoint
metadata), stock graphs and the memory article's agents; a crash between the decode and the write repeats the batch
without counting anything twice."""

from __future__ import annotations

import contextlib
import uuid
from datetime import date, timedelta

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool
from streamlit.testing.v1 import AppTest

from core.capture.follower import catch_up, drop_slot
from core.db import Database, forget_dashboard_database, use_dashboard_database
from core.history import answer_context, replica_health, thread_search, tool_calls, usage
from core.memory import customer_stores, preferences
from core.memory import history as memory_history
from core.memory.customer_stores import StoreSources
from core.migrate import migrate_dashboard
from core.operations.exporter import usage_metrics
from core.storage.prune import PrunePolicy, plan_batch, take_cut
from tests import own_db
from tests.capture_writes import article_turns, graph_turns
from tests.conftest import DIMS, dsn_for, settings_for

# The cluster's tables (core/sql/dashboard/010_extraction.sql): nine kept by the extraction, six by its triggers.
BASE_TABLES = (
    "core_extract_watermark",
    "core_tool_calls",
    "core_thread_days",
    "core_refused_payloads",
    "core_thread_summary",
    "core_message_usage",
    "core_message_no_usage",
    "core_usage_threads",
    "core_usage_days",
)
ROLLUPS = (
    "core_tool_call_days",
    "core_tool_call_subject_days",
    "core_tool_call_day_pairs",
    "core_tool_call_thread_days",
    "core_thread_last",
    "core_thread_day_pairs",
)
C_TABLES = BASE_TABLES + ROLLUPS
# Times of the write itself, not of the data (now() when the row was written).
VOLATILE = ("extracted_at", "found_at", "refreshed_at", "updated_at")
# Migration 047's backfill statements: each rollup as recomputed from its base table.
RECOMPUTED = {
    "core_tool_call_days": """
SELECT tool, (ts AT TIME ZONE 'UTC')::date AS day, coalesce(args ->> 'tipo', '?') AS tipo, clock, count(*) AS calls
FROM core_tool_calls GROUP BY 1, 2, 3, 4""",
    "core_tool_call_subject_days": """
SELECT tool, coalesce(args ->> 'tipo', '?') AS tipo, coalesce(cliente_id, 'thread:' || thread_id) AS subject,
       (ts AT TIME ZONE 'UTC')::date AS day, count(*) AS calls, max(cliente_id) AS cliente_id,
       max(CASE WHEN cliente_id IS NULL THEN thread_id END) AS thread_id
FROM core_tool_calls GROUP BY 1, 2, 3, 4""",
    "core_tool_call_day_pairs": """
SELECT tool, day, tipo, prev_day, count(*) AS subjects FROM (
    SELECT tool, tipo, day,
           lag(day, 1, '-infinity'::date) OVER (PARTITION BY tool, tipo, subject ORDER BY day) AS prev_day
    FROM (SELECT DISTINCT tool, coalesce(args ->> 'tipo', '?') AS tipo, coalesce(cliente_id, 'thread:' || thread_id)
                 AS subject, (ts AT TIME ZONE 'UTC')::date AS day FROM core_tool_calls) b) x
GROUP BY 1, 2, 3, 4""",
    "core_tool_call_thread_days": """
SELECT thread_id, tool, (ts AT TIME ZONE 'UTC')::date AS day, min(ts) AS first_ts, count(*) AS calls,
       coalesce(array_agg(DISTINCT args ->> 'tipo') FILTER (WHERE args ->> 'tipo' IS NOT NULL), '{}') AS tipos,
       max(agent) AS agent, max(cliente_id) AS cliente_id
FROM core_tool_calls GROUP BY 1, 2, 3""",
    "core_thread_last": """
SELECT thread_id, max(last_human_at) AS last_human_at, max(cliente_id) AS cliente_id
FROM core_thread_days GROUP BY 1""",
    "core_thread_day_pairs": """
SELECT day, prev_day, count(*) AS threads FROM (
    SELECT day, lag(day, 1, '-infinity'::date) OVER (PARTITION BY thread_id ORDER BY day) AS prev_day
    FROM core_thread_days) x
GROUP BY 1, 2""",
    # what the extraction adds up per thread and model, and per day, agent and model, from the messages it kept
    "core_usage_threads": """
SELECT thread_id, coalesce(model, '') AS model, max(coalesce(agent, '')) AS agent, count(*) AS messages,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cached_tokens) AS cached_tokens,
       max(ts) AS last_ts
FROM core_message_usage GROUP BY 1, 2""",
    "core_usage_days": """
SELECT (ts AT TIME ZONE 'UTC')::date AS day, coalesce(agent, '') AS agent, coalesce(model, '') AS model,
       count(*) AS messages, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
       sum(cached_tokens) AS cached_tokens
FROM core_message_usage GROUP BY 1, 2, 3""",
}
STORES = {"C1": "T001", "C2": "T001", "C3": "T002", "C4": "T002"}
SENTENCES = (
    "Prefiero recoger mis pedidos en la tienda Diagonal.",
    "Prefiero que me llaméis por teléfono.",
    "¿Qué preferencias tengo?",
    "Hola",
)


dbname = own_db.dbname


def written_there(dsn: str, tables: tuple[str, ...] = C_TABLES) -> dict[str, int]:
    return own_db.written_there(dsn, tables)


def contents(dsn: str, tables: tuple[str, ...] = C_TABLES) -> dict[str, list[str]]:
    return own_db.contents(dsn, tables, VOLATILE)


def recount_differences(dsn: str, *, pruned: bool = False) -> dict[str, int]:
    """Rows of each rollup not in its recount from the base rows, and the reverse (EXCEPT both ways). After threads
    were pruned, core_usage_days is left out: it keeps what the deleted threads cost."""
    out = {}
    with psycopg.connect(dsn) as conn:
        for table, sql in RECOMPUTED.items():
            if pruned and table == "core_usage_days":
                continue
            kept = f"SELECT * FROM {table}"
            ahead = conn.execute(f"SELECT count(*) FROM (({kept}) EXCEPT ({sql})) d").fetchone()
            behind = conn.execute(f"SELECT count(*) FROM (({sql}) EXCEPT ({kept})) d").fetchone()
            if ahead[0] or behind[0]:
                out[table] = ahead[0] + behind[0]
    return out


def store_turns(dsn: str, seed: int, turns: int) -> None:
    """Our retail agent (scripted model, stock PostgresSaver and our store), each customer's conversations held for
    their store (STORES: the `tienda` checkpoint metadata customer_stores reads)."""
    import random

    from core.agents.retail import ContextoCliente, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    rng = random.Random(seed)
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with ConnectionPool(dsn, min_size=1, max_size=4, kwargs=kwargs) as pool:
        store = build_store(pool, OfflineHashEmbeddings(DIMS), DIMS)
        agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(pool))
        for i in range(turns):
            customer = sorted(STORES)[i % len(STORES)]
            text = SENTENCES[i % 2] if i < 2 * len(STORES) else rng.choice(SENTENCES)
            context = ContextoCliente(customer, tienda=STORES[customer])
            run_turn(agent, context, f"cliente-{customer}-{rng.randrange(2)}", text)


def store_tagged_without_customer(dsn: str) -> None:
    """A stock graph's run whose metadata names only a store (T009), and the document whose `hilo` back-link names
    that thread (customer H1, written by the stock store): the metadata source finds the customer by the link."""
    from langgraph.graph import START, MessagesState, StateGraph

    from tests.capture_writes import vector_store

    def reply(state: MessagesState):
        return {"messages": [("ai", "vale")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        compiled = graph.compile(checkpointer=PostgresSaver(conn))
        compiled.invoke(
            {"messages": [("user", "hola")]}, {"configurable": {"thread_id": "hilo-1"}, "metadata": {"tienda": "T009"}}
        )
    conn, store = vector_store(dsn)
    with conn:
        store.put(
            ("clientes", "H1"), "pref-recogida", {"tipo": "recogida", "valor": "Sol", "hilo": "hilo-1"}, index=False
        )


@pytest.fixture(scope="module")
def written(create_database):
    """A migrated agents' database written by the real agents, never read by a pool: the template of each test's
    two copies (CREATE DATABASE ... TEMPLATE needs it without sessions)."""
    dsn = create_database(prefix="cwritten")
    store_turns(dsn, 1, 16)
    store_tagged_without_customer(dsn)
    graph_turns(dsn, 2, 4)
    article_turns(dsn, 3, 3)
    return dsn


@pytest.fixture
def layouts(written, pg_dsn):
    """See own_db.two_layouts."""
    with own_db.two_layouts(pg_dsn, written, "c") as dsns:
        yield dsns


def extract_both(*dsns: str, **kwargs) -> None:
    for dsn in dsns:
        catch_up(dsn)  # the change follower's shadow, where each layout keeps it
        tool_calls.extract(Database(dsn), batch=5, **kwargs)


frames_equal = own_db.frames_equal


@pytest.mark.slow  # real agents write the database; four databases
def test_apart_the_extraction_keeps_the_same_rows_in_ours_and_writes_nothing_in_the_agents_database(layouts):
    default, split, ours = layouts
    extract_both(default, split)
    assert written_there(split) == {}  # not one row of the cluster's in the agents' database
    kept = contents(ours)
    assert kept == contents(default)
    for table in (
        "core_tool_calls",
        "core_thread_days",
        "core_thread_summary",
        "core_tool_call_days",
        "core_thread_last",
    ):
        assert kept[table], table
    assert recount_differences(ours) == {}
    assert tool_calls.checkpoints_behind(Database(split)) == 0

    # every reader of the cluster gives what it gives on one database
    d, s = Database(default), Database(split)
    since, until = date.today() - timedelta(days=29), date.today()
    frames_equal(preferences.preference_daily(s, since, until), preferences.preference_daily(d, since, until))
    assert preferences.preference_daily(s, since, until)["writes"].sum() > 0
    frames_equal(preferences.preference_by_tipo(s, since, until), preferences.preference_by_tipo(d, since, until))
    frames_equal(preferences.writing_conversations(s, since, until), preferences.writing_conversations(d, since, until))
    assert preferences.conversations(s, since, until) == preferences.conversations(d, since, until) > 0
    assert preferences.clocks(s, since, until) == preferences.clocks(d, since, until)
    applied = preferences.preferences_applied(s)
    frames_equal(applied.proposals, preferences.preferences_applied(d).proposals)
    assert thread_search.status_counts(s).counts == thread_search.status_counts(d).counts
    assert thread_search.status_counts(s).total > 0
    query = thread_search.ThreadQuery()
    frames_equal(thread_search.search_threads(s, query).threads, thread_search.search_threads(d, query).threads)
    assert thread_search.agents(s) == thread_search.agents(d)
    frames_equal(usage.usage_by_day(s, since, until, ()), usage.usage_by_day(d, since, until, ()))
    frames_equal(usage.usage_by_thread(s, since, until, ()), usage.usage_by_thread(d, since, until, ()))
    summary_s, summary_d = replica_health.summary(s), replica_health.summary(d)
    assert summary_s["refused_in_sql"] == summary_d["refused_in_sql"]
    assert summary_s["refused_scanned_at"] is not None
    for customer in ("C1", "C3"):
        mine, theirs = memory_history.customer_history(s, customer), memory_history.customer_history(d, customer)
        assert mine is not None and theirs is not None
        frames_equal(mine.frame(), theirs.frame())
        assert any(w.source == memory_history.SOURCE_TOOL_CALL for w in mine.writes)
    uses = answer_context.answers_using(s, "clientes.C1", "pref-recogida")
    frames_equal(uses, answer_context.answers_using(d, "clientes.C1", "pref-recogida"))
    assert not uses.empty
    metrics = {}
    for name, dsn in (("split", split), ("default", default)):
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            metrics[name] = [
                (m.name, sorted((tuple(x.labels.items()), x.value) for x in m.samples)) for m in usage_metrics(conn, ())
            ]
    assert metrics["split"] == metrics["default"]
    # the prune keeps what the extraction has not read: the same plan on both (the watermark passed from ours)
    policy = PrunePolicy(keep_latest=1)
    planned = {}
    for name, dsn in (("split", split), ("default", default)):
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            cut = take_cut(conn, policy)
            with conn.transaction(force_rollback=True):
                planned[name] = sum(p.checkpoints for p in plan_batch(conn, cut, list(cut), policy.keep_latest))
    assert planned["split"] == planned["default"] > 0

    # a thread the agents delete: its rows go at the sweep's step on both layouts (apart: by the follower's shadow)
    thread = "cliente-C1-0"
    for dsn in (default, split):
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
            PostgresSaver(conn).delete_thread(thread)
    pruned = {name: tool_calls.sweep_step(Database(dsn)).pruned for name, dsn in (("s", split), ("d", default))}
    assert pruned["s"] == pruned["d"] > 0
    after = contents(ours)
    assert after == contents(default)
    assert not any(thread in row for row in after["core_tool_calls"])
    assert recount_differences(ours, pruned=True) == {}
    assert written_there(split) == {}


SELECT_FIFTH_KEY = """
SELECT ts, thread_id, checkpoint_ns, checkpoint_id FROM core_checkpoint_shadow
ORDER BY ts, thread_id, checkpoint_ns, checkpoint_id OFFSET 4 LIMIT 1"""


@pytest.mark.slow  # real agents write the database
@pytest.mark.parametrize("when", ["after the decode", "after the write, before its commit"])
def test_a_crash_between_the_decode_and_the_commit_repeats_the_batch_and_counts_nothing_twice(
    layouts, monkeypatch, when
):
    """Batches of 5 checkpoints: the first commits, the process dies in the second, after (2) decoded on the agents'
    side, or after (3) wrote in ours but before its commit. What ours keeps is the first batch's; the next run repeats
    the second from the watermark and ends with what one database keeps, every rollup equal to its recount."""
    default, split, ours = layouts
    real_decode, real_write = tool_calls.decode_batch, tool_calls.write_batch
    calls = {"decode": 0, "write": 0}

    def decode_then_crash(conn, keys):
        found = real_decode(conn, keys)
        calls["decode"] += 1
        if when == "after the decode" and calls["decode"] == 2:
            raise RuntimeError("the process died between the decode and the write")
        return found

    def write_then_crash(conn, decoded):
        found = real_write(conn, decoded)
        calls["write"] += 1
        if when != "after the decode" and calls["write"] == 2:
            assert found["calls"] + found["thread_days"] + found["threads"] > 0  # it had written rows
            raise RuntimeError("the process died before the write's commit")
        return found

    monkeypatch.setattr(tool_calls, "decode_batch", decode_then_crash)
    monkeypatch.setattr(tool_calls, "write_batch", write_then_crash)
    split_db = Database(split)
    catch_up(split)
    with pytest.raises(RuntimeError):
        tool_calls.extract(split_db, batch=5)
    assert calls["decode"] == 2
    with psycopg.connect(ours) as conn:
        fifth = conn.execute(SELECT_FIFTH_KEY).fetchone()
    assert tool_calls.watermark(split_db) == tool_calls.Watermark(*fifth)  # the first batch's, committed
    first_batch = contents(ours)
    monkeypatch.undo()
    tool_calls.extract(split_db, batch=5)  # the run after the crash: from the watermark committed last
    extract_both(default)
    kept = contents(ours)
    assert kept == contents(default)
    assert kept["core_usage_threads"] and kept["core_usage_days"] and kept["core_tool_call_day_pairs"]  # sums to break
    inserted_once = ("core_tool_calls", "core_refused_payloads", "core_message_usage", "core_message_no_usage")
    assert all(set(first_batch[t]) <= set(kept[t]) for t in inserted_once)  # kept, never inserted twice
    assert recount_differences(ours) == {}
    # a look-back over everything writes every batch again: not one figure moves
    tool_calls.extract(split_db, batch=5, lookback=timedelta(days=3650))
    assert contents(ours) == kept
    assert written_there(split) == {}


@pytest.mark.slow  # real agents write the database
def test_a_store_managers_preference_figures_hold_their_stores_customers_only_apart(layouts):
    default, split, ours = layouts
    extract_both(default, split)
    since, until = date.today() - timedelta(days=29), date.today()
    figures = {}
    for name, dsn in (("split", split), ("default", default)):
        db = Database(dsn)
        result = customer_stores.refresh(db, settings_for(dsn))
        assert not result.errors
        scope = StoreSources.from_settings(settings_for(dsn)).scope(["T001"])
        figures[name] = {
            "daily": preferences.preference_daily(db, since, until, scope=scope),
            "by_tipo": preferences.preference_by_tipo(db, since, until, scope=scope),
            "writers": preferences.writing_conversations(db, since, until, scope=scope),
            "count": preferences.writing_conversation_count(db, since, until, scope=scope),
            "conversations": preferences.conversations(db, since, until, scope=scope),
            "clocks": preferences.clocks(db, since, until, scope=scope),
            "applied": preferences.preferences_applied(db, scope=scope).proposals,
            "all": preferences.preference_by_tipo(db, since, until),
        }
    split_figures, default_figures = figures["split"], figures["default"]
    for key in ("daily", "by_tipo", "writers", "applied", "all"):
        frames_equal(split_figures[key], default_figures[key])
    for key in ("count", "conversations", "clocks"):
        assert split_figures[key] == default_figures[key]
    # ... and they are the calls of T001's customers (C1, C2) only, as SQL over ours counts them
    mine = sorted(c for c, store in STORES.items() if store == "T001")
    with psycopg.connect(ours) as conn:
        calls = conn.execute(
            "SELECT count(*) FROM core_tool_calls WHERE tool = 'recordar_preferencia' AND cliente_id = ANY(%s)",
            (mine,),
        ).fetchone()[0]
        every = conn.execute("SELECT count(*) FROM core_tool_calls WHERE tool = 'recordar_preferencia'").fetchone()[0]
    assert 0 < calls < every
    assert split_figures["by_tipo"]["writes"].sum() == split_figures["daily"]["writes"].sum() == calls
    assert split_figures["all"]["writes"].sum() == every
    assert set(split_figures["writers"]["cliente_id"]) == set(mine)
    assert set(split_figures["applied"]["cliente_id"]) <= set(mine)
    scope = StoreSources.from_settings(settings_for(split)).scope(["T001"])
    uses = answer_context.answers_using(Database(split), "clientes.C3", "pref-recogida", scope=scope)
    assert uses.empty  # another store's customer: nothing
    assert not answer_context.answers_using(Database(split), "clientes.C1", "pref-recogida", scope=scope).empty


@pytest.mark.slow  # the memory article's agents write a database of their own
def test_the_articles_agents_database_apart_keeps_what_one_database_keeps(article_agents, pg_dsn):
    written_db = article_agents()
    default = own_db.copy_of(pg_dsn, written_db.dsn, "cartdefault")
    split = written_db.dsn
    ours = dsn_for(pg_dsn, dbname(split) + "_dashboard")
    use_dashboard_database(split, ours)
    try:
        migrate_dashboard(ours)
        migrated = written_there(split)  # what the agents'-side migrations wrote there (080 rewinds the watermark)
        extract_both(default, split)
        assert written_there(split) == migrated
        kept = contents(ours)
        assert kept == contents(default)
        assert kept["core_tool_calls"] and kept["core_thread_summary"]
        assert recount_differences(ours) == {}
        since, until = date.today() - timedelta(days=29), date.today()
        d, s = Database(default), Database(split)
        frames_equal(preferences.preference_by_tipo(s, since, until), preferences.preference_by_tipo(d, since, until))
        assert thread_search.status_counts(s).counts == thread_search.status_counts(d).counts
    finally:
        for dsn in (default, split, ours):
            Database(dsn).close()
        forget_dashboard_database(split)
        for dsn in (default, split):
            with contextlib.suppress(psycopg.Error):
                drop_slot(dsn)


LIVE_MESSAGES = """
WITH live AS (
    SELECT m.thread_id, m.kind, m.tool_calls,
           (coalesce(core_try_timestamptz(c.metadata ->> 'core_replayed_at'), m.ts) AT TIME ZONE 'UTC')::date AS day
    FROM core_checkpoint_messages_view m
    JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)
    WHERE m.kind IN ('human', 'ai'))
SELECT (SELECT count(DISTINCT thread_id) FROM live WHERE kind = 'human' AND day BETWEEN %(since)s AND %(until)s)
       AS conversations,
       (SELECT count(*) FROM live l CROSS JOIN LATERAL jsonb_array_elements(l.tool_calls) AS call
        WHERE l.kind = 'ai' AND call ->> 'name' = 'recordar_preferencia' AND l.day BETWEEN %(since)s AND %(until)s)
       AS writes"""


@pytest.mark.slow  # real agents write the database; a page run
def test_the_preferences_page_apart_shows_the_agents_rows(layouts, app_env):
    from apptools import as_int, metric

    _, split, ours = layouts
    since, until = date.today() - timedelta(days=29), date.today()
    with psycopg.connect(split, row_factory=dict_row) as conn:
        live = conn.execute(LIVE_MESSAGES, {"since": since, "until": until}).fetchone()
    assert live["conversations"] > 0 and live["writes"] > 0
    moved(split)
    app_env(split)  # the page's process knows our database by registration (PG_DASHBOARD is still refused)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.run()
    at.switch_page("app_pages/preferences.py").run()
    assert not at.exception
    assert as_int(metric(at, "Conversaciones")) == live["conversations"]
    assert as_int(metric(at, "Escrituras de preferencias")) == live["writes"]
    assert contents(ours)["core_tool_calls"]


def moved(split: str) -> None:
    """The upgrade in place on the split copy: a start with PG_DASHBOARD refuses an agents' database that still holds
    the dashboard's tables (core.migrate.NotMoved). None of the cluster's tables is left there after it."""
    from core.own_database import move

    move(split, log=lambda _: None)
    with psycopg.connect(split) as conn:
        left = conn.execute("SELECT relname FROM pg_class WHERE relname = ANY(%s)", (list(C_TABLES + G_TABLES),))
        assert left.fetchall() == []


def page(dsn: str, app_env, path: str, query: dict[str, str] | None = None) -> AppTest:
    app_env(dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    at.switch_page(path).run()
    assert not at.exception
    return at


@pytest.mark.slow  # real agents write the database; page runs on two databases
def test_the_checkpoints_and_degradation_pages_apart_show_what_one_database_shows(layouts, app_env):
    from apptools import as_int, frame, metric

    default, split, ours = layouts
    moved(split)
    shown = {}
    for name, dsn in (("split", split), ("default", default)):
        search = page(dsn, app_env, "app_pages/checkpoints.py", {"view": "search"})  # the page extracts first
        cost = page(dsn, app_env, "app_pages/checkpoints.py", {"view": "cost"})
        degradation = page(dsn, app_env, "app_pages/degradation.py")
        shown[name] = (
            as_int(metric(search, "Hilos encontrados")),
            sorted(frame(search, "thread_id", "status")["thread_id"]),
            frame(cost, "thread_id", "cost_usd").sort_values("thread_id").to_dict("records"),
            metric(degradation, "Rechazables en SQL"),
        )
    assert shown["split"] == shown["default"]
    assert shown["split"][0] > 0 and shown["split"][2]
    with psycopg.connect(split) as conn:
        threads = conn.execute("SELECT count(DISTINCT thread_id) FROM checkpoints WHERE checkpoint_ns = ''").fetchone()
    assert shown["split"][0] == threads[0]


@pytest.mark.slow  # real agents write the database; an erasure on each layout
def test_an_erasure_apart_removes_the_customers_rows_from_ours_and_the_rollups_follow(layouts):
    """The erasure (cluster E, both databases) deletes the customer's extracted rows in ours; the rollups follow
    through their triggers there, and ours ends as one database ends."""
    from core.privacy import erasure

    default, split, ours = layouts
    extract_both(default, split)
    results = {
        name: erasure.erase(Database(dsn), "C1", operator="dpo@example.com")
        for name, dsn in (("split", split), ("default", default))
    }
    assert results["split"].complete and results["default"].complete
    assert results["split"].thread_ids == results["default"].thread_ids != []
    kept = contents(ours)
    assert kept == contents(default)
    named = [row for t in C_TABLES for row in kept[t] if '"C1"' in row or "cliente-C1-" in row]
    assert named == []
    assert kept["core_tool_calls"]  # the other customers' rows stay
    assert recount_differences(ours, pruned=True) == {}
    assert written_there(split) == {}


def test_a_pages_statement_timeout_holds_on_our_database_too(split_db, db):
    """ui.common's expensive reads run under a statement timeout: the cluster's readers reach ours through `db.ours`,
    which keeps it (and is the same database where ours is the agents')."""
    timed = split_db.with_statement_timeout(1234)
    with timed.ours.connection() as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == {"statement_timeout": "1234ms"}
        assert conn.info.dbname.endswith("_dashboard")
    same = db.with_statement_timeout(1234)
    assert same.ours is same


@pytest.mark.slow  # real agents write the database; the deployment's roles
def test_the_sweep_jobs_role_extracts_into_ours_with_the_deployments_grants(layouts):
    """deploy/sweeper-grants.sql on the agents' database and deploy/dashboard-database-grants.sql on ours: the sweep
    job's role reads the keys in ours, decodes on the agents' side and writes ours, rollups included."""
    from tests.conftest import ROOT, grant_our_functions

    default, split, ours = layouts
    role = "agent_memory_sweeper"
    with psycopg.connect(split, autocommit=True) as conn:
        conn.execute((ROOT / "deploy" / "sweeper-grants.sql").read_text())
    grant_our_functions(split, role)
    follower = f"capture_{uuid.uuid4().hex[:8]}"  # the file's other role (deploy/capture-grants.sql creates it)
    grants = (ROOT / "deploy" / "dashboard-database-grants.sql").read_text().replace("agent_memory_capture", follower)
    with psycopg.connect(ours, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {follower} LOGIN")
        conn.execute(grants.replace("DATABASE agent_memory_dashboard", f'DATABASE "{dbname(ours)}"'))
    as_sweeper = {dsn: psycopg.conninfo.make_conninfo(dsn, user=role) for dsn in (split, ours)}
    catch_up(split)  # the follower's own role keeps the shadow (the sweeper cannot read the slot)
    use_dashboard_database(split, as_sweeper[ours])  # the sweep job's process: its own credentials for ours
    sweeper = Database(as_sweeper[split])
    try:
        result = tool_calls.sweep_step(sweeper)
        mapped = customer_stores.refresh(sweeper, settings_for(split), trigger="sweep")  # the sweep's other step here
    finally:
        sweeper.close()
        sweeper.ours.close()
        use_dashboard_database(split, ours)
    assert result.calls > 0 and result.error is None
    assert not mapped.errors and mapped.with_store > 0
    catch_up(default)
    tool_calls.sweep_step(Database(default))  # the same batches (which metadata a thread-day keeps follows them)
    assert contents(ours) == contents(default)
    assert customer_stores.refresh(Database(default), settings_for(default)).customers == mapped.customers
    with psycopg.connect(ours) as mine, psycopg.connect(default) as one_db:
        assert mine.execute(SELECT_MAPPING).fetchall() == one_db.execute(SELECT_MAPPING).fetchall()
    assert recount_differences(ours) == {}
    assert written_there(split) == {}


# Cluster G (core/sql/dashboard/011): the store mapping.
G_TABLES = ("core_customer_stores", "core_customer_store_sources", "core_customer_store_refresh")
SELECT_MAPPING = "SELECT source, cliente_id, tienda, rank, effective FROM core_customer_stores ORDER BY 1, 2, 3"


@pytest.mark.slow  # real agents write the database
def test_the_store_mapping_apart_is_refreshed_in_ours_from_the_agents_rows(layouts):
    """customer_stores.refresh with our database apart: each source read on the agents' side (checkpoint metadata, the
    customers' documents), the mapping, its sources' status and its totals written in ours, equal to one database's;
    the agents' database receives nothing of it, and a manager's scope is read there."""
    default, split, ours = layouts
    extract_both(default, split)  # the refresh's totals count the customers the extraction read too
    results, mappings = {}, {}
    for name, dsn in (("split", split), ("default", default)):
        results[name] = customer_stores.refresh(Database(dsn), settings_for(dsn))
        with psycopg.connect(ours if name == "split" else dsn) as conn:
            mappings[name] = conn.execute(SELECT_MAPPING).fetchall()
    split_result, default_result = results["split"], results["default"]
    assert not split_result.errors
    assert (split_result.customers, split_result.with_store, split_result.without_store) == (
        default_result.customers,
        default_result.with_store,
        default_result.without_store,
    )
    assert [(s.source, s.customers, s.pairs, s.error) for s in split_result.sources] == [
        (s.source, s.customers, s.pairs, s.error) for s in default_result.sources
    ]
    assert mappings["split"] == mappings["default"]
    effective = {(c, t) for _, c, t, _, is_effective in mappings["split"] if is_effective}
    assert set(STORES.items()) | {("H1", "T009")} <= effective  # H1: by the `hilo` of its document, in ours
    assert written_there(split, G_TABLES) == {}
    names = StoreSources.from_settings(settings_for(split)).names()
    status = customer_stores.mapping_status(Database(split), names)
    assert status.refreshed_at is not None and status.usable and status.customers == split_result.customers
    scope = StoreSources.from_settings(settings_for(split)).scope(["T001"])
    of_t001 = sorted({c for _, c, t, _, effective in mappings["default"] if effective and t == "T001"})
    assert {"C1", "C2"} <= set(of_t001) and "C3" not in of_t001
    assert customer_stores.scope_customer_ids(Database(split), scope) == of_t001
    assert customer_stores.scope_customers(Database(split), scope) == len(of_t001)
    found = memory_history.customer_history(Database(split), "C3", scope=scope)
    assert found is None  # another store's customer
    assert memory_history.customer_history(Database(split), "C1", scope=scope) is not None
