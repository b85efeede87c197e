"""core_value_holders (migration 043): who holds each string value, kept by triggers on `store`, on a real
server through a stock PostgresStore (the memory article's TTL config): it always equals a pass over every
customer document, through new documents, rewrites, TTL refreshes on read, deletes, the TTL sweep and an
erasure; and the residue scan's commonness read from it is the one the pass gives."""

from __future__ import annotations

import psycopg
import pytest
from conftest import login_role
from langgraph.store.base import TTLConfig
from langgraph.store.postgres import PostgresStore
from psycopg_pool import ConnectionPool

from core.capture.follower import catch_up
from core.privacy import erasure
from core.privacy import residue as res
from core.privacy import subjects as subj

# the naive pass the table replaces: every customer document's distinct string values, per customer
PASS = """
SELECT hashtextextended(l, 0) AS value_hash, split_part(s.prefix, '.', 2) AS cliente_id, count(*)::integer AS documents
FROM store s CROSS JOIN LATERAL core_string_leaves(s.value) AS l WHERE s.prefix LIKE 'clientes.%' GROUP BY 1, 2"""
KEPT = "SELECT value_hash, cliente_id, documents FROM core_value_holders"


def _same(db) -> int:
    catch_up(db.dsn)  # the change follower applies what was written (core/capture)
    kept = {tuple(r.values()) for r in db.fetch(KEPT, read_only=False)}
    naive = {tuple(r.values()) for r in db.fetch(PASS, read_only=False)}
    assert kept == naive, (sorted(kept - naive)[:5], sorted(naive - kept)[:5])
    return len(kept)


@pytest.fixture
def stock_store(db):
    """A stock PostgresStore with the article's TTL (refresh on read), on its own pool."""
    pool = ConnectionPool(db.dsn, kwargs={"autocommit": True, "prepare_threshold": 0}, open=True)
    store = PostgresStore(pool, ttl=TTLConfig(refresh_on_read=True, default_ttl=60, sweep_interval_minutes=None))
    yield store
    pool.close()


def test_the_kept_holders_always_equal_a_pass_over_every_document(db, stock_store):
    for n in range(30):
        shared = {"tienda": "T002", "nota": {"anidada": ["Gran Vía", f"propia de C{n}"]}}
        stock_store.put(("clientes", f"C{n}"), "pref-recogida", {"texto": f"recoger en T00{n % 3}", **shared})
        stock_store.put(("clientes", f"C{n}", "pedidos"), "p1", {"texto": f"pedido de C{n}", "tienda": "T002"})
    stock_store.put(("proveedores", "P1"), "aviso", {"texto": "T002"})  # not a customer: never counted
    assert _same(db) > 60
    stock_store.put(("clientes", "C1"), "pref-recogida", {"texto": "recoger en casa"})  # a rewrite drops values
    stock_store.get(("clientes", "C2"), "pref-recogida")  # a TTL refresh on read is an UPDATE
    stock_store.delete(("clientes", "C3"), "pref-recogida")
    _same(db)
    with psycopg.connect(db.dsn, autocommit=True) as conn:  # some documents expire, the store's sweep deletes them
        conn.execute("UPDATE store SET expires_at = now() - interval '1 minute' WHERE prefix LIKE 'clientes.C1%%'")
    _same(db)
    assert stock_store.sweep_ttl() > 0
    _same(db)
    with db.connection() as conn:  # commonness read from the table, as a pass would count it
        terms = {t.term: t.customers for t in res.customer_terms(conn, "C5")}
    holders = {
        r["term"]: r["n"]
        for r in db.fetch(
            "SELECT l AS term, count(DISTINCT split_part(prefix, '.', 2)) AS n FROM store, core_string_leaves(value) l "
            "WHERE prefix LIKE 'clientes.%%' GROUP BY 1"
        )
    }
    assert terms == {"C5": 1} | {t: holders[t] for t in terms if t != "C5"}
    # C1 and C10-C19 were swept: 19 customers left hold T002; Gran Vía also left with C3's deleted document
    assert terms["T002"] == 19 and terms["Gran Vía"] == 18 and terms["propia de C5"] == 1
    result = erasure.erase(db, "C5", operator="dpo@example.com", config=subj.Attribution())
    assert result.status == "complete" and result.counts_before["core_value_holders"] > 0
    assert {e.table: e.result for e in result.evidence}["core_value_holders"] == 0
    _same(db)


def test_commonness_is_counted_up_to_the_cap(db, stock_store):
    for n in range(res.COUNT_CAP + 5):
        stock_store.put(("clientes", f"K{n}"), "pref-idioma", {"texto": "idioma: catalán"})
    catch_up(db.dsn)
    with db.connection() as conn:
        (term,) = [t for t in res.customer_terms(conn, "K0") if t.term == "idioma: catalán"]
    assert term.common and term.customers == res.COUNT_CAP + 1


def test_an_agent_role_granted_on_the_store_only_still_writes_its_memory(db):
    pool = ConnectionPool(
        login_role(db.dsn, "memoria", "store, store_vectors, store_migrations, vector_migrations"),
        kwargs={"autocommit": True, "prepare_threshold": 0},
        open=True,
    )
    try:
        store = PostgresStore(pool, ttl=TTLConfig(refresh_on_read=True, default_ttl=60))
        store.put(("clientes", "R1"), "pref-idioma", {"texto": "idioma: gallego"})
        store.get(("clientes", "R1"), "pref-idioma")
        store.delete(("clientes", "R1"), "pref-idioma")
        with pytest.raises(psycopg.errors.InsufficientPrivilege), pool.connection() as conn:
            conn.execute("SELECT 1 FROM core_value_holders")
    finally:
        pool.close()
    _same(db)
