"""The Memory page's search by meaning (issue 31 item 3), AppTest on the demo data and on the article's agents."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from apptools import frame
from babel.numbers import format_decimal
from conftest import DIMS, free_port, settings_for
from embedding_server import embeddings_endpoint
from streamlit.testing.v1 import AppTest
from test_tables import display_texts

from core.config import DEFAULT_SEMANTIC_MIN_SIMILARITY
from core.memory.semantic import search
from core.memory.store import POLICIES
from core.privacy import data_views

APP = "../dashboard.py"
QUESTION = "¿qué clientes prefieren WhatsApp?"
SNAPSHOT = "SELECT prefix, key, expires_at FROM store ORDER BY prefix, key"
NOT_CLOSE = "prefiere recoger el pedido en tienda"  # shares no word with any document of the demo
LAST_VIEW = "SELECT coalesce(max(id), 0) AS id FROM core_data_views"
SEARCH_VIEWS = "SELECT target FROM core_data_views WHERE id > %s AND kind = 'search' ORDER BY target"


def page(app_env, dsn: str, **env) -> AppTest:
    app_env(dsn, **env)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    return at


def hits_shown(at: AppTest) -> bool:
    return any("similarity" in d.value.columns for d in at.dataframe)


def ask(at: AppTest, query: str, root: str = "clientes", k: int = 10) -> AppTest:
    """Ask the page; the submit button's key names its label (Spanish or English)."""
    at.text_input(key="memory.semantic_query").input(query)
    at.selectbox(key="memory.semantic_root").select_index(list(POLICIES).index(root))
    at.number_input(key="memory.semantic_k").set_value(k)
    next(b for b in at.button if b.key.startswith("FormSubmitter:memory.semantic_form-")).click().run()
    assert not at.exception
    return at


def test_whatsapp_customers_with_scores_and_links_to_their_memory(demo_db, app_env):
    before = demo_db.fetch(SNAPSHOT)
    at = ask(page(app_env, demo_db.dsn), QUESTION, k=8)
    hits = frame(at, "holder", "similarity")
    expected = search(demo_db, settings_for(demo_db.dsn), QUESTION, "clientes", 8)
    assert [parse_qs(urlsplit(u).query)["ns"][0] for u in hits["holder"]] == expected["prefix"].tolist()
    assert all(urlsplit(u).path == "/memory" for u in hits["holder"])
    # kept as numbers (the grid sorts them as numbers), read in the page's language to two decimals, as every table
    # shows a fraction (ui.tables)
    assert hits["similarity"].tolist() == pytest.approx(expected["similarity"].astype(float).tolist())
    grid = next(d for d in at.dataframe if "similarity" in d.value.columns)
    shown = [
        format_decimal(s, "#,##0.00" if not float(s).is_integer() else None, locale="es")
        for s in expected["similarity"]
    ]
    assert display_texts(grid)["similarity"].tolist() == shown
    whatsapp = demo_db.fetch_one(
        "SELECT count(*) AS n FROM store WHERE value->>'texto' = 'contacto: WhatsApp' AND expires_at > now()"
    )["n"]
    assert whatsapp and set(hits["valor"].head(min(8, whatsapp))) == {"WhatsApp"}
    assert any("1 − distancia coseno" in c.value for c in at.caption)
    assert demo_db.fetch(SNAPSHOT) == before  # the page's search refreshed no TTL
    # the link opens that customer's memory on this page
    at.session_state["memory.ns"] = expected["prefix"].iloc[0]
    at.run()
    assert not at.exception and "WhatsApp" in frame(at, "key", "valor")["valor"].tolist()


@pytest.mark.parametrize(
    "lang, nothing, least, shown_only",
    [
        ("es", "Nada lo bastante parecido", "similitud mínima de 0,3", "similitud de 0,3 o más"),
        ("en", "Nothing close enough", "least similarity of 0.3", "similarity of 0.3 or more"),
    ],
)
def test_nothing_close_enough_is_said_and_no_customer_is_logged_as_viewed(
    demo_db, app_env, lang, nothing, least, shown_only
):
    """Issue 54 finding 2: a question that shares nothing with any document shows no rows at similarity 0 and
    logs nobody as viewed by a search; a question that matches shows and logs only the rows above the least
    similarity, which the page states."""
    app_env(demo_db.dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["lang"] = lang
    at.run()
    assert not at.exception
    before = demo_db.fetch_one(LAST_VIEW)["id"]
    ask(at, NOT_CLOSE)
    assert not hits_shown(at)
    assert any(nothing in i.value and least in i.value for i in at.info), [i.value for i in at.info]
    ask(at, QUESTION, k=50)
    hits = frame(at, "holder", "similarity")
    assert len(hits) and (hits["similarity"] >= DEFAULT_SEMANTIC_MIN_SIMILARITY).all()
    assert any(shown_only in c.value for c in at.caption)  # the threshold, stated where the results are
    assert data_views.flush(demo_db, 10)
    shown = sorted(parse_qs(urlsplit(u).query)["ns"][0] for u in hits["holder"])
    assert [r["target"] for r in demo_db.fetch(SEARCH_VIEWS, (before,))] == shown  # only what was shown


@pytest.mark.parametrize("query, message", [("   ", "type what to look for"), ("whats\x00app", "NUL character")])
def test_bad_query_is_a_clear_error(demo_db, app_env, query, message):
    at = page(app_env, demo_db.dsn)
    at.session_state["memory.semantic_query"] = query
    at.button(key="FormSubmitter:memory.semantic_form-Buscar").click().run()
    assert not at.exception
    assert any(message in e.value for e in at.error) and not hits_shown(at)


def test_endpoint_down_or_other_dims_is_said_and_nothing_is_shown(demo_db, app_env):
    before = demo_db.fetch(SNAPSHOT)
    at = ask(page(app_env, demo_db.dsn, EMBEDDINGS_BASE_URL=f"http://127.0.0.1:{free_port()}/v1"), QUESTION)
    assert any("No se pudo calcular el embedding" in e.value and "endpoint failed" in e.value for e in at.error)
    assert not hits_shown(at)
    with embeddings_endpoint(DIMS * 2) as url:
        at = ask(page(app_env, demo_db.dsn, EMBEDDINGS_BASE_URL=url), QUESTION)
    assert any(f"{DIMS * 2} dimensions" in e.value for e in at.error)
    assert not hits_shown(at)
    assert demo_db.fetch(SNAPSHOT) == before


def test_article_agents_without_vectors_say_so(article_agents_db, app_env):
    at = ask(page(app_env, article_agents_db.dsn), "correo")
    assert any("no tiene vectores" in i.value for i in at.info)


def test_english_labels(demo_db, app_env):
    app_env(demo_db.dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["lang"] = "en"
    at = ask(at.run(), "WhatsApp", k=3)
    assert any(c.value.startswith("Similarity = 1 − pgvector's cosine distance") for c in at.caption)
    assert any(s.value == "Search the memory by meaning" for s in at.subheader)
