"""Real sign-in (the local OpenID Connect provider of tests/test_browser_oidc.py) and chromium: two store managers of
different stores, one with their store in an identity claim (`stores`), the other in their `[roles]` table; each sees
only their stores' customers by navigation and by URL, in the search suggestions and in the search by meaning, with
totals equal to SQL over their stores' customers; a customer of both stores is seen by both; another store's
customer opened by URL is refused and the refusal logged; a manager without a store is told why (issue 39)."""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import pytest
from babel.numbers import format_decimal
from conftest import ARTIFACTS, free_port, settings_for, start_streamlit, stop_streamlit
from playwright.sync_api import expect

from core.memory import customer_stores
from core.privacy import data_views
from tests.test_browser_oidc import sign_in

pytestmark = pytest.mark.browser

T001 = "gerente.t001@example.com"  # store from the identity claim
T002 = "gerente.t002@example.com"  # store from the [roles] table
NONE = "gerente.sin.tienda@example.com"
SEARCH_LABEL = "Id del cliente, proveedor o empleado (o namespace completo, p. ej. clientes.<id>)"


@pytest.fixture(scope="module")
def idp():
    from oidc_provider_mock import User, run_server_in_thread

    def user(email: str, **claims) -> User:
        return User(sub=email, claims={"email": email, "email_verified": True, "name": email, **claims})

    with run_server_in_thread(user_claims=[user(T001, stores=["T001"]), user(T002), user(NONE)]) as server:
        yield f"http://127.0.0.1:{server.server_port}"


@pytest.fixture(scope="module")
def scoped_server(idp, demo_db):
    assert not customer_stores.refresh(demo_db, settings_for(demo_db.dsn)).errors
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    secrets = Path(tempfile.mkdtemp(prefix="scope-oidc-")) / "secrets.toml"
    secrets.write_text(f"""
[auth]
redirect_uri = "{url}/oauth2callback"
cookie_secret = "a-long-random-test-cookie-secret-0123456789"
client_id = "agent-memory-dashboard"
client_secret = "test-client-secret"
server_metadata_url = "{idp}/.well-known/openid-configuration"

[roles]
"{T001}" = ["manager"]
"{T002}" = {{roles = ["manager"], stores = ["T002"]}}
"{NONE}" = ["manager"]
""")
    # the search by meaning finds every document in scope, however far (no least similarity): its results' scope is
    # checked, not SEMANTIC_MIN_SIMILARITY (tests/test_semantic_search.py)
    proc, url = start_streamlit(
        {"PG_AGENTES": demo_db.dsn, "SEMANTIC_MIN_SIMILARITY": "-1"}, ("--secrets.files", str(secrets)), port=port
    )
    yield url
    stop_streamlit(proc)


def es(n: int) -> str:
    return format_decimal(n, locale="es")


def customers(db, store: str) -> set[str]:
    rows = db.fetch("SELECT cliente_id FROM core_customer_stores WHERE effective AND tienda = %s", (store,))
    return {r["cliente_id"] for r in rows}


def with_documents(db, ids: set[str]) -> list[str]:
    rows = db.fetch(
        "SELECT DISTINCT split_part(prefix, '.', 2) AS c FROM store WHERE prefix = ANY(%s) ORDER BY 1",
        ([f"clientes.{c}" for c in ids],),
    )
    return [r["c"] for r in rows]


def metric_value(page, label: str):
    return page.get_by_test_id("stMetric").filter(has_text=label).get_by_test_id("stMetricValue")


def logged(db, viewer: str, kind: str) -> list[dict]:
    return db.fetch(
        "SELECT customer_id, target FROM core_data_views WHERE viewer = %s AND kind = %s ORDER BY id", (viewer, kind)
    )


def wait_logged(db, viewer: str, kind: str, n: int) -> list[dict]:
    """The views the server's background writer logged (a moment after the page showed them)."""
    deadline = time.monotonic() + 30
    while len(rows := logged(db, viewer, kind)) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    return rows


def open_memory(page, url: str, ns: str) -> None:
    page.goto(f"{url}/memory?ns={ns}", wait_until="commit", timeout=120_000)


def shot(page, name: str) -> None:
    """A PNG under test-artifacts/ (looked at by a person)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_two_managers_each_see_only_their_stores_customers(browser, browser_context_args, scoped_server, demo_db):
    db, url = demo_db, scoped_server
    mine = {"T001": customers(db, "T001"), "T002": customers(db, "T002")}
    both = sorted(set(with_documents(db, mine["T001"] & mine["T002"])))
    assert both, "the demo has a customer of T001 and T002 with documents (demo_store: every seventh customer)"
    only = {
        s: [c for c in with_documents(db, mine[s]) if c not in mine[other]]
        for s, other in (("T001", "T002"), ("T002", "T001"))
    }
    for email, store in ((T001, "T001"), (T002, "T002")):
        other = "T002" if store == "T001" else "T001"
        page = browser.new_page(**browser_context_args)
        sign_in(page, url, email)
        expect(page.get_by_text(f"Clientes de sus tiendas: {store}")).to_be_visible(timeout=30_000)
        # totals: their stores' customers only, as SQL counts them
        prefixes = [f"clientes.{c}" for c in mine[store]]
        sql = db.fetch_one(
            "SELECT count(*) AS documents, count(DISTINCT prefix) AS holders FROM store WHERE prefix = ANY(%s)",
            (prefixes,),
        )
        expect(metric_value(page, "Documentos guardados (sus tiendas)")).to_have_text(es(sql["documents"]))
        expect(metric_value(page, "Clientes con preferencias (sus tiendas)")).to_have_text(es(sql["holders"]))
        expect(page.locator(".js-plotly-plot")).to_have_count(2, timeout=30_000)
        shot(page, f"scope-memory-{store}")

        # suggestions: only their customers whose id starts with what was typed
        box = page.get_by_label(SEARCH_LABEL)
        box.fill("C")
        box.press("Enter")
        pills = page.get_by_test_id("stButtonGroup")
        expected = sorted(f"clientes.{c}" for c in with_documents(db, mine[store]))[:10]
        for prefix in expected:
            expect(pills.get_by_text(re.compile(rf"^{re.escape(prefix)} \(\d+\)$"))).to_be_visible(timeout=30_000)
        expect(pills.get_by_text(re.compile(r"^clientes\.\S+ \(\d+\)$"))).to_have_count(len(expected))
        # by navigation: one click on a suggestion opens that customer's memory
        first = expected[0]
        pills.get_by_text(re.compile(rf"^{re.escape(first)} ")).click()
        expect(page.get_by_text(re.compile(rf"^{re.escape(first)}: documentos"))).to_be_visible(timeout=30_000)

        # by URL: the customer of both stores opens; the other store's customer is refused, not shown, and logged
        open_memory(page, url, f"clientes.{both[0]}")
        expect(page.get_by_text(re.compile(rf"^clientes\.{re.escape(both[0])}: documentos"))).to_be_visible(
            timeout=30_000
        )
        theirs = only[other][0]
        open_memory(page, url, f"clientes.{theirs}")
        expect(page.get_by_text("no es un cliente de sus tiendas")).to_be_visible(timeout=30_000)
        expect(page.get_by_text(re.compile(rf"clientes\.{re.escape(theirs)}: documentos"))).to_have_count(0)
        page.get_by_text("no es un cliente de sus tiendas").scroll_into_view_if_needed()
        shot(page, f"scope-refused-{store}")
        assert {"customer_id": theirs, "target": f"clientes.{theirs}"} in wait_logged(db, email, "refused", 1)

        # search by meaning: every result is one of their customers (the results' views are logged by customer)
        page.get_by_label("Qué buscar").fill("prefiero WhatsApp")
        page.get_by_role("button", name="Buscar", exact=True).click()
        expect(page.get_by_text("Similitud = 1 − distancia coseno")).to_be_visible(timeout=60_000)
        hits = wait_logged(db, email, "search", 1)
        assert hits and {h["customer_id"] for h in hits} <= mine[store]
        page.get_by_role("heading", name="Buscar en la memoria por significado").scroll_into_view_if_needed()
        shot(page, f"scope-search-{store}")

        # Preferencias: their stores' conversations, as SQL counts them
        page.get_by_test_id("stSidebarNav").get_by_role("link", name=re.compile("^Preferencias")).click()
        conversations = db.fetch_one(
            "SELECT count(DISTINCT thread_id) AS n FROM core_thread_days WHERE cliente_id = ANY(%s) "
            "AND day BETWEEN current_date - 29 AND current_date",
            (sorted(mine[store]),),
        )["n"]
        expect(metric_value(page, "Conversaciones (sus tiendas)")).to_have_text(es(conversations), timeout=60_000)
        shot(page, f"scope-preferences-{store}")
        page.close()

    page = browser.new_page(**browser_context_args)
    sign_in(page, url, NONE)
    expect(page.get_by_text("tiene el rol de responsable de tienda pero ninguna tienda")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("stMetric")).to_have_count(0)
    shot(page, "scope-no-store")
    page.close()
    assert data_views.flush(db)
