"""Tamper-evident registers: real erasures, re-checks and access exports are sealed into hash chains by
the triggers of 036_register_chain.sql; editing or deleting one register row (or a link) by SQL makes
`chain.verify` fail and name that row. The erasure code itself is unchanged."""

from __future__ import annotations

import pytest

from core.capture.follower import drop_slot
from core.db import Database, reset_pool
from core.privacy import access, chain, erasure, erasure_register
from tests.own_db import copy_of
from tests.test_erasure import agents_for, converse, make_store, write_docs


@pytest.fixture(scope="module")
def built(create_database, pg_dsn):
    """Two erased customers (one re-checked twice) and three access exports, written once through the real code;
    each test gets a copy (`registers`) to tamper with."""
    db = Database(create_database(prefix="registers"))
    store = make_store(db)
    agent = agents_for(db, store)
    for customer in ("C1", "C2", "C3"):
        write_docs(store, customer, 3, nested=1)
        converse(agent, customer)
    erased = [erasure.erase(db, c, operator="dpo@example.com").request_id for c in ("C1", "C2")]
    erasure_register.recheck(db, erased[0], operator="dpo@example.com")
    erasure_register.recheck_all(db)
    exports = [
        access.export(db, "C3", fmt=f, lang="es", operator="dpo@example.com").register_id
        for f in ("json", "html", "json")
    ]
    db.close()
    reset_pool(db.dsn)  # no session left on it: it is the copies' template
    yield db.dsn, erased, exports
    drop_slot(db.dsn)


@pytest.fixture
def registers(built, pg_dsn):
    """A copy of `built` (CREATE DATABASE ... TEMPLATE), with its erased request ids and export register ids."""
    source, erased, exports = built
    db = Database(copy_of(pg_dsn, source, "registers"))
    db.erased, db.exports = erased, exports
    yield db
    reset_pool(db.dsn)
    drop_slot(db.dsn)


def links(db, name):
    return db.fetch("SELECT * FROM core_register_chain WHERE chain = %s ORDER BY position", (name,))


def test_untouched_registers_verify_and_every_final_row_is_sealed(registers):
    db = registers
    erasure_links = links(db, "erasure")
    # 2 requests + 3 re-checks (one manual, two by recheck_all), in the order they were written
    assert [(link["table_name"]) for link in erasure_links] == [
        "core_erasure_register",
        "core_erasure_register",
        "core_erasure_rechecks",
        "core_erasure_rechecks",
        "core_erasure_rechecks",
    ]
    assert [link["row_id"] for link in links(db, "access")] == registers.exports
    for name, n in (("erasure", 5), ("access", 3)):
        result = chain.verify(db, name)
        assert result.ok and result.links == n and result.problem is None, result
        assert result.head_hash == links(db, name)[-1]["row_hash"]
    # the re-checks' own updates of the request (last_recheck_*) are not an edit
    assert (
        db.fetch_one("SELECT last_recheck_at FROM core_erasure_register WHERE id = %s", (db.erased[0],))[
            "last_recheck_at"
        ]
        is not None
    )


def test_a_nullable_column_added_later_keeps_sealed_rows_valid(registers):
    db = registers
    # a later migration adding a column (as 015 added sources / residue / resumed_by)
    db.execute("ALTER TABLE core_erasure_register ADD COLUMN extra_later jsonb")
    db.execute("ALTER TABLE core_access_register ADD COLUMN note_later text")
    assert chain.verify(db, "erasure").ok and chain.verify(db, "access").ok
    # the forward link a resumed request writes on its old row is not an edit; a value in a new column is
    db.execute("UPDATE core_erasure_register SET resumed_by = %s WHERE id = %s", (db.erased[1], db.erased[0]))
    assert chain.verify(db, "erasure").ok
    db.execute("UPDATE core_erasure_register SET extra_later = '[]' WHERE id = %s", (db.erased[1],))
    result = chain.verify(db, "erasure")
    assert (result.ok, result.row_id, result.problem) == (False, db.erased[1], "edited")


def test_a_dba_editing_an_erasures_counts_is_caught(registers):
    db = registers
    target = db.erased[1]
    db.execute(
        "UPDATE core_erasure_register SET counts_after = '{\"store\": 0}', deleted = deleted || "
        "'{\"store\": 999}' WHERE id = %s",
        (target,),
    )
    result = chain.verify(db, "erasure")
    assert not result.ok
    assert (result.table, result.row_id, result.problem) == ("core_erasure_register", target, "edited")
    assert f"core_erasure_register #{target} was changed after it was sealed" == result.detail
    assert chain.verify(db, "access").ok


def test_deleting_a_recheck_row_is_caught(registers):
    db = registers
    victim = db.fetch("SELECT id FROM core_erasure_rechecks ORDER BY id")[1]["id"]
    db.execute("DELETE FROM core_erasure_rechecks WHERE id = %s", (victim,))
    result = chain.verify(db, "erasure")
    assert (result.ok, result.table, result.row_id, result.problem) == (
        False,
        "core_erasure_rechecks",
        victim,
        "removed",
    )


def test_deleting_or_editing_an_access_row_is_caught(registers):
    db = registers
    db.execute("UPDATE core_access_register SET sha256 = repeat('0', 64) WHERE id = %s", (db.exports[2],))
    db.execute("DELETE FROM core_access_register WHERE id = %s", (db.exports[1],))
    result = chain.verify(db, "access")
    # the first broken row in chain order is named
    assert (result.ok, result.table, result.row_id, result.problem) == (
        False,
        "core_access_register",
        db.exports[1],
        "removed",
    )


def test_deleting_a_row_with_its_link_or_forging_a_link_is_caught(registers):
    db = registers
    # remove an export and its link together: the chain has a gap at that position
    db.execute(
        "DELETE FROM core_register_chain WHERE table_name = 'core_access_register' AND row_id = %s", (db.exports[1],)
    )
    db.execute("DELETE FROM core_access_register WHERE id = %s", (db.exports[1],))
    result = chain.verify(db, "access")
    assert (result.ok, result.problem, result.row_id) == (False, "link_removed", db.exports[2])
    # re-hash an edited erasure row into its own link: the next link no longer follows
    target = db.erased[0]
    db.execute("UPDATE core_erasure_register SET operator = 'someone else' WHERE id = %s", (target,))
    db.execute(
        "UPDATE core_register_chain SET content_sha256 = encode(sha256(convert_to("
        "core_register_content(table_name, row_id), 'UTF8')), 'hex') "
        "WHERE table_name = 'core_erasure_register' AND row_id = %s",
        (target,),
    )
    result = chain.verify(db, "erasure")
    assert (result.ok, result.table, result.row_id, result.problem) == (
        False,
        "core_erasure_register",
        target,
        "link_edited",
    )


def test_a_final_row_written_around_the_seal_is_caught(registers):
    db = registers
    with db.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")  # triggers off, as a DBA could
        rid = conn.execute(
            "INSERT INTO core_access_register (customer_id, operator, format, lang, sha256, "
            "size_bytes, counts, sources) VALUES ('C3', 'x', 'json', 'es', repeat('a', 64), 1, "
            "'{}', '{}') RETURNING id"
        ).fetchone()["id"]
    result = chain.verify(db, "access")
    assert (result.ok, result.table, result.row_id, result.problem) == (False, "core_access_register", rid, "unsealed")


def test_a_running_erasure_is_not_sealed_until_final(registers):
    db = registers
    row = db.fetch_one(
        "INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator) "
        "VALUES ('C3', 'clientes.C3', 'dpo') RETURNING id",
        read_only=False,
    )
    assert chain.verify(db, "erasure").ok  # running: may still change
    db.execute("UPDATE core_erasure_register SET passes = 1 WHERE id = %s", (row["id"],))
    db.execute("UPDATE core_erasure_register SET status = 'failed', report = 'x' WHERE id = %s", (row["id"],))
    assert links(db, "erasure")[-1]["row_id"] == row["id"]
    assert chain.verify(db, "erasure").ok


def test_unknown_chain_is_refused(registers):
    with pytest.raises(ValueError, match="unknown register chain"):
        chain.verify(registers, "sweeps")
