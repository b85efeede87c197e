"""Issue 52, cluster E: the registers, their chains, the views log and the erasure's records live in the dashboard's own
database (PG_DASHBOARD), and the erasure runs across the two (core/privacy/erasure.py's protocol): the lock and the
register row `running` in ours first, the deletes on the agents' primary, the evidence of both, the record in ours.

Data written by the real agents: our retail agent (core/agents) and the memory article's agents (the
`article_agents` fixture). The agents' database's copies of our tables receive nothing (pg_stat_user_tables, after
`pg_stat_force_next_flush()`, as tests/test_own_database.py reads it)."""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.postgres import PostgresStore
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from core.capture.follower import catch_up, drop_slot
from core.db import Database, forget_dashboard_database, use_dashboard_database
from core.privacy import access, chain, data_views, erasure, erasure_register, evidence, physical
from core.privacy.erasure import ERASURE_LOCK_NS, ErasureError
from tests import own_db
from tests.conftest import DIMS, dsn_for, migrated_dashboard

# The cluster's tables (core/sql/dashboard/030_registers.sql).
E_TABLES = (
    "core_erasure_register",
    "core_erasure_rechecks",
    "core_access_register",
    "core_register_chain",
    "core_register_redactions",
    "core_register_cuts",
    "core_data_views",
    "core_data_view_gaps",
    "core_data_view_writers",
    "core_erasure_proofs",
    "core_erasure_physical",
    "core_erasure_needles",
)
CUSTOMER = "C1"
AGENTS = "agents:"  # evidence.AGENTS_COPY: how a table of ours is named in the agents' database, apart
ARTICLE_CUSTOMER = "C9"
TURNS = (
    ("cliente-C1-1", CUSTOMER, "Prefiero recoger mis pedidos en la tienda Diagonal."),
    ("cliente-C1-2", CUSTOMER, "¿Qué preferencias tengo?"),
    ("cliente-C2-1", "C2", "Hola"),
    ("cliente-C1-1", CUSTOMER, "Hola"),
)


def written_there(dsn: str, tables: tuple[str, ...] = E_TABLES) -> dict[str, int]:
    return own_db.written_there(dsn, tables)


def retail_turns(dsn: str, turns=TURNS) -> None:
    """Our retail agent (scripted model, stock PostgresSaver, our store) over `turns` (thread, customer, text)."""
    from core.agents.retail import ContextoCliente, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with ConnectionPool(dsn, min_size=1, max_size=4, kwargs=kwargs) as pool:
        store = build_store(pool, OfflineHashEmbeddings(DIMS), DIMS)
        agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(pool))
        for thread, customer, text in turns:
            run_turn(agent, ContextoCliente(customer), thread, text)


def agents_rows(dsn: str, customer: str) -> dict[str, int]:
    """The customer's rows in the agents' tables, and every tombstone."""
    prefix = f"clientes.{customer}"
    with psycopg.connect(dsn) as conn:
        return {
            "store": conn.execute(
                "SELECT count(*) FROM store WHERE prefix = %s OR prefix LIKE %s", (prefix, prefix + ".%")
            ).fetchone()[0],
            "checkpoints": conn.execute(
                "SELECT count(*) FROM checkpoints WHERE metadata->>'cliente_id' = %s", (customer,)
            ).fetchone()[0],
            "checkpoint_writes": conn.execute(
                "SELECT count(*) FROM checkpoint_writes WHERE thread_id LIKE %s", (f"cliente-{customer}-%",)
            ).fetchone()[0],
            "tombstones": conn.execute("SELECT count(*) FROM core_thread_tombstones").fetchone()[0],
        }


def ours_count(db: Database, sql: str, params=()) -> int:
    with psycopg.connect(db.ours.dsn) as conn:
        return conn.execute(sql, params).fetchone()[0]


@contextlib.contextmanager
def apart(agents_dsn: str, pg_dsn: str):
    """The agents' database `agents_dsn` with the dashboard's database apart, created and migrated (a copy of one
    migrated once: conftest.migrated_dashboard)."""
    ours = dsn_for(pg_dsn, str(psycopg.conninfo.conninfo_to_dict(agents_dsn)["dbname"]) + "_dashboard")
    use_dashboard_database(agents_dsn, ours)
    migrated_dashboard(ours)
    db = Database(agents_dsn)
    try:
        yield db
    finally:
        db.ours.close()
        db.close()
        forget_dashboard_database(agents_dsn)
        with contextlib.suppress(psycopg.Error):
            drop_slot(agents_dsn)


def per_table(before: dict[str, int]) -> dict[str, int]:
    """The tables holding rows, over both databases (the agents' copy of a table ours has is `agents:<table>`)."""
    out: dict[str, int] = {}
    for name, n in before.items():
        key = name.removeprefix(AGENTS)
        out[key] = out.get(key, 0) + n
    return {k: v for k, v in out.items() if v}


# --- our retail agent ------------------------------------------------------------------------------------------


def test_an_erasure_apart_is_complete_recorded_in_ours_and_equal_to_the_default_layout(split_db, db):
    """The same turns of our agent on both layouts, the same customer erased: complete on both, with the same counts
    per table (ours apart: summed over both databases); apart, the register, its chain, the needles, the proof and
    the re-check are rows of ours, the chains verify there, and the agents' copies of the cluster's tables receive
    nothing."""
    retail_turns(split_db.dsn)
    retail_turns(db.dsn)
    assert written_there(split_db.dsn) == {}
    kept = erasure.erase(split_db, CUSTOMER, operator="dpo@example.com")
    default = erasure.erase(db, CUSTOMER, operator="dpo@example.com")
    assert kept.status == default.status == "complete", (kept.report, default.report)
    for name, n in default.counts_before.items():  # each table counted where it lives: as on the default layout
        assert kept.counts_before[name] == n, name
        # and its copy in the agents' database: what is left there of ours (nothing), or the original of a mirror
        assert kept.counts_before.get(AGENTS + name, 0) in (0, n), name
    assert set(per_table(kept.counts_before)) == set(per_table(default.counts_before))
    assert kept.counts_before["store"] > 0 and kept.counts_before["checkpoints"] > 0
    # our targets found in ours: the follower's shadow of the customer's documents counted there, 0 after
    assert kept.counts_before["core_store_shadow"] > 0 and kept.counts_after["core_store_shadow"] == 0
    assert kept.counts_before["agents:core_store_shadow"] == 0
    assert all(n == 0 for n in kept.counts_after.values()), kept.counts_after
    # the proof read our tables in both databases
    assert kept.proof is not None and {"core_erasure_register", "agents:core_erasure_register"} <= set(
        kept.proof.tables
    )
    assert erasure_register.recheck(split_db, kept.request_id).clean
    assert ours_count(split_db, "SELECT count(*) FROM core_erasure_register WHERE status = 'complete'") == 1
    assert ours_count(split_db, "SELECT count(*) FROM core_erasure_needles WHERE erased_lsn IS NOT NULL") == 1
    assert ours_count(split_db, "SELECT count(*) FROM core_erasure_proofs") == 1
    assert ours_count(split_db, "SELECT count(*) FROM core_erasure_rechecks") == 1
    verified = chain.verify(split_db, "erasure")
    assert verified.ok and verified.links == 2, verified  # the request and its re-check, sealed in ours
    assert erasure_register.register(split_db)["id"].tolist() == [kept.request_id]
    assert written_there(split_db.dsn) == {}  # not one row of the cluster's in the agents' database
    assert agents_rows(split_db.dsn, CUSTOMER)["store"] == 0 and AGENTS == evidence.AGENTS_COPY
    assert agents_rows(split_db.dsn, "C2")["checkpoints"] > 0  # the neighbour keeps everything


def test_no_row_of_the_agents_is_deleted_before_the_register_row_is_committed_in_ours(split_db, monkeypatch):
    """The invariant of the protocol: every delete of the agents' rows (the store's batch, delete_thread) finds a
    committed `running` row naming the customer in ours, read on a connection of its own."""
    retail_turns(split_db.dsn)
    seen: list[int] = []

    def running() -> int:
        with psycopg.connect(split_db.ours.dsn) as conn:  # another session: committed rows only
            return conn.execute(
                "SELECT count(*) FROM core_erasure_register WHERE customer_id = %s AND status = 'running'", (CUSTOMER,)
            ).fetchone()[0]

    batch, delete_thread = PostgresStore.batch, PostgresSaver.delete_thread

    def checked_batch(self, ops):
        seen.append(running())
        return batch(self, ops)

    def checked_delete_thread(self, thread_id):
        seen.append(running())
        return delete_thread(self, thread_id)

    monkeypatch.setattr(PostgresStore, "batch", checked_batch)
    monkeypatch.setattr(PostgresSaver, "delete_thread", checked_delete_thread)
    result = erasure.erase(split_db, CUSTOMER, operator="dpo@example.com")
    assert result.status == "complete", result.report
    assert len(seen) >= 3 and set(seen) == {1}, seen


def test_ours_unreachable_refuses_to_start_and_deletes_nothing(create_database, pg_dsn):
    """The dashboard's database does not answer: a clear error, and the agents' rows as they were."""
    agents = create_database(prefix="split_down")
    retail_turns(agents)
    before = agents_rows(agents, CUSTOMER)
    use_dashboard_database(agents, dsn_for(pg_dsn, "no_such_dashboard_database"))
    db = Database(agents)
    try:
        with pytest.raises(ErasureError, match=r"not started, nothing deleted: the dashboard's database .* not reach"):
            erasure.erase(db, CUSTOMER, operator="dpo@example.com")
    finally:
        db.close()
        forget_dashboard_database(agents)
    assert before["store"] > 0 and agents_rows(agents, CUSTOMER) == before


def test_a_register_row_that_cannot_be_written_deletes_nothing(split_db):
    """Ours answers but refuses the register row (here a constraint added for the test): a clear error naming it,
    nothing deleted on the agents' side, no tombstone, no row in ours."""
    retail_turns(split_db.dsn)
    before = agents_rows(split_db.dsn, CUSTOMER)
    with psycopg.connect(split_db.ours.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE core_erasure_register ADD CONSTRAINT test_refuses CHECK (customer_id <> 'C1')")
    with pytest.raises(ErasureError, match=r"not started, nothing deleted: its register row could not be written"):
        erasure.erase(split_db, CUSTOMER, operator="dpo@example.com")
    assert before["store"] > 0 and agents_rows(split_db.dsn, CUSTOMER) == before
    assert ours_count(split_db, "SELECT count(*) FROM core_erasure_register") == 0


def test_two_erasures_of_one_customer_take_turns_on_the_lock_in_ours(split_db):
    """A second erasure of the customer started while the first deletes waits on the lock, which is held in our
    database (not the agents'), then finds nothing left."""
    retail_turns(split_db.dsn)
    locks = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND database = " + (
        "(SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    held: dict[str, int] = {}
    second: dict[str, erasure.ErasureResult] = {}
    waiter = threading.Thread(
        target=lambda: second.setdefault("r", erasure.erase(split_db, CUSTOMER, operator="dpo2@example.com"))
    )

    def progress(p: erasure.Progress) -> None:
        if p.step == "store" and not held:
            with psycopg.connect(split_db.ours.dsn) as conn:
                held["ours"] = conn.execute(locks, (ERASURE_LOCK_NS,)).fetchone()[0]
            with psycopg.connect(split_db.dsn) as conn:
                held["agents"] = conn.execute(locks, (ERASURE_LOCK_NS,)).fetchone()[0]
            waiter.start()
            # the second one reaches the lock meanwhile: until it waits on it in ours (up to 10 s; a fixed 1.5 s before)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with psycopg.connect(split_db.ours.dsn) as conn:
                    if conn.execute(locks + " AND NOT granted", (ERASURE_LOCK_NS,)).fetchone()[0]:
                        break
                time.sleep(0.02)
            held["running"] = ours_count(split_db, "SELECT count(*) FROM core_erasure_register")

    first = erasure.erase(split_db, CUSTOMER, operator="dpo@example.com", progress=progress)
    waiter.join(120)
    assert held == {"ours": 1, "agents": 0, "running": 1}, held  # the second has written nothing while it waited
    later = second["r"]
    assert first.status == later.status == "complete", (first.report, later.report)
    assert later.requested_at >= first.finished_at
    assert later.counts_before["store"] == 0 and later.counts_before["checkpoints"] == 0


def test_the_evidence_holds_no_table_while_it_waits_for_one_the_recount_truncates(split_db):
    """The follower's recount truncates our tables in one transaction, in its own order. The evidence's counts wait
    for a table it holds, holding none of those counted before (each count its own transaction): the recount goes on,
    no deadlock (a CI run's erasure failed on one, its pipeline being a single implicit transaction)."""
    retail_turns(split_db.dsn)
    ours_dsn = split_db.ours.dsn
    with split_db.connection() as conn, psycopg.connect(ours_dsn, autocommit=True, row_factory=dict_row) as mine:
        targets = evidence.own_targets(conn, mine)
        ours_tables = sorted({t.name.split(".")[0] for t in targets if t.ours} - {"core_prefix_counts"})
        waiting = "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted"
        out: dict[str, object] = {}

        def count() -> None:
            try:
                out["evidence"] = evidence.run_evidence_conn(conn, targets, CUSTOMER, [], ours=mine)
            except psycopg.Error as exc:
                out["evidence"] = exc

        with psycopg.connect(split_db.ours.dsn) as recount:
            recount.execute("SET lock_timeout = '60s'")  # a hang bound only: the deadlock is found after 1 s
            recount.execute("LOCK TABLE core_prefix_counts IN ACCESS EXCLUSIVE MODE")
            counter = threading.Thread(target=count)
            counter.start()
            with psycopg.connect(split_db.ours.dsn, autocommit=True) as watch:
                deadline = time.monotonic() + 60
                while not watch.execute(waiting, (mine.info.backend_pid,)).fetchone()[0]:
                    assert time.monotonic() < deadline and counter.is_alive(), out
                    time.sleep(0.01)
            try:  # the recount's next tables: every other one the evidence counts
                recount.execute(
                    sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                        sql.SQL(", ").join(map(sql.Identifier, ours_tables))
                    )
                )
            except psycopg.Error as exc:
                out["recount"] = exc
        counter.join(120)
    assert len(ours_tables) >= 3, ours_tables
    assert "recount" not in out, out["recount"]
    assert isinstance(out["evidence"], list), out["evidence"]
    assert {e.table for e in out["evidence"]} >= {"store", "core_prefix_counts", *(t.name for t in targets)}


def test_a_dead_letter_naming_the_customer_is_counted_and_erased_on_both_layouts(split_db, db):
    """The change follower's dead letter of a customer's document (a `hilo` longer than a btree entry of the
    shadow's index admits; the document deleted since, the letter open until a recount) names their namespace in
    `row_key` and `unknown`: counted before, deleted, 0 after; on the default layout and with ours apart (where the
    follower keeps it)."""
    from tests.test_capture_dead_letters import noise

    for database in (db, split_db):
        catch_up(database.dsn)  # the slot first: the follower applies (and fails on) the change as it decodes it
        with PostgresStore.from_conn_string(database.dsn) as store:
            store.put(("clientes", "D1"), "antes", {"texto": "antes", "hilo": "cliente-D1-1"})
            store.put(("clientes", "D1"), "veneno", {"texto": "no cabe", "hilo": noise(3_000, 3)})
            store.put(("clientes", "D2"), "despues", {"texto": "después", "hilo": "cliente-D2-1"})
        catch_up(database.dsn)  # the dead letter recorded
        with PostgresStore.from_conn_string(database.dsn) as store:  # the document gone, its dead letter still open
            store.delete(("clientes", "D1"), "veneno")
        result = erasure.erase(database, "D1", operator="dpo@example.com")
        assert result.counts_before["core_capture_dead_letters"] == 1, result.counts_before
        assert result.counts_after["core_capture_dead_letters"] == 0
        assert result.deleted["core_capture_dead_letters"] == 1
        with psycopg.connect(database.ours.dsn) as conn:
            left = conn.execute("SELECT row_key FROM core_capture_dead_letters").fetchall()
        assert left == [], left


def test_a_failure_midway_is_recorded_in_ours_and_resumed_and_data_back_is_erased_again(split_db):
    """A failure after the first deletes (raised from the progress callback, as a page's rerun would) is recorded in
    ours as `failed` with what remains counted on both databases; resumed, the new request completes and the old row
    names it. A thread said again later: the re-check finds it (data back), erased again from ours' register."""
    from core.privacy import follow_up

    retail_turns(split_db.dsn)

    def fail(p: erasure.Progress) -> None:
        if p.step == "threads":
            raise RuntimeError("the page was closed")

    with pytest.raises(RuntimeError, match="the page was closed"):
        erasure.erase(split_db, CUSTOMER, operator="dpo@example.com", progress=fail)
    with psycopg.connect(split_db.ours.dsn) as conn:
        status, after, report = conn.execute(
            "SELECT status, counts_after, report FROM core_erasure_register"
        ).fetchone()
    assert status == "failed" and "the page was closed" in report
    assert after["store"] == 0 and "core_store_shadow" in after and "agents:core_store_shadow" in after, after
    failed_id = ours_count(split_db, "SELECT max(id) FROM core_erasure_register")
    resumed = follow_up.resume(split_db, failed_id, operator="dpo@example.com")
    assert resumed.status == "complete", resumed.report
    assert ours_count(split_db, "SELECT resumed_by FROM core_erasure_register WHERE id = %s", (failed_id,)) == (
        resumed.request_id
    )
    retail_turns(split_db.dsn, (("cliente-C1-7", CUSTOMER, "Hola"),))  # the customer comes back
    back = erasure_register.recheck(split_db, resumed.request_id)
    assert not back.clean and back.counts["checkpoints"] > 0
    again = follow_up.erase_again(split_db, resumed.request_id, operator="dpo@example.com")
    assert again.status == "complete", again.report
    assert erasure_register.recheck(split_db, again.request_id).clean
    assert chain.verify(split_db, "erasure").ok
    assert written_there(split_db.dsn) == {}


def test_the_exporter_reads_the_registers_counts_and_the_views_gaps_in_ours(split_db):
    """The exporter's erasure gauges (core_erasure_register_counts) and lost views (core_data_view_gaps) come from
    ours: a failed erasure and views that did not fit the queue, counted by the real code paths."""
    from core.operations.exporter import database_metrics

    retail_turns(split_db.dsn)

    def fail(p: erasure.Progress) -> None:
        if p.step == "threads":
            raise RuntimeError("stopped")

    with pytest.raises(RuntimeError):
        erasure.erase(split_db, CUSTOMER, operator="dpo@example.com", progress=fail)
    queue = data_views.ViewQueue(split_db, capacity=1)
    view = data_views.View("dpo@example.com", "dpo", "namespace", "clientes.C1", "C1")
    assert queue.put([view, view, view]) == 2  # two lost: recorded as a gap with the next write
    assert queue.flush(10)
    queue.close()
    with psycopg.connect(split_db.dsn, row_factory=dict_row) as conn:
        samples = {s.name: s.value for m in database_metrics(conn) for s in m.samples if not s.labels}
    assert samples["agent_memory_erasure_requests_incomplete"] == 1
    assert samples["agent_memory_data_views_unrecorded"] == 2
    assert written_there(split_db.dsn) == {}


# --- the articles' agents ----------------------------------------------------------------------------------------


@pytest.mark.slow  # the articles' agents write a database of their own, then the sweep vacuums and reads both
def test_the_articles_agents_erased_apart_with_views_exports_and_the_physical_record_in_ours(article_agents, pg_dsn):
    """On the articles' agents' database with ours apart: an access export and a view with a purpose naming the
    customer, then the erasure (residue threads erased by decision): complete, the view's purpose redacted in ours,
    the three chains verify there, the sweep's physical step reads both databases' files and records in ours; the
    agents' copies of the cluster's tables receive nothing."""
    foreign = article_agents()
    with apart(foreign.dsn, pg_dsn) as db:
        assert written_there(db.dsn) == {}
        export = access.export(db, ARTICLE_CUSTOMER, fmt="json", lang="en", operator="dpo@example.com")
        data_views.record(
            db,
            [data_views.View("dpo@example.com", "dpo", "namespace", "clientes.C9", "C9", "ticket of C9: a claim")],
        )
        assert data_views.flush(db, 10)
        preview = evidence.preview(db, ARTICLE_CUSTOMER)
        assert preview.residue_threads and preview.counts["store"] > 0
        result = erasure.erase(
            db,
            ARTICLE_CUSTOMER,
            operator="dpo@example.com",
            decisions={t: "erase" for t in preview.residue_threads},
        )
        assert result.status == "complete", result.report
        assert result.counts_before["core_data_views.purpose"] == 1
        assert all(n == 0 for n in result.counts_after.values()), result.counts_after
        purposes = {r["purpose"] for r in data_views.views(db, ARTICLE_CUSTOMER).to_dict("records")}
        assert purposes == {f"[redacted: erasure request #{result.request_id}]"}
        for name in ("erasure", "access", "views"):
            verified = chain.verify(db, name)
            assert verified.ok and verified.links >= 1, verified
        assert access.register(db)["id"].tolist() == [export.register_id]
        settled = physical.settle(db)
        assert [s.request_id for s in settled] == [result.request_id]
        record = physical.record(db, result.request_id)
        assert record is not None and "dashboard_database" in record["files"], record
        tables = record["files"]["tables"]
        assert {"store", "checkpoint_writes", "core_store_shadow", "core_erasure_register"} <= set(tables)
        assert "agents:core_erasure_register" in tables  # the agents' copy, read as the agents' files
        assert "dashboard_database" in record["steps"]
        assert record["files"]["status"] == record["files"]["dashboard_database"]["status"] == "measured", record
        assert record["files"]["not_read"] == [], record["files"]["not_read"]
        assert written_there(db.dsn) == {}


def test_a_document_linking_a_thread_id_too_long_for_a_btree_key_does_not_stop_the_erasure(db):
    """A customer's document whose `hilo` (any text the agent wrote) is longer than a btree key admits: its thread
    cannot be tombstoned, and no checkpoint table can hold that thread either (shown with the agents' own saver). The
    erasure completes, says so, and tombstones the customer's other threads."""
    from tests.test_capture_dead_letters import noise

    long_thread = noise(3_000, 3)
    catch_up(db.dsn)
    with PostgresStore.from_conn_string(db.dsn) as store:
        store.put(("clientes", "D1"), "antes", {"texto": "antes", "hilo": "cliente-D1-1"})
        store.put(("clientes", "D1"), "largo", {"texto": "no cabe", "hilo": long_thread})
    with PostgresSaver.from_conn_string(db.dsn) as saver, pytest.raises(psycopg.errors.ProgramLimitExceeded):
        config = {"configurable": {"thread_id": long_thread, "checkpoint_ns": ""}}
        saver.put(config, {"v": 1, "id": "1", "ts": "2026-12-07T00:00:00+00:00", "channel_values": {}}, {}, {})
    catch_up(db.dsn)
    result = erasure.erase(db, "D1", operator="dpo@example.com")
    assert result.status == "complete", result.report
    assert "1 thread id(s) named by the customer's documents are longer than a btree key admits" in result.report
    assert result.counts_after["store"] == 0
    with psycopg.connect(db.dsn) as conn:
        tombstoned = [r[0] for r in conn.execute("SELECT thread_id FROM core_thread_tombstones").fetchall()]
    assert tombstoned == ["cliente-D1-1"], tombstoned
