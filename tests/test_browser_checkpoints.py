"""Real browser (Debian chromium + Playwright) on a real Streamlit server and the demo database:
a thread's checkpoint history opened from a shareable URL."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_thread_history_from_the_url(page, dashboard_url, demo_db, screenshot):
    thread = demo_db.fetch_one(
        "SELECT w.thread_id FROM checkpoint_writes w JOIN checkpoints c USING (thread_id) "
        "WHERE c.metadata->>'cliente_id' IS NOT NULL AND w.channel = 'messages' "
        "GROUP BY w.thread_id ORDER BY count(*) DESC, w.thread_id LIMIT 1")["thread_id"]
    n_ckpt = demo_db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (thread,))["n"]
    tool = demo_db.fetch_one("SELECT tool_name FROM core_checkpoint_writes_view WHERE thread_id = %s "
                             "AND tool_name IS NOT NULL LIMIT 1", (thread,))
    page.goto(dashboard_url)  # through the navigation first, as an SRE would
    nav = page.get_by_test_id("stSidebarNav")
    expect(nav).to_contain_text("Checkpoints", timeout=30_000)
    nav.get_by_role("link", name="Checkpoints").click()
    expect(page.get_by_role("heading", name="Historial de checkpoints de un hilo")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("Elija un hilo en la lista de arriba")).to_be_visible()

    page.goto(f"{dashboard_url}/checkpoints?thread={thread}")  # then the shareable URL of one thread
    expect(page.get_by_role("heading", name="Historial de checkpoints de un hilo")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("stMetric").filter(has_text="Checkpoints")).to_contain_text(f"{n_ckpt:,}", timeout=15_000)
    expect(page.locator(".js-plotly-plot")).to_have_count(1, timeout=15_000)
    expect(page.get_by_test_id("stChatMessage").first).to_be_visible()
    if tool:
        expect(page.get_by_test_id("stChatMessage").filter(has_text=tool["tool_name"]).first).to_be_visible()
    screenshot("checkpoints-thread")

    page.get_by_role("heading", name="Diferencias entre dos checkpoints").scroll_into_view_if_needed()
    expect(page.get_by_text("canales cambiados de")).to_be_visible()
    expect(page.get_by_test_id("stDataFrame").last.get_by_text("messages").first).to_be_attached()
    screenshot("checkpoints-diff")
    assert f"thread={thread}" in page.url
