"""Schema migrations: the store's and the checkpointer's own `setup()`, then ours.

Ours are `core/sql/NNN_name.sql`, applied in order, each in a transaction with its
row in `core_schema_migrations`. Everything runs under a PostgreSQL advisory lock,
so two dashboard processes (or a Job and a dashboard) starting at once are safe.
Run on its own for a migrations Job: `python -m core.migrate`.
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from core.config import load_settings
from core.db import CONNECT_TIMEOUT_S, resolve_dsn

log = logging.getLogger(__name__)

SQL_DIR = Path(__file__).parent / "sql"
# Arbitrary constant shared by every migrating process ("core.migrate").
MIGRATION_LOCK_ID = 0x636F7265_6D696772 & 0x7FFFFFFFFFFFFFFF

CREATE_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS core_schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
SELECT_APPLIED = "SELECT version FROM core_schema_migrations"
INSERT_APPLIED = "INSERT INTO core_schema_migrations (version, name) VALUES (%s, %s)"
SELECT_VECTOR_TYPE = """
SELECT format_type(a.atttypid, a.atttypmod) AS type
FROM pg_attribute a
WHERE a.attrelid = to_regclass('store_vectors') AND a.attname = 'embedding' AND NOT a.attisdropped"""


# ShallowPostgresSaver's tables have the same names as PostgresSaver's, with no checkpoint_id (no history).
SELECT_SHALLOW = """
SELECT to_regclass('checkpoints') IS NOT NULL AND NOT EXISTS (
    SELECT FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'checkpoints' AND column_name = 'checkpoint_id') AS shallow"""


class ShallowCheckpointSchema(RuntimeError):
    """The checkpoint tables were created by ShallowPostgresSaver: no history for the dashboard to read."""


def check_not_shallow(conn: psycopg.Connection) -> None:
    """Raise ShallowCheckpointSchema, before anything is created, on ShallowPostgresSaver's schema."""
    if conn.execute(SELECT_SHALLOW).fetchone()["shallow"]:
        raise ShallowCheckpointSchema(
            "the checkpoint tables were created by ShallowPostgresSaver (deprecated): they keep only the latest "
            "checkpoint of each thread, with no checkpoint_id, history or pending writes per step. The dashboard's "
            "checkpoint views, timeline, diff, tool-call extraction, residue scan and erasure evidence need "
            "PostgresSaver's schema; nothing was changed. Migrate the agents to PostgresSaver (langgraph's "
            "recommendation) or point the dashboard at another database.")


class EmbeddingDimsMismatch(RuntimeError):
    """The configured embedding dims differ from the existing `store_vectors` column."""


def migration_files() -> list[tuple[int, str, Path]]:
    """Our migrations in order; raises if two files share a version."""
    found: dict[int, tuple[int, str, Path]] = {}
    for path in sorted(SQL_DIR.glob("*.sql")):
        m = re.match(r"(\d+)_(.+)\.sql$", path.name)
        if not m:
            continue
        version = int(m.group(1))
        if version in found:
            raise RuntimeError(f"two migrations with version {version}: {found[version][2].name}, {path.name}")
        found[version] = (version, m.group(2), path)
    return [found[v] for v in sorted(found)]


def stored_dims(conn: psycopg.Connection) -> int | None:
    row = conn.execute(SELECT_VECTOR_TYPE).fetchone()
    if row is None:
        return None
    type_name = row["type"] if isinstance(row, dict) else row[0]
    m = re.search(r"\((\d+)\)", type_name)
    return int(m.group(1)) if m else None


def check_dims(conn: psycopg.Connection, dims: int) -> None:
    """Raise EmbeddingDimsMismatch if `store_vectors.embedding` exists with other dims."""
    existing = stored_dims(conn)
    if existing is not None and existing != dims:
        raise EmbeddingDimsMismatch(
            f"EMBEDDINGS_DIMS={dims} but store_vectors.embedding is vector({existing}): "
            f"configure the embedding model that wrote this store (dims {existing}) or re-embed it"
        )


LOCK_WAIT_S = 120


def _wait_for_lock(conn: psycopg.Connection) -> None:
    """Take the migration lock, polling. A blocking pg_advisory_lock would sit in an open
    transaction, and the checkpointer's CREATE INDEX CONCURRENTLY (run by the lock holder)
    waits for every open transaction: a deadlock."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while not conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (MIGRATION_LOCK_ID,)).fetchone()["ok"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"another process has held the migration lock for over {LOCK_WAIT_S} s")
        time.sleep(0.1)


def migrate(dsn: str, dims: int) -> list[str]:
    """Apply everything not yet applied; return the names applied now. Idempotent."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    applied_now: list[str] = []
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        _wait_for_lock(conn)
        try:
            check_dims(conn, dims)
            check_not_shallow(conn)
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            # setup() only needs the dims; the embedding function is never called here.
            build_store(conn, embeddings=OfflineHashEmbeddings(dims), dims=dims).setup()
            PostgresSaver(conn).setup()
            conn.execute(CREATE_VERSION_TABLE)
            done = {r["version"] for r in conn.execute(SELECT_APPLIED).fetchall()}
            for version, name, path in migration_files():
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(path.read_text())
                    conn.execute(INSERT_APPLIED, (version, name))
                applied_now.append(f"{version:03d}_{name}")
                log.info("applied migration %03d_%s", version, name)
            sync_serde_allowlist(conn)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
    return applied_now


DELETE_ALLOWLIST = "DELETE FROM core_serde_allowlist"
INSERT_ALLOWLIST = "INSERT INTO core_serde_allowlist (module, name, method, source) VALUES (%s, %s, %s, %s)"


def sync_serde_allowlist(conn: psycopg.Connection) -> int:
    """Rewrite `core_serde_allowlist` (migration 021) from the serializer's own allowlist
    (core.checkpoints.serde.allowlist_rows), in one transaction, on every migrate: the SQL decoder
    and the serializer refuse the same payloads. Returns the rows written."""
    from core.checkpoints.serde import allowlist_rows

    rows = allowlist_rows()
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(DELETE_ALLOWLIST)
        cur.executemany(INSERT_ALLOWLIST, rows)
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.migrate", description="Apply the store, checkpointer and dashboard migrations.")
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    settings = load_settings()
    applied = migrate(resolve_dsn(settings), settings.embeddings_dims)
    print(f"migrations applied: {len(applied)}" + (f" ({', '.join(applied)})" if applied else " (up to date)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
