"""Right of access on the real embedded PostgreSQL: the export holds every document and every message of
the customer's threads (counts equal SQL), nothing of look-alike neighbours, says so when there is
nothing, refuses bad ids as erasure does, refreshes no TTL, marks refused payloads, and registers each
export with the sha256 of the file handed over."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import timedelta

import ormsgpack
import pytest
from babel.dates import format_datetime
from langgraph.store.base import PutOp

from core.db import Database, reset_pool
from core.memory.store import InvalidIdentifier
from core.privacy import access, access_notice, access_render, chain
from core.privacy.access_report import MARKER_KINDS
from tests.test_erasure import LOOK_ALIKES, agents_for, converse, make_store, write_docs

BIG = "C9"
DOCS = 300
NESTED = 60


@pytest.fixture(scope="module")
def populated(create_database):
    """C9 with 300 documents (60 nested, one expired not yet swept) and 3 agent threads, plus a guard denial
    and a tampered write in one of its threads; five look-alikes with documents and a thread each."""
    db = Database(create_database())
    store = make_store(db)
    write_docs(store, BIG, DOCS - 1, nested=NESTED)
    store.batch([PutOp(("clientes", BIG), "caducado", {"texto": "caducado"}, index=["texto"], ttl=0.001)])
    agent = agents_for(db, store)
    converse(agent, BIG, n_threads=3)
    for other in LOOK_ALIKES:
        write_docs(store, other, 6, nested=2)
        converse(agent, other)
    db.execute(
        "INSERT INTO core_guard_denials (denial_key, replica_id, tool, risk, thread_id, subject_root, "
        "subject_id, customer_id, reason, denied_at) VALUES (gen_random_uuid(), 'r1', 'publicar_aviso', "
        "'HIGH', 'cliente-C9-1', 'clientes', 'C9', 'C9', 'degraded', now())"
    )
    db.execute(
        "INSERT INTO core_guard_denials (denial_key, replica_id, tool, risk, thread_id, subject_root, "
        "subject_id, customer_id, reason, denied_at) VALUES (gen_random_uuid(), 'r1', 'publicar_aviso', "
        "'HIGH', 'cliente-C19-1', 'clientes', 'C19', 'C19', 'degraded', now())"
    )
    tampered = ormsgpack.packb([ormsgpack.Ext(0, ormsgpack.packb(["os", "system", "touch /tmp/x"]))])
    db.execute(
        "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, "
        "channel, type, blob) SELECT thread_id, checkpoint_ns, checkpoint_id, 'tampered', '~', 0, 'messages', "
        "'msgpack', %s FROM checkpoints WHERE thread_id = 'cliente-C9-2' ORDER BY checkpoint_id DESC LIMIT 1",
        (tampered,),
    )
    time.sleep(0.1)  # "caducado" is now expired, not swept
    yield db
    reset_pool(db.dsn)


def sql_counts(db, customer: str) -> dict[str, int]:
    """What the export must hold, counted independently (exact prefixes, threads by checkpoint metadata)."""
    prefixes = [
        r["prefix"]
        for r in db.fetch(
            "SELECT DISTINCT prefix FROM store WHERE split_part(prefix, '.', 1) = 'clientes' "
            "AND split_part(prefix, '.', 2) = %s",
            (customer,),
        )
    ]
    threads = [
        r["thread_id"]
        for r in db.fetch("SELECT DISTINCT thread_id FROM checkpoints WHERE metadata->>'cliente_id' = %s", (customer,))
    ]
    one = lambda q, p: db.fetch_one(q, p)["n"]  # noqa: E731
    return {
        "documents": one("SELECT count(*) AS n FROM store WHERE prefix = ANY(%s)", (prefixes,)),
        "expired_documents": one(
            "SELECT count(*) AS n FROM store WHERE prefix = ANY(%s) AND expires_at < now()", (prefixes,)
        ),
        "threads": len(threads),
        "messages": one(
            "SELECT count(*) AS n FROM core_checkpoint_messages_view WHERE thread_id = ANY(%s)", (threads,)
        ),
        "memory_writes": one("SELECT count(*) AS n FROM core_memory_writes WHERE prefix = ANY(%s)", (prefixes,)),
        "conversations": one(
            "SELECT count(*) AS n FROM core_conversations WHERE subject_root = 'clientes' AND subject_id = %s",
            (customer,),
        ),
    }


def test_export_holds_every_document_and_message_and_nothing_of_look_alikes(populated):
    db = populated
    report = access.gather(db, BIG)
    expected = sql_counts(db, BIG)
    counts = report.counts
    assert {k: counts[k] for k in expected} == expected
    # our 300 plus what the agents' recordar_preferencia wrote in the conversations
    prefs = {d["key"] for d in report.documents if d["key"].startswith("pref-")}
    assert prefs and counts["documents"] == DOCS + len(prefs)
    assert counts["expired_documents"] == 1 and counts["threads"] == 3
    assert counts["guard_denials"] == 1 and counts["marked_payloads"] == 1
    # every document, by key, with its times; the expired one marked
    keys = {(d["prefix"], d["key"]) for d in report.documents}
    assert keys == {
        (r["prefix"], r["key"])
        for r in db.fetch("SELECT prefix, key FROM store WHERE prefix IN ('clientes.C9', 'clientes.C9.pedidos')")
    }
    expired = [d for d in report.documents if d["expired"]]
    assert [d["key"] for d in expired] == ["caducado"] and expired[0]["expires_at"] is not None
    assert all(d["created_at"] and d["updated_at"] for d in report.documents)
    # every message of each thread, in the view's order, decoded (no raw blobs)
    for thread in report.threads:
        rows = db.fetch(
            "SELECT kind, content FROM core_checkpoint_messages_view WHERE thread_id = %s "
            "ORDER BY ts, checkpoint_id, task_path, task_id, idx, position",
            (thread["thread_id"],),
        )
        got = [(m["kind"], m["content"]) for m in thread["messages"] if m["kind"] not in MARKER_KINDS]
        assert got == [(r["kind"], r["content"]) for r in rows]
        kinds = {m["kind"] for m in thread["messages"]}
        assert {"human", "ai", "tool"} <= kinds
        assert any(m.get("tool_calls") for m in thread["messages"])
    # nothing of a look-alike, anywhere in the file
    text = access_render.export_json(
        report, requested_by="dpo@example.com", lang="es", notice=access_notice.notice(db, "es")
    ).decode()
    for other in LOOK_ALIKES:
        assert f"clientes.{other}" not in text and f"cliente-{other}-" not in text, other
    doc = json.loads(text)
    assert {d["prefix"] for d in doc["store_documents"]} == {"clientes.C9", "clientes.C9.pedidos"}
    assert doc["cover"]["counts"] == counts and doc["cover"]["nothing_found"] is False
    # the readable document holds the same: every document (expired one marked) and every message
    html = access_render.export_html(
        report, requested_by="dpo@example.com", lang="es", notice=access_notice.notice(db, "es")
    ).decode()
    kinds = {"recogida", "contacto", "idioma", "horario"}  # pref-<tipo> reads as the preference it holds

    def heading(d: dict) -> str:
        key, place = d["key"], d["prefix"][len("clientes.C9.") :] if d["prefix"] != "clientes.C9" else ""
        shown = f"Preferencia de {key[5:]}" if key.startswith("pref-") and key[5:] in kinds else f"<code>{key}</code>"
        return f"<h3>{f'<code>{place}</code> / ' if place else ''}{shown}"

    assert all(heading(d) in html for d in report.documents)
    assert html.count("caducado (se borrará en el próximo barrido)") == 1
    assert html.count("<div class='msg ") == sum(len(t["messages"]) for t in report.threads)
    for other in LOOK_ALIKES:
        assert f"clientes.{other}" not in html and f"cliente-{other}-" not in html, other


@pytest.mark.parametrize("other", LOOK_ALIKES)
def test_each_look_alike_gets_only_its_own_data(populated, other):
    report = access.gather(populated, other)
    expected = sql_counts(populated, other)
    assert {k: report.counts[k] for k in expected} == expected
    assert report.counts["documents"] == 6 + sum(d["key"].startswith("pref-") for d in report.documents)
    assert report.counts["threads"] == 1
    assert {d["prefix"] for d in report.documents} == {f"clientes.{other}", f"clientes.{other}.pedidos"}
    assert [t["thread_id"] for t in report.threads] == [f"cliente-{other}-1"]


def test_a_refused_payload_is_marked_in_place_not_dropped(populated):
    report = access.gather(populated, BIG)
    thread = next(t for t in report.threads if t["thread_id"] == "cliente-C9-2")
    markers = [m for m in thread["messages"] if m["kind"] == "refused"]
    assert len(markers) == 1 and markers[0]["refused_type"] == "os.system"
    html = access_render.export_html(
        report, requested_by="dpo", lang="en", notice=access_notice.notice(populated, "en")
    ).decode()
    assert "content the system refuses to save (os.system); not shown" in html
    # the rest of the thread is there: every message of the view, none dropped
    n = populated.fetch_one("SELECT count(*) AS n FROM core_checkpoint_messages_view WHERE thread_id = 'cliente-C9-2'")
    assert sum(1 for m in thread["messages"] if m["kind"] not in MARKER_KINDS) == n["n"] > 0


def test_exporting_refreshes_no_ttl_and_changes_nothing(populated):
    db = populated
    snapshot = "SELECT prefix, key, expires_at, updated_at FROM store WHERE prefix LIKE 'clientes.C9%%' ORDER BY 1, 2"
    before = db.fetch(snapshot)
    totals = "SELECT (SELECT count(*) FROM store) AS s, (SELECT count(*) FROM checkpoint_writes) AS w"
    t0 = db.fetch_one(totals)
    time.sleep(0.05)  # a refresh would move expires_at by at least this much
    result = access.export(db, BIG, fmt="json", lang="es", operator="dpo@example.com")
    assert db.fetch(snapshot) == before
    assert db.fetch_one(totals) == t0
    assert hashlib.sha256(result.data).hexdigest() == result.sha256
    row = db.fetch_one("SELECT * FROM core_access_register WHERE id = %s", (result.register_id,))
    assert row["sha256"] == result.sha256 and row["size_bytes"] == len(result.data)
    assert row["customer_id"] == BIG and row["operator"] == "dpo@example.com" and row["format"] == "json"


def test_a_customer_with_no_data_gets_an_export_that_says_so(populated):
    report = access.gather(populated, "C404")
    assert report.empty and report.counts["documents"] == 0 and report.counts["threads"] == 0
    doc = access_render.export_document(
        report, requested_by="dpo", lang="es", notice=access_notice.notice(populated, "es")
    )
    assert doc["cover"]["nothing_found"] is True
    assert (
        "No hay ningún dato sobre este cliente"
        in access_render.export_html(
            report, requested_by="dpo", lang="es", notice=access_notice.notice(populated, "es")
        ).decode()
    )
    assert (
        "There is no data about this customer"
        in access_render.export_html(
            report, requested_by="dpo", lang="en", notice=access_notice.notice(populated, "en")
        ).decode()
    )


def test_the_cover_names_who_when_sources_and_the_coverage_caveat(populated):
    db = populated
    # a thread no source attributes (no metadata, no conversation row)
    db.execute(
        "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata) "
        "VALUES ('conv-anon', '', '1', '{\"ts\": \"2026-01-01T00:00:00+00:00\"}', '{\"source\": \"input\"}') "
        "ON CONFLICT DO NOTHING"
    )
    report = access.gather(db, BIG)
    assert report.unattributed_threads >= 1
    for lang, words in (("es", "no pueden atribuirse"), ("en", "cannot be attributed")):
        html = access_render.export_html(
            report, requested_by="dpo@example.com", lang=lang, notice=access_notice.notice(db, lang)
        ).decode()
        assert "dpo@example.com" in html and words in html and "core_conversations" in html
        zone = access_notice.notice(db, lang).timezone
        assert format_datetime(report.generated_at, "d MMM y, HH:mm", tzinfo=zone, locale=lang) in html


@pytest.mark.parametrize("bad", ["", "   ", "C.9", "C\x009", "x" * 10_000, " C9", None])
def test_bad_ids_are_refused_as_in_erasure_and_nothing_is_registered(populated, bad):
    db = populated
    n = db.fetch_one("SELECT count(*) AS n FROM core_access_register")["n"]
    with pytest.raises(InvalidIdentifier) as info:
        access.export(db, bad, fmt="json", lang="es", operator="dpo")
    assert str(info.value).startswith("customer id ")
    with pytest.raises(InvalidIdentifier):
        access.gather(db, bad)
    assert db.fetch_one("SELECT count(*) AS n FROM core_access_register")["n"] == n


def test_bad_format_language_or_operator_registers_nothing(populated):
    db = populated
    n = db.fetch_one("SELECT count(*) AS n FROM core_access_register")["n"]
    for kwargs in (
        {"fmt": "pdf", "lang": "es", "operator": "d"},
        {"fmt": "json", "lang": "fr", "operator": "d"},
        {"fmt": "json", "lang": "es", "operator": " "},
    ):
        with pytest.raises(ValueError):
            access.export(db, BIG, **kwargs)
    assert db.fetch_one("SELECT count(*) AS n FROM core_access_register")["n"] == n


def test_export_on_demo_agents_matches_sql(demo_db):
    row = demo_db.fetch_one(
        "SELECT subject_id AS c FROM core_conversations WHERE subject_root = 'clientes' AND subject_id NOT IN "
        "(SELECT customer_id FROM core_erasure_register) AND subject_id IN "
        "(SELECT split_part(prefix, '.', 2) FROM core_memory_writes WHERE thread_id IS NOT NULL) "
        "GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"
    )
    customer = row["c"]
    report = access.gather(demo_db, customer)
    expected = sql_counts(demo_db, customer)
    assert expected["documents"] > 0 and expected["messages"] > 0
    assert {k: report.counts[k] for k in expected} == expected
    doc = json.loads(
        access_render.export_json(report, requested_by="dpo", lang="es", notice=access_notice.notice(demo_db, "es"))
    )
    assert (
        sum(len(t["messages"]) for t in doc["threads"]) == report.counts["messages"] + report.counts["marked_payloads"]
    )
    # one clock (issue 40): each conversation dated from its first to its last message, on the day the demo replays,
    # as our logs date it: the preference it wrote falls between the two; the conversations in the order they happened
    threads = {t["thread_id"]: t for t in report.threads}
    for t in report.threads:
        times = [m["ts"] for m in t["messages"]]
        assert t["first_ts"] == min(times) <= max(times) == t["last_ts"], t["thread_id"]
    assert [t["first_ts"] for t in report.threads] == sorted(t["first_ts"] for t in report.threads)
    writes = [w for w in report.logs["memory_writes"] if w["thread_id"] in threads]
    assert writes
    for w in writes:
        t = threads[w["thread_id"]]
        assert t["first_ts"] - timedelta(minutes=1) <= w["written_at"] <= t["last_ts"] + timedelta(minutes=1), w
    started = {c["thread_id"]: c["started_at"] for c in report.logs["conversations"]}
    assert all(abs(threads[k]["first_ts"] - v) < timedelta(minutes=1) for k, v in started.items() if k in threads)
    assert chain.verify(demo_db, "erasure").ok  # the demo's own erasure was sealed by the migration's triggers


def test_export_on_the_article_agents_fixture(article_agents_db):
    """Agents built from the memory article (stock savers, `conv-<uuid>` threads, no metadata): the export holds
    every document and every message of the threads the resolver attributes (by the `hilo` back-link), names the
    residue threads it did not include, and nothing of a look-alike."""
    db = Database(article_agents_db.dsn)
    try:
        for customer in ("C9", "C_9", "C19", "C9x", "C%"):
            assert article_agents_db.threads_of(customer), customer
            report = access.gather(db, customer)
            writes = article_agents_db.threads_of(customer, "write")
            assert sorted(t["thread_id"] for t in report.threads) == writes, customer
            assert all(t["sources"] == ["store:hilo"] for t in report.threads)
            docs = db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix = %s", (f"clientes.{customer}",))["n"]
            msgs = db.fetch_one(
                "SELECT count(*) AS n FROM core_checkpoint_messages_view WHERE thread_id = ANY(%s)", (writes,)
            )["n"]
            assert (report.counts["documents"], report.counts["messages"]) == (docs, msgs) and docs > 0 and msgs > 0
            residue = {r["thread_id"] for r in report.residue}
            assert residue == set(
                article_agents_db.threads_of(customer, "read") + article_agents_db.threads_of(customer, "chat")
            ), customer
            text = access_render.export_json(
                report, requested_by="dpo", lang="es", notice=access_notice.notice(db, "es")
            ).decode()
            mine = set(article_agents_db.threads_of(customer))
            others = {c.thread_id for c in article_agents_db.conversations} - mine
            assert not any(t in text for t in others), customer
    finally:
        reset_pool(db.dsn)
