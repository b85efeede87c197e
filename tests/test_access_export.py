"""The access export's HTML is a document to hand to the customer (issue 30): no internal keys or ISO timestamps, tool
calls in words, the art. 15 information (controller, DPO, purposes, retention from the policy in force, recipients,
rights, complaint, source) in the requester's language, configurable, and bad configuration refused before anything
is registered."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import get_args

import pytest
from babel.dates import format_datetime
from conftest import DIMS
from langgraph.checkpoint.postgres import PostgresSaver

from agent_memory_runtime import clock
from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import POLICIES, TipoPreferencia, build_store
from core.privacy import access, access_notice, access_render, data_views
from tests.test_access import BIG, populated  # noqa: F401  (the module's fixture)

RAW_KEYS = (
    "serde_refusals",
    "memory_writes",
    "guard_denials",
    "episode_denials",
    "expired_documents",
    "marked_payloads",
    "erasure_rechecks",
    "access_exports",
    "thread_id",
    "written_at",
    "last_turn_at",
    "started_at",
    "denied_at",
    "tool_calls",
    "namespace_prefix",
    "sources_searched",
)


def html_of(db, lang: str = "es", operator: str = "local") -> str:
    return access.export(db, BIG, fmt="html", lang=lang, operator=operator).data.decode()


def body(html: str) -> str:
    """What a person reads before the technical annex, tags stripped."""
    return re.sub(r"<[^>]+>", " ", html.split("<h2>Anexo técnico")[0].split("<h2>Technical annex")[0])


@pytest.mark.parametrize("lang", ["es", "en"])
def test_the_html_reads_as_a_document_for_the_customer(populated, lang):  # noqa: F811
    html = html_of(populated, lang)
    text = body(html)
    for key in RAW_KEYS:
        assert key not in text, key
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", html), "an ISO timestamp"
    assert not re.search(r":\d{2}\.\d{3,6}", html), "fractions of a second"
    assert '"args"' not in html and "{&quot;" not in html and '{"' not in text, "JSON in the document"
    assert (
        "El asistente guardó su preferencia: <code>tipo = "
        if lang == "es"
        else "The assistant saved your preference: <code>tipo = "
    ) in html
    prepared = re.search(r"<dt>(?:Preparado por|Prepared by)</dt><dd>([^<]*)</dd>", html)[1]
    assert "local" not in prepared and (
        "delegado de protección de datos" in prepared or "data protection officer" in prepared
    )
    assert ("el cliente C9 (derecho de acceso)" if lang == "es" else "customer C9 (right of access)") in text
    assert "Ninguno. Ninguno." not in text and "None. None." not in text


@pytest.mark.parametrize("lang", ["es", "en"])
def test_the_html_has_no_internal_key_no_empty_section_and_one_language(populated, lang):  # noqa: F811
    """Issue 40: who looked at the data is named in words (never `art15:C9` or `access_register:1`), a preference by
    what it holds (never `pref-recogida`), a document's fields in the export's language; the clock is named once;
    no heading stands over nothing; and no give-away word of the other language (what was said, values and
    identifiers in code are left out: they are the customer's and the agents' as written)."""
    from apptools import foreign_words
    from test_i18n import FOREIGN

    data_views.log_views(
        populated,
        [
            data_views.View("dpo@example.com", "dpo", "access_preview", f"art15:{BIG}", BIG, "solicitud"),
            data_views.View("dpo@example.com", "dpo", "access_export", "access_register:1", BIG, "solicitud"),
            data_views.View("sre@example.com", "sre", "thread", f"cliente-{BIG}-1", BIG, "incidencia"),
        ],
    )
    html = html_of(populated, lang)
    for key in ("art15:", "access_register:", "pref-"):
        assert key not in html, key
    assert ("su solicitud de acceso" if lang == "es" else "your access request") in html
    assert ("la exportación n.º 1 de sus datos" if lang == "es" else "export no. 1 of your data") in html
    n = 1 + [t["thread_id"] for t in access.gather(populated, BIG).threads].index(f"cliente-{BIG}-1")
    conversation = f"{'Conversación' if lang == 'es' else 'Conversation'} {n}"
    assert f"<h3 id='conversation-{n}'>{conversation}</h3>" in html and f"<td>{conversation}</td>" in html
    clock = "Todas las horas de este documento están en la zona horaria" if lang == "es" else "Every time in this"
    assert html.count(clock) == 1
    assert ("<dt>Tipo</dt>" if lang == "es" else "<dt>Kind</dt>") in html and "<dt>tipo</dt>" not in html
    assert not re.search(r"</h3>\s*(<h[23]|</div>|</body>)|</h2>\s*(<h2|</div>|</body>)", html), (
        "a heading over nothing"
    )
    assert "<div class='said'></div>" not in html and "class='msg tool'><b>" in html
    readable = re.sub(r"<code>.*?</code>|<div class='said'>.*?</div>|<dd class='value'>.*?</dd>", " ", html, flags=re.S)
    readable = re.sub(r"<style>.*?</style>|<[^>]+>", " ", readable, flags=re.S)
    assert foreign_words([readable], FOREIGN[lang]) == []


def test_a_thread_is_dated_once_by_the_clock_of_its_messages(populated):  # noqa: F811
    """The conversation log names each thread as its heading does and dates it nowhere else (the demo's log runs on
    a replayed clock, the checkpoints on the real one: two dates for one conversation)."""
    html = html_of(populated)
    report = access.gather(populated, BIG)
    zone = access_notice.notice(populated, "es").timezone
    assert report.logs["conversations"]
    for n, thread in enumerate(report.threads, start=1):
        first = format_datetime(thread["first_ts"], "d MMM y, HH:mm", tzinfo=zone, locale="es")
        last = format_datetime(thread["last_ts"], "d MMM y, HH:mm", tzinfo=zone, locale="es")
        assert f"Conversación {n}</h3><p class='muted'>del {first} al {last}</p>" in html
        log = next(r for r in report.logs["conversations"] if r["thread_id"] == thread["thread_id"])
        assert f"<tr><td>Conversación {n}</td><td>{log['agent']}</td><td>{log['turns']}</td></tr>" in html


@pytest.mark.parametrize(
    "lang, words",
    [
        (
            "es",
            [
                "Responsable del tratamiento",
                "Delegado de protección de datos",
                "Para qué tratamos sus datos",
                "Destinatarios",
                "Cuánto tiempo los conservamos",
                "De dónde proceden",
                "rectificación",
                "supresión",
                "limitación",
                "oponerse",
                "Agencia Española de Protección de Datos (AEPD)",
            ],
        ),
        (
            "en",
            [
                "Controller",
                "Data protection officer",
                "What we process your data for",
                "Recipients",
                "How long we keep it",
                "Where it comes from",
                "rectified",
                "erasure",
                "restriction",
                "object",
                "Agencia Española de Protección de Datos (AEPD)",
            ],
        ),
    ],
)
def test_the_export_says_what_article_15_requires_in_the_requesters_language(populated, lang, words):  # noqa: F811
    text = body(html_of(populated, lang))
    for word in words:
        assert word in text, word
    days = POLICIES["clientes"].ttl_days
    assert (f"{days} días desde la última vez" if lang == "es" else f"{days} days after an assistant last uses") in text


def test_the_retention_of_conversations_is_the_one_the_last_sweep_applied(populated):  # noqa: F811
    db = populated
    db.execute(
        "INSERT INTO core_sweep_log (trigger, operator, host, status, dry_run, retention_days, started_at, "
        "finished_at) VALUES ('manual', 'sre', 'h', 'ok', false, 37, now(), now())"
    )
    try:
        assert "37 días desde el último mensaje de la conversación" in body(html_of(db))
        assert access.export(db, BIG, fmt="json", lang="en", operator="dpo").data.count(b"37 days after") == 1
    finally:
        db.execute("DELETE FROM core_sweep_log WHERE retention_days = 37")


def test_the_texts_are_configurable_and_bad_configuration_registers_nothing(populated, tmp_path, monkeypatch):  # noqa: F811
    db = populated
    good = tmp_path / "notice.toml"
    good.write_text(
        'timezone = "America/Mexico_City"\n[es]\ncontroller_name = "Tiendas Sol, S.A."\n'
        'purposes = ["Vender zapatos."]\n[en]\ncontroller_name = "Sol Shops Inc."\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("ACCESS_NOTICE_FILE", str(good))
    monkeypatch.setenv("DPO_CONTACT", "dpd@sol.example")
    es, en = body(html_of(db, "es")), body(html_of(db, "en"))
    assert "Tiendas Sol, S.A." in es and "Vender zapatos." in es and "dpd@sol.example" in es
    assert "Para qué" in es and "Atender sus consultas" not in es
    assert "Sol Shops Inc." in en and "Answering your questions" in en and "America/Mexico_City" in en
    assert access_notice.notice(db, "es").configured

    n = db.fetch_one("SELECT count(*) AS n FROM core_access_register")["n"]
    for content, error in (
        ('[es]\ncontroler_name = "x"\n', "unknown key [es].controler_name"),
        ('[es]\npurposes = "one"\n', "[es].purposes must be a non-empty list of texts"),
        ('timezone = "Mars/Olympus"\n', "unknown time zone 'Mars/Olympus'"),
        ("[es\n", "cannot read the access notice file"),
    ):
        good.write_text(content, encoding="utf-8")
        with pytest.raises(access_notice.NoticeConfigError, match=re.escape(error)):
            access.export(db, BIG, fmt="html", lang="es", operator="dpo")
    assert db.fetch_one("SELECT count(*) AS n FROM core_access_register")["n"] == n


def test_without_configuration_the_defaults_say_they_are_examples(populated, monkeypatch):  # noqa: F811
    for env in ("ACCESS_NOTICE_FILE", *access_notice.IDENTITY_ENV.values()):
        monkeypatch.delenv(env, raising=False)
    info = access_notice.notice(populated, "es")
    assert not info.configured and "configure CONTROLLER_NAME" in info.texts["controller_name"]
    assert access_render.LANGS == tuple(access_notice.PERIODS)


@pytest.mark.parametrize("lang", ["es", "en"])
def test_the_arguments_and_values_the_agents_wrote_read_as_written(populated, lang):  # noqa: F811
    """Issue 54 finding 8: the agents wrote `tipo="recogida"` in Spanish; the English export must not rewrite it as
    `tipo = pickup` (the preference's heading says in words what it holds; the values stay as written)."""
    html = html_of(populated, lang)
    written = re.findall(r"(?:guardó su preferencia|saved your preference): <code>tipo = ([^,]+),", html)
    assert written and set(written) <= set(get_args(TipoPreferencia)), written
    values = re.findall(r"<dt>(?:Tipo|Kind)</dt><dd class='value'>([^<]*)</dd>", html)
    assert values and set(values) <= set(get_args(TipoPreferencia)), values


@pytest.mark.parametrize(
    "lang, note",
    [
        ("es", "Este sistema es una demostración que reproduce días pasados"),
        ("en", "This system is a demonstration that replays past days"),
    ],
)
def test_a_preference_dated_by_two_clocks_is_explained_in_the_export(db, lang, note):
    """Issue 54 finding 7: a conversation of the demo's replayed day writes a preference; the store dates it on the
    database's clock, the conversation and our memory-write log on the replayed day. The export says why, next to
    the documents, in plain words; a customer whose conversations ran on the real clock reads no such note."""
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    replayed = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1, hours=12)
    with clock.simulated(replayed):
        run_turn(agent, ContextoCliente("C7"), "cliente-C7-1", "Prefiero recoger mis pedidos en la tienda Sierpes.")
    run_turn(agent, ContextoCliente("C8"), "cliente-C8-1", "Prefiero recoger mis pedidos en la tienda Sierpes.")
    report = access.gather(db, "C7")
    (document,) = report.documents
    (logged,) = report.logs["memory_writes"]
    assert document["created_at"] - logged["written_at"] > timedelta(days=1)  # two clocks for one preference
    html = access.export(db, "C7", fmt="html", lang=lang, operator="local").data.decode()
    documents = html.split("<h2>")[2]  # the cover, then the documents' section
    assert note in documents, documents[:400]
    assert json.loads(access.export(db, "C7", fmt="json", lang=lang, operator="local").data)["cover"]["clock_note"]
    other = access.export(db, "C8", fmt="html", lang=lang, operator="local").data.decode()
    assert note not in other


@pytest.mark.parametrize(
    "lang, saved", [("es", "El asistente guardó su preferencia"), ("en", "The assistant saved your preference")]
)
def test_the_customer_reads_what_the_assistant_did_not_its_internals(populated, lang, saved):  # noqa: F811
    """Issue 54 finding 8: the customer reads "the assistant saved your preference", never a tool's name, a thread id
    or a count of saved states; the JSON keeps them for the DPO (machine-readable)."""
    html = html_of(populated, lang)
    text = body(html)
    for name in ("recordar_preferencia", "avisos_proveedor", "proponer_entrega"):
        assert not re.search(rf"\b{name}\b", text), name
    # `preferencias` is also a word: as a tool's name it is called or answers
    assert not re.search(r"<code>preferencias\b|(?:de|of) preferencias\b", html)
    assert saved in html
    report = access.gather(populated, BIG)
    for thread in report.threads:
        assert thread["thread_id"] not in text, thread["thread_id"]
    assert "estados guardados" not in text and "saved states" not in text
    document = json.loads(access.export(populated, BIG, fmt="json", lang=lang, operator="local").data)
    assert {t["thread_id"] for t in document["threads"]} == {t["thread_id"] for t in report.threads}
    calls = [c["name"] for t in document["threads"] for m in t["messages"] for c in m.get("tool_calls") or []]
    assert "recordar_preferencia" in calls
