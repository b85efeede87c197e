"""Real browser (Debian chromium): local mode (no [auth]) grants its roles to a browser on this machine
that opened the dashboard by a loopback name, and to nothing else.

A host-resolver rule maps evil.example to 127.0.0.1, as a DNS rebinding attack does (before the fix the
Erasure page opened there with "Roles concedidos: ... dpo"). Streamlit refuses that name's websocket
(server.allowedHosts in .streamlit/config.toml); with that check relaxed (server.allowedHosts = "*", as
someone serving another name might set it) the dashboard itself still grants no role and says why. A request
with an X-Forwarded-For header (a proxy in front of 127.0.0.1) gets no role either."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from core.db import Database, reset_pool
from tests.conftest import ARTIFACTS, start_streamlit, stop_streamlit

pytestmark = pytest.mark.browser

ERASURE = "Borrar todo lo que los agentes recuerdan de un cliente"
GRANTED = "Roles concedidos: responsable de tienda (manager), operaciones (sre), protección de datos (dpo)."
FOREIGN = "esta página no se abrió como localhost, 127.0.0.1 ni [::1]"
FORWARDED = "la petición llegó a través de un proxy (cabecera Forwarded o X-Forwarded-*)"


@pytest.fixture(scope="module")
def local_db(create_database):
    database = Database(create_database(prefix="localhost"))
    yield database
    reset_pool(database.dsn)


@pytest.fixture(scope="module")
def port(local_db):
    """The stock server (.streamlit/config.toml, LOCAL_ROLES by default all): its port."""
    proc, url = start_streamlit({"PG_AGENTES": local_db.dsn})
    yield urlsplit(url).port
    stop_streamlit(proc)


@pytest.fixture(scope="module")
def relaxed_port(local_db):
    """The same with Streamlit's Host check switched off: only the dashboard's own check is left."""
    proc, url = start_streamlit({"PG_AGENTES": local_db.dsn, "STREAMLIT_SERVER_ALLOWED_HOSTS": "*"})
    yield urlsplit(url).port
    stop_streamlit(proc)


@pytest.fixture(scope="module")
def rebound(browser_type, browser_type_launch_args):
    """A chromium that resolves evil.example to 127.0.0.1, as a rebound DNS name does."""
    args = [*browser_type_launch_args["args"], "--host-resolver-rules=MAP evil.example 127.0.0.1"]
    browser = browser_type.launch(**{**browser_type_launch_args, "args": args})
    yield browser
    browser.close()


@pytest.fixture
def new_page(browser_context_args):
    """`new_page(browser, **context_args)`: a page in a context of its own, closed after the test."""
    contexts = []

    def _open(browser, **kwargs):
        contexts.append(browser.new_context(**browser_context_args, **kwargs))
        return contexts[-1].new_page()

    yield _open
    for context in contexts:
        context.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def expect_no_role(page) -> None:
    expect(page.get_by_text(ERASURE)).to_have_count(0)
    expect(page.get_by_text("Roles concedidos")).to_have_count(0)
    expect(page.get_by_test_id("stSidebarNav")).to_have_count(0)


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
def test_a_loopback_name_gets_the_local_roles(browser, new_page, port, name):
    page = new_page(browser)
    page.goto(f"http://{name}:{port}/erasure")
    expect(page.get_by_text(ERASURE)).to_be_visible(timeout=30_000)
    expect(page.get_by_text(GRANTED)).to_be_visible()
    shot(page, f"local_host_{name}")


def test_streamlit_refuses_a_rebound_name(rebound, new_page, port):
    page = new_page(rebound)
    with page.expect_websocket() as opened:
        page.goto(f"http://evil.example:{port}/erasure")
    # the page itself is served (plain HTTP), its websocket is refused: no script ever runs for it (the
    # page stays blank while Streamlit's client retries)
    assert opened.value.url == f"ws://evil.example:{port}/_stcore/stream"
    assert "Unexpected response code: 403" in opened.value.wait_for_event("socketerror")
    expect_no_role(page)
    shot(page, "local_host_rebound_refused_by_streamlit")


def test_a_rebound_name_gets_no_role_from_the_dashboard(rebound, new_page, relaxed_port):
    page = new_page(rebound)
    for path in ("/erasure", "/"):
        page.goto(f"http://evil.example:{relaxed_port}{path}")
        expect(page.get_by_text(FOREIGN)).to_be_visible(timeout=30_000)
        expect(page.get_by_text(f"http://localhost:{relaxed_port}")).to_be_visible()
        expect_no_role(page)
    shot(page, "local_host_rebound_no_role")
    # the same server still serves this machine's browser
    page.goto(f"http://127.0.0.1:{relaxed_port}/erasure")
    expect(page.get_by_text(ERASURE)).to_be_visible(timeout=30_000)


def test_a_forwarded_request_gets_no_role(browser, new_page, port):
    page = new_page(browser, extra_http_headers={"X-Forwarded-For": "203.0.113.7"})
    page.goto(f"http://127.0.0.1:{port}/erasure")
    # st.context.headers are the websocket handshake's: the refusal shows that it carried the header
    expect(page.get_by_text(FORWARDED)).to_be_visible(timeout=30_000)
    expect_no_role(page)
    shot(page, "local_host_forwarded_no_role")
