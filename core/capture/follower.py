"""The change follower: reads the agents' changes from a logical slot (pgoutput) and keeps our aggregates.

First aggregate moved: documents per store prefix (`core_capture_prefix_counts`, the follower's twin of
`core_prefix_counts`, which the store triggers still keep until the migration drops them).

Exactly once: each batch is applied in one transaction together with the commit LSN it reached
(`core_capture_position`); the slot is advanced only after that commit. A restart skips every transaction
whose commit LSN is at or below the stored position (killed between commit and advance), and a batch killed
before its commit is simply decoded again (the slot was not advanced).
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from dataclasses import dataclass

import psycopg

from core.capture import pgoutput

AGENT_TABLES = ("store", "store_vectors", "checkpoints", "checkpoint_blobs", "checkpoint_writes")
PUBLICATION = "core_capture"
# Test hook: pause (sleep long) at a named point so a test can SIGKILL the process there.
PAUSE_ENV = "CORE_CAPTURE_PAUSE_AT"  # "after_apply" (committed, slot not advanced) | "mid_batch" (inside the txn)

SCHEMA = """
CREATE TABLE IF NOT EXISTS core_capture_position (
    slot_name text PRIMARY KEY,
    lsn       pg_lsn NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS core_capture_prefix_counts (
    prefix    text PRIMARY KEY,
    documents bigint NOT NULL
);
"""


class CaptureNotAllowed(RuntimeError):
    """Logical decoding cannot be set up here; the message says what is missing."""


def slot_name_for(dbname: str) -> str:
    """Slots are cluster-wide: one per database, named after it."""
    return ("core_capture_" + re.sub(r"[^a-z0-9_]", "_", dbname.lower()))[:63]


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def _pause(point: str) -> None:
    if os.environ.get(PAUSE_ENV) == point:
        marker = os.environ.get(PAUSE_ENV + "_FILE")
        if marker:
            with open(marker, "w") as f:
                f.write(point)
        time.sleep(3600)


@dataclass
class BatchResult:
    transactions: int
    changes: int
    position: int | None


class Follower:
    def __init__(self, dsn: str, *, slot: str | None = None, batch_changes: int = 10_000) -> None:
        self.dsn = dsn
        self.batch_changes = batch_changes
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT current_database()").fetchone()
            assert row is not None
            self.slot = slot or slot_name_for(row[0])

    # --- setup -----------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Create (idempotently) our tables, the publication (as the tables' owner only) and the slot."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            level = conn.execute("SHOW wal_level").fetchone()
            if level is None or level[0] != "logical":
                raise CaptureNotAllowed(f"wal_level is {level[0] if level else '?'}; logical decoding needs logical")
            conn.execute(SCHEMA)
            self._publish(conn)
            has_slot = conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)).fetchone()
            if not has_slot:
                try:
                    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,))
                except psycopg.errors.InsufficientPrivilege as exc:
                    raise CaptureNotAllowed(f"creating the slot needs the REPLICATION attribute: {exc}") from exc
                except psycopg.errors.DuplicateObject:
                    pass
                # A new slot starts now: recount what is already there, at the slot's start.
                self._recount(conn)

    def _publish(self, conn: psycopg.Connection) -> None:
        """The publication covers whichever of the five tables exist (a saver's tables may come later)."""
        existing = [
            r[0]
            for r in conn.execute(
                "SELECT c.relname, pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c"
                " WHERE c.relname = ANY(%s) AND c.relkind IN ('r', 'p') AND c.relnamespace = 'public'::regnamespace",
                (list(AGENT_TABLES),),
            ).fetchall()
        ]
        published = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_publication_tables WHERE pubname = %s AND schemaname = 'public'",
                (PUBLICATION,),
            ).fetchall()
        }
        has_pub = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (PUBLICATION,)).fetchone()
        missing = [t for t in existing if t not in published]
        if has_pub and not missing:
            return
        owned = conn.execute(
            "SELECT relname FROM pg_class WHERE relname = ANY(%s) AND relnamespace = 'public'::regnamespace"
            " AND NOT pg_has_role(current_user, relowner, 'USAGE')",
            (missing or list(AGENT_TABLES),),
        ).fetchall()
        if owned:
            raise CaptureNotAllowed(
                "creating or extending the publication needs the owner of the agents' tables; "
                f"{current_user(conn)} does not own {', '.join(r[0] for r in owned)}: run the migrations as the owner"
            )
        tables = ", ".join(f"public.{t}" for t in missing)
        if not has_pub:
            conn.execute(f"CREATE PUBLICATION {PUBLICATION}" + (f" FOR TABLE {tables}" if tables else ""))
        elif missing:
            conn.execute(f"ALTER PUBLICATION {PUBLICATION} ADD TABLE {tables}")

    def _recount(self, conn: psycopg.Connection) -> None:
        """Rebuild the aggregate from the table, positioned at the slot's confirmed LSN.

        Only exact while no writes run between slot creation and this recount; the upgrade migration will take
        the slot's snapshot (a replication connection's EXPORT_SNAPSHOT) instead (see docs/capture-plan.md)."""
        with conn.transaction():
            conn.execute("DELETE FROM core_capture_prefix_counts")
            conn.execute("INSERT INTO core_capture_prefix_counts SELECT prefix, count(*) FROM store GROUP BY prefix")
            conn.execute(
                "INSERT INTO core_capture_position (slot_name, lsn) SELECT slot_name, confirmed_flush_lsn"
                " FROM pg_replication_slots WHERE slot_name = %s"
                " ON CONFLICT (slot_name) DO UPDATE SET lsn = EXCLUDED.lsn, applied_at = now()",
                (self.slot,),
            )

    # --- one batch ---------------------------------------------------------------------------------------
    def run_once(self, conn: psycopg.Connection | None = None) -> BatchResult:
        if conn is None:
            # autocommit: `conn.transaction()` below is then a real BEGIN ... COMMIT, not a savepoint.
            with psycopg.connect(self.dsn, autocommit=True) as own:
                return self.run_once(own)
        row = conn.execute("SELECT lsn::text FROM core_capture_position WHERE slot_name = %s", (self.slot,)).fetchone()
        applied = _lsn(row[0]) if row else 0
        rows = conn.execute(
            "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s,"
            " 'proto_version', '1', 'publication_names', %s)",
            (self.slot, self.batch_changes, PUBLICATION),
        ).fetchall()
        relations: dict[int, pgoutput.Relation] = {}
        delta: Counter[str] = Counter()
        truncated = False
        pending: Counter[str] = Counter()
        pending_truncate = False
        reached: int | None = None
        txns = changes = 0
        for lsn_text, data in rows:
            msg = pgoutput.decode(data)
            if isinstance(msg, pgoutput.Relation):
                relations[msg.oid] = msg
            elif isinstance(msg, pgoutput.Begin):
                pending, pending_truncate = Counter(), False
            elif isinstance(msg, pgoutput.Commit):
                end = _lsn(lsn_text)
                if end > applied:  # else applied before a kill that came before the slot's advance
                    if pending_truncate:
                        delta, truncated = Counter(), True
                    delta.update(pending)
                    txns += 1
                reached = end
            else:
                changes += 1
                pending_truncate = self._change(msg, relations, pending) or pending_truncate
        if reached is None or reached <= applied:
            if reached is not None:
                self._advance(conn, reached)
            return BatchResult(0, 0, applied or None)
        with conn.transaction():
            if truncated:
                conn.execute("DELETE FROM core_capture_prefix_counts")
            items = sorted((p, n) for p, n in delta.items() if n)
            if items:
                conn.cursor().executemany(
                    "INSERT INTO core_capture_prefix_counts AS c (prefix, documents) VALUES (%s, %s)"
                    " ON CONFLICT (prefix) DO UPDATE SET documents = c.documents + EXCLUDED.documents",
                    items,
                )
                conn.execute("DELETE FROM core_capture_prefix_counts WHERE documents <= 0")
            _pause("mid_batch")
            conn.execute(
                "INSERT INTO core_capture_position (slot_name, lsn) VALUES (%s, %s::pg_lsn)"
                " ON CONFLICT (slot_name) DO UPDATE SET lsn = EXCLUDED.lsn, applied_at = now()",
                (self.slot, _lsn_text(reached)),
            )
        _pause("after_apply")
        self._advance(conn, reached)
        return BatchResult(txns, changes, reached)

    def _advance(self, conn: psycopg.Connection, lsn: int) -> None:
        conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, _lsn_text(lsn)))

    @staticmethod
    def _change(msg: pgoutput.Message, relations: dict[int, pgoutput.Relation], pending: Counter[str]) -> bool:
        """Fold one change into `pending`; True for a TRUNCATE of store."""
        if isinstance(msg, pgoutput.Truncate):
            hit = any(relations[o].name == "store" for o in msg.oids if o in relations)
            if hit:
                pending.clear()  # what this transaction inserted before the TRUNCATE is gone too
            return hit
        oid = getattr(msg, "oid", None)
        rel = relations.get(oid) if oid is not None else None
        if rel is None or rel.name != "store":
            return False
        i = rel.columns.index("prefix")
        if isinstance(msg, pgoutput.Insert):
            pending[str(msg.new[i])] += 1
        elif isinstance(msg, pgoutput.Delete):
            pending[str(msg.old[i])] -= 1
        elif isinstance(msg, pgoutput.Update) and msg.old is not None:  # key changed (never by langgraph)
            pending[str(msg.old[i])] -= 1
            pending[str(msg.new[i])] += 1
        return False

    def run(self, *, idle_sleep: float = 0.2, stop_after_idle: float | None = None) -> None:
        idle_since = time.monotonic()
        conn = psycopg.connect(self.dsn, autocommit=True)  # one backend for the follower's life
        while True:
            result = self.run_once(conn)
            if result.transactions:
                idle_since = time.monotonic()
            else:
                if stop_after_idle is not None and time.monotonic() - idle_since > stop_after_idle:
                    return
                time.sleep(idle_sleep)


def current_user(conn: psycopg.Connection) -> str:
    row = conn.execute("SELECT current_user").fetchone()
    return str(row[0]) if row else "?"


if __name__ == "__main__":
    import sys

    f = Follower(sys.argv[1])
    f.setup()
    f.run()
