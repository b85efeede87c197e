"""Every storage format langgraph writes, named and shown right (issue 28), on databases written through
langgraph's own classes (tests/format_agents.py) on the real embedded server."""

from __future__ import annotations

import psycopg
import pytest
from apptools import metric
from format_agents import (
    AES_KEY,
    OLD_AES_KEY,
    delta_thread,
    encrypted_agent,
    json_thread,
    older_checkpoints_thread,
    pickle_thread,
    shallow_database,
)

from core.history import formats, views


@pytest.fixture(scope="module")
def formats_db(create_database):
    """One database holding a thread of each format beside nothing else."""
    from core.db import Database

    database = Database(create_database(prefix="formats"))
    database.delta_state = delta_thread(database.dsn, "delta-1")
    encrypted_agent(database.dsn, "enc-1", "mi teléfono es 600111222, soy C77")
    encrypted_agent(database.dsn, "enc-old", "dirección antigua de C77", key=OLD_AES_KEY)
    pickle_thread(database.dsn, "pickle-1")
    yield database
    database.close()


def test_the_database_fingerprint_counts_each_format(formats_db):
    fp = formats.fingerprint(formats_db)
    assert fp.migration_version is not None and fp.migration_version >= 9
    assert not fp.shallow
    with psycopg.connect(formats_db.dsn) as conn:
        enc = conn.execute(
            "SELECT (SELECT count(*) FROM checkpoint_blobs WHERE type LIKE '%+aes')"
            " + (SELECT count(*) FROM checkpoint_writes WHERE type LIKE '%+aes')"
        ).fetchone()[0]
        pick = conn.execute(
            "SELECT (SELECT count(*) FROM checkpoint_blobs WHERE type = 'pickle')"
            " + (SELECT count(*) FROM checkpoint_writes WHERE type = 'pickle')"
        ).fetchone()[0]
        delta_ck = conn.execute(
            "SELECT count(*) FROM checkpoints WHERE metadata ? 'counters_since_delta_snapshot'"
        ).fetchone()[0]
        snapshots = conn.execute(
            "SELECT count(*) FROM checkpoint_blobs WHERE core_checkpoint_payload(type, blob) "
            "->> 'type' = 'langgraph.checkpoint.serde.types._DeltaSnapshot'"
        ).fetchone()[0]
    assert enc > 0 and fp.encrypted == enc and fp.encrypted_threads == 2
    assert pick == 2 and fp.pickle == 2 and fp.pickle_threads == 1
    assert (
        snapshots >= 4
        and fp.delta_snapshots == snapshots
        and fp.delta_checkpoints == delta_ck > 0
        and fp.delta_threads == 1
    )
    # the pickle thread's checkpoint is base.empty_checkpoint(): format v2, without sends
    assert fp.undecodable == 0 and fp.json == 0 and fp.older_checkpoints == 1 and fp.pending_sends == 0
    assert fp.special


def test_a_thread_fingerprint_is_that_threads_alone(formats_db):
    enc = formats.fingerprint(formats_db, "enc-1")
    assert enc.encrypted > 0 and enc.encrypted_threads == 1 and enc.pickle == 0 and enc.delta_snapshots == 0
    assert enc.decoded and enc.undecodable == 0
    delta = formats.fingerprint(formats_db, "delta-1")
    assert delta.delta_snapshots == 6 and delta.encrypted == 0 and delta.delta_threads == 1
    assert formats.fingerprint(formats_db, "nadie").rows == 0


def test_pickle_rows_are_refused_never_unpickled(formats_db):
    writes = views.step_writes(formats_db, "pickle-1")
    pickled = writes[writes["blob_type"] == "pickle"]
    assert len(pickled) == 1
    assert pickled["refused_type"].tolist() == ["pickle"] and pickled["undecodable"].isna().all()
    assert "valor" not in pickled["payload"].iloc[0] and "escrito" not in pickled["payload"].iloc[0]
    timeline = views.thread_timeline(formats_db, "pickle-1")
    assert timeline["refused_value"].tolist() == ["pickle"]


def test_a_delta_snapshot_reads_its_value_not_the_inline_marker(formats_db):
    with psycopg.connect(formats_db.dsn) as conn:
        rows = conn.execute(
            "SELECT channel_values -> 'items', delta_channels -> 'items' ->> 'source' FROM core_checkpoints_view "
            "WHERE thread_id = 'delta-1' AND channel_values ? 'items' ORDER BY checkpoint_id"
        ).fetchall()
    assert rows and all(v != True for v, _ in rows)  # noqa: E712 - the marker itself is `true`
    # since migration 135 the checkpoints between snapshots hold the rebuilt value (tests/test_delta_views.py)
    snapshots = [v for v, source in rows if source == "snapshot"]
    assert snapshots and all(v["type"].endswith("_DeltaSnapshot") for v in snapshots)
    assert all(isinstance(v, list) for v, source in rows if source != "snapshot")


def test_the_shallow_saver_schema_is_named_clearly(create_database):
    dsn = create_database(migrated=False)
    shallow_database(dsn, "shallow-1")
    from core.migrate import ShallowCheckpointSchema, migrate

    with pytest.raises(ShallowCheckpointSchema, match="ShallowPostgresSaver"):
        migrate(dsn, 64)
    with psycopg.connect(dsn) as conn:  # nothing of ours was created
        assert conn.execute("SELECT to_regclass('core_schema_migrations')").fetchone()[0] is None


def test_a_start_without_auto_migrate_names_the_shallow_schema(create_database):
    dsn = create_database(migrated=False)
    shallow_database(dsn, "shallow-1")
    from core.migrate import ShallowCheckpointSchema, check_schema

    with pytest.raises(ShallowCheckpointSchema, match="ShallowPostgresSaver"):
        check_schema(dsn, 64)


def test_the_dashboard_on_a_shallow_database_says_why_it_cannot_open(create_database, app_env):
    from streamlit.testing.v1 import AppTest

    dsn = create_database(migrated=False)
    shallow_database(dsn, "shallow-1")
    app_env(dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60).run()
    assert not at.exception
    assert any("ShallowPostgresSaver" in e.value for e in at.error), [e.value for e in at.error]
    hint = " ".join(m.value for m in at.markdown)
    assert "ShallowPostgresSaver" in hint and "PostgresSaver" in hint and "historial" in hint, hint


@pytest.fixture(scope="module")
def older_db(create_database):
    """Rows of the formats langgraph no longer writes: checkpoints v < 4 with a pending send, and a json row."""
    from core.db import Database

    database = Database(create_database(prefix="older"))
    database.sends_state = older_checkpoints_thread(database.dsn, "v2-sends")
    database.json_value = json_thread(database.dsn, "json-1")
    yield database
    database.close()


def test_older_checkpoints_with_pending_sends_are_counted_decoded_and_named(older_db, app_env):
    from langgraph.checkpoint.serde.types import TASKS

    # langgraph itself reads the first checkpoint's Send into the second one's state
    assert [s.node for s in older_db.sends_state[TASKS]] == ["trabajador"]
    fp = formats.fingerprint(older_db, "v2-sends")
    assert fp.older_checkpoints == 2 and fp.pending_sends == 1 and fp.special
    writes = views.step_writes(older_db, "v2-sends")
    send = writes[writes["channel"] == TASKS]
    assert len(send) == 1 and send["undecodable"].isna().all()
    assert "langgraph.types.Send" in send["payload"].iloc[0] and "P-77" in send["payload"].iloc[0]
    at = _page(older_db.dsn, app_env, {"thread": "v2-sends"})
    infos = [i.value for i in at.info]
    assert any("Envíos pendientes (leídos de las escrituras del padre) 1" in i for i in infos), infos


def test_json_rows_are_counted_and_decoded_as_langgraph_reads_them(older_db):
    assert older_db.json_value.content == "hola, soy C77"  # langgraph's own reader
    fp = formats.fingerprint(older_db, "json-1")
    assert fp.json == 1 and fp.undecodable == 0 and fp.special
    writes = views.step_writes(older_db, "json-1")
    row = writes[writes["blob_type"] == "json"]
    assert len(row) == 1 and row["undecodable"].isna().all()
    assert '"hola, soy C77"' in row["payload"].iloc[0] and '"HumanMessage"' in row["payload"].iloc[0]


# --- the Checkpoints page ----------------------------------------------------------------------------------


def _page(dsn: str, app_env, query: dict | None = None, **env):
    from streamlit.testing.v1 import AppTest

    app_env(dsn, **env)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    at.switch_page("app_pages/checkpoints.py").run()
    assert not at.exception
    return at


def test_the_storage_view_shows_the_fingerprint_and_the_missing_key(formats_db, app_env):
    fp = formats.fingerprint(formats_db)
    at = _page(formats_db.dsn, app_env)
    at.radio(key="checkpoints.view").set_value("storage").run()
    assert not at.exception
    # read on request only (a scan of every blob and write): not read, then read with its time
    assert not any("filas cifradas" in w.value for w in at.warning)
    assert any(c.value.startswith("Sin leer") for c in at.caption)
    at.button(key="checkpoints.formats.read").click().run()
    assert not at.exception
    assert any(c.value.startswith("Leídos a las") for c in at.caption)
    assert metric(at, "Cifradas (hilos)") == f"{fp.encrypted:,} (2)"
    assert metric(at, "Pickle (rechazadas)") == "2"
    assert metric(at, "Delta: instantáneas / checkpoints sin valor") == f"{fp.delta_snapshots} / {fp.delta_checkpoints}"
    assert metric(at, "Migración de checkpoints") == f"v{fp.migration_version}"
    warnings = [w.value for w in at.warning]
    assert any(f"{fp.encrypted} filas cifradas en 2 hilos" in w and "no escaneados" in w for w in warnings), warnings


def test_the_thread_view_names_the_threads_formats(formats_db, app_env):
    at = _page(formats_db.dsn, app_env, {"thread": "enc-1"}, LANGGRAPH_AES_KEYS=AES_KEY)
    infos = [i.value for i in at.info]
    assert any(i.startswith("Formatos de este hilo: Cifradas (hilos)") for i in infos), infos
    assert any("1 claves AES configuradas" in i for i in infos), infos
    plain = _page(formats_db.dsn, app_env, {"thread": "delta-1"})
    assert any("Delta" in i.value for i in plain.info)
    assert not any("Cifradas" in i.value for i in plain.info)


def test_the_exporter_exposes_the_fingerprint_from_the_background(formats_db):
    from apptools import wait_until

    from core.operations.exporter import DatabaseCollector

    collector = DatabaseCollector(formats_db.dsn)

    def exported() -> dict:
        return {s.name: s.value for m in collector.collect() for s in m.samples}

    wait_until(lambda: "agent_memory_checkpoint_encrypted_rows" in exported(), 30)
    got, fp = exported(), formats.fingerprint(formats_db)
    assert got["agent_memory_checkpoint_encrypted_rows"] == fp.encrypted > 0
    assert got["agent_memory_checkpoint_encrypted_threads"] == 2
    assert got["agent_memory_checkpoint_pickle_rows"] == 2
    assert got["agent_memory_checkpoint_delta_snapshots"] == fp.delta_snapshots
    assert got["agent_memory_checkpoint_migration_version"] == fp.migration_version
    assert got["agent_memory_checkpoint_shallow_schema"] == 0
    assert got["agent_memory_checkpoint_formats_computed_timestamp_seconds"] > 0


# --- encrypted checkpoints ---------------------------------------------------------------------------------


def test_encrypted_writes_read_with_the_configured_key_only(formats_db, monkeypatch):
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    monkeypatch.delenv("LANGGRAPH_AES_KEYS", raising=False)
    locked = views.step_writes(formats_db, "enc-1")
    enc = locked[locked["blob_type"] == "msgpack+aes"]
    assert len(enc) > 0 and enc["undecodable"].str.contains("encrypted").all()
    assert not locked["content"].fillna("").str.contains("600111222").any()
    monkeypatch.setenv("LANGGRAPH_AES_KEYS", f"{OLD_AES_KEY},{AES_KEY}")  # rotation: the older key first
    opened = views.step_writes(formats_db, "enc-1")
    assert opened["undecodable"].isna().all()
    assert (opened["message_kind"] == "human").sum() == 1 and (opened["message_kind"] == "ai").sum() == 1
    assert opened["content"].str.contains("mi teléfono es 600111222").any()
    # the plaintext never reached the database: every row is still encrypted there
    with psycopg.connect(formats_db.dsn) as conn:
        assert (
            conn.execute(
                "SELECT count(*) FROM checkpoint_writes WHERE thread_id = 'enc-1' AND type NOT LIKE '%+aes'"
            ).fetchone()[0]
            == 0
        )
    monkeypatch.setenv("LANGGRAPH_AES_KEYS", "una-clave-erronea")
    with pytest.raises(ValueError, match="16, 24 or 32 bytes"):
        views.step_writes(formats_db, "enc-1")


def test_the_residue_scan_reads_encrypted_threads_with_a_key_and_names_the_others(formats_db, monkeypatch):
    from core.privacy import residue as res

    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    monkeypatch.delenv("LANGGRAPH_AES_KEYS", raising=False)
    blind = res.residue_scan(formats_db, "C77")
    assert blind.not_scanned == ["enc-1", "enc-old"]
    assert {"enc-1", "enc-old", "delta-1"} <= set(blind.proposed)  # delta-1: its writes hold C77 in clear
    monkeypatch.setenv("LANGGRAPH_AES_KEYS", AES_KEY)
    one_key = res.residue_scan(formats_db, "C77")
    assert one_key.not_scanned == ["enc-old"]
    assert [m.snippet for m in one_key.matches_of("enc-1")] and "soy C77" in one_key.matches_of("enc-1")[0].snippet
    monkeypatch.setenv("LANGGRAPH_AES_KEYS", f"{AES_KEY},{OLD_AES_KEY}")
    both = res.residue_scan(formats_db, "C77")
    assert both.not_scanned == [] and {"enc-1", "enc-old"} <= {m.thread_id for m in both.matches}


def test_an_erasure_is_complete_only_when_the_dpo_decided_on_the_unread_threads(create_database, monkeypatch):
    from core.db import Database
    from core.privacy.erasure import erase
    from core.privacy.evidence import preview

    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    monkeypatch.delenv("LANGGRAPH_AES_KEYS", raising=False)
    db = Database(create_database(prefix="encerase"))
    try:
        encrypted_agent(db.dsn, "enc-9", "soy C78")
        assert preview(db, "C78").residue_threads == ["enc-9"]
        undecided = erase(db, "C78", operator="dpo@test")
        assert undecided.status == "incomplete" and "enc-9" in undecided.report
        row = next(r for r in undecided.residue if r["thread_id"] == "enc-9")
        assert row["terms"] == ["(not scanned: encrypted, no key opens it)"] and row["decision"] == "undecided"
        left = erase(db, "C78", operator="dpo@test", decisions={"enc-9": ("leave", "cifrado por otra aplicación")})
        assert left.status == "complete" and "enc-9 (cifrado por otra aplicación)" in left.report
    finally:
        db.close()


def test_the_access_export_reads_encrypted_messages_and_names_the_formats(create_database, monkeypatch):
    import json

    from core.db import Database
    from core.privacy import access

    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    monkeypatch.setenv("LANGGRAPH_AES_KEYS", AES_KEY)
    db = Database(create_database(prefix="encaccess"))
    try:
        encrypted_agent(db.dsn, "cliente-C79-1", "mi correo es c79@example.com")
        doc = json.loads(access.export(db, "C79", fmt="json", lang="es", operator="dpo@test").data)
        texts = [m.get("content") for t in doc["threads"] for m in t["messages"]]
        assert "mi correo es c79@example.com" in texts and not any(
            m["kind"] == "undecodable" for t in doc["threads"] for m in t["messages"]
        )
        fmt = doc["cover"]["storage_formats"]
        assert fmt["encrypted"] > 0 and fmt["encrypted_threads"] == 1 and fmt["encrypted_writes_read"] > 0
        html = access.export(db, "C79", fmt="html", lang="en", operator="dpo@test").data.decode()
        assert "Storage formats of your conversations" in html and "Encrypted conversations: 1" in html
        monkeypatch.delenv("LANGGRAPH_AES_KEYS")
        blind = json.loads(access.export(db, "C79", fmt="json", lang="es", operator="dpo@test").data)
        kinds = [m["kind"] for t in blind["threads"] for m in t["messages"]]
        assert "undecodable" in kinds and "c79@example.com" not in json.dumps(blind["threads"])
        assert blind["cover"]["storage_formats"]["encrypted_writes_read"] == 0
    finally:
        db.close()
