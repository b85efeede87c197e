"""Issue 51 item 2: `complete` only with its own proof. Before a request is recorded complete, the customer's declared
values are read again in every table (checkpoints raw, the whole store, every text column of ours) without the token
index or the follower's aggregates (core/privacy/proof.py); a value still held anywhere withholds `complete` and the
register names where (by reference, never the value). On databases written by the articles' agents."""

from __future__ import annotations

import uuid

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.postgres import PostgresStore
from psycopg_pool import ConnectionPool

from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database, reset_pool
from core.privacy import erasure, evidence
from core.privacy import subjects as subj
from tests.test_erasure import make_store
from tests.test_token_index_rotation import term_key

DEFAULT = subj.Attribution()


def _supplier_notice(dsn: str, value: str) -> None:
    """A supplier notice written by a stock PostgresStore (another agent of the article's kind), holding `value`."""
    with ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True, "prepare_threshold": 0}) as pool:
        PostgresStore(pool).put(("proveedores", "P001"), "aviso-1", {"texto": f"Avisar al cliente en {value}"})


def _erase_all_proposed(db: Database, customer: str) -> erasure.ErasureResult:
    preview = evidence.preview(db, customer, DEFAULT)
    return erasure.erase(
        db,
        customer,
        operator="dpo@example.com",
        config=DEFAULT,
        decisions={t: "erase" for t in preview.residue_threads},
    )


def test_clean_erasure_records_the_tables_it_read(article_agents):
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        result = _erase_all_proposed(db, "C9")
        assert result.status == "complete", result.report
        assert result.proof is not None and result.proof.clean
        row = db.fetch_one("SELECT * FROM core_erasure_proofs WHERE request_id = %s", (result.request_id,))
        assert row["clean"] is True and row["found"] == [] and row["unproven"] == []
        # every relation that can hold a value was read: the agents' and ours, registers included
        assert {"checkpoint_writes", "checkpoint_blobs", "checkpoints", "store"} <= set(row["tables"])
        assert {"core_tool_calls", "core_erasure_register", "core_data_views"} <= set(row["tables"])
    finally:
        reset_pool(db.dsn)


def test_a_value_left_in_another_namespace_withholds_complete(article_agents):
    """Red before the proof: the evidence queries look at the customer's prefix and threads only, so a supplier
    notice holding the customer's e-mail left the request `complete`."""
    foreign = article_agents()
    email = foreign.declared("C9")["contacto"]
    _supplier_notice(foreign.dsn, email)
    db = Database(foreign.dsn)
    try:
        result = _erase_all_proposed(db, "C9")
        assert result.status == "incomplete"
        assert "store proveedores.P001/aviso-1" in result.report
        assert email not in result.report  # named by reference, never by value
        row = db.fetch_one("SELECT * FROM core_erasure_proofs WHERE request_id = %s", (result.request_id,))
        assert row["clean"] is False
        assert [(f["table"], f["where"]) for f in row["found"]] == [("store", "proveedores.P001/aviso-1")]
        assert email not in str(row)
        register = db.fetch_one("SELECT status, report FROM core_erasure_register WHERE id = %s", (result.request_id,))
        assert register["status"] == "incomplete" and "proveedores.P001/aviso-1" in register["report"]
    finally:
        reset_pool(db.dsn)


def test_a_thread_the_dpo_left_with_a_reason_is_not_a_finding(article_agents):
    """What the register itself says remains (a thread left with its reason) is not counted against `complete`."""
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        preview = evidence.preview(db, "C9", DEFAULT)
        # the DPO leaves one proposed thread with a reason: the re-read must not count it
        left, *rest = preview.residue_threads
        decisions = {t: "erase" for t in rest} | {left: ("leave", "legal hold: claim 42")}
        result = erasure.erase(db, "C9", operator="dpo@example.com", config=DEFAULT, decisions=decisions)
        assert result.status == "complete", result.report
        assert result.proof is not None and result.proof.clean  # the thread left with a reason is not a finding
    finally:
        reset_pool(db.dsn)


def test_a_value_an_earlier_request_erased_found_again_by_its_hashes(article_agents):
    """The second erasure of a customer knows the first one's values only by the register's keyed hashes: the re-read
    still finds one that reappeared in a supplier notice."""
    foreign = article_agents()
    email = foreign.declared("C9")["contacto"]
    db = Database(foreign.dsn)
    try:
        assert _erase_all_proposed(db, "C9").status == "complete"
        _supplier_notice(foreign.dsn, email)  # the value comes back, in another namespace
        again = _erase_all_proposed(db, "C9")
        assert again.status == "incomplete" and "store proveedores.P001/aviso-1" in again.report, again.report
        assert email not in again.report
    finally:
        reset_pool(db.dsn)


def test_values_erased_under_a_rotated_term_key_withhold_complete(article_agents):
    """Red before: after a TERM_HASH_KEY rotation the register's hashes of what an earlier request erased match
    nothing; erasing the customer again said `complete` while the value was back in a supplier notice."""
    foreign = article_agents()
    email = foreign.declared("C9")["contacto"]
    db = Database(foreign.dsn)
    try:
        assert _erase_all_proposed(db, "C9").status == "complete"
        _supplier_notice(foreign.dsn, email)
        with term_key(uuid.uuid4().hex + uuid.uuid4().hex):
            again = _erase_all_proposed(db, "C9")
        assert again.status == "incomplete", again.report
        assert "hashed under another TERM_HASH_KEY" in again.report and email not in again.report
    finally:
        reset_pool(db.dsn)


def test_a_value_the_customer_stated_then_overwrote_is_looked_for_too(create_database):
    """Red before: the customer's contact phone, overwritten by a later conversation, is in no document any more; a
    supplier notice still quoting it was not found and the erasure said `complete`. The value is read from the tool
    call of the customer's own (attributed) conversation."""
    db = Database(create_database())
    try:
        agent = build_agent(
            "atencion-cliente", ScriptedChatModel(), store=make_store(db), checkpointer=PostgresSaver(db.pool)
        )
        run_turn(agent, ContextoCliente("C7"), "cliente-C7-1", "Contactadme siempre por teléfono 611222333.")
        run_turn(agent, ContextoCliente("C7"), "cliente-C7-2", "Contactadme siempre por teléfono 699888777.")
        _supplier_notice(db.dsn, "teléfono 611222333")
        result = erasure.erase(db, "C7", operator="dpo@example.com", config=DEFAULT)
        assert result.status == "incomplete" and "store proveedores.P001/aviso-1" in result.report, result.report
        assert "611222333" not in result.report
    finally:
        reset_pool(db.dsn)
