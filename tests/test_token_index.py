"""The token index of checkpoint threads (migration 042, core/privacy/token_index.py) on a real server:
the msgpack walk covers every token of the SQL decoder's text, the triggers list whatever any writer
writes, a write during indexing is never lost, and a residue scan through the index finds exactly what a
scan of every row finds, on databases written by agents we did not write."""

from __future__ import annotations

import math
import uuid

import pytest
from conftest import login_role
from foreign_agents import CUSTOMERS
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import MessagesState, StateGraph
from psycopg_pool import ConnectionPool

from core.capture.follower import catch_up
from core.db import Database
from core.privacy import erasure, evidence
from core.privacy import residue as res
from core.privacy import subjects as subj
from core.privacy import token_index as ti
from core.privacy import tokens as tok

DEFAULT = subj.Attribution()
SELECT_ROWS = """
SELECT type, blob, core_checkpoint_payload(type, blob)::text AS text FROM checkpoint_writes
UNION ALL SELECT type, blob, core_checkpoint_payload(type, blob)::text FROM checkpoint_blobs"""


def _decoder_tokens(text: str) -> set[str]:
    found: set[str] = set()
    tok.tokens_of_json_text(text, found)
    return found


def _assert_walk_covers_decoder(db: Database, rows) -> int:
    walked = 0
    for row in rows:
        tokens = tok.payload_tokens(row["type"], row["blob"])
        if tokens is None:
            continue
        walked += 1
        missing = _decoder_tokens(row["text"]) - tokens
        assert not missing, (row["type"], missing, row["text"][:300])
    return walked


def test_the_walk_covers_every_token_of_the_decoder_text_on_foreign_and_demo_payloads(article_agents_db, demo_db):
    for database in (Database(article_agents_db.dsn), demo_db):
        rows = database.fetch(SELECT_ROWS)
        assert len(rows) > 50
        assert _assert_walk_covers_decoder(database, rows) > 0.9 * len(rows)


def test_the_walk_covers_numbers_bytes_escapes_and_constructors(db):
    serde = JsonPlusSerializer()
    values = [
        {"texto": 'hola\nC9 "citado" tab\there \\ barra', 1: "clave entera", -7: -12345678901234},
        [1e20, 1e-07, 1.0, 0.1, 1.5e300, -2.5, math.nan, math.inf, 123456789012345680000.0, 7e15, 1e16],
        [b"\x00\xffbytes crudos"],  # msgpack bin inside a value (bytes alone are blob type "bytes")
        [
            HumanMessage("Soy el cliente C9, teléfono 600123456"),
            AIMessage(
                "",
                tool_calls=[
                    {
                        "name": "recordar_preferencia",
                        "id": "c1",
                        "args": {"tipo": "recogida", "valor": "Tienda Centro", "n": 3.25},
                    }
                ],
            ),
        ],
        {"anidado": [{"x": None, "y": True, "z": False}], "ñandú": "mañana"},
    ]
    rows = []
    for value in values:
        blob_type, blob = serde.dumps_typed(value)
        text = db.fetch_one("SELECT core_checkpoint_payload(%s, %s)::text AS text", (blob_type, blob))["text"]
        rows.append({"type": blob_type, "blob": blob, "text": text})
    assert _assert_walk_covers_decoder(db, rows) == len(rows)
    # the other blob types the decoder knows; what the walk does not reproduce goes through the decoder
    for blob_type, blob in (
        serde.dumps_typed(b"bytes alone"),
        ("bytearray", b"\x01\x02"),
        ("empty", None),
        ("null", None),
    ):
        text = db.fetch_one("SELECT core_checkpoint_payload(%s, %s)::text AS text", (blob_type, blob))["text"]
        assert _assert_walk_covers_decoder(db, [{"type": blob_type, "blob": blob, "text": text}]) == 1
    assert tok.payload_tokens("pickle", b"\x80\x04K\x01.") is None
    assert tok.payload_tokens("msgpack", b"\xc1") is None


def _threads(db: Database, table: str = "core_token_dirty") -> set[str]:
    catch_up(db.dsn)  # the change follower lists what was written (core/capture)
    return {r["thread_id"] for r in db.fetch(f"SELECT thread_id FROM {table}", read_only=False)}


def _stock_graph(dsn: str):
    pool = ConnectionPool(dsn, kwargs={"autocommit": True, "prepare_threshold": 0}, open=True)
    saver = PostgresSaver(pool)

    def reply(state: MessagesState):
        return {"messages": [AIMessage(f"recibido: {state['messages'][-1].content}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.set_entry_point("reply")
    return pool, graph.compile(checkpointer=saver)


def test_any_writer_lists_its_threads_and_the_indexer_empties_the_list(db):
    """A stock PostgresSaver (not our code) writes; the change follower lists the thread; the indexer indexes it and
    un-lists it; the next turn lists it again, with its new words findable once indexed."""
    pool, graph = _stock_graph(db.dsn)
    thread = f"ajeno-{uuid.uuid4()}"
    try:
        graph.invoke({"messages": [HumanMessage("primera palabra zanahoria")]}, {"configurable": {"thread_id": thread}})
        assert thread in _threads(db)
        result = ti.index_pending(db)
        assert result.threads >= 1 and result.pending == 0 and thread not in _threads(db)
        with db.connection() as conn:
            assert thread in ti.candidates(conn, ["zanahoria"]).threads
            assert thread not in ti.candidates(conn, ["berenjena"]).threads
        graph.invoke({"messages": [HumanMessage("segunda palabra berenjena")]}, {"configurable": {"thread_id": thread}})
        assert thread in _threads(db)
        with db.connection() as conn:  # listed, so a candidate for any term until indexed
            assert thread in ti.candidates(conn, ["berenjena"]).threads
        ti.index_pending(db)
        with db.connection() as conn:
            found = ti.candidates(conn, ["berenjena"])
            assert thread in found.threads and not found.unindexed
    finally:
        pool.close()


def test_a_write_after_the_claim_keeps_the_thread_listed(db):
    """The indexer claims a thread; a stock saver then writes to it before the indexer reads it. The indexer
    finishes, and the thread is still listed (claim cleared): the new turn is never lost to the index."""
    pool, graph = _stock_graph(db.dsn)
    thread = f"carrera-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread}}
    try:
        graph.invoke({"messages": [HumanMessage("antes del indexador")]}, config)
        ti.index_pending(db)
        graph.invoke({"messages": [HumanMessage("listado otra vez")]}, config)
        catch_up(db.dsn)
        with db.connection() as conn:
            with conn.transaction():
                claimed = [r["thread_id"] for r in conn.execute(ti.CLAIM, {"limit": 1000})]
            assert thread in claimed
            graph.invoke({"messages": [HumanMessage("durante el indexado pepinillo")]}, config)
            catch_up(db.dsn)  # the follower lists the thread while the indexer works
            result = ti.IndexResult()
            with conn.transaction():
                ti.index_claimed(conn, claimed, result)
        row = db.fetch_one("SELECT claimed_at FROM core_token_dirty WHERE thread_id = %s", (thread,), read_only=False)
        assert row is not None and row["claimed_at"] is None
        ti.index_pending(db)
        with db.connection() as conn:
            assert thread in ti.candidates(conn, ["pepinillo"]).threads
        assert thread not in _threads(db)
    finally:
        pool.close()


def _full_scan(monkeypatch):
    monkeypatch.setattr(ti, "DIRTY_SCAN_MAX", -1)  # every thread "waits": the scan reads every row


@pytest.mark.parametrize("analyzed", [False, True], ids=["no statistics", "common tokens left out of the keys"])
def test_residue_through_the_index_equals_a_scan_of_every_row(article_agents_db, monkeypatch, analyzed):
    """On the article's agents (stock savers, no metadata): for every customer, the residue found through the
    index (every thread indexed) is the residue a scan of every row finds, match for match; also once ANALYZE
    knows the common tokens and the lookups leave them out (fewer tokens per key: more threads named, the same
    matches)."""
    database = Database(article_agents_db.dsn)
    try:
        with database.connection() as conn, conn.transaction(force_rollback=True):
            ti.index_claimed(conn, sorted(_threads(database)), ti.IndexResult())
            conn.execute("DELETE FROM core_token_dirty")
            if analyzed:
                conn.execute("ANALYZE core_thread_tokens")
                shares = ti.token_shares(conn)
                assert shares and max(shares.values()) > ti.COMMON_TOKEN_SHARE
                terms = [t.term for c in CUSTOMERS for t in res.customer_terms(conn, c)]
                shorter = [t for t in terms if len(ti.lookup_keys([t], shares)[t]) < len(ti.lookup_keys([t])[t])]
                assert shorter  # some lookups really changed
            else:
                assert not ti.token_shares(conn)
            for customer in CUSTOMERS:
                attributed = subj.resolve_conn(conn, customer, DEFAULT).threads
                indexed = res.residue_conn(conn, customer, attributed)
                assert "token index" in indexed.sql and "every thread" not in indexed.sql
                with monkeypatch.context() as m:
                    _full_scan(m)
                    full = res.residue_conn(conn, customer, attributed)
                assert "every thread" in full.sql
                assert indexed.matches == full.matches and indexed.proposed == full.proposed, customer
                # each term's customers, and each distinctive term's threads; a common term's threads are counted
                # by the index as the threads holding all its words: at least those holding it as written
                assert [(t.term, t.customers) for t in indexed.terms] == [(t.term, t.customers) for t in full.terms]
                for mine, scanned in zip(indexed.terms, full.terms, strict=True):
                    assert (mine.threads >= scanned.threads) if mine.common else (mine.threads == scanned.threads)
                # only threads a distinctive term may be in are read: common-only threads are counted, not listed
                assert set(indexed.common_threads) <= set(full.common_threads), customer
                assert indexed.proposed, customer  # the article's read and chat threads carry no back-link
    finally:
        database.close()


def test_an_id_after_a_newline_is_found_and_a_value_is_never_a_part_of_a_word(db):
    """A message "hola\\nC9" holds C9 (the JSON escape is a boundary); `Centro` is not found in `Centros`."""
    pool, graph = _stock_graph(db.dsn)
    near, far = f"nl-{uuid.uuid4()}", f"word-{uuid.uuid4()}"
    try:
        graph.invoke({"messages": [HumanMessage("hola\nCNL7 quiere recoger")]}, {"configurable": {"thread_id": near}})
        graph.invoke({"messages": [HumanMessage("los Centrosdeventa abren")]}, {"configurable": {"thread_id": far}})
        ti.index_pending(db)
        with db.connection() as conn:
            found = res.residue_conn(
                conn,
                "CNL7",
                {},
                [
                    res.Term("CNL7", "id", 1),
                    res.Term("Centros", "value", 1),
                    res.Term("Centrosdeventa abren", "value", 1),
                ],
            )
        assert {(m.thread_id, m.term) for m in found.matches} == {(near, "CNL7"), (far, "Centrosdeventa abren")}
    finally:
        pool.close()


def test_an_erasure_deletes_the_tokens_of_the_erased_threads(article_agents):
    foreign = article_agents()
    database = Database(foreign.dsn)
    try:
        ti.index_pending(database)
        customer = CUSTOMERS[0]
        threads = foreign.threads_of(customer)
        assert _threads(database, "core_thread_tokens") >= set(threads)
        preview = evidence.preview(database, customer, DEFAULT)
        assert preview.counts["core_thread_tokens"] == len(preview.thread_ids)  # attributed threads' rows
        assert "token index" in preview.residue.sql and preview.residue_threads  # found through the index
        result = erasure.erase(
            database,
            customer,
            operator="dpo@example.com",
            config=DEFAULT,
            decisions={t: "erase" for t in preview.residue_threads},
        )
        assert result.status == "complete", result.report
        tables = {e.table: e.result for e in result.evidence}
        assert tables["core_thread_tokens"] == 0 and tables["core_token_dirty"] == 0
        assert not _threads(database, "core_thread_tokens") & set(threads)
    finally:
        database.close()


def test_the_index_cannot_answer_without_a_token_or_with_too_much_waiting(db, monkeypatch):
    with db.connection() as conn:
        assert ti.candidates(conn, ["--- ¿? ---"]).threads is None
        assert "no token" in ti.candidates(conn, ["--- ¿? ---"]).why_full
        _full_scan(monkeypatch)
        assert "wait for the token indexer" in ti.candidates(conn, ["zanahoria"]).why_full


def test_deleted_threads_lose_their_tokens_at_the_sweep_step(db):
    pool, graph = _stock_graph(db.dsn)
    thread = f"borrable-{uuid.uuid4()}"
    try:
        graph.invoke({"messages": [HumanMessage("contenido")]}, {"configurable": {"thread_id": thread}})
        ti.index_pending(db)
        assert thread in _threads(db, "core_thread_tokens")
        graph.checkpointer.delete_thread(thread)  # langgraph's own delete: no trigger fires on DELETE
        ti.sweep_step(db)
        assert thread not in _threads(db, "core_thread_tokens")
    finally:
        pool.close()


def test_an_agent_role_with_rights_on_the_checkpoint_tables_only_still_writes(db):
    """Agents we did not write use their own role, granted on langgraph's tables only: nothing of ours runs in
    their transactions, their writes succeed and the change follower lists their threads."""
    import psycopg

    pool, graph = _stock_graph(
        login_role(db.dsn, "agente", "checkpoints, checkpoint_blobs, checkpoint_writes, checkpoint_migrations")
    )
    thread = f"rol-{uuid.uuid4()}"
    try:
        graph.invoke({"messages": [HumanMessage("con su propio rol")]}, {"configurable": {"thread_id": thread}})
        with pytest.raises(psycopg.errors.InsufficientPrivilege), pool.connection() as conn:
            conn.execute("SELECT 1 FROM core_token_dirty")
        assert thread in _threads(db)
    finally:
        pool.close()
