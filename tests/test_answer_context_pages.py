"""AppTest of the context at a step (issue 56, item 1) on its two pages: Checkpoints (SRE) opened at a thread and an
answer by URL shows the answer's messages and the documents they name, each linking to its Memory view; Memory (a
store manager, scoped) opened at a document by URL lists the answers that used it, each linking to its context, and
a manager of another store is refused the customer and shown none of it."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import DIMS, settings_for
from langgraph.checkpoint.postgres import PostgresSaver
from streamlit.testing.v1 import AppTest

from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database
from core.history import answer_context, tool_calls
from core.ids import ThreadId
from core.memory import customer_stores
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store

APP = "../dashboard.py"
CHECKPOINTS = "app_pages/checkpoints.py"
AUTH = {
    "redirect_uri": "http://localhost:8501/oauth2callback",
    "cookie_secret": "a-long-random-test-cookie-secret-0123456789",
    "client_id": "agent-memory-dashboard",
    "client_secret": "test-client-secret",
    "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration",
}
MANAGER = "gerente.t001@example.com"


@pytest.fixture(scope="module")
def retail_db(create_database) -> Database:
    db = Database(create_database(prefix="ctxpage"))
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for customer, tienda in (("C401", "T001"), ("C402", "T002")):
        ctx = ContextoCliente(customer, tienda=tienda)
        run_turn(agent, ctx, f"cliente-{customer}-1", "Contactadme siempre por correo electrónico.")
        run_turn(agent, ctx, f"cliente-{customer}-2", "¿Qué preferencias tengo guardadas?")
    tool_calls.catch_up(db)
    assert not customer_stores.refresh(db, settings_for(db.dsn)).errors
    yield db
    db.close()


def links(at: AppTest, column: str) -> list[dict]:
    """The query parameters of every link in `column` of the page's tables."""
    out = []
    for frame in at.dataframe:
        if column in frame.value.columns:
            out += [parse_qs(urlsplit(u).query) for u in frame.value[column] if isinstance(u, str)]
    return out


def texts(at: AppTest) -> str:
    shown = "\n".join(e.value for kind in ("error", "warning", "info", "caption", "markdown") for e in at.get(kind))
    return shown.replace("\\", "")


def open_checkpoints(dsn: str, app_env, query: dict, lang: str = "es") -> AppTest:
    app_env(dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    for k, v in {**query, "lang": lang}.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(CHECKPOINTS).run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("lang", ["es", "en"])
def test_checkpoints_answer_by_url_shows_its_context_on_the_article_agents(article_agents_db, app_env, lang):
    db = Database(article_agents_db.dsn)
    try:
        tool_calls.catch_up(db)
        thread = article_agents_db.threads_of("C9", "read")[0]
        answer = answer_context.answers(db, ThreadId.parse(thread)).iloc[-1]
        ctx = answer_context.context_at(db, ThreadId.parse(thread), answer["checkpoint_id"], answer["checkpoint_ns"])
    finally:
        db.close()
    assert ctx is not None
    at = open_checkpoints(article_agents_db.dsn, app_env, {"thread": thread, "answer": answer["checkpoint_id"]}, lang)
    shown = texts(at)
    heading = {"es": "Paso", "en": "Step"}[lang]
    assert f"**{heading} {ctx.step}**" in shown
    # every message of the context in order (headed "message n"), then the answer (headed "Answer")
    word, answer_word = {"es": ("mensaje", "Respuesta"), "en": ("message", "Answer")}[lang]
    mine = []
    for chat in at.get("chat_message"):
        head = chat.markdown[0].value if len(chat.markdown) else ""
        if f"· {word} " in head or head == f"**{answer_word}**":
            mine.append((head, " ".join(x.value for x in chat.get("text"))))
    kinds = {"es": {"human": "persona", "ai": "IA", "tool": "herramienta"}, "en": {"human": "human", "ai": "AI"}}[lang]
    expected = [
        f"**{kinds.get(m['kind'], m['kind'])}** · {word} {i + 1}" + (" · `preferencias`" if m["kind"] == "tool" else "")
        for i, m in enumerate(ctx.messages)
    ]
    assert [h for h, _ in mine] == [*expected, f"**{answer_word}**"]
    assert [x for _, x in mine] == [m.get("content") or "" for m in ctx.messages] + ["Ya lo tengo en cuenta."]
    assert at.query_params["answer"] == answer["checkpoint_id"]
    # the documents, each linking to its Memory view
    docs = links(at, "prefix")
    assert {(d["ns"][0], d["key"][0]) for d in docs} == {
        ("clientes.C9", "pref-contacto"),
        ("clientes.C9", "pref-horario"),
        ("clientes.C9", "pref-recogida"),
    }
    assert all(d["lang"] == [lang] for d in docs)


def test_checkpoints_unknown_answer_is_said_and_changes_nothing(article_agents_db, app_env):
    thread = article_agents_db.threads_of("C9", "read")[0]
    for bad in ["%", "1f1f'--", "x" * 2_000]:
        at = open_checkpoints(article_agents_db.dsn, app_env, {"thread": thread, "answer": bad})
        assert "No hay ninguna respuesta escrita desde el checkpoint" in texts(at)
        assert not links(at, "prefix")


def manager(dsn: str, app_env, stores: list[str], query: dict) -> AppTest:
    app_env(dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["auth"] = AUTH
    at.secrets["roles"] = {MANAGER: ["manager"]}
    at.user = {"is_logged_in": True, "email": MANAGER, "email_verified": True, "name": MANAGER, "stores": stores}
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def test_memory_document_lists_the_answers_that_used_it_for_its_stores_manager(retail_db, app_env):
    at = manager(retail_db.dsn, app_env, ["T001"], {"ns": "clientes.C401", "key": "pref-contacto"})
    uses = links(at, "answer")
    expected = answer_context.answers_using(retail_db, "clientes.C401", "pref-contacto")
    assert {(u["thread"][0], u["answer"][0]) for u in uses} == set(
        zip(expected["thread_id"], expected["checkpoint_id"], strict=True)
    )
    assert {u["thread"][0] for u in uses} == {"cliente-C401-1", "cliente-C401-2"}


def test_memory_document_of_another_store_shows_no_answer(retail_db, app_env):
    at = manager(retail_db.dsn, app_env, ["T002"], {"ns": "clientes.C401", "key": "pref-contacto"})
    assert "no es un cliente de sus tiendas" in texts(at)
    assert not links(at, "answer")


def test_another_thread_typed_drops_the_answer_of_the_first(article_agents_db, app_env):
    db = Database(article_agents_db.dsn)
    try:
        first, other = article_agents_db.threads_of("C9", "read")[0], article_agents_db.threads_of("C19", "read")[0]
        answer = answer_context.answers(db, ThreadId.parse(first)).iloc[-1]["checkpoint_id"]
    finally:
        db.close()
    at = open_checkpoints(article_agents_db.dsn, app_env, {"thread": first, "answer": answer})
    assert at.query_params["answer"] == answer
    at.text_input(key="checkpoints.thread").input(other).run()
    assert not at.exception
    assert at.query_params["thread"] == other and "answer" not in at.query_params
    assert "No hay ninguna respuesta escrita desde el checkpoint" not in texts(at)
