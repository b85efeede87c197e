"""Real sign-in: a real OpenID Connect provider runs locally (oidc-provider-mock), the dashboard's
`[auth]` points at it (a secrets file through --secrets.files), and in chromium a store manager and a
DPO sign in through st.login. Each sees only their own pages, and the erasure register records the
DPO's e-mail as the operator."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from playwright.sync_api import expect

from core.db import reset_pool
from tests.conftest import free_port, start_streamlit, stop_streamlit
from tests.test_browser_erasure import button
from tests.test_browser_erasure import erasure_demo as _erasure_demo

# The demo seed runs the agents synchronously; pytest-playwright's session loop may already be running
# in this thread, so the seed runs in a thread of its own.


@pytest.fixture(scope="module")
def erasure_demo(create_database):
    from concurrent.futures import ThreadPoolExecutor

    gen = _erasure_demo._get_wrapped_function()(create_database)
    with ThreadPoolExecutor(1) as pool:
        database = pool.submit(next, gen).result()
    yield database
    with ThreadPoolExecutor(1) as pool:
        pool.submit(next, gen, None).result()


pytestmark = pytest.mark.browser

MANAGER = "gerente.centro@example.com"
DPO = "dpo@example.com"


@pytest.fixture(scope="module")
def idp():
    from oidc_provider_mock import User, run_server_in_thread

    users = [
        User(sub=MANAGER, claims={"email": MANAGER, "email_verified": True, "name": "Gerente Centro"}),
        User(sub=DPO, claims={"email": DPO, "email_verified": True, "name": "Delegada de protección de datos"}),
    ]
    with run_server_in_thread(user_claims=users) as server:
        yield f"http://127.0.0.1:{server.server_port}"


@pytest.fixture(scope="module")
def signed_server(idp, erasure_demo):  # noqa: F811
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    folder = Path(tempfile.mkdtemp(prefix="oidc-"))
    secrets = folder / "secrets.toml"
    secrets.write_text(f"""
[auth]
redirect_uri = "{url}/oauth2callback"
cookie_secret = "a-long-random-test-cookie-secret-0123456789"
client_id = "agent-memory-dashboard"
client_secret = "test-client-secret"
server_metadata_url = "{idp}/.well-known/openid-configuration"

[roles]
"{MANAGER}" = ["manager"]
"{DPO}" = ["dpo"]
""")
    proc, url = start_streamlit({"PG_AGENTES": erasure_demo.dsn}, args=("--secrets.files", str(secrets)), port=port)
    yield url
    stop_streamlit(proc)


def sign_in(page, url: str, email: str) -> None:
    page.goto(url)
    expect(page.get_by_text("Inicie sesión para ver la memoria de los agentes.")).to_be_visible(timeout=30_000)
    button(page, "Iniciar sesión").click()
    # the identity provider's own page: pick the user (a real authorization-code round trip)
    page.get_by_role("button", name=email, exact=True).click(timeout=30_000)
    expect(page.get_by_test_id("stSidebarNav")).to_be_visible(timeout=30_000)


def test_manager_signs_in_and_sees_only_the_store_pages(page, signed_server, screenshot):
    sign_in(page, signed_server, MANAGER)
    nav = page.get_by_test_id("stSidebarNav")
    expect(nav.get_by_text("Tienda")).to_be_visible()
    expect(nav.get_by_role("link", name=re.compile("^Memoria"))).to_be_visible()
    expect(nav.get_by_role("link", name=re.compile("^Preferencias"))).to_be_visible()
    for other in ("Operaciones", "Protección de datos", "Barridos", "Checkpoints", "Borrado"):
        expect(nav.get_by_text(other)).to_have_count(0)
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar.get_by_text(f"Sesión: {MANAGER} (manager)")).to_be_visible()
    expect(sidebar.get_by_text("Modo local")).to_have_count(0)
    expect(page.get_by_role("heading", name="Memoria entre conversaciones")).to_be_visible()
    screenshot("oidc-manager")
    # the erasure URL opens for a manager only to be refused by the page's own role check
    page.goto(f"{signed_server}/erasure")
    expect(page.get_by_text("Esta página requiere el rol «dpo».")).to_be_visible(timeout=30_000)
    expect(page.get_by_label("Id del cliente (p. ej. C9)")).to_have_count(0)


def test_dpo_signs_in_erases_and_is_the_registered_operator(page, signed_server, erasure_demo, screenshot):  # noqa: F811
    db, cid = erasure_demo, erasure_demo.customer
    sign_in(page, signed_server, DPO)
    nav = page.get_by_test_id("stSidebarNav")
    expect(nav.get_by_text("Protección de datos")).to_be_visible()
    for other in ("Tienda", "Operaciones", "Memoria", "Barridos", "Checkpoints"):
        expect(nav.get_by_text(other, exact=True)).to_have_count(0)
    expect(page.get_by_test_id("stSidebar").get_by_text(f"Sesión: {DPO} (dpo)")).to_be_visible()
    expect(page.get_by_text("Borrar todo lo que los agentes recuerdan de un cliente")).to_be_visible(timeout=30_000)
    field = page.get_by_label("Id del cliente (p. ej. C9)")
    field.fill(cid)
    field.press("Enter")
    button(page, "Vista previa").click()
    expect(page.get_by_text(f"Qué se borraría de clientes.{cid}")).to_be_visible(timeout=20_000)
    screenshot("oidc-dpo-preview")
    button(page, "Borrar…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Repita el id del cliente").fill(cid)
    dialog.get_by_label("Repita el id del cliente").press("Enter")
    dialog.get_by_test_id("stButton").filter(has_text="Borrar definitivamente").locator("button").click()
    expect(page.get_by_text(f"Borrado completo de {cid}")).to_be_visible(timeout=30_000)
    screenshot("oidc-dpo-erased")
    row = db.fetch_one(
        "SELECT status, operator FROM core_erasure_register WHERE customer_id = %s ORDER BY id DESC LIMIT 1", (cid,)
    )
    assert row == {"status": "complete", "operator": DPO}
    nav.get_by_role("link", name=re.compile("Registro de borrados")).click()
    expect(page.get_by_role("heading", name="Registro de borrados")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("stDataFrame").first.get_by_text(DPO).first).to_be_attached(timeout=15_000)
    screenshot("oidc-dpo-register")
    reset_pool(db.dsn)
