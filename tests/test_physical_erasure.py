"""Physical erasure, measured (issue 42 item 1), on the embedded server whose files this process can read.

A customer with a phone and an address in store rows, vectors, a TOASTed checkpoint blob and checkpoint writes (the
retail agent, real store and saver); the files of the five tables (heap, TOAST, indexes, every segment) and pg_wal
read as bytes before and after each step. What is asserted is what was measured (core/privacy/physical.py): the
values are in the files before anything (so the test can fail), still there after erase() and a CHECKPOINT, still in
the freed space after the sweep's plain VACUUM, gone from the table files only after a rewrite (VACUUM FULL, run here
as an operator's rewrite window would); the WAL keeps them throughout. The register states exactly what the scan
found, never "overwritten" while a value is found, and its horizons are the server's settings.
"""

from __future__ import annotations

import json
import secrets
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.capture.follower import catch_up, drop_slot
from core.db import Database, reset_pool
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.operations import sweep
from core.privacy import erasure, erasure_register, evidence, physical
from core.privacy import residue as res
from tests.conftest import DIMS, ROOT, database_factory, grant_our_functions, own_embedded_server

CUSTOMER = "CZ7Q4X"
PHONE = "612345678"
ADDRESS = "Calle Zurbarán 27"


@pytest.fixture(scope="module")
def pg_dsn(tmp_path_factory):
    """A server of this module's own: its pg_wal holds this module's WAL only, so the scans read all of it (the
    session's server, after the whole suite's writes, holds more than physical.WAL_MAX_BYTES: then the WAL is rightly
    "not measured" and the WAL assertions here could not be checked)."""
    servers = own_embedded_server(tmp_path_factory, "physical")
    base, _control = next(servers)
    yield base
    next(servers, None)


@pytest.fixture(scope="module")
def create_database(pg_dsn):
    return database_factory(pg_dsn)


@pytest.fixture
def db(create_database):
    database = Database(create_database())
    yield database
    reset_pool(database.dsn)
    drop_slot(database.dsn)  # the change follower's slot (the erasure's sync made it) holds this server's WAL


def noise(n: int) -> str:
    """Incompressible text: pglz gives up (under 25 % savings), the blob is stored out of line as it is."""
    return secrets.token_urlsafe(n)


def write_customer(db: Database, customer: str) -> None:
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    thread, ctx = f"cliente-{customer}-1", ContextoCliente(customer)
    phone, address = (PHONE, ADDRESS) if customer == CUSTOMER else (noise(7), noise(12))
    run_turn(agent, ctx, thread, f"Contactadme siempre por teléfono {phone}.")
    run_turn(agent, ctx, thread, f"Prefiero recoger mis pedidos en la tienda {address}.")
    run_turn(agent, ctx, thread, " ".join(f"{noise(700)} mi teléfono {phone}, vivo en {address}" for _ in range(6)))


def sql(dsn: str, statement: str, params=None) -> list[dict]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def checkpoint(db: Database) -> None:
    sql(db.dsn, "CHECKPOINT")


def terms_of(db: Database, customer: str) -> dict[str, str]:
    """The request's terms as erase() will number them (t1 the id, looked for as the namespace prefix), in clear:
    the test holds them, the register never does."""
    with db.connection() as conn:
        terms = res.customer_terms(conn, customer)
    return {
        f"t{n}": (f"{evidence.ROOT}.{customer}" if t.kind == "id" else t.term)
        for n, t in enumerate(terms, start=1)
        if not t.common
    }


def plain_scan(db: Database, terms: dict[str, str], threads: list[str]) -> physical.FileScan:
    """The same scan the register's is, with the values in clear (labels: the register's references): the same
    tables, and in the registers (KEPT_TABLES) the id (t1) and the thread ids not counted."""
    labels = {f"thread{i}": t for i, t in enumerate(sorted(threads), start=1)}
    return physical.scan_files(db, terms | labels, kept={"t1", *labels})


def parts(scan: physical.FileScan) -> dict[str, dict[str, list[str]]]:
    """{table: {part: [labels found]}} for the tables where something was found."""
    out: dict[str, dict[str, list[str]]] = {}
    for r in scan.relations:
        if r.found:
            part = out.setdefault(r.table, {}).setdefault(r.part, [])
            part[:] = sorted(set(part) | set(r.found))
    return out


def registered(db: Database, request_id: int) -> dict:
    row = physical.record(db, request_id)
    assert row is not None, "the sweep did not settle the request"
    return row


def register_parts(row: dict) -> dict[str, dict[str, list[str]]]:
    return {t: v["parts"] for t, v in row["files"]["tables"].items() if v["found"]}


def server_setting(dsn: str, name: str) -> str:
    r = sql(dsn, "SELECT setting, unit FROM pg_settings WHERE name = %s", (name,))[0]
    return r["setting"] + (f" {r['unit']}" if r["unit"] else "")


def assert_register_is_the_scan(db: Database, row: dict, scan: physical.FileScan) -> None:
    assert scan.measured, scan.reason
    assert row["files"]["status"] == "measured"
    assert register_parts(row) == parts(scan)
    assert row["files"]["wal"]["found"] == sorted(scan.found_in_wal())
    if scan.found_in_tables():  # a value still found is never reported as overwritten
        assert row["files_status"] == physical.IN_FREE_SPACE
        assert row["t_files_overwritten"] is None
    else:
        assert row["files_status"] == physical.OVERWRITTEN
        assert row["t_files_overwritten"] is not None


def assert_wal_horizon_is_the_servers(db: Database, row: dict, retention: int | None) -> None:
    wal = row["wal"]
    for name in ("wal_keep_size", "max_slot_wal_keep_size", "archive_mode", "archive_command", "wal_level"):
        assert wal["settings"][name] == server_setting(db.dsn, name), name
    slots = sql(db.dsn, "SELECT slot_name FROM pg_replication_slots ORDER BY slot_name")
    assert [s["slot_name"] for s in wal["slots"]] == [s["slot_name"] for s in slots]
    assert row["backup_retention_days"] == retention
    # the slots holding WAL from before the erasure's end, as the server compares LSNs
    held = [
        r["slot_name"]
        for r in sql(
            db.dsn,
            "SELECT s.slot_name FROM pg_replication_slots s JOIN core_erasure_needles n ON n.request_id = %s "
            "WHERE s.restart_lsn <= n.erased_lsn ORDER BY s.slot_name",
            (row["request_id"],),
        )
    ]
    assert wal["slots_holding"] == held
    assert wal["erased_lsn"] is not None
    if held:
        assert row["t_wal_backup_horizon"] is None and "slot" in row["horizon_note"]
    elif retention is None:
        assert row["t_wal_backup_horizon"] is None
        assert "BACKUP_RETENTION_DAYS is not configured" in row["horizon_note"]
    elif row["t_files_overwritten"] is None:
        assert row["t_wal_backup_horizon"] is None and row["horizon_note"].startswith("open:")
    else:
        assert row["t_wal_backup_horizon"] == row["t_files_overwritten"] + timedelta(days=retention)


def test_each_step_as_measured_in_the_files_and_the_register_says_exactly_that(db, monkeypatch):
    monkeypatch.setenv("BACKUP_RETENTION_DAYS", "7")
    # other customers before and after: the erased tuples sit between live ones, as in a real database
    for other in ("OTRO1", "OTRO2"):
        write_customer(db, other)
    write_customer(db, CUSTOMER)
    for other in ("OTRO3", "OTRO4"):
        write_customer(db, other)
    terms = terms_of(db, CUSTOMER)
    assert any(PHONE in v for v in terms.values()) and any(ADDRESS in v for v in terms.values())
    threads = [f"cliente-{CUSTOMER}-1"]
    # the blob is out of line: the TOAST table holds it
    toasted = sql(
        db.dsn,
        "SELECT count(*) AS n FROM checkpoint_blobs WHERE thread_id = %s AND pg_column_size(blob) > 2000",
        (threads[0],),
    )
    assert toasted[0]["n"] > 0

    checkpoint(db)
    before = plain_scan(db, terms, threads)
    assert before.measured, before.reason
    found = parts(before)
    phone = {label for label, v in terms.items() if PHONE in v}
    address = {label for label, v in terms.items() if ADDRESS in v}
    assert phone & set(found["store"]["table"]) and address & set(found["store"]["table"])
    assert phone & set(found["checkpoint_blobs"]["toast"]) and address & set(found["checkpoint_blobs"]["toast"])
    assert set(found["checkpoint_writes"]) & {"table", "toast"}
    assert "t1" in found["store"]["index"]  # the namespace prefix is in the store's keys
    assert phone <= before.found_in_wal() and address <= before.found_in_wal()

    result = erasure.erase(db, CUSTOMER, operator="dpo@example.com")
    assert result.status == "complete", result.report
    assert all(e.result == 0 for e in result.evidence)
    # SQL zero: the bytes are still in the files, before and after a CHECKPOINT (not all of them byte for byte: a
    # read that finds a page full of dead tuples may prune it, "opportunistic pruning", measured on checkpoint_writes)
    for when in ("before a checkpoint", "after a checkpoint"):
        if when == "after a checkpoint":
            checkpoint(db)
        now = parts(plain_scan(db, terms, threads))
        assert phone & set(now["store"]["table"]) and address & set(now["store"]["table"]), when
        assert phone & set(now["checkpoint_blobs"]["toast"]), when
        assert address & set(now["checkpoint_writes"]["toast"]), when
        assert "t1" in now["store"]["index"], when
    # the register keeps keyed needles, never a value
    needles = sql(
        db.dsn, "SELECT needles::text AS t FROM core_erasure_needles WHERE request_id = %s", (result.request_id,)
    )
    assert needles and all(v not in needles[0]["t"] for v in (PHONE, ADDRESS, CUSTOMER))

    run = sweep.run_sweep(db, trigger="manual")
    assert run.status == "ok", run.error
    assert f"#{result.request_id}" in (run.physical_erasure or "")
    after = plain_scan(db, terms, threads)
    row = registered(db, result.request_id)
    # plain VACUUM freed the space but did not overwrite it: heap and TOAST still hold the values
    assert phone & set(parts(after)["store"]["table"])
    assert phone & set(parts(after)["checkpoint_blobs"]["toast"])
    assert_register_is_the_scan(db, row, after)
    assert row["files_status"] == physical.IN_FREE_SPACE
    assert (
        row["t_sql_zero"]
        == sql(db.dsn, "SELECT finished_at FROM core_erasure_register WHERE id = %s", (result.request_id,))[0][
            "finished_at"
        ]
    )
    for table in physical.AGENT_TABLES:
        step = row["steps"]["tables"][table]
        assert step["done"] is True and "FULL" not in step["step"], step
        # VACUUM's own report (not pg_stat's n_dead_tup, which other backends' late stats flushes change after it)
        assert step["stats"]["last_vacuum"] is not None and step["report"]["dead_not_removable"] == 0, step
    # the erased rows were there to remove: VACUUM removed them, or the line pointers readers had pruned
    assert (
        sum(
            p["removed"] + (p["dead_items_removed"] or 0)
            for step in row["steps"]["tables"].values()
            for name, p in step["report"].items()
            if name in ("table", "toast")
        )
        > 0
    )
    assert row["steps"]["checkpoint"]["done"] is True
    assert_wal_horizon_is_the_servers(db, row, retention=7)
    doc = erasure_register.evidence_document(db, result.request_id)["physical"]
    assert doc["files_status"] == physical.IN_FREE_SPACE and doc["t_files_overwritten"] is None
    assert doc["steps"]["tables"]["store"]["report"]["dead_not_removable"] == 0
    assert PHONE not in json.dumps(doc) and ADDRESS not in json.dumps(doc, ensure_ascii=False)

    # an operator's rewrite window (ACCESS EXCLUSIVE: the agents' outage) of every table the sweep scans (the agents'
    # and ours: the change follower's shadows held the values too), then the next sweep measures it
    assert set(physical.AGENT_TABLES) <= set(row["steps"]["tables"])
    for table in row["steps"]["tables"]:
        sql(db.dsn, f"VACUUM (FULL) {table}")
    assert sweep.run_sweep(db, trigger="manual").status == "ok"
    rewritten = plain_scan(db, terms, threads)
    row = registered(db, result.request_id)
    assert parts(rewritten) == {}, "VACUUM (FULL) left a value in a table's files"
    assert_register_is_the_scan(db, row, rewritten)
    assert row["files_status"] == physical.OVERWRITTEN and row["attempts"] == 2
    assert phone <= rewritten.found_in_wal()  # the WAL still holds them: no table step changes it
    assert_wal_horizon_is_the_servers(db, row, retention=7)

    # settled: the next sweep runs no step for it
    assert "nothing to settle" in (sweep.run_sweep(db, trigger="manual").physical_erasure or "")


def test_a_found_value_cannot_be_recorded_as_overwritten(db):
    result = erasure.erase(db, "C77", operator="dpo@example.com")
    with pytest.raises(psycopg.errors.CheckViolation):
        sql(
            db.dsn,
            "INSERT INTO core_erasure_physical (request_id, steps, files, files_status, wal, first_steps_at, "
            "settled_at) VALUES (%s, '{}', '{}', %s, '{}', now(), now())",
            (result.request_id, physical.OVERWRITTEN),
        )


def test_vacuum_says_what_an_open_snapshot_kept_from_it(db):
    """The register's "dead tuples VACUUM could not remove" is VACUUM's own count: a transaction that took its
    snapshot before the erasure keeps the erased rows alive for it, and the step says so (then 0 once it ends)."""
    write_customer(db, CUSTOMER)
    with psycopg.connect(db.dsn) as reader:  # a report someone left open, REPEATABLE READ: its snapshot stays
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM checkpoints").fetchone()
        assert erasure.erase(db, CUSTOMER, operator="dpo@example.com").status == "complete"
        held = physical.after_erasure_steps(db).tables
        assert held["checkpoints"]["report"]["dead_not_removable"] > 0, held["checkpoints"]
        assert held["checkpoints"]["report"]["table"]["dead_not_removable"] > 0
        reader.rollback()
    freed = physical.after_erasure_steps(db).tables
    assert all(step["report"]["dead_not_removable"] == 0 for step in freed.values()), freed


def test_vacuum_report_in_another_language_is_unknown():
    assert physical.vacuum_report(['terminó de limpiar "db.public.store": tuplas: 2 eliminadas']) is None


def test_files_not_readable_are_unknown_never_gone(db, monkeypatch):
    monkeypatch.setattr(physical, "_data_directory", lambda conn: (None, "no access to the files (test)"))
    scan = physical.scan_files(db, {"v": PHONE})
    assert scan.status == "unknown" and scan.reason == "no access to the files (test)"
    assert all(v["found"] is None for v in scan.by_table().values())


def test_the_sweep_role_of_the_deployment_runs_the_steps_but_cannot_read_the_files(db):
    """deploy/sweeper-grants.sql's role: VACUUM (MAINTAIN) and CHECKPOINT (pg_checkpoint) done, the data directory
    not told to it: the files are "not measured", never overwritten."""
    write_customer(db, CUSTOMER)
    result = erasure.erase(db, CUSTOMER, operator="dpo@example.com")
    assert result.status == "complete", result.report
    sql(db.dsn, (ROOT / "deploy" / "sweeper-grants.sql").read_text())
    grant_our_functions(db.dsn, "agent_memory_sweeper")
    sweeper = Database(psycopg.conninfo.make_conninfo(db.dsn, user="agent_memory_sweeper"))
    try:
        (settled,) = physical.settle(sweeper)
    finally:
        reset_pool(sweeper.dsn)
    row = registered(db, result.request_id)
    assert settled.files_status == row["files_status"] == physical.NOT_MEASURED
    assert row["t_files_overwritten"] is None and "files not measured" in row["files_note"]
    assert row["files"]["status"] == "unknown"
    assert all(row["steps"]["tables"][t]["done"] for t in physical.AGENT_TABLES), row["steps"]["tables"]
    assert row["steps"]["checkpoint"]["done"] is True


def test_on_the_article_agents_database(article_agents, monkeypatch):
    monkeypatch.delenv("BACKUP_RETENTION_DAYS", raising=False)
    foreign = article_agents()
    db = Database(foreign.dsn)
    customer = "C10"  # no other customer's id starts with it (C9 would match clientes.C9x)
    slot, later = f"physical_{secrets.token_hex(4)}", f"physical_{secrets.token_hex(4)}"
    try:
        terms = terms_of(db, customer)
        assert any("c10@ejemplo.es" in v for v in terms.values())
        threads = foreign.threads_of(customer)
        checkpoint(db)
        before = plain_scan(db, terms, threads)
        assert "store" in parts(before) and before.found_in_wal(), parts(before)
        # a slot reserving WAL before the erasure holds the WAL of the values: the horizon is not bounded by time;
        # one reserved after the erasure's end does not (a new slot reserves from the last checkpoint's redo point:
        # a checkpoint first)
        sql(db.dsn, "SELECT pg_create_physical_replication_slot(%s, true)", (slot,))
        preview = evidence.preview(db, customer)
        result = erasure.erase(
            db, customer, operator="dpo@example.com", decisions={t: "erase" for t in preview.residue_threads}
        )
        assert result.status == "complete", result.report
        catch_up(db.dsn)  # the change follower has applied the erasure: its slot no longer holds the WAL before it
        checkpoint(db)  # (a logical slot's restart point moves at the next running-transactions record)
        catch_up(db.dsn)
        sql(db.dsn, "SELECT pg_create_physical_replication_slot(%s, true)", (later,))
        run = sweep.run_sweep(db, trigger="manual")
        assert run.status == "ok", run.error
        scan = plain_scan(db, terms, sorted(set(result.thread_ids)))
        row = registered(db, result.request_id)
        assert scan.found_in_tables(), "plain VACUUM overwrote everything: the findings changed, update physical.py"
        assert_register_is_the_scan(db, row, scan)
        assert row["wal"]["slots_holding"] == [slot]
        assert {later, slot} <= {s["slot_name"] for s in row["wal"]["slots"]}
        assert_wal_horizon_is_the_servers(db, row, retention=None)
    finally:
        sql(
            db.dsn,
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = ANY(%s)",
            ([slot, later],),
        )
        reset_pool(db.dsn)
        drop_slot(db.dsn)


def test_the_register_page_says_what_is_not_yet_physically_gone_and_when(db, app_env, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BACKUP_RETENTION_DAYS", "7")
    write_customer(db, "OTRO1")
    write_customer(db, CUSTOMER)
    result = erasure.erase(db, CUSTOMER, operator="dpo@example.com")
    app_env(db.dsn)

    def page() -> tuple[AppTest, str]:
        at = AppTest.from_file("../dashboard.py", default_timeout=30).run()
        at.switch_page("app_pages/erasure_register.py").run()
        assert not at.exception, at.exception
        shown = [m.value for m in at.markdown] + [w.value for w in at.warning] + [s.value for s in at.success]
        shown += [i.value for i in at.info] + [c.value for c in at.caption] + [c.value for c in at.code]
        return at, "\n".join(shown)

    _, text = page()
    assert "Ningún barrido ha asentado todavía esta solicitud" in text
    catch_up(db.dsn)  # the change follower has applied the erasure: its slot no longer holds the WAL before it
    checkpoint(db)  # (a logical slot's restart point moves at the next running-transactions record)
    catch_up(db.dsn)
    assert sweep.run_sweep(db, trigger="manual").status == "ok"
    at, text = page()
    row = registered(db, result.request_id)
    assert row["files_status"] == physical.IN_FREE_SPACE
    assert "Inalcanzable por SQL desde" in text and "Aún no borrada físicamente" in text
    assert "Aún no se sabe cuándo sale del WAL" in text and "7 days (BACKUP_RETENTION_DAYS)" in text
    assert PHONE not in text and ADDRESS not in text
    steps = next(df.value for df in at.dataframe if "vacuum_done" in df.value.columns)
    with db.connection() as conn:
        scanned = physical.scanned_tables(conn)
    assert set(physical.AGENT_TABLES) <= set(scanned) and "core_tool_calls" in scanned
    assert set(steps["table_name"]) == set(scanned) and steps["vacuum_done"].all()
    assert (steps["found"] != "").any()


def test_a_missing_file_or_a_rewrite_during_the_scan_is_unknown_never_gone(db, monkeypatch):
    write_customer(db, CUSTOMER)
    checkpoint(db)
    assert physical.scan_files(db, {"v": PHONE}).measured
    real = physical.relation_segments
    monkeypatch.setattr(physical, "relation_segments", lambda path: [])  # a relation's file not there to read
    missing = physical.scan_files(db, {"v": PHONE})
    assert missing.status == "unknown" and "missing" in (missing.reason or "")
    assert all(v["found"] is None for v in missing.by_table().values())

    rewrites = []

    def rewrite_while_reading(path):  # an operator's VACUUM (FULL) lands in the middle of the read
        if not rewrites:
            sql(db.dsn, "VACUUM (FULL) store")
            rewrites.append(path)
        return real(path)

    monkeypatch.setattr(physical, "relation_segments", rewrite_while_reading)
    rewritten = physical.scan_files(db, {"v": PHONE})
    assert rewritten.status == "unknown" and "rewritten during the scan" in (rewritten.reason or "")


# Every relation of this database's schema (tables, materialized views, their indexes) with their TOAST tables and
# TOAST indexes, each with the table it belongs to: the test's own list, from the catalog, independent of physical's.
SELECT_OUR_FILES = """
WITH ours AS (
    SELECT oid, reltoastrelid FROM pg_class
    WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'm')
)
SELECT oid::regclass::text AS table, oid::regclass::text AS relation, pg_relation_filepath(oid) AS path FROM ours
UNION ALL
SELECT oid::regclass::text, reltoastrelid::regclass::text, pg_relation_filepath(reltoastrelid)
FROM ours WHERE reltoastrelid <> 0
UNION ALL
SELECT o.oid::regclass::text, i.indexrelid::regclass::text, pg_relation_filepath(i.indexrelid)
FROM ours o JOIN pg_index i ON i.indrelid = o.oid OR (o.reltoastrelid <> 0 AND i.indrelid = o.reltoastrelid)"""


def files_holding(db: Database, skips: dict[str, frozenset[str]]) -> dict[str, dict[str, list[str]]]:
    """For each value of `skips`: {table: [relations]} of every table of the schema (but the value's skipped ones)
    whose files (heap, TOAST, indexes, every segment) hold its UTF-8 bytes, read here as plain bytes, each file once
    (no physical.scan_files, no needles): what "overwritten" must agree with."""
    data_dir = Path(sql(db.dsn, "SHOW data_directory")[0]["data_directory"])
    out: dict[str, dict[str, list[str]]] = {v: {} for v in skips}
    rows = sql(db.dsn, SELECT_OUR_FILES)
    assert {"core_tool_calls", *physical.AGENT_TABLES} <= {r["table"] for r in rows}
    for r in rows:
        main = data_dir / r["path"]
        for f in [main, *sorted(main.parent.glob(main.name + ".[0-9]*"))]:
            data = f.read_bytes() if f.exists() else b""
            for value, skip in skips.items():
                if r["table"] not in skip and value.encode("utf-8") in data:
                    out[value].setdefault(r["table"], []).append(r["relation"])
    return out


def values_in_files(db: Database, customer: str, threads: list[str]) -> dict[str, dict[str, list[str]]]:
    """Where the files hold the customer's phone, address, namespace prefix or thread ids (the last two but in the
    registers, which keep them by design: evidence.PROTECTED_TABLES)."""
    skips = {PHONE: frozenset(), ADDRESS: frozenset()}
    skips |= {v: evidence.PROTECTED_TABLES for v in (f"{evidence.ROOT}.{customer}", *threads)}
    return {v: where for v, where in files_holding(db, skips).items() if where}


def test_overwritten_only_once_no_file_of_any_table_erase_deleted_from_holds_the_value(db, monkeypatch):
    """Issue 51 item 2: erase() deletes the customer's rows from our own tables too (core_tool_calls.args holds
    recordar_preferencia's `valor`, the phone), so "overwritten" must cover their files, not only the agents' five:
    the register says overwritten only when the files, read here byte for byte, no longer hold the values."""
    monkeypatch.setenv("BACKUP_RETENTION_DAYS", "7")
    write_customer(db, "OTRO1")
    write_customer(db, CUSTOMER)
    write_customer(db, "OTRO2")
    threads = [f"cliente-{CUSTOMER}-1"]
    assert sweep.run_sweep(db, trigger="manual").status == "ok"  # extracts the tool calls into core_tool_calls
    held = sql(
        db.dsn,
        "SELECT count(*) AS n FROM core_tool_calls WHERE tool = 'recordar_preferencia' AND args::text LIKE %s",
        (f"%{PHONE}%",),
    )
    assert held[0]["n"] > 0, "the agent's recordar_preferencia call with the phone was not extracted"
    checkpoint(db)
    assert "core_tool_calls" in values_in_files(db, CUSTOMER, threads)[PHONE]
    result = erasure.erase(db, CUSTOMER, operator="dpo@example.com")
    assert result.status == "complete", result.report
    assert result.deleted.get("core_tool_calls"), result.deleted
    # an operator's rewrite window for the agents' five tables: what the register took for "overwritten"
    for table in physical.AGENT_TABLES:
        sql(db.dsn, f"VACUUM (FULL) {table}")
    assert sweep.run_sweep(db, trigger="manual").status == "ok"
    checkpoint(db)
    row = registered(db, result.request_id)
    still = values_in_files(db, CUSTOMER, threads)
    if row["files_status"] == physical.OVERWRITTEN:
        assert still == {}, f"the register says overwritten, the files hold {still}"
    else:
        assert still, f"nothing in the files, yet not overwritten: {row['files_note']}"
        assert row["files_status"] == physical.IN_FREE_SPACE, row["files_note"]
        assert row["t_files_overwritten"] is None and row["t_wal_backup_horizon"] is None
        for table in {t for where in still.values() for t in where}:
            assert f"{table}: " in row["files_note"], (table, row["files_note"])
    # settle vacuumed and read every table erase() deleted from, ours included
    for table in ("core_tool_calls", *physical.AGENT_TABLES, *result.deleted):
        if table in physical.AGENT_TABLES or sql(db.dsn, "SELECT to_regclass(%s) AS t", (table,))[0]["t"]:
            assert row["steps"]["tables"][table]["done"] is True, table
            assert row["files"]["tables"][table]["files"] > 0, table
    assert row["files"]["not_read"] == []
    assert_wal_horizon_is_the_servers(db, row, retention=7)

    # the rewrite window for every table the register names (ours too), then the next sweep measures it
    for table in row["steps"]["tables"]:
        sql(db.dsn, f"VACUUM (FULL) {table}")
    assert sweep.run_sweep(db, trigger="manual").status == "ok"
    checkpoint(db)
    row = registered(db, result.request_id)
    assert values_in_files(db, CUSTOMER, threads) == {}
    assert row["files_status"] == physical.OVERWRITTEN, row["files_note"]
    assert row["t_files_overwritten"] is not None
    assert_wal_horizon_is_the_servers(db, row, retention=7)


def test_a_table_erase_deleted_from_and_not_read_withholds_overwritten(db, monkeypatch):
    """Where the scan cannot cover a table erase() deletes from (here: the old fixed list of the agents' five), the
    register withholds "overwritten" and names the tables not read, even with the five rewritten and clean."""
    write_customer(db, CUSTOMER)
    assert sweep.run_sweep(db, trigger="manual").status == "ok"  # core_tool_calls holds the phone
    result = erasure.erase(db, CUSTOMER, operator="dpo@example.com")
    assert result.status == "complete", result.report
    for table in physical.AGENT_TABLES:
        sql(db.dsn, f"VACUUM (FULL) {table}")
    monkeypatch.setattr(physical, "scanned_tables", lambda conn: list(physical.AGENT_TABLES))
    (settled,) = physical.settle(db)
    row = registered(db, result.request_id)
    assert row["files"]["status"] == "measured" and register_parts(row) == {}, row["files"]
    assert settled.files_status == row["files_status"] == physical.NOT_MEASURED
    assert row["t_files_overwritten"] is None and row["t_wal_backup_horizon"] is None
    assert "core_tool_calls" in row["files"]["not_read"]
    assert (
        "no file read of table(s) erase() deletes from" in row["files_note"] and "core_tool_calls" in row["files_note"]
    )
