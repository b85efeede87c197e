"""Two dashboard processes behind a real sticky proxy: Debian's HAProxy running deploy/haproxy/haproxy.cfg, the
sign-in through a real OpenID Connect provider (oidc-provider-mock), in chromium.

A store manager and a DPO sign in at the same time and are pinned to different processes; every request of a
browser (page, websocket, the erasure report's download from /media/) reaches the process holding its session; the
DPO erases a customer and downloads the report. Then the DPO's process stops, as a pod does in a rollout or a drain:
the reloaded page lands on the other process and the DPO is still signed in (one [auth] cookie_secret for both)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from core.db import reset_pool
from tests.conftest import ARTIFACTS, ROOT, free_port, start_streamlit, stop_streamlit
from tests.test_browser_erasure import button
from tests.test_browser_oidc import DPO, MANAGER, erasure_demo, idp, sign_in  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
ROUTE_COOKIE = "agent-memory-route"
SERVERS = {"d1": "dashboard-1", "d2": "dashboard-2"}  # cookie value -> server name in haproxy.cfg
# httplog: client [time] frontend backend/server timers status bytes req-cookie resp-cookie ... "request"
LOG_LINE = re.compile(
    r"^\S+ \[[^\]]+\] \S+ \S+/(?P<server>\S+) \S+ (?P<status>-?\d+) \S+ (?P<req_cookie>\S+) "
    r'(?P<resp_cookie>\S+) .*"(?P<method>\S+) (?P<path>\S+)'
)


class Proxy:
    def __init__(self, idp_url: str, dsn: str, folder: Path):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        secrets = folder / "secrets.toml"  # one file for both processes, as one Secret for every pod
        secrets.write_text(f"""
[auth]
redirect_uri = "{self.url}/oauth2callback"
cookie_secret = "a-long-random-test-cookie-secret-shared-by-every-replica"
client_id = "agent-memory-dashboard"
client_secret = "test-client-secret"
server_metadata_url = "{idp_url}/.well-known/openid-configuration"

[roles]
"{MANAGER}" = ["manager"]
"{DPO}" = ["dpo"]
""")
        self.dashboards = {}
        for cookie in SERVERS:
            proc, url = start_streamlit({"PG_AGENTES": dsn}, args=("--secrets.files", str(secrets)))
            self.dashboards[cookie] = proc, url
        self.log = folder / "haproxy.log"
        env = {
            **os.environ,
            "DASHBOARD_BIND": f"127.0.0.1:{port}",
            **{f"DASHBOARD_{i}": self.dashboards[c][1].removeprefix("http://") for i, c in ((1, "d1"), (2, "d2"))},
        }
        self.haproxy = subprocess.Popen(
            ["haproxy", "-db", "-f", str(HAPROXY_CFG)], env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                assert self.haproxy.poll() is None and time.monotonic() < deadline, self.log.read_text()
                time.sleep(0.2)

    def requests(self) -> list[dict]:
        return [m.groupdict() for line in self.log.read_text().splitlines() if (m := LOG_LINE.match(line))]

    def stop(self) -> None:
        self.haproxy.terminate()
        self.haproxy.wait(10)
        for proc, _ in self.dashboards.values():
            if proc.poll() is None:
                stop_streamlit(proc)


@pytest.fixture(scope="module")
def proxy(idp, erasure_demo):  # noqa: F811
    proxy = Proxy(idp, erasure_demo.dsn, Path(tempfile.mkdtemp(prefix="sticky-proxy-")))
    yield proxy
    proxy.stop()


def screenshot(page, name: str) -> None:
    """This test's pages are its own (two browser contexts), not pytest-playwright's `page`."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.wait_for_timeout(500)  # let the toast and the tables settle
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def route(context) -> str:
    (value,) = [c["value"] for c in context.cookies() if c["name"] == ROUTE_COOKIE]
    return value


def test_two_users_on_two_processes_sign_in_erase_and_survive_their_process_stopping(
    browser,
    browser_context_args,
    proxy,
    erasure_demo,  # noqa: F811 (the imported fixture)
):
    db, cid = erasure_demo, erasure_demo.customer
    manager_context = browser.new_context(**browser_context_args)
    dpo_context = browser.new_context(**browser_context_args, accept_downloads=True)
    manager, dpo = manager_context.new_page(), dpo_context.new_page()

    sign_in(manager, proxy.url, MANAGER)
    expect(manager.get_by_role("heading", name="Memoria entre conversaciones")).to_be_visible()
    sign_in(dpo, proxy.url, DPO)
    expect(dpo.get_by_test_id("stSidebar").get_by_text(f"Sesión: {DPO} (dpo)")).to_be_visible()
    # round robin for a browser without the cookie, then the cookie: one process each
    assert {route(manager_context), route(dpo_context)} == set(SERVERS)

    # the DPO erases on their process and downloads the report it serves from its memory (/media/...)
    expect(dpo.get_by_text("Borrar todo lo que los agentes recuerdan de un cliente")).to_be_visible(timeout=30_000)
    field = dpo.get_by_label("Id del cliente (p. ej. C9)")
    field.fill(cid)
    field.press("Enter")
    button(dpo, "Vista previa").click()
    expect(dpo.get_by_text(f"Qué se borraría de clientes.{cid}")).to_be_visible(timeout=20_000)
    button(dpo, "Borrar…").click()
    dialog = dpo.get_by_role("dialog")
    dialog.get_by_label("Repita el id del cliente").fill(cid)
    dialog.get_by_label("Repita el id del cliente").press("Enter")
    dialog.get_by_test_id("stButton").filter(has_text="Borrar definitivamente").locator("button").click()
    expect(dpo.get_by_text(f"Borrado completo de {cid}")).to_be_visible(timeout=30_000)
    with dpo.expect_download(timeout=30_000) as download:
        dpo.get_by_test_id("stDownloadButton").locator("button").click()
    report = json.loads(Path(download.value.path()).read_text())
    assert report["request"]["customer_id"] == cid and report["request"]["operator"] == DPO
    assert report["request"]["status"] == "complete"
    screenshot(dpo, "sticky-proxy-dpo-erased")

    # every request that carried a route cookie went to the process it names: pages, static files, the
    # sign-in callback, the download (the websockets are logged when they close, below)
    served = proxy.requests()
    pinned = [r for r in served if r["req_cookie"].startswith(f"{ROUTE_COOKIE}=")]
    assert any(r["path"].startswith("/media/") for r in pinned), served[-20:]
    assert any(r["path"].startswith("/oauth2callback") for r in pinned), served[-20:]
    for r in pinned:
        assert r["server"] == SERVERS[r["req_cookie"].split("=", 1)[1]], r

    # the DPO's process stops (SIGTERM, as Kubernetes does): the reloaded page is served by the other one, and the
    # DPO is still signed in there, their route cookie now naming it
    before = route(dpo_context)
    stop_streamlit(proxy.dashboards[before][0])
    dpo.reload()
    expect(dpo.get_by_test_id("stSidebar").get_by_text(f"Sesión: {DPO} (dpo)")).to_be_visible(timeout=30_000)
    expect(dpo.get_by_text("Inicie sesión para ver la memoria de los agentes.")).to_have_count(0)
    assert route(dpo_context) != before
    dpo.get_by_test_id("stSidebarNav").get_by_role("link", name=re.compile("Registro de borrados")).click()
    expect(dpo.get_by_role("heading", name="Registro de borrados")).to_be_visible(timeout=30_000)
    expect(dpo.get_by_test_id("stDataFrame").first.get_by_text(DPO).first).to_be_attached(timeout=15_000)
    screenshot(dpo, "sticky-proxy-dpo-after-failover")
    # the manager, on the process still running, was never disturbed
    manager.get_by_test_id("stSidebarNav").get_by_role("link", name=re.compile("^Preferencias")).click()
    expect(manager.get_by_test_id("stSidebar").get_by_text(f"Sesión: {MANAGER} (manager)")).to_be_visible()
    expect(manager.get_by_role("heading", name="Escrituras de preferencias por conversación")).to_be_visible(
        timeout=30_000
    )
    screenshot(manager, "sticky-proxy-manager")

    manager_context.close()
    dpo_context.close()
    deadline = time.monotonic() + 10  # HAProxy logs a websocket when it closes
    while (
        not (
            sockets := [r for r in proxy.requests() if r["path"].startswith("/_stcore/stream") and r["status"] == "101"]
        )
        or len({s["server"] for s in sockets}) < 2
    ):
        assert time.monotonic() < deadline, proxy.requests()[-30:]
        time.sleep(0.5)
    for s in sockets:
        if s["req_cookie"].startswith(f"{ROUTE_COOKIE}="):
            assert s["server"] == SERVERS[s["req_cookie"].split("=", 1)[1]], s
    reset_pool(db.dsn)
