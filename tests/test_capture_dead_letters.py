"""Issue 51 items 4-6 and the follower's dead letters (item 5 of what to build), on the real embedded server with
stock PostgresStore writes: a row the follower cannot apply never stops it.

Some rows below are shaped by SQL after a real `PostgresStore.put`, because the store's API cannot produce them and
the defect is about that row shape in the WAL: an `expires_at` in year 11026 or 'infinity' (the API takes a TTL in
minutes), an UPDATE of a document's key (PostgresStore never updates keys; any SQL client of the agents' database
may). The publication's row filter is an operator's `ALTER PUBLICATION`."""

from __future__ import annotations

import random
import string

import psycopg
import pytest
from langgraph.store.postgres import PostgresStore

from core.capture.follower import CaptureNotAllowed, catch_up, drop_slot
from core.capture.verify import differences
from core.db import Database


@pytest.fixture
def capture_dsn(create_database):
    dsn = create_database(migrated=True, prefix="capture_dl")
    catch_up(dsn)  # creates the slot
    yield dsn
    drop_slot(dsn)


def noise(n: int, seed: int) -> str:
    """Incompressible text: a value this long is stored out of line (TOAST), a key or link this long exceeds a btree
    entry."""
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=n))


def sql(dsn: str, statement: str, params: tuple = ()) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)


def test_a_document_expiring_in_year_11026_or_never_is_applied_and_equals_a_recount(capture_dsn):
    """Item 4: `expires_at` in year 11026 (text '11026-12-01 ...': the day is not its first ten characters) and
    'infinity' are applied; the follower goes on and every aggregate equals a recount."""
    dsn = capture_dsn
    with PostgresStore.from_conn_string(dsn) as store:
        store.put(("clientes", "Y1"), "lejos", {"texto": "hasta el año 11026"}, ttl=60)
        store.put(("clientes", "Y1"), "nunca", {"texto": "para siempre"}, ttl=60)
        store.put(("memorias", "Y1"), "antes", {"texto": "antes de Cristo"}, ttl=60)
    sql(dsn, "UPDATE store SET expires_at = '11026-12-01 10:00:00+00' WHERE key = 'lejos'")
    sql(dsn, "UPDATE store SET expires_at = 'infinity' WHERE key = 'nunca'")
    sql(dsn, "UPDATE store SET expires_at = '0044-03-15 12:00:00+00 BC' WHERE key = 'antes'")
    catch_up(dsn, 20)
    assert differences(dsn) == {}
    with PostgresStore.from_conn_string(dsn) as store:  # and it goes on
        store.put(("clientes", "Y2"), "despues", {"texto": "después"}, ttl=60)
        store.delete(("clientes", "Y1"), "lejos")
    catch_up(dsn, 20)
    assert differences(dsn) == {}


def test_a_row_filter_added_to_the_publication_is_refused_then_recounted(capture_dsn):
    """Item 5: `ALTER PUBLICATION ... WHERE (...)` hides every filtered row from the slot. The follower says so (it
    never reports itself caught up while missing them) and, once the publication is as the migrations made it,
    recounts: every aggregate equals a recount."""
    dsn = capture_dsn
    sql(dsn, "ALTER PUBLICATION core_capture DROP TABLE store")
    sql(
        dsn,
        "ALTER PUBLICATION core_capture ADD TABLE store (prefix, key, value, updated_at, expires_at) "
        "WHERE (prefix <> 'clientes.OCULTO')",
    )
    with PostgresStore.from_conn_string(dsn) as store:
        store.put(("clientes", "OCULTO"), "pref", {"tipo": "idioma", "valor": "es"})
        store.put(("clientes", "VISTO"), "pref", {"tipo": "idioma", "valor": "eu"})
    with pytest.raises(CaptureNotAllowed, match=r"store filtered by WHERE \(prefix <> 'clientes\.OCULTO'"):
        catch_up(dsn, 10)
    sql(dsn, "ALTER PUBLICATION core_capture DROP TABLE store")
    sql(dsn, "ALTER PUBLICATION core_capture ADD TABLE store (prefix, key, value, updated_at, expires_at)")
    catch_up(dsn, 20)
    assert differences(dsn) == {}


def test_a_key_change_keeps_the_hashes_and_hilo_of_an_unchanged_toasted_value(capture_dsn):
    """Item 6: an UPDATE of a document's key that leaves its out-of-line (TOASTed) value alone: pgoutput sends the
    value as 'unchanged', and the follower keeps its hashes and `hilo` link (from its shadow of the document, or from
    the row when the document was not a customer's before). PostgresStore never updates keys: the UPDATE is SQL, the
    row shape is what any SQL client of the agents' database writes."""
    dsn = capture_dsn
    big = {"texto": noise(40_000, 1), "hilo": "cliente-T1-1", "nota": "valor grande"}
    other = {"texto": noise(40_000, 2), "hilo": "cliente-T2-9"}
    with PostgresStore.from_conn_string(dsn) as store:
        store.put(("clientes", "T1"), "grande", big)
        store.put(("borradores", "T2"), "grande", other)
    catch_up(dsn, 20)
    with psycopg.connect(dsn) as conn:  # stored out of line: the UPDATEs below do not send it
        external = conn.execute("SELECT bool_and(pg_column_toast_chunk_id(value) IS NOT NULL) FROM store").fetchone()
    assert external == (True,)
    sql(dsn, "UPDATE store SET key = 'grande-2' WHERE prefix = 'clientes.T1' AND key = 'grande'")
    sql(dsn, "UPDATE store SET prefix = 'clientes.T2' WHERE prefix = 'borradores.T2' AND key = 'grande'")
    catch_up(dsn, 20)
    assert differences(dsn) == {}
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT prefix, key, hilo FROM core_store_shadow ORDER BY 1").fetchall() == [
            ("clientes.T1", "grande-2", "cliente-T1-1"),
            ("clientes.T2", "grande", "cliente-T2-9"),
        ]


def test_a_row_that_cannot_be_applied_is_a_dead_letter_and_the_rest_is_applied(capture_dsn):
    """A customer's document whose `hilo` is longer than a btree entry of our shadow's link index admits (the store
    has no index on it: the agent's write succeeds) cannot be applied. The follower records it (slot position,
    table, key, error, time), applies every other change of the batch and after it, and names the aggregates it
    touches as unknown; the document deleted, a recount clears them and every aggregate equals a recount."""
    from core.capture.follower import request_recount
    from core.capture.status import capture_status, open_dead_letters

    dsn = capture_dsn
    with PostgresStore.from_conn_string(dsn) as store:
        store.put(("clientes", "D1"), "antes", {"texto": "antes", "hilo": "cliente-D1-1"})
        store.put(("clientes", "D1"), "veneno", {"texto": "no cabe", "hilo": noise(3_000, 3)})
        store.put(("clientes", "D2"), "despues", {"texto": "después", "hilo": "cliente-D2-1"})
    catch_up(dsn, 20)
    db = Database(dsn)
    try:
        letters = open_dead_letters(db)
        assert list(letters["table_name"]) == ["store"]
        assert list(letters["row_key"]) == ["clientes.D1 / veneno"]
        assert "index row size" in letters["error"].iloc[0]
        assert letters["lsn"].iloc[0] and letters["recorded_at"].iloc[0] is not None
        assert "clientes.D1" in letters["unknown"].iloc[0]
        assert capture_status(db).dead_letters == 1
        with psycopg.connect(dsn) as conn:  # everything else applied
            counts = dict(conn.execute("SELECT prefix, documents FROM core_prefix_counts").fetchall())
        assert counts == {"clientes.D1": 1, "clientes.D2": 1}
        with PostgresStore.from_conn_string(dsn) as store:  # the follower goes on
            store.put(("clientes", "D3"), "luego", {"texto": "luego"})
            store.delete(("clientes", "D1"), "veneno")
        request_recount(dsn)
        catch_up(dsn, 20)
        assert differences(dsn) == {}
        assert open_dead_letters(db).empty
        assert capture_status(db).dead_letters == 0
    finally:
        db.close()
