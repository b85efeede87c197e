"""Context at a step (issue 56, item 1): for one AI answer, the messages the model was called with equal what the
checkpoint holds (read with SQL from the checkpoint tables and decoded by langgraph's own serializer, independently
of our SQL decoder), and the memory documents those messages name are linked with their value then and now. On a
database written by the memory article's agents and on one written by our retail agents; the answers that used a
document, scoped to a manager's stores; bad ids find nothing."""

from __future__ import annotations

import pytest
from conftest import DIMS, settings_for
from foreign_agents import Conversation, run_conversations, thread_id_for
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database
from core.history import answer_context, memory_refs, tool_calls
from core.ids import ThreadId
from core.memory import customer_stores
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store

# The checkpoint tables themselves: which version of `messages` a checkpoint holds, and that version's blob.
SQL_MESSAGES_BLOB = """
SELECT b.type, b.blob
FROM checkpoints c
JOIN checkpoint_blobs b ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
 AND b.channel = 'messages' AND b.version = c.checkpoint -> 'channel_versions' ->> 'messages'
WHERE c.thread_id = %s AND c.checkpoint_ns = %s AND c.checkpoint_id = %s"""
SQL_DOCUMENT = "SELECT value, updated_at FROM store WHERE prefix = %s AND key = %s"
BAD_IDS = ["", "%", "_", "'", '"', "a\x00b", "x" * 5_000, "1f1f%", "' OR '1'='1"]


def checkpoint_messages(db: Database, thread_id: str, ns: str, checkpoint_id: str) -> list[tuple]:
    """The `messages` channel at one checkpoint, loaded by langgraph's serializer: (kind, content, calls, call id)."""
    row = db.fetch_one(SQL_MESSAGES_BLOB, (thread_id, ns, checkpoint_id))
    assert row is not None
    loaded = JsonPlusSerializer().loads_typed((row["type"], bytes(row["blob"])))
    return [
        (
            m.type,
            m.content,
            [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", None) or []],
            getattr(m, "tool_call_id", None),
        )
        for m in loaded
    ]


def shown_messages(ctx: answer_context.AnswerContext) -> list[tuple]:
    return [
        (
            m["kind"],
            m.get("content"),
            [(c["name"], c["args"], c["id"]) for c in m.get("tool_calls") or []],
            m.get("tool_call_id"),
        )
        for m in ctx.messages
    ]


def last_answer(db: Database, thread_id: str):
    found = answer_context.answers(db, ThreadId.parse(thread_id))
    assert not found.empty
    return found.iloc[-1]


def document(db: Database, prefix: str, key: str) -> dict:
    row = db.fetch_one(SQL_DOCUMENT, (prefix, key))
    assert row is not None
    return row


# --- the memory article's agents ----------------------------------------------------------------------------------


def test_article_read_answer_context_equals_the_checkpoint(article_agents_db):
    db = Database(article_agents_db.dsn)
    try:
        tool_calls.catch_up(db)
        thread = article_agents_db.threads_of("C9", "read")[0]
        answer = last_answer(db, thread)
        assert answer["content"] == "Ya lo tengo en cuenta."
        ctx = answer_context.context_at(db, ThreadId.parse(thread), answer["checkpoint_id"], answer["checkpoint_ns"])
        assert ctx is not None and ctx.source == "stored"
        expected = checkpoint_messages(db, thread, answer["checkpoint_ns"], answer["checkpoint_id"])
        assert [m[0] for m in expected] == ["human", "ai", "tool"]
        assert shown_messages(ctx) == expected
        assert [a["content"] for a in ctx.answer] == ["Ya lo tengo en cuenta."]
        # the `preferencias` result names three documents; no message names the customer: the values only C9 holds
        docs = ctx.documents.set_index("key")
        assert sorted(docs.index) == ["pref-contacto", "pref-horario", "pref-recogida"]
        assert set(docs["prefix"]) == {"clientes.C9"} and set(docs["found_by"]) == {"value"}
        for key, declared in article_agents_db.declared("C9").items():
            now = document(db, "clientes.C9", f"pref-{key}")
            row = docs.loc[f"pref-{key}"]
            assert row["value_then"] == declared == row["seen"] and row["then_how"] == "result"
            assert row["value_now"] == now["value"]["valor"] == declared and row["now_state"] == "present"
            assert row["updated_at"] == now["updated_at"]
    finally:
        db.close()


def test_article_write_answer_links_its_document_by_hilo(article_agents_db):
    db = Database(article_agents_db.dsn)
    try:
        tool_calls.catch_up(db)
        conv = next(c for c in article_agents_db.conversations if c.customer == "C_9" and c.tipo == "contacto")
        answer = last_answer(db, conv.thread_id)
        ctx = answer_context.context_at(
            db, ThreadId.parse(conv.thread_id), answer["checkpoint_id"], answer["checkpoint_ns"]
        )
        assert ctx is not None
        expected = checkpoint_messages(db, conv.thread_id, answer["checkpoint_ns"], answer["checkpoint_id"])
        assert shown_messages(ctx) == expected
        (row,) = ctx.documents.to_dict("records")
        now = document(db, "clientes.C_9", "pref-contacto")
        assert (row["prefix"], row["key"], row["access"], row["found_by"]) == (
            "clientes.C_9",
            "pref-contacto",
            "write",
            "hilo",
        )
        assert row["seen"] == conv.valor == now["value"]["valor"] == row["value_now"] == row["value_then"]
        assert row["then_how"] == "history"
        # the other way: the document lists this answer (its `hilo` names the thread)
        uses = answer_context.answers_using(db, "clientes.C_9", "pref-contacto")
        used = set(zip(uses["thread_id"], uses["checkpoint_id"], strict=True))
        assert (conv.thread_id, answer["checkpoint_id"]) in used
        # look-alike customers' documents are never this one's answers
        assert conv.thread_id not in set(answer_context.answers_using(db, "clientes.C9", "pref-contacto")["thread_id"])
    finally:
        db.close()


@pytest.mark.slow  # the article's agents write a database for this test alone
def test_article_value_then_and_now_differ_after_an_overwrite(article_agents):
    foreign = article_agents()
    later = Conversation(thread_id_for("C9/later"), "C9", "write", "contacto", "teléfono 600 111 222")
    run_conversations(foreign.dsn, [later])
    db = Database(foreign.dsn)
    try:
        tool_calls.catch_up(db)
        read_thread = foreign.threads_of("C9", "read")[0]
        answer = last_answer(db, read_thread)
        ctx = answer_context.context_at(
            db, ThreadId.parse(read_thread), answer["checkpoint_id"], answer["checkpoint_ns"]
        )
        assert ctx is not None
        row = ctx.documents.set_index("key").loc["pref-contacto"]
        assert row["value_then"] == "correo c9@ejemplo.es" and row["then_how"] == "result"
        assert (
            row["value_now"] == "teléfono 600 111 222" == document(db, "clientes.C9", "pref-contacto")["value"]["valor"]
        )
        # the first write's answer: no message names the customer, and the document's `hilo` now names the later
        # conversation: whose document it wrote is not known, and nothing is claimed about it
        first = next(c for c in foreign.conversations if c.customer == "C9" and c.tipo == "contacto")
        answer = last_answer(db, first.thread_id)
        ctx = answer_context.context_at(
            db, ThreadId.parse(first.thread_id), answer["checkpoint_id"], answer["checkpoint_ns"]
        )
        assert ctx is not None
        (row,) = ctx.documents.to_dict("records")
        assert (row["key"], row["seen"], row["prefix"], row["found_by"]) == (
            "pref-contacto",
            "correo c9@ejemplo.es",
            None,
            None,
        )
        assert (row["value_then"], row["then_how"], row["value_now"], row["now_state"]) == (
            None,
            "unknown",
            None,
            "unknown",
        )
    finally:
        db.close()


# --- our retail agents --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def retail_db(create_database) -> Database:
    """C301 (store T001) declares contacto, reads their preferences, then changes contacto; C302 (store T002) too."""
    db = Database(create_database(prefix="ctx"))
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for customer, tienda in (("C301", "T001"), ("C302", "T002")):
        ctx = ContextoCliente(customer, tienda=tienda)
        run_turn(agent, ctx, f"cliente-{customer}-1", "Contactadme siempre por correo electrónico.")
        run_turn(agent, ctx, f"cliente-{customer}-2", "¿Qué preferencias tengo guardadas?")
        run_turn(agent, ctx, f"cliente-{customer}-3", "Contactadme siempre por teléfono.")
    tool_calls.catch_up(db)
    yield db
    db.close()


def test_retail_read_answer_context_and_documents(retail_db):
    answer = last_answer(retail_db, "cliente-C301-2")
    ctx = answer_context.context_at(
        retail_db, ThreadId.parse("cliente-C301-2"), answer["checkpoint_id"], answer["checkpoint_ns"]
    )
    assert ctx is not None and ctx.subject == "C301" and ctx.subject_source == "metadata"
    assert shown_messages(ctx) == checkpoint_messages(
        retail_db, "cliente-C301-2", answer["checkpoint_ns"], answer["checkpoint_id"]
    )
    row = ctx.documents.set_index("key").loc["pref-contacto"]
    assert row["prefix"] == "clientes.C301" and row["found_by"] == "metadata" and row["tool"] == "preferencias"
    assert row["value_then"] == "correo electrónico" and row["then_how"] == "result"
    assert row["value_now"] == "teléfono" == document(retail_db, "clientes.C301", "pref-contacto")["value"]["valor"]


def test_retail_write_answer_value_then_from_the_write_history(retail_db):
    answer = last_answer(retail_db, "cliente-C301-1")
    ctx = answer_context.context_at(
        retail_db, ThreadId.parse("cliente-C301-1"), answer["checkpoint_id"], answer["checkpoint_ns"]
    )
    assert ctx is not None
    assert shown_messages(ctx) == checkpoint_messages(
        retail_db, "cliente-C301-1", answer["checkpoint_ns"], answer["checkpoint_id"]
    )
    (row,) = ctx.documents.to_dict("records")
    assert (row["prefix"], row["key"], row["access"]) == ("clientes.C301", "pref-contacto", "write")
    assert row["value_then"] == "correo electrónico" and row["then_how"] == "history"
    assert row["value_now"] == "teléfono"


def test_answers_using_a_document_and_the_managers_scope(retail_db):
    uses = answer_context.answers_using(retail_db, "clientes.C301", "pref-contacto")
    assert set(uses["thread_id"]) == {"cliente-C301-1", "cliente-C301-2", "cliente-C301-3"}
    # each is the first answer whose context holds the mention: its context names the document
    for use in uses.itertuples():
        ctx = answer_context.context_at(retail_db, ThreadId.parse(use.thread_id), use.checkpoint_id, use.checkpoint_ns)
        assert ctx is not None and "clientes.C301" in set(ctx.documents["prefix"])
    customer_stores.refresh(retail_db, settings_for(retail_db.dsn))
    sources = customer_stores.StoreSources.from_settings(settings_for(retail_db.dsn))
    mine = answer_context.answers_using(retail_db, "clientes.C301", "pref-contacto", scope=sources.scope(["T001"]))
    assert set(mine["thread_id"]) == set(uses["thread_id"])
    other = answer_context.answers_using(retail_db, "clientes.C301", "pref-contacto", scope=sources.scope(["T002"]))
    assert other.empty
    assert not answer_context.answers_using(
        retail_db, "clientes.C302", "pref-contacto", scope=sources.scope(["T002"])
    ).empty


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_ids_find_nothing(retail_db, bad):
    thread = ThreadId.parse("cliente-C301-1")
    assert answer_context.context_at(retail_db, thread, bad, "") is None
    assert answer_context.answers_using(retail_db, bad, "pref-contacto").empty
    assert answer_context.answers_using(retail_db, "clientes.C301", bad).empty
    assert answer_context.answers_using(retail_db, f"clientes.{bad}", "pref-contacto").empty


def test_references_name_documents_by_their_tools():
    messages = [
        {"kind": "human", "content": "hola"},
        {"kind": "ai", "tool_calls": [{"name": "recordar_preferencia", "args": {"tipo": "idioma", "valor": "ca"}}]},
        {"kind": "ai", "tool_calls": [{"name": "preferencias", "args": {}, "id": "c1"}]},
        {"kind": "tool", "tool_name": "preferencias", "tool_call_id": "c1", "content": "- recogida: T1\n- idioma: ca"},
        {"kind": "tool", "tool_name": "avisos_proveedor", "content": "- retraso en la entrega"},
        {"kind": "ai", "tool_calls": [{"name": "recordar_preferencia", "args": {"tipo": "x" * 500, "valor": "v"}}]},
    ]
    refs = memory_refs.references(messages)
    assert [(r.key, r.via, r.position, r.value) for r in refs] == [
        ("pref-idioma", "call", 1, "ca"),
        ("pref-recogida", "result", 3, "T1"),
        ("pref-idioma", "result", 3, "ca"),
    ]
