"""Erasure of one customer on the real embedded PostgreSQL: store (nested namespaces, vectors,
expired rows), checkpoint threads made by real agents, our logs; look-alike ids untouched; live
writes caught; re-check after a late write; bad ids refused; erasing twice recorded."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.base import PutOp
from psycopg.types.json import Jsonb

from agent_memory_runtime import replica_health
from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database, reset_pool
from core.demo import operations as demo_operations
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import InvalidIdentifier, build_store, put_memory, ttl_for
from core.privacy import erasure, erasure_register, evidence
from tests.conftest import DIMS


@pytest.fixture
def db(create_database):
    """A migrated, empty database whose pool is closed afterwards (the session's server has a
    connection limit, and every test here opens a pool on its own database)."""
    database = Database(create_database())
    yield database
    reset_pool(database.dsn)


BIG = "C9"
LOOK_ALIKES = ["C_9", "C19", "CA9", "C%", "C9x"]
BIG_DOCS = 2_500
NESTED = 500  # of BIG_DOCS, under ("clientes", BIG, "pedidos")


def make_store(db):
    return build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)


def write_docs(store, customer: str, n: int, nested: int = 0, batch: int = 500) -> None:
    """`n` documents through the store's real batch path (vectors indexed on `texto`)."""
    ns_top, ns_nested = ("clientes", customer), ("clientes", customer, "pedidos")
    ops = []
    for i in range(n):
        ns = ns_nested if i < nested else ns_top
        ops.append(
            PutOp(
                ns,
                f"doc-{i}",
                {"texto": f"pedido {i} de {customer} en la tienda Gran Vía"},
                index=["texto"],
                ttl=ttl_for(ns),
            )
        )
    for start in range(0, len(ops), batch):
        store.batch(ops[start : start + batch])


def agents_for(db, store):
    saver = PostgresSaver(db.pool)
    return build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=saver)


def converse(agent, customer: str, n_threads: int = 1) -> list[str]:
    threads = []
    for k in range(1, n_threads + 1):
        thread_id = f"cliente-{customer}-{k}"
        run_turn(agent, ContextoCliente(customer), thread_id, "Prefiero recoger mis pedidos en la tienda Sierpes.")
        run_turn(agent, ContextoCliente(customer), thread_id, "Prefiero que me atendáis en catalán.")
        threads.append(thread_id)
    return threads


def footprint(db, customer: str) -> dict[str, int]:
    """Every row that names `customer`, counted independently of core.erasure (exact prefixes only,
    so a look-alike id is never counted as this customer)."""
    prefixes = [f"clientes.{customer}", f"clientes.{customer}.pedidos"]
    threads = [
        r["thread_id"]
        for r in db.fetch("SELECT DISTINCT thread_id FROM checkpoints WHERE metadata->>'cliente_id' = %s", (customer,))
    ]
    one = lambda q, p: db.fetch_one(q, p)["n"]  # noqa: E731
    return {
        "store": one("SELECT count(*) AS n FROM store WHERE prefix = ANY(%s)", (prefixes,)),
        "store_vectors": one("SELECT count(*) AS n FROM store_vectors WHERE prefix = ANY(%s)", (prefixes,)),
        "threads": len(threads),
        "checkpoints": one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = ANY(%s)", (threads,)),
        "checkpoint_blobs": one("SELECT count(*) AS n FROM checkpoint_blobs WHERE thread_id = ANY(%s)", (threads,)),
        "checkpoint_writes": one("SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = ANY(%s)", (threads,)),
        "core_memory_writes": one("SELECT count(*) AS n FROM core_memory_writes WHERE prefix = ANY(%s)", (prefixes,)),
        "core_conversations": one(
            "SELECT count(*) AS n FROM core_conversations WHERE subject_root = 'clientes' AND subject_id = %s",
            (customer,),
        ),
    }


def register_rows(db, customer: str) -> list[dict]:
    return db.fetch("SELECT * FROM core_erasure_register WHERE customer_id = %s ORDER BY id", (customer,))


@pytest.fixture
def populated(db):
    """C9 with 2,500 documents (500 nested, vectors, one expired) and 3 agent threads; five look-alikes
    with documents, a nested namespace and one agent thread each."""
    store = make_store(db)
    write_docs(store, BIG, BIG_DOCS - 1, nested=NESTED)
    store.batch([PutOp(("clientes", BIG), "caducado", {"texto": "caducado"}, index=["texto"], ttl=0.001)])
    agent = agents_for(db, store)
    converse(agent, BIG, n_threads=3)
    for other in LOOK_ALIKES:
        write_docs(store, other, 6, nested=2)
        converse(agent, other)
    # A thread whose conversation row is gone is still found by its checkpoint metadata.
    db.execute("DELETE FROM core_conversations WHERE thread_id = 'cliente-C9-2'")
    time.sleep(0.1)  # the "caducado" document is now expired but not swept
    return db


def test_customer_erased_completely_and_look_alikes_keep_every_row(populated):
    db = populated
    before = {c: footprint(db, c) for c in [BIG, *LOOK_ALIKES]}
    assert before[BIG]["store"] == BIG_DOCS + 2  # + pref-recogida, pref-idioma from the agent
    assert before[BIG]["store_vectors"] >= BIG_DOCS
    assert before[BIG]["threads"] == 3 and before[BIG]["checkpoints"] > 0 and before[BIG]["checkpoint_writes"] > 0
    assert all(before[c]["store"] > 0 and before[c]["checkpoints"] > 0 for c in LOOK_ALIKES)

    dry = evidence.preview(db, BIG)
    assert dry.counts["store"] == BIG_DOCS + 2
    assert dry.counts["store_vectors"] == before[BIG]["store_vectors"]
    assert dry.counts["checkpoints"] == before[BIG]["checkpoints"]
    assert dict(dry.namespaces) == {"clientes.C9": BIG_DOCS + 2 - NESTED, "clientes.C9.pedidos": NESTED}
    assert dry.thread_ids == ["cliente-C9-1", "cliente-C9-2", "cliente-C9-3"]
    assert footprint(db, BIG) == before[BIG]  # a dry run deletes nothing

    steps = []
    result = erasure.erase(db, BIG, operator="dpo@example.com", progress=steps.append)
    assert result.status == "complete", result.report
    assert result.passes == 1
    assert result.counts_before["store"] == BIG_DOCS + 2
    assert result.deleted["store"] == BIG_DOCS + 2
    assert set(result.counts_after.values()) == {0}
    assert {
        "store",
        "store_vectors",
        "checkpoints",
        "checkpoint_blobs",
        "checkpoint_writes",
        "core_memory_writes",
        "core_conversations",
    } <= set(result.counts_after)
    assert [s.step for s in steps][:2] == ["counting", "store"] and steps[-1].step == "done"

    after = footprint(db, BIG)
    assert after == dict.fromkeys(after, 0)
    # threads by id, whatever their metadata says
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id LIKE 'cliente-C9-%'")["n"] == 0
    for other in LOOK_ALIKES:
        assert footprint(db, other) == before[other], other

    # the store evidence is the seed's pair, corrected for nested namespaces, run literally
    store_q, vectors_q = result.store_evidence
    assert store_q.sql == (
        "SELECT count(*) AS n FROM store WHERE prefix = 'clientes.C9' OR prefix LIKE 'clientes.C9.%' ESCAPE '\\'"
    )
    assert vectors_q.table == "store_vectors" and "store_vectors" in vectors_q.sql
    assert store_q.result == vectors_q.result == 0
    for ev in result.evidence:  # each literal query still returns 0 when run again as shown ...
        if ev.table == "residue":  # ... but the residue's, which names its terms by reference (issue 25)
            assert ev.result == 0 and ":residue_terms" in ev.sql and "Gran Vía" not in ev.sql
            continue
        assert db.fetch_one(ev.sql)["n"] == 0, ev.sql
    assert erasure_register.recheck(db, result.request_id).clean  # which a re-check proves through the hashes

    # the register holds the request with its evidence
    (row,) = register_rows(db, BIG)
    assert row["operator"] == "dpo@example.com" and row["status"] == "complete"
    assert row["finished_at"] >= row["requested_at"]
    assert row["counts_before"]["store"] == BIG_DOCS + 2 and set(row["counts_after"].values()) == {0}
    assert row["thread_ids"] == ["cliente-C9-1", "cliente-C9-2", "cliente-C9-3"]
    assert {e["table"] for e in row["evidence"]} >= {"store", "store_vectors", "checkpoints"}

    # wildcard-like ids erase only themselves
    for wild, survivors in (("C_9", ["C19", "CA9", "C%", "C9x"]), ("C%", ["C19", "CA9", "C9x"])):
        res = erasure.erase(db, wild, operator="dpo@example.com")
        assert res.status == "complete", res.report
        assert footprint(db, wild) == dict.fromkeys(footprint(db, wild), 0)
        for other in survivors:
            assert footprint(db, other) == before[other], (wild, other)
    like_q = next(e for e in res.evidence if e.table == "store")
    assert "clientes.C\\\\%.%" in like_q.sql  # '%' escaped in the LIKE arm (E'' literal doubles the backslash)


def test_dry_run_and_erasure_of_unknown_customer_are_harmless(db):
    store = make_store(db)
    write_docs(store, "C1", 3)
    dry = evidence.preview(db, "C999")
    assert dry.total == 0 and dry.namespaces == [] and dry.thread_ids == []
    res = erasure.erase(db, "C999", operator="local")
    assert res.status == "complete" and sum(res.deleted.values()) == 0
    assert footprint(db, "C1")["store"] == 3


def test_erasing_twice_is_harmless_and_recorded(db):
    store = make_store(db)
    write_docs(store, "C7", 20, nested=5)
    converse(agents_for(db, store), "C7")
    first = erasure.erase(db, "C7", operator="dpo@example.com")
    second = erasure.erase(db, "C7", operator="otro.dpo@example.com")
    assert first.status == second.status == "complete"
    assert first.counts_before["store"] == 22 and sum(second.counts_before.values()) == 0
    assert sum(second.deleted.values()) == 0
    rows = register_rows(db, "C7")
    assert [r["operator"] for r in rows] == ["dpo@example.com", "otro.dpo@example.com"]
    assert all(r["status"] == "complete" for r in rows)
    # the second request remembers the first one's threads, so a re-check still looks for them
    assert rows[1]["thread_ids"] == ["cliente-C7-1"]
    reg = erasure_register.register(db)
    assert list(reg["customer_id"]) == ["C7", "C7"] and reg["same_day"].all()
    assert (reg["seconds_to_zero"] >= 0).all()


@pytest.mark.parametrize("bad", ["", "   ", "C.9", "C\x009", "x" * 10_000, " C9", None])
def test_unusable_ids_get_a_clear_error_and_delete_nothing(db, bad):
    store = make_store(db)
    write_docs(store, "C9", 4, nested=1)
    converse(agents_for(db, store), "C9")
    before = {c: footprint(db, c) for c in ("C9",)}
    total_rows = db.fetch_one(
        "SELECT (SELECT count(*) FROM store) + (SELECT count(*) FROM checkpoints) "
        "+ (SELECT count(*) FROM core_memory_writes) AS n"
    )["n"]
    with pytest.raises(InvalidIdentifier) as info:
        erasure.erase(db, bad, operator="dpo@example.com")
    message = str(info.value)
    assert message.startswith("customer id ") and any(
        w in message for w in ("empty", "whitespace", "'.'", "NUL", "characters long", "must be text")
    ), message
    with pytest.raises(InvalidIdentifier):
        evidence.preview(db, bad)
    assert {c: footprint(db, c) for c in ("C9",)} == before
    assert (
        db.fetch_one(
            "SELECT (SELECT count(*) FROM store) + (SELECT count(*) FROM checkpoints) "
            "+ (SELECT count(*) FROM core_memory_writes) AS n"
        )["n"]
        == total_rows
    )
    assert db.fetch_one("SELECT count(*) AS n FROM core_erasure_register")["n"] == 0


def test_operator_identity_is_required(db):
    with pytest.raises(ValueError, match="operator"):
        erasure.erase(db, "C9", operator="  ")
    assert db.fetch_one("SELECT count(*) AS n FROM core_erasure_register")["n"] == 0


class LiveWriter(threading.Thread):
    """An agent-like writer: documents (with vectors and write-log rows) for one customer, nonstop."""

    def __init__(self, db, customer: str):
        super().__init__(daemon=True)
        self.store = make_store(db)
        self.customer = customer
        self.written = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                put_memory(
                    self.store,
                    ("clientes", self.customer, "live"),
                    f"live-{self.written}",
                    {"texto": f"escritura en vivo {self.written}"},
                    thread_id=None,
                    agent="live",
                )
                self.written += 1
                time.sleep(0.005)
        except BaseException as exc:  # surfaced by the test, never swallowed
            self.error = exc

    def wait_for_write_after(self, mark: int, timeout: float = 10.0) -> None:
        """Wait until a write that *started* after `mark` writes had completed is complete: the one in
        flight at `mark` may have landed its document before the caller's moment, so wait for two."""
        deadline = time.monotonic() + timeout
        while self.written < mark + 2:
            assert time.monotonic() < deadline, "live writer stalled"
            assert self.error is None, self.error
            time.sleep(0.005)


def test_live_writer_during_erasure_is_caught(db):
    store = make_store(db)
    write_docs(store, "C5", 300)
    writer = LiveWriter(db, "C5")
    writer.start()
    writer.wait_for_write_after(0)

    def on_progress(p: erasure.Progress) -> None:
        # the writer lands at least one more document after pass 1 has emptied the store, then stops
        if p.step == "store" and p.pass_no == 1:
            writer.wait_for_write_after(writer.written)
            writer.stop.set()
            writer.join(5)

    result = erasure.erase(db, "C5", operator="dpo@example.com", progress=on_progress)
    assert writer.error is None
    assert result.status == "complete", result.report
    assert result.passes >= 2  # the late documents were caught by a second pass
    assert result.deleted["store"] == 300 + writer.written
    assert footprint(db, "C5")["store"] == 0
    assert db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix LIKE 'clientes.C5.%'")["n"] == 0
    assert db.fetch_one("SELECT count(*) AS n FROM core_memory_writes WHERE prefix LIKE 'clientes.C5%'")["n"] == 0


def test_writes_that_keep_coming_are_bounded_and_reported(db):
    writer = LiveWriter(db, "C6")
    writer.start()
    writer.wait_for_write_after(0)

    def on_progress(p: erasure.Progress) -> None:
        if p.step == "logs":  # every pass: a new write lands before its evidence is counted
            writer.wait_for_write_after(writer.written)

    try:
        result = erasure.erase(db, "C6", operator="dpo@example.com", max_passes=3, progress=on_progress)
    finally:
        writer.stop.set()
        writer.join(5)
    assert writer.error is None
    assert result.status == "incomplete" and result.passes == 3
    assert "writes kept arriving" in result.report and "store=" in result.report
    (row,) = register_rows(db, "C6")
    assert row["status"] == "incomplete" and row["report"] == result.report and row["passes"] == 3
    assert row["counts_after"]["store"] > 0

    again = erasure.erase(db, "C6", operator="dpo@example.com")  # writer stopped: now it reaches zero
    assert again.status == "complete", again.report
    assert footprint(db, "C6")["store"] == 0


def test_recheck_reports_data_that_came_back(db):
    store = make_store(db)
    agent = agents_for(db, store)
    write_docs(store, "C3", 10)
    converse(agent, "C3", n_threads=2)
    converse(agent, "C4")
    result = erasure.erase(db, "C3", operator="dpo@example.com")
    assert result.status == "complete"

    clean = erasure_register.recheck(db, result.request_id, operator="dpo@example.com")
    assert clean.clean and set(clean.counts.values()) == {0}

    # a late turn on a deleted thread recreates it (the shape of langgraph issue #7206)
    run_turn(agent, ContextoCliente("C3"), "cliente-C3-1", "Prefiero que me atendáis en euskera.")
    late = erasure_register.recheck(db, result.request_id, operator="dpo@example.com")
    assert not late.clean
    assert late.counts["checkpoints"] > 0 and late.counts["checkpoint_blobs"] + late.counts["checkpoint_writes"] > 0
    assert late.counts["store"] == 1  # pref-idioma written again by the tool
    row = register_rows(db, "C3")[0]
    assert row["last_recheck_clean"] is False and row["last_recheck_at"] == late.checked_at
    checks = erasure_register.rechecks(db, result.request_id)
    assert list(checks["clean"]) == [False, True]
    assert checks["counts"].iloc[0]["checkpoints"] == late.counts["checkpoints"]

    swept = erasure_register.recheck_all(db)  # what the sweep job calls (and logs as text)
    assert [(r.customer_id, r.clean, r.trigger) for r in swept] == [("C3", False, "sweep")]
    assert str(swept) == f"re-checked 1 erasure request(s): 0 clean, 1 with data back (request #{result.request_id})"
    assert "C3" not in str(swept)
    doc = erasure_register.evidence_document(db, result.request_id)
    assert doc["request"]["customer_id"] == "C3" and len(doc["rechecks"]) == 3
    assert "SELECT count(*) AS n FROM store WHERE prefix = 'clientes.C3'" in erasure_register.evidence_json(
        db, result.request_id
    )

    # erasing again clears what came back, including the recreated thread
    again = erasure.erase(db, "C3", operator="dpo@example.com")
    assert again.status == "complete" and again.counts_before["checkpoints"] > 0
    assert footprint(db, "C3") == dict.fromkeys(footprint(db, "C3"), 0)
    assert footprint(db, "C4")["checkpoints"] > 0
    assert [r.clean for r in erasure_register.recheck_all(db)] == [True]
    with pytest.raises(erasure.ErasureError):
        erasure_register.recheck(db, 999_999)


def test_our_other_tables_naming_the_customer_are_erased_too(db):
    """Guard denials, denials inside degradation episodes, retention samples in the sweep log, and a
    table added later (found by its columns) lose what names the customer, and only that."""
    db.execute("CREATE TABLE core_customer_notes (customer_id text, note text)")
    store = make_store(db)
    agent = agents_for(db, store)
    (thread,) = converse(agent, "C2")
    converse(agent, "C20")
    # Written as the dual saver writes them on recovery: one episode with its denials.
    now = datetime.now(UTC)
    rows = [
        {
            "tool": "recordar_preferencia",
            "risk": "HIGH",
            "thread_id": thread,
            "subject_root": "clientes",
            "subject_id": "C2",
            "customer_id": "C2",
            "reason": "degraded",
            "denied_at": now,
        },
        {
            "tool": "recordar_preferencia",
            "risk": "HIGH",
            "thread_id": "cliente-C20-1",
            "subject_root": "clientes",
            "subject_id": "C20",
            "customer_id": "C20",
            "reason": "degraded",
            "denied_at": now,
        },
        {
            "tool": "publicar_aviso",
            "risk": "HIGH",
            "thread_id": "compras-P001-retraso",
            "subject_root": "proveedores",
            "subject_id": "C2",
            "customer_id": None,
            "reason": "degraded",
            "denied_at": now,
        },
    ]
    with db.connection() as conn:
        replica_health.write_episode(
            conn,
            replica_health.Episode(
                replica_id="r1",
                host="h",
                pid=1,
                degraded_from=now,
                degraded_to=now,
                reason="test",
                checkpoints_buffered=0,
                writes_buffered=0,
                ops_resynced=0,
                resync_ms=1.0,
                denials=rows,
            ),
        )
    denials = [
        {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in r.items() if k != "reason"} for r in rows
    ]
    db.execute(
        """INSERT INTO core_sweep_log (trigger, host, status, threads_sample)
                  VALUES ('scheduled', 'h', 'ok', %s)""",
        (Jsonb(["cliente-C20-1", thread, "personal-E001"]),),
    )
    db.execute("INSERT INTO core_customer_notes VALUES ('C2', 'x'), ('C20', 'y')")

    dry = evidence.preview(db, "C2")
    assert dry.counts["core_guard_denials"] == 1 and dry.counts["core_customer_notes"] == 1
    assert dry.counts["core_degradation_episodes.denials"] == 1 and dry.counts["core_sweep_log.threads_sample"] == 1
    result = erasure.erase(db, "C2", operator="dpo@example.com")
    assert result.status == "complete", result.report
    for name in (
        "core_guard_denials",
        "core_customer_notes",
        "core_degradation_episodes.denials",
        "core_sweep_log.threads_sample",
    ):
        assert result.deleted[name] == 1 and result.counts_after[name] == 0, name
    # the supplier's denial that happens to carry subject_id C2 is not the customer's
    assert [r["customer_id"] for r in db.fetch("SELECT customer_id FROM core_guard_denials ORDER BY id")] == [
        "C20",
        None,
    ]
    assert db.fetch_one("SELECT denials FROM core_degradation_episodes")["denials"] == denials[1:]
    assert db.fetch_one("SELECT threads_sample FROM core_sweep_log")["threads_sample"] == [
        "cliente-C20-1",
        "personal-E001",
    ]
    assert db.fetch_one("SELECT customer_id FROM core_customer_notes")["customer_id"] == "C20"


def test_a_failure_midway_is_recorded_as_failed_and_raised(db):
    """A real database error during the erasure (a trigger refusing the delete) is not swallowed."""
    store = make_store(db)
    write_docs(store, "C8", 10)
    converse(agents_for(db, store), "C8")
    db.execute("""CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                  BEGIN RAISE EXCEPTION 'conversations are on legal hold'; END $$""")
    db.execute("CREATE TRIGGER hold BEFORE DELETE ON core_conversations FOR EACH ROW EXECUTE FUNCTION refuse()")
    with pytest.raises(Exception, match="legal hold"):
        erasure.erase(db, "C8", operator="dpo@example.com")
    (row,) = register_rows(db, "C8")
    assert row["status"] == "failed" and "legal hold" in row["report"] and row["finished_at"] is not None
    assert row["deleted"]["store"] == 12  # what was done before the failure is on record
    # issue 16 finding 9: the sweep's re-check no longer skips a failed request; it finds what is left
    (check,) = erasure_register.recheck_all(db)
    assert check.request_id == row["id"] and not check.clean and check.counts["core_conversations"] > 0


def test_demo_step_erases_one_customer_for_real(db):
    store = make_store(db)
    agent = agents_for(db, store)
    for c in ("C1", "C2", "C3"):
        converse(agent, c)
    result = demo_operations.erase_demo_customer(db, exclude=["C1"])  # the longest silent after C1
    assert result is not None and result.customer_id == "C2" and result.status == "complete"
    assert result.operator == "demo" and footprint(db, "C2")["store"] == 0
    assert footprint(db, "C1")["store"] > 0 and footprint(db, "C3")["store"] > 0


def test_the_storage_summary_loses_the_customers_threads(db):
    """core_thread_storage (sweep-refreshed sizes per thread, with the customer id) is erased too."""
    from core.storage.storage import refresh_thread_storage

    agent = agents_for(db, make_store(db))
    mine, other = converse(agent, "C9", 2), converse(agent, "C19")
    assert refresh_thread_storage(db) == 3
    result = erasure.erase(db, "C9", operator="dpo@example.com")
    assert result.status == "complete", result.report
    assert result.deleted["core_thread_storage"] == 2 and result.counts_after["core_thread_storage"] == 0
    left = [r["thread_id"] for r in db.fetch("SELECT thread_id FROM core_thread_storage ORDER BY thread_id")]
    assert left == other and not set(mine) & set(left)
