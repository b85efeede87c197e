"""Real browser (Debian chromium + Playwright) on a real Streamlit server and the demo database:
a thread's checkpoint history opened from a shareable URL."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_thread_history_from_the_url(page, dashboard_url, demo_db, screenshot):
    thread = demo_db.fetch_one(
        "SELECT w.thread_id FROM checkpoint_writes w JOIN checkpoints c USING (thread_id) "
        "WHERE c.metadata->>'cliente_id' IS NOT NULL AND w.channel = 'messages' "
        "GROUP BY w.thread_id ORDER BY count(*) DESC, w.thread_id LIMIT 1"
    )["thread_id"]
    n_ckpt = demo_db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (thread,))["n"]
    tool = demo_db.fetch_one(
        "SELECT tool_name FROM core_checkpoint_writes_view WHERE thread_id = %s AND tool_name IS NOT NULL LIMIT 1",
        (thread,),
    )
    page.goto(dashboard_url)  # through the navigation first, as an SRE would
    nav = page.get_by_test_id("stSidebarNav")
    expect(nav).to_contain_text("Checkpoints", timeout=30_000)
    nav.get_by_role("link", name="Checkpoints").click()
    expect(page.get_by_role("heading", name="Historial de checkpoints de un hilo")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("Elija un hilo en la lista de arriba")).to_be_visible()

    page.goto(f"{dashboard_url}/checkpoints?thread={thread}")  # then the shareable URL of one thread
    expect(page.get_by_role("heading", name="Historial de checkpoints de un hilo")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("stMetric").filter(has_text="Checkpoints")).to_contain_text(
        f"{n_ckpt:,}", timeout=15_000
    )
    expect(page.locator(".js-plotly-plot")).to_have_count(1, timeout=15_000)
    expect(page.get_by_test_id("stChatMessage").first).to_be_visible()
    if tool:
        expect(page.get_by_test_id("stChatMessage").filter(has_text=tool["tool_name"]).first).to_be_visible()
    screenshot("checkpoints-thread")

    page.get_by_role("heading", name="Diferencias entre dos checkpoints").scroll_into_view_if_needed()
    expect(page.get_by_text(re.compile(r"^\d+ canal(es)? cambiados? de \d+"))).to_be_visible()
    # the diff names the messages channel and what changed in it, by message id
    expect(
        page.get_by_text(re.compile(r"^Mensajes de messages: [1-9]\d* añadidos?, \d+ eliminados?, \d+ cambiados?"))
    ).to_be_visible()
    screenshot("checkpoints-diff")
    assert f"thread={thread}" in page.url


def test_storage_view_shows_where_the_bytes_go(page, dashboard_url, demo_db, screenshot):
    """The Storage view on the demo: PostgreSQL's statistics, bytes per channel, growth, orphans (the threads the
    application no longer knows said to be unknowable: the demo has no KNOWN_THREADS_QUERY), one thread's curve and
    what a prune would free (a dry run: the shared demo database is not changed)."""
    thread = demo_db.fetch_one("SELECT thread_id FROM checkpoints GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1")[
        "thread_id"
    ]
    before = demo_db.fetch_one("SELECT count(*) AS n FROM checkpoints")["n"]
    page.goto(f"{dashboard_url}/checkpoints?thread={thread}")
    expect(page.get_by_role("heading", name="Historial de checkpoints de un hilo")).to_be_visible(timeout=30_000)
    page.get_by_text("Almacenamiento", exact=True).click()
    expect(page.get_by_role("heading", name="Tablas según PostgreSQL")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("Estadísticas de PostgreSQL leídas el")).to_be_visible()
    expect(page.get_by_role("heading", name="Bytes por canal (blobs y escrituras, todos los hilos)")).to_be_visible()
    page.get_by_role(
        "heading", name="Bytes por canal (blobs y escrituras, todos los hilos)"
    ).scroll_into_view_if_needed()
    screenshot("checkpoints-storage-channels")
    # The demo configures no KNOWN_THREADS_QUERY: the page says it cannot tell, never a 0.
    unknowable = page.get_by_text("Hilos que la aplicación ya no conoce: no se puede saber")
    unknowable.scroll_into_view_if_needed()
    expect(unknowable).to_be_visible()
    expect(page.get_by_test_id("stMetric").filter(has_text="Hilos que la aplicación ya no conoce")).to_have_count(0)
    screenshot("checkpoints-storage-orphans")
    page.get_by_role("heading", name="Un hilo: bytes por paso y por canal (ahora)").scroll_into_view_if_needed()
    expect(page.get_by_test_id("stTextInput").filter(has_text="Hilo").locator("input")).to_have_value(thread)
    page.get_by_role("button", name="Calcular").click()
    expect(page.get_by_test_id("stMetric").filter(has_text="La poda liberaría")).to_be_visible(timeout=60_000)
    page.get_by_role("heading", name="Qué liberaría una poda").scroll_into_view_if_needed()
    screenshot("checkpoints-storage-thread-prune")
    assert demo_db.fetch_one("SELECT count(*) AS n FROM checkpoints")["n"] == before
