"""Semantic search of the memory (issue 31 item 3): pgvector in SQL, read-only, never `store.search`."""

from __future__ import annotations

import math
import time

import pytest
from conftest import DIMS, free_port, settings_for
from embedding_server import embeddings_endpoint
from langgraph.store.postgres import PostgresStore

from core.config import DEFAULT_SEMANTIC_MIN_SIMILARITY, load_settings
from core.db import Database
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.semantic import MAX_K, MAX_QUERY_LENGTH, EmbeddingUnavailable, SearchInputError, search
from core.memory.store import build_store, put_memory, search_memory

QUESTION = "¿qué clientes prefieren WhatsApp?"
SNAPSHOT = "SELECT prefix, key, expires_at, updated_at, ttl_minutes FROM store ORDER BY prefix, key"


EXPIRED = "SELECT coalesce(bool_and(expires_at <= now()), false) AS gone FROM store WHERE prefix = 'clientes.C_4'"


def written(db: Database) -> PostgresStore:
    """Four customers' documents (one expired) and a supplier's notice, through the agents' own tools."""
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    put_memory(
        store,
        ("clientes", "C1"),
        "pref-contacto",
        {"tipo": "contacto", "valor": "WhatsApp", "texto": "contacto: WhatsApp"},
    )
    put_memory(
        store,
        ("clientes", "C2"),
        "pref-contacto",
        {"tipo": "contacto", "valor": "correo electrónico", "texto": "contacto: correo electrónico"},
    )
    put_memory(
        store, ("clientes", "C3"), "pref-recogida", {"tipo": "recogida", "valor": "T002", "texto": "recogida: T002"}
    )
    put_memory(
        store,
        ("clientes", "C_4"),
        "pref-contacto",
        {"tipo": "contacto", "valor": "WhatsApp", "texto": "contacto: WhatsApp"},
        valid_for_minutes=0.001,
    )
    put_memory(store, ("proveedores", "P1"), "aviso", {"texto": "WhatsApp de pedidos caído"})
    # C_4's document has expired (not swept), on the database's clock the search reads: waited for, not a fixed 0.5 s
    deadline = time.monotonic() + 10
    while not db.fetch_one(EXPIRED)["gone"]:
        assert time.monotonic() < deadline, "C_4's document did not expire"
        time.sleep(0.01)
    return store


@pytest.fixture
def store(db):
    return written(db)


@pytest.fixture(scope="module")
def read_only(create_database):
    """One database for the tests that must read nothing and change nothing (each asserts it): written once."""
    database = Database(create_database())
    yield database, written(database)
    database.close()


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_nearest_customers_first_with_cosine_similarity_expired_and_other_roots_left_out(db, store):
    # every document, however far (no least similarity): the ranking and the score themselves
    found = search(db, settings_for(db.dsn, semantic_min_similarity=-1.0), QUESTION, "clientes", 10)
    assert found["prefix"].tolist()[0] == "clientes.C1"
    assert set(found["prefix"]) == {"clientes.C1", "clientes.C2", "clientes.C3"}  # not C_4 (expired), not P1
    assert found["similarity"].is_monotonic_decreasing
    emb = OfflineHashEmbeddings(DIMS)
    for row in found.itertuples():  # the score is the cosine similarity of the query and the document's texto
        assert row.similarity == pytest.approx(cosine(emb.embed_query(QUESTION), emb.embed_query(row.texto)), abs=1e-3)
    assert search(db, settings_for(db.dsn), QUESTION, "clientes", 1)["prefix"].tolist() == ["clientes.C1"]
    assert search(db, settings_for(db.dsn), "WhatsApp", "proveedores", 5)["prefix"].tolist() == ["proveedores.P1"]


def test_only_documents_at_least_as_similar_as_the_setting_are_found(db, store):
    """Issue 54 finding 2: a document that shares nothing with the question (similarity 0, or a bucket collision's
    negative) is not a result; the least similarity is SEMANTIC_MIN_SIMILARITY (default 0.3)."""
    found = search(db, settings_for(db.dsn), QUESTION, "clientes", 10)
    assert found["prefix"].tolist() == ["clientes.C1"]  # C2 and C3 share no word with the question
    assert (found["similarity"] >= DEFAULT_SEMANTIC_MIN_SIMILARITY).all()
    assert search(db, settings_for(db.dsn), "prefiere recoger el pedido en tienda", "clientes", 10).empty
    strict = settings_for(db.dsn, semantic_min_similarity=0.5)
    assert search(db, strict, QUESTION, "clientes", 10).empty  # C1 is 0.354 to the four-word question
    assert search(db, strict, "WhatsApp", "clientes", 10)["prefix"].tolist() == ["clientes.C1"]  # 0.707


def test_the_least_similarity_is_read_from_the_environment(monkeypatch):
    assert load_settings({}).semantic_min_similarity == DEFAULT_SEMANTIC_MIN_SIMILARITY == 0.3
    monkeypatch.setenv("SEMANTIC_MIN_SIMILARITY", "0.45")
    assert load_settings({}).semantic_min_similarity == 0.45
    for bad in ("1.5", "-2", "nan", "mucho"):
        monkeypatch.setenv("SEMANTIC_MIN_SIMILARITY", bad)
        with pytest.raises(ValueError, match="SEMANTIC_MIN_SIMILARITY must be a number from -1 to 1"):
            load_settings({})


def test_looking_does_not_extend_retention(db, store):
    before = db.fetch(SNAPSHOT)
    time.sleep(0.05)
    assert not search(db, settings_for(db.dsn), QUESTION, "clientes", MAX_K).empty
    assert db.fetch(SNAPSHOT) == before
    # the same check catches what the store's own search does (it refreshes the TTL of what it returns)
    assert search_memory(store, ("clientes",), query=QUESTION, limit=MAX_K)
    assert db.fetch(SNAPSHOT) != before


@pytest.mark.parametrize(
    "query, root, k",
    [
        ("", "clientes", 5),
        ("   ", "clientes", 5),
        ("whats\x00app", "clientes", 5),
        ("x" * (MAX_QUERY_LENGTH + 1), "clientes", 5),
        (QUESTION, "clientes.C1", 5),
        (QUESTION, "", 5),
        (QUESTION, "clientes", 0),
        (QUESTION, "clientes", MAX_K + 1),
        (QUESTION, "clientes", True),
        (None, "clientes", 5),
    ],
)
def test_bad_input_is_a_clear_error_and_reads_nothing(read_only, query, root, k):
    db, _store = read_only
    before = db.fetch(SNAPSHOT)
    with pytest.raises(SearchInputError):
        search(db, settings_for(db.dsn, embeddings_base_url=f"http://127.0.0.1:{free_port()}/v1"), query, root, k)
    assert db.fetch(SNAPSHOT) == before


def test_endpoint_down_or_with_other_dims_is_a_clear_error(db, store):
    before = db.fetch(SNAPSHOT)
    down = settings_for(db.dsn, embeddings_base_url=f"http://127.0.0.1:{free_port()}/v1", embeddings_model="m")
    with pytest.raises(EmbeddingUnavailable, match="endpoint failed"):
        search(db, down, QUESTION, "clientes", 5)
    with embeddings_endpoint(DIMS + 1) as url:
        with pytest.raises(EmbeddingUnavailable, match=f"{DIMS + 1} dimensions but store_vectors.embedding has {DIMS}"):
            search(db, settings_for(db.dsn, embeddings_base_url=url, embeddings_model="m"), QUESTION, "clientes", 5)
    assert db.fetch(SNAPSHOT) == before


def test_the_configured_endpoint_embeds_the_query(db, store):
    offline = search(db, settings_for(db.dsn), QUESTION, "clientes", 5)
    with embeddings_endpoint(DIMS) as url:
        remote = search(
            db, settings_for(db.dsn, embeddings_base_url=url, embeddings_model="m"), QUESTION, "clientes", 5
        )
    assert remote["prefix"].tolist() == offline["prefix"].tolist()
    assert remote["similarity"].tolist() == pytest.approx(offline["similarity"].tolist(), abs=1e-3)


def test_demo_data_whatsapp_customers(demo_db):
    found = search(demo_db, settings_for(demo_db.dsn), QUESTION, "clientes", 20)
    assert len(found) >= 1 and found["prefix"].str.startswith("clientes.").all()
    whatsapp = demo_db.fetch_one(
        "SELECT count(*) AS n FROM store s JOIN store_vectors v USING (prefix, key) WHERE s.prefix LIKE 'clientes.%%' "
        "AND s.value->>'texto' = 'contacto: WhatsApp' AND (s.expires_at IS NULL OR s.expires_at > now())"
    )["n"]
    # the word the query shares with the documents makes them results, and only them (issue 54: a document that
    # shares nothing with the question is no result): every WhatsApp contact, nothing else
    assert len(found) == min(20, whatsapp) and set(found["texto"]) == {"contacto: WhatsApp"}
    # with no least similarity the nearest 20 come back, the WhatsApp contacts first
    every = search(demo_db, settings_for(demo_db.dsn, semantic_min_similarity=-1.0), QUESTION, "clientes", 20)
    assert len(every) == 20 and set(every.head(min(20, whatsapp))["texto"]) == {"contacto: WhatsApp"}


def test_article_agents_store_without_vectors_finds_nothing_and_changes_nothing(article_agents_db):
    from core.db import Database

    db = Database(article_agents_db.dsn)
    try:
        before = db.fetch(SNAPSHOT)
        assert before  # the article's agents wrote preferences, without an index (no vectors)
        assert search(db, settings_for(db.dsn), "correo", "clientes", 5).empty
        assert db.fetch(SNAPSHOT) == before
    finally:
        db.close()
