"""Migration 056's repair: erasure requests written before it kept the erased values (residue terms, the terms per
residue thread and exclusion, the residue query with its terms inlined, in the request and in its re-checks), sealed
in the hash chain. After `migrate` no value is left, the chain still verifies and names each redacted row with when,
the links sealed before keep their hashes (head hashes handed out stay valid), a re-check still works through the
hashes, and a row edited before or after the redaction is still reported as edited."""

from __future__ import annotations

from datetime import UTC

import psycopg
import pytest
from babel.dates import format_datetime
from psycopg.types.json import Jsonb

from core import migrate as migrate_module
from core.agents.retail import ContextoCliente, run_turn
from core.db import Database, reset_pool
from core.memory.store import put_memory
from core.migrate import migrate
from core.privacy import chain, erasure_register, raw_scan
from core.privacy import residue as res
from core.privacy.redaction import REASON
from tests.conftest import DIMS
from tests.test_erasure import agents_for, make_store
from tests.test_erasure_keeps_nothing import ADDRESS, scan, untagged_turn

BEFORE_056 = 56


def _version(m) -> int:
    return m.version if hasattr(m, "version") else m[0]


@pytest.fixture
def legacy(create_database, monkeypatch):
    """A database migrated up to 055 in which C9 was erased (and re-checked twice) and C7's erasure is still
    running, their register rows written as the code before 056 wrote them: every term verbatim."""
    dsn = create_database(migrated=False)
    every = migrate_module.migration_files
    with monkeypatch.context() as m:
        m.setattr(
            migrate_module, "migration_files", lambda *a, **k: [f for f in every(*a, **k) if _version(f) < BEFORE_056]
        )
        m.setattr(migrate_module, "repair_register", lambda conn: 0)
        migrate(dsn, DIMS)
    db = Database(dsn)
    store = make_store(db)
    agent = agents_for(db, store)
    put_memory(
        store,
        ("clientes", "C9"),
        "direccion",
        {"texto": f"direccion: {ADDRESS}", "calle": ADDRESS},
        thread_id="cliente-C9-1",
    )
    run_turn(agent, ContextoCliente("C9"), "cliente-C9-1", "Por favor contactadme siempre por whatsapp al 600 123 456.")
    untagged_turn(agent, "soporte-1", f"Un cliente dicta su dirección: {ADDRESS}")
    with db.connection() as conn:
        terms = res.customer_terms(conn, "C9")
        # the raw-bytes candidates as that code found them (today's token index needs migration 073)
        raw = {thread for _, thread in raw_scan.candidates(conn, [t.term for t in terms if not t.common], [])}
        params = res.residue_count_params(conn, terms, [], candidates=raw)
        legacy_sql = (
            psycopg.ClientCursor(conn)
            .mogrify(
                res.RESIDUE_THREADS_SQL.replace(
                    "SELECT DISTINCT r.thread_id FROM", "SELECT count(DISTINCT r.thread_id) AS n FROM"
                ),
                params,
            )
            .strip()
        )
    db.values = [t.term for t in terms if t.kind == "value"]
    assert ADDRESS in db.values and ADDRESS in legacy_sql
    # what the erasure then deleted (the old code deleted the same; only its register differed)
    for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
        db.execute(f"DELETE FROM {table} WHERE thread_id IN ('cliente-C9-1', 'soporte-1')")
    db.execute("DELETE FROM store WHERE prefix = 'clientes.C9'")
    for table in ("core_conversations", "core_memory_writes", "core_token_dirty"):
        db.execute(f"DELETE FROM {table} WHERE thread_id IN ('cliente-C9-1', 'soporte-1')")
    evidence = [
        {
            "table": "store",
            "sql": "SELECT count(*) AS n FROM store WHERE prefix = 'clientes.C9'",
            "result": 0,
            "at": "2026-12-01T10:00:00.000+00:00",
        },
        {"table": "residue", "sql": legacy_sql, "result": 0, "at": "2026-12-01T10:00:00.000+00:00"},
    ]
    residue = [
        {"thread_id": "soporte-1", "terms": [ADDRESS, f"direccion: {ADDRESS}"], "decision": "erase", "reason": None}
    ]
    old_terms = [
        {"term": t.term, "kind": t.kind, "customers": t.customers, "threads": t.threads, "common": t.common}
        for t in terms
    ]
    db.erased = db.fetch_one(
        """
        INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator, status, finished_at, passes,
            thread_ids, counts_before, deleted, counts_after, evidence, sources, residue, residue_terms, exclusions)
        VALUES ('C9', 'clientes.C9', 'dpo@example.com', 'complete', now(), 1, %s, '{"store": 2}', '{"store": 2}',
                '{"store": 0, "residue": 0}', %s, %s, %s, %s, '[]') RETURNING id""",
        (
            ["cliente-C9-1", "soporte-1"],
            Jsonb(evidence),
            Jsonb({"soporte-1": ["residue"]}),
            Jsonb(residue),
            Jsonb(old_terms),
        ),
        read_only=False,
    )["id"]
    db.rechecks = [
        db.fetch_one(
            """
        INSERT INTO core_erasure_rechecks (request_id, trigger, clean, counts, evidence)
        VALUES (%s, 'sweep', true, '{"store": 0, "residue": 0}', %s) RETURNING id""",
            (db.erased, Jsonb(evidence)),
            read_only=False,
        )["id"]
        for _ in range(2)
    ]
    db.running = db.fetch_one(
        """
        INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator, residue_terms, residue)
        VALUES ('C7', 'clientes.C7', 'dpo', %s, %s) RETURNING id""",
        (
            Jsonb([{"term": "Plaza Nueva 1", "kind": "value", "customers": 1, "threads": 0, "common": False}]),
            Jsonb([{"thread_id": "x", "terms": ["Plaza Nueva 1"], "decision": "undecided", "reason": None}]),
        ),
        read_only=False,
    )["id"]
    db.values.append("Plaza Nueva 1")
    db.agent = agent
    yield db
    reset_pool(dsn)


def links(db) -> list[dict]:
    return db.fetch("SELECT * FROM core_register_chain WHERE chain = 'erasure' ORDER BY position")


def test_the_repair_leaves_no_value_and_the_chain_verifies_naming_what_it_redacted(legacy):
    db = legacy
    assert set(scan(db, db.values)) == {
        "core_erasure_register.evidence",
        "core_erasure_register.residue",
        "core_erasure_register.residue_terms",
        "core_erasure_rechecks.evidence",
    }
    sealed = links(db)
    assert len(sealed) == 3 and all(  # sealed as 036 seals (today's verifier needs 056's table)
        link["content_sha256"]
        == chain.sha256_hex(
            db.fetch_one("SELECT core_register_content(%s, %s) AS c", (link["table_name"], link["row_id"]))["c"]
        )
        for link in sealed
    )

    migrate(db.dsn, DIMS)

    assert scan(db, db.values) == {}
    result = chain.verify(db, "erasure")
    assert result.ok, result
    assert [(r.table, r.row_id) for r in result.redactions] == [
        ("core_erasure_register", db.erased),
        *(("core_erasure_rechecks", k) for k in db.rechecks),
    ]
    first = result.redactions[0]
    assert set(first.fields) == {"residue_terms", "residue", "evidence", "term_salt"} and first.reason == REASON
    assert first.redacted_at is not None and result.redactions[1].fields == ("evidence",)
    # the links sealed before are untouched (a head hash handed out then is still a prefix of this chain);
    # the chain grew by one sealed record per redacted sealed row (the running request had no link)
    after = links(db)
    assert after[:3] == sealed and [link["table_name"] for link in after[3:]] == ["core_register_redactions"] * 3
    row = db.fetch_one("SELECT * FROM core_erasure_register WHERE id = %s", (db.erased,))
    refs = {t["ref"]: t for t in row["residue_terms"]}
    assert row["term_salt"] and all("term" not in t for t in row["residue_terms"])
    assert {r for r in row["residue"][0]["terms"]} <= set(refs)
    (residue_ev,) = [e for e in row["evidence"] if e["table"] == "residue"]
    assert ":residue_terms" in residue_ev["sql"] and "cliente-C9-1" in residue_ev["sql"]  # threads as they ran
    running = db.fetch_one("SELECT * FROM core_erasure_register WHERE id = %s", (db.running,))
    assert running["residue"][0]["terms"] == ["t1"] and running["residue_terms"][0]["ref"] == "t1"

    # idempotent: a second run repairs nothing and seals nothing
    migrate(db.dsn, DIMS)
    assert len(links(db)) == len(after)

    # the repaired request is still re-checked through its hashes: clean, then the address comes back
    first_check = erasure_register.recheck(db, db.erased)
    assert first_check.clean, {k: v for k, v in first_check.counts.items() if v}
    untagged_turn(db.agent, "soporte-2", f"Otra vez: {ADDRESS}")
    assert erasure_register.recheck(db, db.erased).counts["residue"] == 1
    assert chain.verify(db, "erasure").ok

    # an edit after the redaction is an edit; so is one of a redaction record
    db.execute("UPDATE core_erasure_register SET passes = 7 WHERE id = %s", (db.erased,))
    broken = chain.verify(db, "erasure")
    assert (broken.ok, broken.row_id, broken.problem) == (False, db.erased, "edited")
    db.execute("UPDATE core_erasure_register SET passes = 1 WHERE id = %s", (db.erased,))
    assert chain.verify(db, "erasure").ok
    db.execute("UPDATE core_register_redactions SET reason = 'nothing to see' WHERE row_id = %s", (db.rechecks[0],))
    broken = chain.verify(db, "erasure")
    assert (broken.ok, broken.table, broken.problem) == (False, "core_register_redactions", "edited")


def test_a_row_edited_before_the_repair_is_still_reported_edited(legacy):
    """The redaction does not launder a tampered row: its record says it was not intact."""
    db = legacy
    db.execute("UPDATE core_erasure_register SET counts_before = '{\"store\": 0}' WHERE id = %s", (db.erased,))
    migrate(db.dsn, DIMS)
    assert scan(db, db.values) == {}  # the values go anyway
    assert (
        db.fetch_one(
            "SELECT intact FROM core_register_redactions WHERE row_id = %s AND table_name = 'core_erasure_register'",
            (db.erased,),
        )["intact"]
        is False
    )
    result = chain.verify(db, "erasure")
    assert (result.ok, result.row_id, result.problem) == (False, db.erased, "edited")


def test_verifying_the_chain_on_the_register_page_says_what_was_redacted_and_when(legacy, app_env):
    from apptools import shown

    from tests.test_erasure_pages import dashboard, texts

    migrate(legacy.dsn, DIMS)
    app_env(legacy.dsn)
    at = dashboard("app_pages/erasure_register.py")
    at.button(key="erasure_register.verify").click().run()
    assert not at.exception, at.exception
    assert any(s.value.startswith("Cadena íntegra: 6 filas selladas") for s in at.success), texts(at)
    (info,) = [shown(i.value) for i in at.info if i.value.startswith("Filas selladas redactadas después")]
    # when, as a person reads it in Spanish (the viewer's zone: UTC without a browser), not ISO
    when = {
        (r["table_name"], r["row_id"]): format_datetime(r["redacted_at"], "medium", tzinfo=UTC, locale="es") + " UTC"
        for r in legacy.fetch("SELECT table_name, row_id, redacted_at FROM core_register_redactions")
    }
    assert (
        f"core_erasure_register #{legacy.erased} (residue_terms, residue, evidence, term_salt) "
        f"{when['core_erasure_register', legacy.erased]}"
        in info
        and all(
            f"core_erasure_rechecks #{k} (evidence) {when['core_erasure_rechecks', k]}" in info for k in legacy.rechecks
        )
    ), info
