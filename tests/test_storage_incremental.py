"""The sweep's storage refresh is incremental (issue 27): the detail (bytes per channel and per step, orphans) is
recomputed only for the threads whose rows changed since the last refresh. Every figure it keeps equals a full
recomputation at the same snapshot, after agent writes, prunes, erasures (tombstoned threads), deletions of whole
threads, orphans made by hand and changes that leave every count and size as they were; on databases written by our
agents and by the article's agents; and two refreshes at once count nothing twice. Real agents, real PostgreSQL."""

from __future__ import annotations

import threading

import psycopg
from foreign_agents import Conversation, run_conversations, thread_id_for
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row
from test_storage_batches import KEYS, turns
from test_storage_detail import KNOWN, app_knows, write

from core.db import Database
from core.history import tool_calls
from core.privacy import erasure
from core.storage import prune, storage, storage_detail

# Every figure the refresh keeps (the Storage view reads these, and only these), each in a stable order; the
# refresh's own time and duration left out.
FIGURES = {
    "summary": "SELECT thread_id, cliente_id, checkpoints, checkpoint_bytes, blobs, blob_bytes, writes, write_bytes, "
    "total_bytes, last_ts, metadata_keys, known, fingerprint FROM core_thread_storage ORDER BY thread_id",
    "channels": "SELECT * FROM core_channel_storage ORDER BY thread_id, channel",
    "growth": "SELECT * FROM core_thread_growth ORDER BY thread_id",
    "orphans": "SELECT * FROM core_thread_orphans ORDER BY thread_id",
    "refresh": "SELECT metadata_keys, threads, checkpoints, blobs, writes, batches, batch_rows, orphan_blobs, "
    "orphan_blob_bytes, orphan_writes, orphan_write_bytes, unknown_threads, unknown_thread_bytes, "
    "unknown_threads_error FROM core_thread_storage_refresh",
    # the page's own reads of them
    "channel_totals": storage_detail.SELECT_CHANNEL_TOTALS,
    "growing": storage_detail.SELECT_GROWING.replace("%s", "1000"),
    "unknown_list": storage_detail.SELECT_UNKNOWN_THREADS.replace("%s", "1000"),
    "table_rows": "SELECT table_name, rows FROM (" + storage.SELECT_KEPT_TABLE_TOTALS + ") t",
}
BATCH_ROWS = 7  # many batches: thread ranges cut inside the data

# The reference for the rewritten detail: the statements the refresh ran before (git 32ce943), which expanded every
# checkpoint's channel_versions twice (growth, then orphans), read per thread over the whole database.
OLD_STEPS = """
WITH c AS MATERIALIZED (
    SELECT thread_id, checkpoint_ns, checkpoint_id, metadata ->> 'step' AS step,
           checkpoint -> 'channel_versions' AS versions,
           lag(checkpoint -> 'channel_versions') OVER (PARTITION BY thread_id, checkpoint_ns ORDER BY checkpoint_id)
               AS previous,
           pg_column_size(checkpoint) + pg_column_size(metadata) AS checkpoint_bytes
    FROM checkpoints
), blobs AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, sum(coalesce(octet_length(b.blob), 0)) AS bytes
    FROM c
    CROSS JOIN LATERAL jsonb_each_text(coalesce(c.versions, '{}')) AS e(channel, version)
    JOIN checkpoint_blobs b ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
                           AND b.channel = e.channel AND b.version = e.version
    WHERE c.previous ->> e.channel IS DISTINCT FROM e.version
    GROUP BY 1, 2, 3
), w AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, sum(coalesce(octet_length(blob), 0)) AS bytes
    FROM checkpoint_writes GROUP BY 1, 2, 3
), steps AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.step,
           row_number() OVER (PARTITION BY c.thread_id ORDER BY c.checkpoint_id) AS n,
           c.checkpoint_bytes, coalesce(b.bytes, 0) AS blob_bytes, coalesce(w.bytes, 0) AS write_bytes
    FROM c
    LEFT JOIN blobs b USING (thread_id, checkpoint_ns, checkpoint_id)
    LEFT JOIN w USING (thread_id, checkpoint_ns, checkpoint_id)
)"""
OLD_GROWTH = (
    OLD_STEPS
    + f"""
SELECT thread_id, count(*)::integer AS steps, sum(bytes)::bigint AS bytes, (array_agg(bytes ORDER BY n))[1] AS
       first_step_bytes, (array_agg(bytes ORDER BY n DESC))[1] AS last_step_bytes, regr_slope(bytes, n) AS slope,
       coalesce(count(*) >= {storage_detail.MIN_STEPS} AND regr_slope(bytes, n) * count(*) > avg(bytes), false)
           AS superlinear
FROM (SELECT thread_id, n, checkpoint_bytes + blob_bytes + write_bytes AS bytes FROM steps) s
GROUP BY thread_id ORDER BY thread_id"""
)
OLD_STEP_ROWS = (
    OLD_STEPS
    + """
SELECT n, checkpoint_ns, checkpoint_id, step, checkpoint_bytes, blob_bytes, write_bytes FROM steps
WHERE thread_id = %s ORDER BY n"""
)
OLD_ORPHANS = """
WITH refs AS (
    SELECT DISTINCT thread_id, checkpoint_ns, e.key AS channel, e.value AS version
    FROM checkpoints CROSS JOIN LATERAL jsonb_each_text(coalesce(checkpoint -> 'channel_versions', '{}')) e
), b AS (
    SELECT x.thread_id, count(*) AS blobs, sum(x.bytes) AS blob_bytes
    FROM (SELECT thread_id, checkpoint_ns, channel, version, coalesce(octet_length(blob), 0) AS bytes
          FROM checkpoint_blobs) x
    LEFT JOIN refs r USING (thread_id, checkpoint_ns, channel, version)
    WHERE r.thread_id IS NULL
    GROUP BY x.thread_id
), w AS (
    SELECT thread_id, count(*) AS writes, sum(coalesce(octet_length(w.blob), 0)) AS write_bytes
    FROM checkpoint_writes w
    WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id
                      AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)
    GROUP BY thread_id
)
SELECT thread_id, coalesce(b.blobs, 0) AS blobs, coalesce(b.blob_bytes, 0) AS blob_bytes, coalesce(w.writes, 0) AS
       writes, coalesce(w.write_bytes, 0) AS write_bytes
FROM b FULL JOIN w USING (thread_id) ORDER BY thread_id"""


def figures(conn: psycopg.Connection) -> dict[str, list[dict]]:
    return {name: conn.execute(sql).fetchall() for name, sql in FIGURES.items()}


class Refresher:
    """Refreshes a database incrementally, as the sweep does, and checks each refresh against a full recomputation
    made on the same data (in a transaction rolled back, so the incremental chain never starts from a full one)."""

    def __init__(self, db: Database, known_query: str | None = None):
        self.db, self.known_query = db, known_query

    def refresh(self) -> storage.StorageRefresh:
        with self.db.connection() as conn:
            with conn.transaction():
                done = storage.refresh_storage_conn(conn, KEYS, BATCH_ROWS, known_query=self.known_query)
            kept = figures(conn)
            with conn.transaction(force_rollback=True):
                full = storage.refresh_storage_conn(conn, KEYS, BATCH_ROWS, known_query=self.known_query, full=True)
                reference = figures(conn)
        assert full.detailed == full.threads == done.threads
        for name in FIGURES:
            assert kept[name] == reference[name], name
        return done

    def expect(self, detailed: set[str] | int) -> storage.StorageRefresh:
        """Refresh; the threads whose detail it recomputed are `detailed` (how many, or which: a set of thread ids
        whose fingerprints differ from the last refresh's)."""
        before = self.fingerprints()
        done = self.refresh()
        after = self.fingerprints()
        changed = {t for t in before.keys() | after.keys() if t in after and before.get(t) != after[t]}
        if isinstance(detailed, int):
            assert done.detailed == len(changed) == detailed, (done.detailed, changed)
        else:
            assert changed == detailed and done.detailed == len(detailed), (changed, detailed)
        return done

    def fingerprints(self) -> dict[str, object]:
        return {
            r["thread_id"]: r["fingerprint"]
            for r in self.db.fetch("SELECT thread_id, fingerprint FROM core_thread_storage", read_only=False)
        }


def threads(db: Database) -> int:
    return db.fetch_one(
        "SELECT count(DISTINCT thread_id) AS n FROM (SELECT thread_id FROM checkpoints UNION ALL "
        "SELECT thread_id FROM checkpoint_blobs UNION ALL SELECT thread_id FROM checkpoint_writes) t"
    )["n"]


def test_incremental_refresh_equals_a_full_one_after_every_kind_of_change(db):
    write(db)  # growing threads, a DeltaChannel graph, our agents' conversations, an orphan blob and write
    unknown = app_knows(db)
    r = Refresher(db, KNOWN)
    first = r.expect(threads(db))  # the first refresh computes every thread
    assert first.threads == threads(db) and storage_detail.orphans(db)["blobs"] == 1
    assert storage_detail.unknown_threads(db)["threads"] == len(unknown)
    r.expect(set())  # nothing changed: no detail recomputed, every figure the same

    # Agent writes: a new turn in a thread, a new thread.
    turns(db, {"cliente-C1-1": "C1", "cliente-C8-1": "C8"})
    r.expect({"cliente-C1-1", "cliente-C8-1"})

    # The application forgets a thread: no checkpoint row changed, the summary's `known` still follows.
    (forgotten,) = db.fetch(
        "DELETE FROM hilos_app WHERE thread_id = (SELECT min(thread_id) FROM hilos_app "
        "WHERE thread_id LIKE 'cliente-%') RETURNING thread_id",
        read_only=False,
    )
    r.expect(set())
    assert forgotten["thread_id"] in {t["thread_id"] for t in db.fetch(FIGURES["unknown_list"])}

    # History pruning (the sweep's step, after its extraction): older checkpoints, their writes and blobs deleted in
    # live threads.
    tool_calls.extract(db)
    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn:
        pruned = prune.prune_history(conn, prune.validate_policy(3))
    assert pruned.threads
    r.expect({t.thread_id for t in pruned.threads})

    # An erasure: the customer's threads deleted and tombstoned, and our rows naming them (summary and detail).
    erased = erasure.erase(db, "C3", operator="dpo@example.com")
    assert erased.status == "complete", erased.report
    assert db.fetch("SELECT thread_id FROM core_thread_tombstones") == [{"thread_id": "cliente-C3-1"}]
    r.expect(set())
    assert "cliente-C3-1" not in {t["thread_id"] for t in db.fetch(FIGURES["summary"])}

    # A whole thread deleted by the saver (retention), and one by hand from the checkpoints table only.
    PostgresSaver(db.pool).delete_thread("cliente-C2-1")
    db.execute("DELETE FROM checkpoints WHERE thread_id = 'compras-P1-retraso'")
    r.expect({"compras-P1-retraso"})

    # Orphans made by hand: a blob no checkpoint references, the latest checkpoint of a thread gone with its writes
    # left behind.
    def thread_orphans(thread: str) -> dict:
        return db.fetch_one("SELECT blobs, writes FROM core_thread_orphans WHERE thread_id = %s", (thread,)) or {
            "blobs": 0,
            "writes": 0,
        }

    delta, personal = thread_orphans("delta"), thread_orphans("personal-E1")
    db.execute(
        "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
        "VALUES ('delta', '', 'items', '99.huérfano', 'msgpack', '\\x0102'::bytea)"
    )
    assert (
        db.execute(
            "DELETE FROM checkpoints WHERE thread_id = 'personal-E1' AND checkpoint_id = (SELECT "
            "max(checkpoint_id) FROM checkpoint_writes WHERE thread_id = 'personal-E1')"
        )
        == 1
    )
    r.expect({"delta", "personal-E1"})
    assert thread_orphans("delta") == {"blobs": delta["blobs"] + 1, "writes": delta["writes"]}
    assert thread_orphans("personal-E1")["writes"] > personal["writes"]

    # A change no count or size shows: a referenced blob's version renamed (same length). The thread's rows, blobs
    # and bytes are the same; its orphans and growth per step are not.
    sizes = db.fetch_one(
        "SELECT checkpoints, blobs, blob_bytes, writes, total_bytes FROM core_thread_storage "
        "WHERE thread_id = 'cuadratico'"
    )
    orphans_before = storage_detail.orphans(db)["blobs"]
    assert (
        db.execute(
            "UPDATE checkpoint_blobs SET version = overlay(version PLACING 'z' FROM 1 FOR 1) "
            "WHERE thread_id = 'cuadratico' AND channel = 'history' AND version = (SELECT max(version) "
            "FROM checkpoint_blobs WHERE thread_id = 'cuadratico' AND channel = 'history')"
        )
        == 1
    )
    r.expect({"cuadratico"})
    assert (
        db.fetch_one(
            "SELECT checkpoints, blobs, blob_bytes, writes, total_bytes FROM core_thread_storage "
            "WHERE thread_id = 'cuadratico'"
        )
        == sizes
    )
    assert storage_detail.orphans(db)["blobs"] == orphans_before + 1

    # Every thread gone: nothing left anywhere.
    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
        db.execute(f"DELETE FROM {table}")
    done = r.expect(set())
    assert done.threads == 0
    for table in ("core_thread_storage", "core_channel_storage", "core_thread_growth", "core_thread_orphans"):
        assert db.fetch_one(f"SELECT count(*) AS n FROM {table}")["n"] == 0, table
    assert storage_detail.orphans(db)["blobs"] == storage_detail.orphans(db)["writes"] == 0


def test_a_summary_row_gone_without_its_detail_is_recomputed(db):
    """An erasure deletes core_thread_storage's rows by customer id too (the detail tables have none): a thread whose
    summary row went while its checkpoints and detail stayed is recomputed, never left with stale detail."""
    write(db)
    r = Refresher(db)
    r.refresh()
    db.execute("DELETE FROM core_thread_storage WHERE thread_id = 'cliente-C1-1'")
    db.execute("UPDATE core_thread_growth SET bytes = bytes + 1 WHERE thread_id = 'cliente-C1-1'")
    r.expect(1)


def test_on_the_article_agents_database(article_agents):
    """Stock savers, no metadata, `conv-<uuid>` threads: more conversations, a thread deleted, by-hand orphans."""
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        r = Refresher(db)
        r.expect(threads(db))
        r.expect(set())
        (chat,) = foreign.threads_of("C9", "chat")
        new = Conversation(thread_id_for("incremental/C9/chat/2"), "C9", "chat")
        run_conversations(foreign.dsn, [Conversation(chat, "C9", "chat"), new])
        r.expect({chat, new.thread_id})
        write_thread = foreign.threads_of("C9", "write")[0]
        with PostgresSaver.from_conn_string(foreign.dsn) as saver:
            saver.delete_thread(write_thread)
        db.execute(
            "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_id = (SELECT min(checkpoint_id) "
            "FROM checkpoints WHERE thread_id = %s)",
            (chat, chat),
        )
        r.expect({chat})
        tool_calls.extract(db)  # as the sweep does before it prunes
        with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn:
            pruned = prune.prune_history(conn, prune.validate_policy(2))
        r.expect({t.thread_id for t in pruned.threads})
    finally:
        db.close()


def test_two_refreshes_at_once_count_nothing_twice(db):
    """Two sweeps refreshing at once: the second waits for the first, then reads its rows (its snapshot is taken
    after the lock): it recomputes only what an agent wrote meanwhile, and every total is the full recomputation's."""
    write(db)
    r = Refresher(db)
    r.refresh()
    second: dict = {}

    def refresh_too() -> None:
        try:
            with db.connection() as conn, conn.transaction():
                second["done"] = storage.refresh_storage_conn(conn, KEYS, BATCH_ROWS)
        except Exception as exc:  # noqa: BLE001 (reported by the assertion below)
            second["error"] = exc

    other = threading.Thread(target=refresh_too)

    def between_batches(batch: int, hi: str | None) -> None:
        if batch == 1:
            turns(db, {"cliente-C1-1": "C1"})  # after the first refresh's snapshot
            other.start()
            deadline = 100
            while not db.fetch_one(
                "SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND relation = 'core_thread_storage'::regclass"
            )["n"]:
                deadline -= 1
                assert deadline, "the second refresh never waited for the first"
                threading.Event().wait(0.05)

    with db.connection() as conn, conn.transaction():
        first = storage.refresh_storage_conn(conn, KEYS, BATCH_ROWS, on_batch=between_batches)
    other.join(60)
    assert "error" not in second, second
    assert first.detailed == 0  # its snapshot: before the agent's turn
    assert second["done"].detailed == 1 and second["done"].threads == first.threads  # the turn, nothing else
    r.expect(set())  # and a full recomputation agrees with every figure the two kept
    assert storage_detail.orphans(db)["blobs"] == 1 and storage_detail.orphans(db)["writes"] == 1


def same_detail_as_before(db: Database) -> None:
    """The refresh's growth and orphans per thread, and one thread's steps read live, equal the old statements'."""
    storage.refresh_thread_storage(db, KEYS, batch_rows=BATCH_ROWS, known_query=None, full=True)
    assert db.fetch(FIGURES["growth"], read_only=False) == db.fetch(OLD_GROWTH, read_only=False)
    old_orphans = db.fetch(OLD_ORPHANS, read_only=False)
    assert db.fetch(FIGURES["orphans"], read_only=False) == old_orphans
    for thread in [r["thread_id"] for r in db.fetch("SELECT DISTINCT thread_id FROM checkpoints")]:
        live = storage_detail.thread_steps(db, thread).drop(columns=["bytes", "cumulative"])
        assert live.to_dict("records") == db.fetch(OLD_STEP_ROWS, (thread,), read_only=False), thread


def test_the_detail_equals_the_statements_it_replaced(db, article_agents):
    """Growth per step and orphans, now from one expansion of each checkpoint's versions, are those of the two
    statements before, on our agents' threads (growing, DeltaChannel, orphans by hand, a pruned history, checkpoints
    gone from the middle of a thread) and on the article agents' database."""
    write(db)
    same_detail_as_before(db)
    tool_calls.extract(db)  # as the sweep does before it prunes
    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn:
        assert prune.prune_history(conn, prune.validate_policy(4)).threads
    db.execute(
        "DELETE FROM checkpoints WHERE thread_id = 'cuadratico' AND checkpoint_id IN (SELECT checkpoint_id FROM "
        "checkpoints WHERE thread_id = 'cuadratico' ORDER BY checkpoint_id LIMIT 2)"
    )
    assert db.fetch_one("SELECT count(*) AS n FROM core_thread_orphans", read_only=False)["n"] >= 1
    same_detail_as_before(db)
    assert db.fetch_one("SELECT sum(blobs) AS n FROM core_thread_orphans", read_only=False)["n"] > 1
    foreign = Database(article_agents().dsn)
    try:
        same_detail_as_before(foreign)
    finally:
        foreign.close()
