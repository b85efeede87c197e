"""The access export holds a memory's history (issue 56, item 5): "what we hold and how it changed", its purpose in
the export's language, each write with the superseded value struck through, in the customer's words (no tool name,
no thread id in the body); on the articles' agents' database the history equals the tool calls SQL reads."""

from __future__ import annotations

import json
import re

import pytest
from test_memory_flags import RECOGIDA, Shop

from core.db import Database
from core.history import tool_calls
from core.privacy import access, access_notice, access_render

PURPOSE = {
    "es": "Lo que guardamos y cómo cambió: cada vez que un asistente anotó una de sus preferencias",
    "en": "What we hold and how it changed: each time an assistant noted one of your preferences",
}


@pytest.fixture(scope="module")
def overwritten(create_database):
    db = Database(create_database())
    shop = Shop(db)
    shop.say("H1", "cliente-H1-1", RECOGIDA.format("Sierpes"))
    shop.say("H1", "cliente-H1-2", RECOGIDA.format("Goya"))
    shop.settle()
    yield db
    db.close()


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_the_json_holds_every_write_as_the_database_does(overwritten):
    db = overwritten
    doc = json.loads(access.export(db, "H1", fmt="json", lang="es", operator="dpo@example.com").data)
    history = doc["memory_history"]
    calls = db.fetch(
        "SELECT args ->> 'valor' AS valor, thread_id FROM core_tool_calls WHERE tool = 'recordar_preferencia' "
        "AND cliente_id = 'H1' ORDER BY ts"
    )
    assert [(h["key"], h["value"], h["thread_id"]) for h in history] == [
        ("pref-recogida", c["valor"], c["thread_id"]) for c in calls
    ]
    assert [(h["superseded"], h["current"], h["state"]) for h in history] == [
        (True, False, "held"),
        (False, True, "held"),
    ]
    assert doc["information"]["history_purpose"].startswith(PURPOSE["es"])


@pytest.mark.slow  # the real retail agent writes a database for this test
@pytest.mark.parametrize("lang", ["es", "en"])
def test_the_html_says_what_we_hold_and_how_it_changed_in_the_customers_words(overwritten, lang):
    html = access.export(overwritten, "H1", fmt="html", lang=lang, operator="dpo@example.com").data.decode()
    section = html.split(
        "<h2>Lo que guardamos y cómo cambió</h2>" if lang == "es" else "<h2>What we hold and how it changed</h2>"
    )
    assert len(section) == 2, "the history section, once"
    body = section[1].split("<h2>")[0]
    assert PURPOSE[lang] in body
    assert "<del>Sierpes</del>" in body and "<strong>Goya</strong>" in body and "<del>Goya</del>" not in body
    assert ("Conversación 1" if lang == "es" else "Conversation 1") in body
    assert ("sustituido" if lang == "es" else "superseded") in body
    assert "recordar_preferencia" not in body and "cliente-H1-" not in body and "pref-recogida" not in body
    assert not re.search(r"\d{4}-\d{2}-\d{2}T", body)


def test_on_the_articles_agents_the_exported_history_is_the_tool_calls(article_agents_db):
    db = Database(article_agents_db.dsn)
    try:
        tool_calls.extract(db)
        report = access.gather(db, "C_9")
        threads = article_agents_db.threads_of("C_9", "write")
        expected = db.fetch(
            "SELECT 'pref-' || (args ->> 'tipo') AS key, args ->> 'valor' AS valor, thread_id FROM core_tool_calls "
            "WHERE tool = 'recordar_preferencia' AND thread_id = ANY(%s) ORDER BY 1",
            (threads,),
        )
        assert [(h["key"], h["value"], h["thread_id"]) for h in report.memory_history] == [
            (r["key"], r["valor"], r["thread_id"]) for r in expected
        ]
        html = access_render.render(
            report, "html", requested_by="dpo", lang="en", notice=access_notice.notice(db, "en")
        ).decode()
        assert "<strong>T002</strong>" in html and PURPOSE["en"] in html
    finally:
        db.close()
