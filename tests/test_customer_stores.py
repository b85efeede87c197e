"""Which store each customer belongs to and what a store manager may read (issue 39), at the core level: who manages
what (claims, `[roles]` entries, bad input), the mapping's sources on databases written by our agents and by agents
built from the articles alone (store in checkpoint metadata, a configured query on the application's tables), their
order, a failing or hung query (that source's error, nothing shown), and every scoped read against SQL."""

from __future__ import annotations

import re
from datetime import date, timedelta

import psycopg
import pytest
from conftest import settings_for

from core import roles
from core.config import load_settings
from core.demo.seed import demo_store
from core.memory import customer_stores, preferences, reads, semantic
from core.memory.customer_stores import StoreSources
from core.memory.store import InvalidIdentifier

# --- who manages what -------------------------------------------------------------------------------------------


def test_stores_from_a_claim_a_roles_table_or_nothing():
    role_map = {
        "ana@example.com": {"roles": ("manager",), "stores": ("T002",)},
        "luis@example.com": ("manager",),  # the list form: stores from the claim
        "eva@example.com": {"roles": ("manager",), "stores": ("*",)},
    }
    claims = {"stores": ["T001", "T003", "T001"]}
    # the [roles] table wins over the claim; the list form takes the claim; "*" is every store
    assert roles.store_scope_for("Ana@Example.com", role_map, claims, "stores") == roles.StoreScope(
        ("T002",), "secrets"
    )
    assert roles.store_scope_for("luis@example.com", role_map, claims, "stores") == roles.StoreScope(
        ("T001", "T003"), "claim:stores"
    )
    assert roles.store_scope_for("luis@example.com", role_map, claims, "tiendas") == roles.StoreScope((), "none")
    every = roles.store_scope_for("eva@example.com", role_map, {}, "stores")
    assert every.stores is None and every.every_store and every.origin == "secrets"
    assert roles.roles_for("ana@example.com", role_map) == ("manager",)
    assert roles.roles_for("luis@example.com", role_map) == ("manager",)
    with pytest.raises(roles.UnknownRole, match="unknown key"):
        roles.roles_for("x@example.com", {"x@example.com": {"roles": ["manager"], "tiendas": ["T1"]}})


@pytest.mark.parametrize(
    "claim, message",
    [
        ("T001", "must be a list of store ids, got str"),
        (7, "must be a list of store ids, got int"),
        ({"T001": True}, "must be a list"),
        ([7], "must be text"),
        ([""], "empty or has surrounding spaces"),
        ([" T001"], "surrounding spaces"),
        (["T%"], "'%'"),
        (["T_1"], "'_'"),
        (["T'1"], '"\'"'),
        (['T"1'], "'\"'"),
        (["T\x001"], "NUL"),
        (["T\\1"], repr("\\")),
        (["x" * 101], "101 characters"),
        (["*", "T001"], "must be alone"),
        ([f"T{i}" for i in range(1001)], "1001 stores"),
    ],
)
def test_a_bad_store_claim_is_a_clear_error_and_no_store(claim, message):
    scope = roles.store_scope_for("luis@example.com", {}, {"stores": claim}, "stores")
    assert scope.stores == () and scope.origin == "claim:stores"
    assert scope.error is not None and message in scope.error, scope.error


def test_secrets_table_form_and_list_form_load(monkeypatch):
    monkeypatch.delenv("STORE_CLAIM", raising=False)
    cfg = load_settings(
        {
            "roles": {
                "Ana@example.com": {"roles": ["manager"], "stores": ["T002"]},
                "sre@example.com": ["sre"],
            }
        }
    )
    assert cfg.role_map == {
        "ana@example.com": {"roles": ("manager",), "stores": ("T002",)},
        "sre@example.com": ("sre",),
    }
    assert cfg.store_claim == "stores"
    assert load_settings({"STORE_CLAIM": "https://example.com/stores"}).store_claim == "https://example.com/stores"
    for bad in ("has space", "a'b", "%x"):
        with pytest.raises(ValueError, match="STORE_CLAIM"):
            load_settings({"STORE_CLAIM": bad})


# --- the mapping on a database written by our own agents (the demo) -------------------------------------------------

DEMO_THREAD = re.compile(r"^cliente-C(\d+)-(\d+)$")


def effective(db) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in db.fetch("SELECT cliente_id, tienda FROM core_customer_stores WHERE effective"):
        out.setdefault(r["cliente_id"], set()).add(r["tienda"])
    return out


@pytest.fixture(scope="module")
def demo_mapped(demo_db):
    result = customer_stores.refresh(demo_db, settings_for(demo_db.dsn), trigger="manual")
    assert not result.errors
    return demo_db, result


def test_our_agents_store_in_checkpoint_metadata_gives_each_customer_its_stores(demo_mapped):
    db, result = demo_mapped
    expected: dict[str, set[str]] = {}
    for r in db.fetch("SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id LIKE 'cliente-C%%'"):
        match = DEMO_THREAD.match(r["thread_id"])
        if match and (store := demo_store(int(match[1]), int(match[2]) - 1)) is not None:
            expected.setdefault(f"C{match[1]}", set()).add(store)
    assert effective(db) == expected
    assert any(len(s) == 2 for s in expected.values())  # customers of two stores
    sources = {s.source: s for s in result.sources}
    assert set(sources) == {"metadata:tienda", "document:tienda"}
    assert sources["metadata:tienda"].customers == len(expected) and sources["document:tienda"].customers == 0
    assert set(
        db.fetch_one("SELECT array_agg(DISTINCT source) AS s FROM core_customer_stores WHERE effective")["s"]
    ) == {"metadata:tienda"}
    # customers without a store: every tenth customer (no store in any conversation) among those the dashboard knows
    known = {
        r["c"]
        for r in db.fetch(
            "SELECT split_part(prefix, '.', 2) AS c FROM core_prefix_counts WHERE root = 'clientes' AND documents > 0 "
            "UNION SELECT cliente_id FROM core_thread_last WHERE cliente_id IS NOT NULL "
            "UNION SELECT subject_id FROM core_conversations WHERE subject_root = 'clientes'"
        )
    }
    assert result.customers == len(known) and result.with_store == len(expected)
    assert result.without_store == len(known - set(expected)) > 0


def scoped(db, *stores: str):
    return StoreSources.from_settings(settings_for(db.dsn)).scope(stores)


def customers_of(db, *stores: str) -> list[str]:
    return [
        r["c"]
        for r in db.fetch(
            "SELECT DISTINCT cliente_id AS c FROM core_customer_stores WHERE effective AND tienda = ANY(%s) ORDER BY 1",
            (list(stores),),
        )
    ]


@pytest.fixture(params=["per customer", "large scope"])
def plan(request, monkeypatch):
    """Each scoped read both ways: a lookup per customer, and the hashed joins of a large scope (LARGE_SCOPE)."""
    if request.param == "large scope":
        monkeypatch.setattr(customer_stores, "LARGE_SCOPE", 0)
    return request.param


def test_scoped_memory_reads_equal_sql_over_the_stores_customers(demo_mapped, plan):
    db, _ = demo_mapped
    scope = scoped(db, "T001")
    mine = customers_of(db, "T001")
    prefixes = [f"clientes.{c}" for c in mine]
    sql = db.fetch_one(
        "SELECT count(*) AS documents, count(DISTINCT prefix) AS namespaces, "
        "count(*) FILTER (WHERE expires_at < now()) AS expired, "
        "(SELECT count(*) FROM store_vectors WHERE prefix = ANY(%(p)s)) AS vectors "
        "FROM store WHERE prefix = ANY(%(p)s)",
        {"p": prefixes},
    )
    totals = reads.memory_totals(db, scope=scope)
    assert (totals.documents, totals.namespaces, totals.expired, totals.vectors) == (
        sql["documents"],
        sql["namespaces"],
        sql["expired"],
        sql["vectors"],
    )
    assert totals.customers == sql["namespaces"] > 0 and totals.documents < reads.memory_totals(db).documents
    by_root = reads.documents_by_root(db, scope=scope)
    assert by_root.to_dict("records") == [
        {"root": "clientes", "documents": sql["documents"], "namespaces": sql["namespaces"], "expired": sql["expired"]}
    ]
    top = reads.top_prefixes(db, 20, scope=scope)
    assert set(top["prefix"]) <= set(prefixes) and top["documents"].is_monotonic_decreasing
    oversized = reads.oversized_customers(db, scope=scope)
    every = reads.oversized_customers(db)
    assert oversized["prefix"].tolist() == [p for p in every["prefix"] if p in prefixes]
    # another store's customer: not found, not suggested, its documents not read
    other = next(c for c in customers_of(db, "T002") if c not in mine)
    assert reads.find_namespaces(db, other, scope=scope).empty
    assert not reads.find_namespaces(db, other).empty
    assert reads.namespace_items(db, f"clientes.{other}", scope=scope).empty
    assert not reads.namespace_items(db, f"clientes.{mine[0]}", scope=scope).empty
    suggested = reads.suggest_namespaces(db, "C", 500, scope=scope)["prefix"].tolist()
    assert suggested == sorted(p for p in prefixes if p in set(db_prefixes(db)))
    assert reads.suggest_namespaces(db, "clientes.C", 500, scope=scope)["prefix"].tolist() == suggested
    assert reads.suggest_namespaces(db, "proveedores.P", 10, scope=scope).empty
    assert reads.refused_customer(f"clientes.{other}") == other == reads.refused_customer(other)
    assert reads.refused_customer("proveedores.P001") is None


def db_prefixes(db) -> list[str]:
    return [r["prefix"] for r in db.fetch("SELECT DISTINCT prefix FROM store")]


def test_a_customer_of_two_stores_is_seen_from_both(demo_mapped):
    db, _ = demo_mapped
    both = db.fetch_one(
        "SELECT cliente_id, array_agg(tienda ORDER BY tienda) AS t FROM core_customer_stores WHERE effective "
        "GROUP BY 1 HAVING count(*) = 2 AND bool_or(cliente_id IN (SELECT split_part(prefix, '.', 2) FROM store)) "
        "ORDER BY 1 LIMIT 1"
    )
    assert both is not None
    for store in both["t"]:
        assert not reads.find_namespaces(db, both["cliente_id"], scope=scoped(db, store)).empty


def test_scoped_search_by_meaning_ranks_only_the_stores_customers(demo_mapped, plan):
    db, _ = demo_mapped
    # every document in scope, however far (no least similarity): the scoping and the ranking themselves
    settings = settings_for(db.dsn, semantic_min_similarity=-1.0)
    scope = scoped(db, "T002")
    mine = {f"clientes.{c}" for c in customers_of(db, "T002")}
    hits = semantic.search(db, settings, "prefiero WhatsApp", "clientes", 50, scope=scope)
    searchable = db.fetch_one(
        "SELECT count(*) AS n FROM store_vectors v JOIN store s USING (prefix, key) "
        "WHERE v.prefix = ANY(%s) AND (s.expires_at IS NULL OR s.expires_at > now())",
        (sorted(mine),),
    )["n"]
    assert len(hits) == min(50, searchable) > 0 and set(hits["prefix"]) <= mine
    assert hits["similarity"].is_monotonic_decreasing
    with pytest.raises(semantic.SearchInputError, match="root must be 'clientes'"):
        semantic.search(db, settings, "retrasos", "proveedores", 5, scope=scope)


def test_scoped_preferences_equal_sql_over_the_stores_customers(demo_mapped):
    db, _ = demo_mapped
    scope = scoped(db, "T003")
    mine = customers_of(db, "T003")
    until = date.today()
    since = until - timedelta(days=29)
    period = {"since": since, "until": until, "c": mine}
    conversations = db.fetch_one(
        "SELECT count(DISTINCT thread_id) AS n FROM core_thread_days WHERE cliente_id = ANY(%(c)s) "
        "AND day BETWEEN %(since)s AND %(until)s",
        period,
    )["n"]
    calls = db.fetch(
        "SELECT thread_id, args ->> 'tipo' AS tipo, cliente_id FROM core_tool_calls "
        "WHERE tool = 'recordar_preferencia' "
        "AND cliente_id = ANY(%(c)s) AND (ts AT TIME ZONE 'UTC')::date BETWEEN %(since)s AND %(until)s",
        period,
    )
    assert conversations > 0 and calls
    assert preferences.conversations(db, since, until, scope=scope) == conversations
    assert int(preferences.preference_daily(db, since, until, scope=scope)["writes"].sum()) == len(calls)
    by_tipo = preferences.preference_by_tipo(db, since, until, scope=scope)
    assert int(by_tipo["writes"].sum()) == len(calls)
    assert dict(zip(by_tipo["tipo"], by_tipo["customers"], strict=True)) == {
        t: len({c["cliente_id"] for c in calls if c["tipo"] == t}) for t in {c["tipo"] for c in calls}
    }
    writers = preferences.writing_conversations(db, since, until, 500, scope=scope)
    assert sorted(writers["thread_id"]) == sorted({c["thread_id"] for c in calls})
    assert preferences.writing_conversation_count(db, since, until, scope=scope) == len(writers)
    assert set(writers["cliente_id"]) <= set(mine)
    applied = preferences.preferences_applied(db, 500, since, until, scope=scope)
    assert set(applied.proposals["cliente_id"]) <= set(mine)
    assert sum(preferences.clocks(db, since, until, scope=scope).values()) == len(calls)


# --- agents built from the articles alone: the store in checkpoint metadata, and a configured query ---------------

# The application tags each run with the conversation's store only (`config={"metadata": {"tienda": ...}}`), as the
# article's runtime context carries it; the customer is nowhere in the metadata: the preference documents' `hilo`
# back-links name it. C_9 talks to two stores; C% to none.
ARTICLE_STORES = {"C9": ("T001",), "C19": ("T002",), "C9x": ("T001",), "C_9": ("T002", "T003"), "C10": ("T003",)}


@pytest.fixture(scope="module")
def article_stores(create_database):
    from conftest import off_loop
    from foreign_agents import run_conversations, script

    from core.migrate import migrate

    dsn = create_database(migrated=False, prefix="foreign_stores")
    convs = script()

    def metadata(conv, n: int) -> dict:
        stores = ARTICLE_STORES.get(conv.customer, ())
        return {"tienda": stores[n % len(stores)]} if stores else {}

    # each customer's three write threads (with `hilo` back-links) alternate its stores
    off_loop(run_conversations, dsn, convs, metadata)
    migrate(dsn, 64)
    with psycopg.connect(dsn, autocommit=True) as conn:  # the application's own table of customers
        conn.execute("CREATE TABLE app_clientes (cliente_id text, tienda text)")
        conn.execute("INSERT INTO app_clientes VALUES ('C9', 'T002'), ('C_9', 'T001'), ('C_9', 'T004')")
    from core.db import Database

    db = Database(dsn)
    yield db
    db.close()


def stores_by_customer(db) -> dict[str, dict[str, set[str]]]:
    out: dict[str, dict[str, set[str]]] = {}
    for r in db.fetch("SELECT cliente_id, tienda, source FROM core_customer_stores WHERE effective"):
        out.setdefault(r["cliente_id"], {}).setdefault(r["source"], set()).add(r["tienda"])
    return out


def test_article_agents_store_from_checkpoint_metadata(article_stores):
    db = article_stores
    result = customer_stores.refresh(db, settings_for(db.dsn))
    assert not result.errors
    # the write threads' stores (n % 2 alternates a two-store customer's writes)
    assert stores_by_customer(db) == {
        "C9": {"metadata:tienda": {"T001"}},
        "C19": {"metadata:tienda": {"T002"}},
        "C9x": {"metadata:tienda": {"T001"}},
        "C_9": {"metadata:tienda": {"T002", "T003"}},
        "C10": {"metadata:tienda": {"T003"}},
    }
    assert (result.customers, result.with_store, result.without_store) == (6, 5, 1)  # C% has no store
    t001 = scoped(db, "T001")
    assert sorted(reads.suggest_namespaces(db, "C", 10, scope=t001)["prefix"]) == ["clientes.C9", "clientes.C9x"]
    # look-alike ids never cross: C_9 and C% are not C9's, and `_`/`%` stay literal
    assert reads.find_namespaces(db, "C_9", scope=t001).empty and reads.find_namespaces(db, "C%", scope=t001).empty
    assert reads.suggest_namespaces(db, "C_", 10, scope=t001).empty
    n = db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix IN ('clientes.C9', 'clientes.C9x')")["n"]
    assert reads.memory_totals(db, scope=t001).documents == n


def test_a_configured_query_comes_first_and_metadata_fills_in(article_stores):
    db = article_stores
    query = "SELECT cliente_id, tienda FROM app_clientes"
    result = customer_stores.refresh(db, settings_for(db.dsn, customer_store_query=query))
    assert not result.errors
    assert [s.source for s in result.sources] == ["query", "metadata:tienda", "document:tienda"]
    assert stores_by_customer(db) == {
        "C9": {"query": {"T002"}},  # the application's table wins over the metadata's T001
        "C_9": {"query": {"T001", "T004"}},  # a customer of two stores, each
        "C19": {"metadata:tienda": {"T002"}},
        "C9x": {"metadata:tienda": {"T001"}},
        "C10": {"metadata:tienda": {"T003"}},
    }
    scope = StoreSources.from_settings(settings_for(db.dsn, customer_store_query=query)).scope(("T001",))
    assert sorted(reads.suggest_namespaces(db, "C", 10, scope=scope)["prefix"]) == ["clientes.C9x", "clientes.C_9"]
    # the same scope against the mapping computed without the query: stale, nothing
    assert reads.find_namespaces(db, "C9x", scope=scoped(db, "T001")).empty


@pytest.mark.parametrize(
    "query, error",
    [
        ("SELECT cliente_id, tienda FROM no_such_table", "UndefinedTable"),
        ("DELETE FROM app_clientes RETURNING cliente_id, tienda", "ReadOnlySqlTransaction"),
        ("SELECT cliente_id FROM app_clientes", "two columns"),
        ("SELECT 'C9x', 'T001' FROM pg_sleep(2)", "QueryCanceled"),
    ],
)
def test_a_failing_or_hung_query_is_that_sources_error_and_nothing_is_shown(article_stores, monkeypatch, query, error):
    db = article_stores
    monkeypatch.setattr(customer_stores, "QUERY_TIMEOUT_MS", 300)
    before = db.fetch("SELECT * FROM app_clientes ORDER BY 1, 2")
    settings = settings_for(db.dsn, customer_store_query=query)
    result = customer_stores.refresh(db, settings)
    assert list(result.errors) == ["query"] and error in result.errors["query"]
    assert db.fetch("SELECT * FROM app_clientes ORDER BY 1, 2") == before  # READ ONLY: nothing changed
    status = customer_stores.mapping_status(db, StoreSources.from_settings(settings).names())
    assert not status.usable and error in status.errors["query"]
    scope = StoreSources.from_settings(settings).scope(("T001", "T002", "T003"))
    # nothing instead of everything: every scoped read is empty, the unscoped ones are not
    assert reads.memory_totals(db, scope=scope).documents == 0 < reads.memory_totals(db).documents
    assert reads.suggest_namespaces(db, "C", 10, scope=scope).empty
    assert reads.find_namespaces(db, "C19", scope=scope).empty
    assert reads.namespace_items(db, "clientes.C19", scope=scope).empty
    assert customer_stores.scope_customers(db, scope) == 0
    customer_stores.refresh(db, settings_for(db.dsn))  # back to the metadata alone
    assert customer_stores.scope_customers(db, scoped(db, "T001", "T002", "T003")) == 5


def test_a_query_with_parameters_is_refused_before_anything_runs(article_stores):
    with pytest.raises(customer_stores.StoreSourceConfigError, match="takes no parameters"):
        customer_stores.refresh(
            article_stores, settings_for(article_stores.dsn, customer_store_query="SELECT %(id)s, 'T1'")
        )
    with pytest.raises(customer_stores.StoreSourceConfigError, match="is not a key name"):
        customer_stores.refresh(article_stores, settings_for(article_stores.dsn, customer_store_keys=("tienda'x",)))


def test_bad_search_input_is_refused_in_a_scope(article_stores):
    scope = scoped(article_stores, "T001")
    for bad in ("", " ", "C9\x00", "x" * 401):
        with pytest.raises(InvalidIdentifier):
            reads.find_namespaces(article_stores, bad, scope=scope)
        with pytest.raises(InvalidIdentifier):
            reads.suggest_namespaces(article_stores, bad, scope=scope)
