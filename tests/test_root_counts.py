"""The Memory page's totals and per-root table, and the expired-per-root read of the Sweeps page and the exporter,
from `core_root_counts` (migration 046) and `core_expiry_days` (040): always equal to the live counts over `store`
and `store_vectors` they replaced, through a stock PostgresStore (the memory article's TTL config) and our own
store: puts with and without vectors, rewrites, TTL refreshes, deletes, expiries on past days and earlier today,
the TTL sweep, an erasure, a truncate; concurrent writers of one root from several connections."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pandas as pd
import psycopg
import pytest
from conftest import DIMS, login_role
from langgraph.store.base import PutOp, TTLConfig
from langgraph.store.postgres import PostgresStore
from psycopg_pool import ConnectionPool

from core.capture.follower import catch_up
from core.memory import reads
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store, ttl_for
from core.operations import exporter, sweep, sweep_reads
from core.privacy import erasure
from core.privacy import subjects as subj

# The live queries the kept counts replaced (core/memory/reads.py and sweep_reads.py before 046).
LIVE_TOTALS = """
SELECT (SELECT count(*) FROM store) AS documents,
       (SELECT count(*) FROM store WHERE expires_at IS NOT NULL AND expires_at < now()) AS expired,
       (SELECT count(*) FROM store_vectors) AS vectors,
       (SELECT count(DISTINCT prefix) FROM store) AS namespaces,
       (SELECT count(DISTINCT prefix) FROM store WHERE split_part(prefix, '.', 1) = 'clientes') AS customers"""
LIVE_BY_ROOT = """
WITH docs AS (
    SELECT split_part(prefix, '.', 1) AS root, count(*) AS documents, count(DISTINCT prefix) AS namespaces
    FROM store GROUP BY 1
), expired AS (
    SELECT split_part(prefix, '.', 1) AS root, count(*) AS expired FROM store
    WHERE expires_at IS NOT NULL AND expires_at < now() GROUP BY 1
)
SELECT d.root, d.documents, d.namespaces, coalesce(e.expired, 0) AS expired
FROM docs d LEFT JOIN expired e USING (root) ORDER BY d.documents DESC, d.root"""


def same_as_live(db) -> reads.MemoryTotals:
    """Every read equals its live count, in one snapshot (REPEATABLE READ: the clock and the rows agree)."""
    catch_up(db.dsn)  # the change follower applies what was written (core/capture)
    with db.connection() as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        expired = reads.expired_counts_conns(conn, conn)  # ours is the agents' database here: one snapshot
        kept_totals = {**conn.execute(reads.SELECT_ROOT_TOTALS).fetchone(), "expired": sum(expired.values())}
        live_totals = conn.execute(LIVE_TOTALS).fetchone()
        kept_roots = [{**r, "expired": expired.get(r["root"], 0)} for r in conn.execute(reads.SELECT_BY_ROOT)]
        live_roots = conn.execute(LIVE_BY_ROOT).fetchall()
        conn.execute("ROLLBACK")
    assert kept_totals == live_totals
    assert kept_roots == live_roots
    # the page functions themselves, and the exporter's gauge, on the same data
    totals = reads.memory_totals(db)
    assert totals == reads.MemoryTotals(**db.fetch_one(LIVE_TOTALS))
    pd.testing.assert_frame_equal(
        reads.documents_by_root(db),
        pd.DataFrame(db.fetch(LIVE_BY_ROOT), columns=["root", "documents", "namespaces", "expired"]),
    )
    by_root = sweep_reads.expired_by_root(db).set_index("root")["expired"].to_dict()
    assert sum(by_root.values()) == totals.expired
    for r in db.fetch(LIVE_BY_ROOT):
        assert by_root[r["root"]] == r["expired"]
    with psycopg.connect(db.dsn, row_factory=psycopg.rows.dict_row) as conn:
        (gauge,) = [m for m in exporter.database_metrics(conn) if m.name.endswith("store_expired_documents")]
    assert sum(s.value for s in gauge.samples) == totals.expired
    return totals


@pytest.fixture
def stock_store(db):
    """A stock PostgresStore with the article's TTL (refresh on read), on its own pool."""
    pool = ConnectionPool(db.dsn, kwargs={"autocommit": True, "prepare_threshold": 0}, open=True)
    store = PostgresStore(pool, ttl=TTLConfig(refresh_on_read=True, default_ttl=60, sweep_interval_minutes=None))
    yield store
    pool.close()


def _spread_expiries(db) -> None:
    """Expiries on past days, earlier today, later today and on coming days (the clock cannot be moved)."""
    now = datetime.now(UTC)
    db.execute(
        "UPDATE store SET expires_at = %s + make_interval(days => (abs(hashtext(key || prefix)) %% 9) - 4)", (now,)
    )
    db.execute("UPDATE store SET expires_at = %s - interval '1 second' WHERE key LIKE '%%-1'", (now,))
    db.execute("UPDATE store SET expires_at = %s + interval '1 hour' WHERE key LIKE '%%-2'", (now,))


def test_kept_counts_equal_the_live_counts_through_a_stock_store(db, stock_store):
    assert same_as_live(db) == reads.MemoryTotals(0, 0, 0, 0, 0)
    for n in range(12):
        stock_store.put(("clientes", f"C{n}"), "pref-recogida", {"texto": f"recoger en T00{n % 3}"})
        stock_store.put(("clientes", f"C{n}", "pedidos"), f"p-{n % 3}", {"texto": f"pedido {n}"}, index=False)
        stock_store.put(("proveedores", f"P{n % 4}"), f"aviso-{n}", {"texto": "retraso"}, index=False)
    totals = same_as_live(db)
    assert (totals.documents, totals.namespaces, totals.vectors) == (36, 28, 0)
    _spread_expiries(db)
    assert same_as_live(db).expired > 0
    stock_store.put(("clientes", "C1"), "pref-recogida", {"texto": "recoger en casa"})  # rewrite
    stock_store.get(("clientes", "C2"), "pref-recogida")  # a TTL refresh on read is an UPDATE
    stock_store.delete(("clientes", "C3"), "pref-recogida")  # the namespace clientes.C3 disappears
    same_as_live(db)
    assert stock_store.sweep_ttl() > 0
    assert same_as_live(db).expired == 0
    result = erasure.erase(db, "C5", operator="dpo@example.com", config=subj.Attribution())
    assert result.status == "complete"
    same_as_live(db)


def test_kept_counts_equal_the_live_counts_with_vectors_the_sweep_and_a_truncate(db):
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    ops = [
        PutOp(
            (root, f"X{i % 5}"),
            f"k-{i}",
            {"texto": f"{root} {i}"},
            index=None if i % 2 else False,
            ttl=ttl_for((root, f"X{i % 5}")),
        )
        for root, n in (("clientes", 30), ("proveedores", 12), ("empleados", 8))
        for i in range(n)
    ]
    store.batch(ops)
    totals = same_as_live(db)
    assert totals.vectors == 25 and totals.documents == 50
    _spread_expiries(db)
    same_as_live(db)
    store.batch([PutOp(("clientes", "X1"), "k-1", None), PutOp(("empleados", "X2"), "k-2", None)])  # cascades
    same_as_live(db)
    sweep.run_sweep(db, trigger="manual")  # expired documents and their vectors deleted
    assert same_as_live(db).expired == 0
    db.execute("TRUNCATE store CASCADE")
    assert same_as_live(db) == reads.MemoryTotals(0, 0, 0, 0, 0)


def test_concurrent_writers_of_one_root_keep_the_counts_exact(db):
    """Eight connections write and delete `clientes` documents at once: the follower's deltas add up."""

    def writer(n: int) -> None:
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            store = PostgresStore(conn)
            for i in range(25):
                store.put(("clientes", f"W{n}-{i % 6}"), f"k-{i}", {"texto": str(i)}, index=False)
                if i % 4 == 0:
                    store.delete(("clientes", f"W{n}-{i % 6}"), f"k-{i}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    totals = same_as_live(db)
    assert totals.documents == 8 * (25 - 7) and totals.namespaces == 8 * 6
    # the writers never touch the totals (the shards spread the triggers' writes of 046-055); the follower alone does
    assert db.fetch_one("SELECT array_agg(DISTINCT shard) AS s FROM core_root_counts")["s"] == [0]


def test_an_agent_role_granted_on_the_store_only_keeps_the_counts(db):
    pool = ConnectionPool(
        login_role(db.dsn, "memoria_raices", "store, store_vectors, store_migrations, vector_migrations"),
        kwargs={"autocommit": True, "prepare_threshold": 0},
        open=True,
    )
    try:
        store = PostgresStore(pool)
        store.put(("empleados", "E1"), "turno", {"texto": "mañana"}, index=False)
        store.delete(("empleados", "E1"), "turno")
        store.put(("empleados", "E2"), "turno", {"texto": "tarde"}, index=False)
    finally:
        pool.close()
    assert same_as_live(db) == reads.MemoryTotals(1, 0, 0, 1, 0)


def test_the_memory_page_on_the_article_agents_database_equals_the_live_counts(article_agents, app_env):
    """Agents built from the articles alone (stock PostgresStore and PostgresSaver, none of our code): the Memory
    page's totals and per-root table, read from the kept counts, equal the live counts over their `store`, with
    documents expired on past days and earlier today."""
    from apptools import as_int, frame, metric
    from streamlit.testing.v1 import AppTest

    from core.db import Database

    written = article_agents()
    db = Database(written.dsn)
    try:
        _spread_expiries(db)
        catch_up(written.dsn)  # what a follower running beside the dashboard would have applied
        live = db.fetch_one(LIVE_TOTALS)
        assert live["documents"] > 0 and live["expired"] > 0
        app_env(written.dsn)
        at = AppTest.from_file("../dashboard.py", default_timeout=60)
        at.run()
        at.switch_page("app_pages/memory.py").run()
        assert not at.exception, at.exception
        shown = {
            k: as_int(metric(at, label))
            for k, label in (
                ("documents", "Documentos guardados"),
                ("namespaces", "Titulares con memoria"),
                ("vectors", "Buscables por significado"),
                ("expired", "Caducados pendientes de borrar"),
            )
        }
        assert shown == {k: live[k] for k in shown}
        by_root = frame(at, "root", "documents", "namespaces", "expired")
        holder = {
            "clientes": "Clientes",
            "proveedores": "Proveedores",
            "empleados": "Empleados",
        }  # as the page names them
        assert by_root.to_dict("records") == [
            dict(r, root=holder.get(r["root"], r["root"])) for r in db.fetch(LIVE_BY_ROOT)
        ]
    finally:
        db.close()
