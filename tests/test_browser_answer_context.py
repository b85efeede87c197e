"""Real browser (Debian chromium + Playwright) on a dashboard over the memory article's agents' database: the context of
an answer in two clicks from the Checkpoints page (thread, then answer), in Spanish and in English, with the
documents its messages name; and from a document on the Memory page, the answers that used it."""

from __future__ import annotations

import pytest
from conftest import start_streamlit, stop_streamlit
from playwright.sync_api import expect

from bench.st_server import wait_painted
from core.db import Database
from core.history import answer_context, tool_calls
from core.ids import ThreadId

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WORDS = {
    "es": {
        "title": "Contexto de una respuesta",
        "step": "Paso 2",
        "answer": "Respuesta",
        "documents": "Documentos de memoria que nombran estos mensajes",
        "uses": "Respuestas que usaron un documento",
        "then": "el resultado de la herramienta",
    },
    "en": {
        "title": "Context of an answer",
        "step": "Step 2",
        "answer": "Answer",
        "documents": "Memory documents these messages name",
        "uses": "Answers that used a document",
        "then": "the tool's result",
    },
}


@pytest.fixture(scope="module")
def article_url(article_agents_db):
    db = Database(article_agents_db.dsn)
    try:
        tool_calls.catch_up(db)
    finally:
        db.close()
    proc, url = start_streamlit({"PG_AGENTES": article_agents_db.dsn})
    yield url
    stop_streamlit(proc)


def pick_row(page, grid, row: int) -> None:
    """Tick the selection box of `row` (0: the first) in a grid (its row markers are the left column), once the
    page's run is over and drawn (a click while it runs can land on a grid drawn again), with the grid in the middle of
    the viewport and no longer moving: the click goes to coordinates (glide draws its cells on a canvas), so a grid
    at the viewport's edge, or one that a section drawn late above it pushes down, would take the click elsewhere."""
    wait_painted(page)
    grid.evaluate("e => e.scrollIntoView({block: 'center'})")
    box, before = grid.bounding_box(), None
    for _ in range(50):  # at most 5 s for the layout to settle
        if box == before:
            break
        page.wait_for_timeout(100)
        before, box = box, grid.bounding_box()
    assert box == before, f"the grid kept moving: {before} -> {box}"
    y = box["y"] + 35 + 17 + 35 * row
    assert 0 < y < page.viewport_size["height"], f"row {row} at y={y} is outside the viewport"
    page.mouse.click(box["x"] + 18, y)


@pytest.mark.parametrize("lang", ["es", "en"])
def test_context_of_an_answer_in_two_clicks(page, article_url, article_agents_db, screenshot, lang):
    words = WORDS[lang]
    thread = article_agents_db.threads_of("C9", "read")[0]
    db = Database(article_agents_db.dsn)
    try:
        answers = answer_context.answers(db, ThreadId.parse(thread))
    finally:
        db.close()
    page.goto(f"{article_url}/checkpoints?thread={thread}&lang={lang}")  # click 1: the thread (its URL)
    heading = page.get_by_role("heading", name=words["title"])
    expect(heading).to_be_visible(timeout=60_000)
    heading.scroll_into_view_if_needed()
    grid = page.get_by_test_id("stDataFrame").filter(has=page.get_by_text("Ya lo tengo en cuenta.")).first
    expect(grid).to_be_visible(timeout=60_000)  # the page's later sections are still being drawn under load
    pick_row(page, grid, len(answers) - 1)  # click 2: the last answer
    expect(page.get_by_text(f"{words['step']} ·", exact=False).first).to_be_visible(timeout=30_000)
    screenshot(f"answer-context-picked-{lang}")
    chats = page.get_by_test_id("stChatMessage")
    expect(chats.filter(has_text="¿Qué preferencias tengo?").first).to_be_visible()
    expect(chats.filter(has_text="correo c9@ejemplo.es").first).to_be_visible()
    expect(chats.filter(has_text=words["answer"]).filter(has_text="Ya lo tengo en cuenta.").first).to_be_visible()
    assert f"answer={answers.iloc[-1]['checkpoint_id']}" in page.url
    chats.filter(has_text="correo c9@ejemplo.es").first.scroll_into_view_if_needed()
    screenshot(f"answer-context-messages-{lang}")
    documents = page.get_by_text(words["documents"])
    documents.scroll_into_view_if_needed()
    docs_grid = page.get_by_test_id("stDataFrame").filter(has=page.get_by_text("pref-contacto")).first
    expect(docs_grid).to_be_visible()
    expect(docs_grid.get_by_text("correo c9@ejemplo.es").first).to_be_attached()
    expect(docs_grid.get_by_text(words["then"]).first).to_be_attached()
    screenshot(f"answer-context-documents-{lang}")


@pytest.mark.parametrize("lang", ["es", "en"])
def test_a_document_lists_the_answers_that_used_it(page, article_url, article_agents_db, screenshot, lang):
    words = WORDS[lang]
    conv = next(c for c in article_agents_db.conversations if c.customer == "C9" and c.tipo == "contacto")
    page.goto(f"{article_url}/memory?ns=clientes.C9&key=pref-contacto&lang={lang}")
    heading = page.get_by_role("heading", name=words["uses"])
    expect(heading).to_be_visible(timeout=60_000)
    heading.scroll_into_view_if_needed()
    uses = page.get_by_test_id("stDataFrame").filter(has=page.get_by_text(conv.thread_id)).last
    expect(uses).to_be_visible(timeout=60_000)
    pick_row(page, uses, 0)
    expect(page.get_by_role("heading", name=words["title"])).to_have_count(0)  # the context, inline, has no heading
    chats = page.get_by_test_id("stChatMessage")
    expect(chats.filter(has_text=words["answer"]).filter(has_text="Anotado.").first).to_be_visible(timeout=30_000)
    chats.filter(has_text="Anotado.").first.scroll_into_view_if_needed()
    screenshot(f"answer-context-memory-uses-{lang}")
