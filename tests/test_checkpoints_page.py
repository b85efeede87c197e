"""AppTest of the Checkpoints page (SRE) and its read functions: no exception, every figure equal to
SQL on the same database, the thread id in the URL, bad input finding exactly nothing or exactly
that thread. Real embedded PostgreSQL, checkpoints written by the real agents."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest
from apptools import as_int, decode, frame, metric, plain
from conftest import DIMS
from langgraph.checkpoint.postgres import PostgresSaver
from streamlit.testing.v1 import AppTest

from core.agents.retail import ContextoCliente, ContextoProveedor, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database
from core.history import views
from core.ids import InvalidIdentifier, ThreadId
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.storage import storage as ckpt_storage
from ui.safe import md, md_code

APP = "../dashboard.py"
PAGE = "app_pages/checkpoints.py"
WEIRD_CUSTOMER = "C_%'\"1"
WEIRD_THREAD = "cliente-C_%'\"1-1"
PLAIN_THREAD = "cliente-C101-1"
BAD_INPUT = [
    "%",
    "_",
    "cliente-%",
    "cliente-C_%",
    "cliente_C101_1",
    "' OR '1'='1",
    '"',
    "C%",
    "C_",
    "x" * 1_000,
    WEIRD_THREAD[:-1] + "_",
    PLAIN_THREAD.upper(),
    " " + PLAIN_THREAD,
]
# Thread ids that cannot name a stored thread: refused where they enter (ThreadId), each with what is wrong.
REFUSED_THREAD_IDS = {
    "": "thread id is empty",
    "   ": "thread id is empty",
    "a\x00b": "thread id contains a NUL character",
    "x" * 10_000: "thread id is 10000 characters long",
}


@pytest.fixture(scope="module")
def agents_db(create_database) -> Database:
    """Two customers' threads (one with %, _ and quotes in its ids) written by the real agents."""
    db = Database(create_database(prefix="ckpage"))
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for text in ["Prefiero recoger mis pedidos en la tienda Sierpes.", "¿Qué preferencias tengo guardadas?"]:
        run_turn(agent, ContextoCliente("C101"), PLAIN_THREAD, text)
    run_turn(agent, ContextoCliente("C101"), "cliente-C101-2", "Hola, quería saber el estado de mi pedido.")
    run_turn(agent, ContextoCliente(WEIRD_CUSTOMER), WEIRD_THREAD, "Prefiero que me atendáis en catalán.")
    return db


def open_page(dsn: str, app_env, query: dict | None = None, **env) -> AppTest:
    app_env(dsn, **env)
    at = AppTest.from_file(APP, default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception
    at.switch_page(PAGE).run()
    assert not at.exception
    return at


# --- read functions ------------------------------------------------------------------------


@pytest.mark.parametrize("text", BAD_INPUT)
def test_bad_input_finds_nothing(agents_db, text):
    thread = ThreadId.parse(text)
    assert views.find_thread(agents_db, thread).empty
    assert views.threads_of_customer(agents_db, text).empty
    assert views.thread_timeline(agents_db, thread).empty
    assert views.step_writes(agents_db, thread).empty
    assert views.thread_storage(agents_db, thread)["checkpoints"] == 0


@pytest.mark.parametrize("text", list(REFUSED_THREAD_IDS), ids=["empty", "blank", "nul", "huge"])
def test_a_thread_id_that_can_name_no_thread_is_refused_saying_why(agents_db, text):
    with pytest.raises(InvalidIdentifier, match=REFUSED_THREAD_IDS[text]):
        ThreadId.parse(text)
    assert views.threads_of_customer(agents_db, text).empty


def test_ids_with_wildcards_and_quotes_find_exactly_that_thread(agents_db):
    assert views.find_thread(agents_db, WEIRD_THREAD)["thread_id"].tolist() == [WEIRD_THREAD]
    assert views.threads_of_customer(agents_db, WEIRD_CUSTOMER)["thread_id"].tolist() == [WEIRD_THREAD]
    assert sorted(views.threads_of_customer(agents_db, "C101")["thread_id"]) == [PLAIN_THREAD, "cliente-C101-2"]
    n = agents_db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (WEIRD_THREAD,))["n"]
    assert len(views.thread_timeline(agents_db, WEIRD_THREAD)) == n > 0


def test_read_functions_equal_sql(agents_db):
    q = agents_db.fetch_one
    timeline = views.thread_timeline(agents_db, PLAIN_THREAD)
    sql = agents_db.fetch(
        "SELECT checkpoint_id, (metadata->>'step')::int AS step FROM checkpoints "
        "WHERE thread_id = %s ORDER BY checkpoint->>'ts'",
        (PLAIN_THREAD,),
    )
    assert timeline["checkpoint_id"].tolist() == [r["checkpoint_id"] for r in sql]
    assert timeline["step"].tolist() == [r["step"] for r in sql]
    writes = views.step_writes(agents_db, PLAIN_THREAD)
    assert len(writes) == q("SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = %s", (PLAIN_THREAD,))["n"]
    assert timeline["pending_writes"].sum() == len(writes)
    assert {"recordar_preferencia", "preferencias"} <= set(writes["tool_name"].dropna())
    assert {"human", "ai", "tool"} <= set(writes["message_kind"].dropna())
    storage = views.thread_storage(agents_db, PLAIN_THREAD)
    assert (
        storage["write_bytes"]
        == q("SELECT sum(octet_length(blob)) AS n FROM checkpoint_writes WHERE thread_id = %s", (PLAIN_THREAD,))["n"]
    )
    assert (
        storage["blob_bytes"]
        == q("SELECT sum(octet_length(blob)) AS n FROM checkpoint_blobs WHERE thread_id = %s", (PLAIN_THREAD,))["n"]
    )
    n = ckpt_storage.refresh_thread_storage(agents_db)
    assert n == agents_db.fetch_one("SELECT count(DISTINCT thread_id) AS n FROM checkpoints")["n"]
    largest = views.largest_threads(agents_db, 10)
    assert (
        largest["total_bytes"] == largest["checkpoint_bytes"] + largest["blob_bytes"] + largest["write_bytes"]
    ).all()
    assert set(largest["thread_id"]) == {
        r["thread_id"] for r in agents_db.fetch("SELECT DISTINCT thread_id FROM checkpoints")
    }
    assert largest["total_bytes"].is_monotonic_decreasing


def test_diff_between_first_and_last_checkpoint(agents_db):
    timeline = views.thread_timeline(agents_db, PLAIN_THREAD)
    first, last = timeline["checkpoint_id"].iloc[0], timeline["checkpoint_id"].iloc[-1]
    diff = views.checkpoint_diff(agents_db, PLAIN_THREAD, first, last).set_index("channel")
    assert diff.loc["messages", "change"] == "added"
    assert "Sierpes" in diff.loc["messages", "new_value"] and pd.isna(diff.loc["messages", "old_value"])
    same = views.checkpoint_diff(agents_db, PLAIN_THREAD, last, last)
    assert set(same["change"]) == {"unchanged"}
    other = views.thread_timeline(agents_db, "cliente-C101-2")["checkpoint_id"].iloc[-1]
    assert views.checkpoint_diff(agents_db, PLAIN_THREAD, first, other).empty  # not of this thread


# --- the page ------------------------------------------------------------------------------


def test_thread_from_the_url_figures_equal_sql(agents_db, app_env):
    at = open_page(agents_db.dsn, app_env, {"thread": PLAIN_THREAD})
    q = agents_db.fetch_one
    n_ckpt = q("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (PLAIN_THREAD,))["n"]
    n_writes = q("SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = %s", (PLAIN_THREAD,))["n"]
    assert as_int(metric(at, "Checkpoints")) == n_ckpt
    assert as_int(metric(at, "Escrituras")) == n_writes
    assert metric(at, "Cliente") == "C101"
    assert metric(at, "Último paso") == str(
        q("SELECT max((metadata->>'step')::int) AS n FROM checkpoints WHERE thread_id = %s", (PLAIN_THREAD,))["n"]
    )
    written = next(m for m in at.metric if m.label == "Bytes de escrituras")  # "1,2 kB", the exact count in its help
    assert (
        as_int(written.proto.help.removesuffix(" bytes"))
        == q("SELECT sum(octet_length(blob)) AS n FROM checkpoint_writes WHERE thread_id = %s", (PLAIN_THREAD,))["n"]
    )
    timeline = frame(at, "checkpoint_id", "step", "source", "updated_channels")
    assert len(timeline) == n_ckpt
    # the plotly timeline: one point per checkpoint, at its step
    spec = at.get("plotly_chart")[0].proto.spec
    import json

    fig = json.loads(spec)
    points = [y for trace in fig["data"] if trace.get("mode") == "markers" for y in decode(trace["y"])]
    steps = [
        r["s"]
        for r in agents_db.fetch(
            "SELECT (metadata->>'step')::int AS s FROM checkpoints WHERE thread_id = %s", (PLAIN_THREAD,)
        )
    ]
    assert sorted(points) == sorted(steps)
    writes = frame(at, "channel", "message_kind", "tool_name", "payload")
    assert len(writes) == n_writes
    assert "recordar_preferencia" in set(writes["tool_name"].dropna())
    assert any("Sierpes" in (c or "") for c in writes["content"])
    assert any(cm for cm in at.get("chat_message"))
    # the conversation reads in Spanish: kinds in words, a tool call as its name and arguments, never raw JSON
    heads = [m.value for m in at.markdown]
    assert any(h.startswith("**persona**") for h in heads) and any(h.startswith("**IA**") for h in heads)
    assert not any(h.startswith(("**human", "**ai")) for h in heads)
    calls = [h for h in heads if h.startswith("Llama a:")]
    assert calls and all("recordar_preferencia(" in c or "(" in c for c in calls), calls
    assert any("recordar_preferencia(" in c and "tipo = " in c for c in calls), calls
    assert not [c for c in at.get("code") if '"args"' in c.value]
    diff = frame(at, "change", "old_value", "new_value")
    assert "messages" in set(diff["channel"]) and set(diff["change"]) <= {"añadido", "eliminado", "cambiado"}
    assert at.query_params["thread"] == PLAIN_THREAD


def test_one_step_writes_and_diff_toggle(agents_db, app_env):
    at = open_page(agents_db.dsn, app_env, {"thread": PLAIN_THREAD})
    step = agents_db.fetch_one(
        "SELECT checkpoint_id, count(*) AS n FROM checkpoint_writes WHERE thread_id = %s AND channel = 'messages' "
        "GROUP BY checkpoint_id ORDER BY checkpoint_id LIMIT 1",
        (PLAIN_THREAD,),
    )
    picker = at.selectbox(key="checkpoints.step")
    # each checkpoint named by its step and its time in the viewer's zone, the zone named (UTC here)
    labels = picker.options[1:]
    assert labels and all(
        re.fullmatch(r"paso -?\d+ · .*20\d\d, \d{1,2}:\d\d:\d\d UTC · \w{12}", label) for label in labels
    ), labels[:3]
    picker.set_value(step["checkpoint_id"]).run()
    assert not at.exception
    writes = frame(at, "channel", "message_kind", "payload")
    assert set(writes["checkpoint_id"]) == {step["checkpoint_id"]}
    assert (
        len(writes)
        == agents_db.fetch_one(
            "SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_id = %s",
            (PLAIN_THREAD, step["checkpoint_id"]),
        )["n"]
    )
    at.toggle(key="checkpoints.diff_changes").set_value(False).run()
    diff = frame(at, "change", "old_value", "new_value")
    assert {"sin cambios", "solo versión nueva (mismo valor)"} & set(diff["change"])


def test_find_by_customer_opens_the_thread(agents_db, app_env):
    at = open_page(agents_db.dsn, app_env)
    assert any("Elija un hilo en la lista de arriba" in i.value for i in at.info)
    at.radio(key="checkpoints.find_by").set_value("customer").run()
    at.text_input(key="checkpoints.customer").input(WEIRD_CUSTOMER).run()
    assert not at.exception
    found = frame(at, "thread_id", "cliente_id", "checkpoints")
    assert found["thread_id"].tolist() == [WEIRD_THREAD]
    at.text_input(key="checkpoints.thread").input(WEIRD_THREAD).run()
    assert not at.exception
    assert metric(at, "Cliente") == md(WEIRD_CUSTOMER)  # shown as the text it is, not as Markdown
    assert at.query_params["thread"] == WEIRD_THREAD


def test_recent_activity_lists_threads_newest_first(agents_db, app_env):
    at = open_page(agents_db.dsn, app_env)  # the page opens on the recent threads, nothing to click
    assert at.radio(key="checkpoints.find_by").value == "recent"
    found = frame(at, "thread_id", "last_ts")
    sql = agents_db.fetch("SELECT thread_id FROM checkpoints GROUP BY thread_id ORDER BY max(checkpoint->>'ts') DESC")
    assert found["thread_id"].tolist() == [r["thread_id"] for r in sql]


def test_a_thread_of_no_customer_has_no_customer_link(db, app_env):
    """Issue 54 finding 8: a supplier's thread (`compras-P001-...`, no customer) read "nan" as a customer link
    (`?cliente=nan`) in the recent activity; it has no customer, so no link: the grid's empty "—"."""
    agent = build_agent("compras", ScriptedChatModel(), store=None, checkpointer=PostgresSaver(db.pool))
    run_turn(agent, ContextoProveedor("P001"), "compras-P001-caida-1", "Aviso: el WhatsApp de pedidos está caído.")
    customers = build_agent("atencion-cliente", ScriptedChatModel(), store=None, checkpointer=PostgresSaver(db.pool))
    run_turn(customers, ContextoCliente("C5"), "cliente-C5-1", "Hola, quería saber el estado de mi pedido.")
    at = open_page(db.dsn, app_env)
    grid = next(d.value for d in at.dataframe if {"thread_id", "cliente_id"} <= set(d.value.columns))
    links = dict(zip(plain(grid["thread_id"]), grid["cliente_id"], strict=True))
    assert set(links) == {"compras-P001-caida-1", "cliente-C5-1"}
    assert parse_qs(urlsplit(links["cliente-C5-1"]).query)["cliente"] == ["C5"]
    assert pd.isna(links["compras-P001-caida-1"]), links  # not "/checkpoints?cliente=nan", not a link at all


def test_recent_activity_on_the_article_agents_database(article_agents_db, app_env):
    """The recent threads come from the follower's checkpoint shadow (no index of ours on `checkpoints`): on a
    database written by the memory article's agents (`conv-<uuid>` threads, no metadata of ours) the page lists
    every thread, newest first, as the live table orders them."""
    db = Database(article_agents_db.dsn)
    try:
        at = open_page(article_agents_db.dsn, app_env)
        found = frame(at, "thread_id", "last_ts")
        sql = db.fetch("SELECT thread_id FROM checkpoints GROUP BY thread_id ORDER BY max(checkpoint->>'ts') DESC")
        assert len(sql) > 1 and found["thread_id"].tolist() == [r["thread_id"] for r in sql]
    finally:
        db.close()


def test_a_thread_of_the_article_agents_opens_from_its_link(article_agents_db, app_env):
    """A `conv-<uuid>` thread the memory article's agents wrote (stock saver, no metadata of ours), opened from
    `?thread=` (parsed as a ThreadId): its checkpoints and writes equal SQL's."""
    thread = article_agents_db.conversations[0].thread_id
    db = Database(article_agents_db.dsn)
    try:
        at = open_page(article_agents_db.dsn, app_env, {"thread": thread})
        q = db.fetch_one
        n_ckpt = q("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (thread,))["n"]
        n_writes = q("SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = %s", (thread,))["n"]
        assert n_ckpt > 0 and not at.error
        assert as_int(metric(at, "Checkpoints")) == n_ckpt
        assert as_int(metric(at, "Escrituras")) == n_writes
    finally:
        db.close()


@pytest.mark.parametrize("text", BAD_INPUT)
def test_page_bad_input_shows_nothing(agents_db, app_env, text):
    at = open_page(agents_db.dsn, app_env)
    at.text_input(key="checkpoints.thread").input(text).run()
    assert not at.exception
    assert any("Ningún hilo se llama exactamente" in i.value for i in at.info)
    assert not at.metric and not at.get("plotly_chart")
    at.radio(key="checkpoints.find_by").set_value("customer").run()
    at.text_input(key="checkpoints.customer").input(text).run()
    assert not at.exception
    assert any("Ninguna fuente atribuye hilos a" in i.value for i in at.info)


@pytest.mark.parametrize("text", ["   ", "x" * 10_000], ids=["blank", "huge"])  # NUL cannot be typed or linked
def test_page_refuses_a_thread_id_that_can_name_no_thread(agents_db, app_env, text):
    at = open_page(agents_db.dsn, app_env, {"thread": text})  # a link (?thread=), as the box is filled from it
    assert not at.exception
    why = "está en blanco" if not text.strip() else "tiene 10.000 caracteres (como máximo 1.000)"
    shown = md_code(text if len(text) <= 60 else text[:60] + "…")  # the start of what was typed, inert
    assert [e.value for e in at.error] == [f"No se puede buscar el hilo {shown}: {why}. No se ha consultado nada."]
    assert not at.metric and not at.get("plotly_chart")


def test_storage_view_equals_sql(agents_db, app_env):
    ckpt_storage.refresh_thread_storage(agents_db)  # the largest threads are read as of the last refresh
    at = open_page(agents_db.dsn, app_env)
    at.radio(key="checkpoints.view").set_value("storage").run()
    assert not at.exception
    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
        assert as_int(metric(at, f"{table}: filas")) == agents_db.fetch_one(f"SELECT count(*) AS n FROM {table}")["n"]
    largest = frame(at, "thread_id", "total_bytes", "write_bytes")
    top = agents_db.fetch_one(
        "SELECT thread_id, sum(octet_length(blob)) AS b FROM checkpoint_writes "
        "GROUP BY thread_id ORDER BY b DESC LIMIT 1"
    )
    assert largest.set_index("thread_id").loc[top["thread_id"], "write_bytes"] == top["b"]
    assert [c.key for c in at.get("plotly_chart")][:1] == ["checkpoints.largest_chart"]


def test_demo_data_in_english(demo_db, app_env):
    thread = demo_db.fetch_one(
        "SELECT thread_id FROM checkpoints WHERE metadata->>'cliente_id' IS NOT NULL ORDER BY thread_id LIMIT 1"
    )["thread_id"]
    at = open_page(demo_db.dsn, app_env, {"thread": thread, "lang": "en"})
    assert any(t.value == "A thread's checkpoint history" for t in at.title)
    assert (
        as_int(metric(at, "Checkpoints"))
        == demo_db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (thread,))["n"]
    )


def test_manager_is_refused(agents_db, app_env):
    app_env(agents_db.dsn, LOCAL_ROLES="manager")
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    # registered but hidden from a manager's menu: its URL opens it, and it refuses naming the role
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == ["Esta página requiere el rol «sre»."]
    assert not at.text_input and not at.metric and not at.dataframe
    page = AppTest.from_file("../" + PAGE, default_timeout=60)
    page.run()
    assert not page.exception
    assert any("requiere el rol «sre»" in e.value for e in page.error)
    assert not page.metric and not page.dataframe
