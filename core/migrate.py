"""Schema migrations: the store's and the checkpointer's own `setup()`, then ours.

Ours are `core/sql/NNN_name.sql`, applied in order, each in a transaction with its
row in `core_schema_migrations` (version, name, the sha256 of the file's text). Everything runs under a
PostgreSQL advisory lock, so two dashboard processes (or a Job and a dashboard) starting at once are safe.
Run on its own for a migrations Job: `python -m core.migrate`.

Before anything is changed, the applied rows are checked against the files (as Flyway's validate does):
an applied file edited since, a version the files do not have, or a row applied before checksums were
kept whose file is none of the texts that file had in this repository's history (`HISTORY.sha256`) stop
the run with MigrationMismatch naming each file. A fix to an applied migration is a new migration.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.rows import DictRow, dict_row

from core.config import load_settings
from core.db import CONNECT_TIMEOUT_S, dashboard_dsn_for, one, resolve_dsn

log = logging.getLogger(__name__)

SQL_DIR = Path(__file__).parent / "sql"
# The dashboard's own database's migrations (issue 52): applied where PG_DASHBOARD points, when it is not the agents'.
DASHBOARD_SQL_DIR = SQL_DIR / "dashboard"
# In SQL_DIR: every text each migration file had in this repository's history before checksums were kept.
HISTORY_NAME = "HISTORY.sha256"
# Arbitrary constant shared by every migrating process ("core.migrate").
MIGRATION_LOCK_ID = 0x636F7265_6D696772 & 0x7FFFFFFFFFFFFFFF

CREATE_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS core_schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
# Tables created before checksums were kept get the columns here. sha256: the file's text as applied;
# sha256_backfilled_at: set on a row applied before, whose sha256 is the file's text when it was recorded.
ADD_CHECKSUM_COLUMNS = """
ALTER TABLE core_schema_migrations ADD COLUMN IF NOT EXISTS sha256 text,
                                   ADD COLUMN IF NOT EXISTS sha256_backfilled_at timestamptz"""
VERSION_TABLE_EXISTS = "SELECT to_regclass('core_schema_migrations') IS NOT NULL AS present"
# to_jsonb: a row read the same way whether or not the table has the checksum columns yet
SELECT_APPLIED = "SELECT to_jsonb(m) AS row FROM core_schema_migrations m ORDER BY version"
INSERT_APPLIED = "INSERT INTO core_schema_migrations (version, name, sha256) VALUES (%s, %s, %s)"
BACKFILL_CHECKSUM = """
UPDATE core_schema_migrations SET sha256 = %s, sha256_backfilled_at = now() WHERE version = %s AND sha256 IS NULL"""
SELECT_VECTOR_TYPE = """
SELECT format_type(a.atttypid, a.atttypmod) AS type
FROM pg_attribute a
WHERE a.attrelid = to_regclass('store_vectors') AND a.attname = 'embedding' AND NOT a.attisdropped"""


class SchemaMismatch(RuntimeError):
    """The database is not the one this code's schema expects; the message says why and what to do."""


# ShallowPostgresSaver's tables have the same names as PostgresSaver's, with no checkpoint_id (no history).
SELECT_SHALLOW = """
SELECT to_regclass('checkpoints') IS NOT NULL AND NOT EXISTS (
    SELECT FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'checkpoints' AND column_name = 'checkpoint_id') AS
    shallow"""


class ShallowCheckpointSchema(SchemaMismatch):
    """The checkpoint tables were created by ShallowPostgresSaver: no history for the dashboard to read."""


def check_not_shallow(conn: psycopg.Connection[DictRow]) -> None:
    """Raise ShallowCheckpointSchema, before anything is created, on ShallowPostgresSaver's schema."""
    if one(conn.execute(SELECT_SHALLOW).fetchone())["shallow"]:
        raise ShallowCheckpointSchema(
            "the checkpoint tables were created by ShallowPostgresSaver (deprecated): they keep only the latest "
            "checkpoint of each thread, with no checkpoint_id, history or pending writes per step. The dashboard's "
            "checkpoint views, timeline, diff, tool-call extraction, residue scan and erasure evidence need "
            "PostgresSaver's schema; nothing was changed. Migrate the agents to PostgresSaver (langgraph's "
            "recommendation) or point the dashboard at another database."
        )


class EmbeddingDimsMismatch(SchemaMismatch):
    """The configured embedding dims differ from the existing `store_vectors` column."""


class NotMoved(SchemaMismatch):
    """PG_DASHBOARD is set but the dashboard's tables are still in the agents' database (no upgrade in place yet)."""


class MigrationMismatch(SchemaMismatch):
    """The applied migrations differ from core/sql's files (each problem names its file)."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def label(self) -> str:
        return f"{self.version:03d}_{self.name}"

    @cached_property
    def sha256(self) -> str:
        """sha256 of the file's bytes (as git stores them)."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def migration_files(sql_dir: Path = SQL_DIR) -> list[Migration]:
    """Our migrations in order; raises if two files share a version."""
    found: dict[int, Migration] = {}
    for path in sorted(sql_dir.glob("*.sql")):
        m = re.match(r"(\d+)_(.+)\.sql$", path.name)
        if not m:
            continue
        version = int(m.group(1))
        if version in found:
            raise RuntimeError(f"two migrations with version {version}: {found[version].path.name}, {path.name}")
        found[version] = Migration(version, m.group(2), path)
    return [found[v] for v in sorted(found)]


def released_checksums(sql_dir: Path = SQL_DIR) -> dict[str, frozenset[str]]:
    """File name -> the sha256 of every text it had in this repository's history (`HISTORY.sha256`)."""
    texts: dict[str, set[str]] = {}
    for line in (sql_dir / HISTORY_NAME).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            sha, name = line.split()
            texts.setdefault(name, set()).add(sha)
    return {name: frozenset(shas) for name, shas in texts.items()}


def check_applied(
    conn: psycopg.Connection[DictRow], files: list[Migration], *, pending_ok: bool, sql_dir: Path = SQL_DIR
) -> list[Migration]:
    """Compare the database's applied migrations with `files`; return those applied before checksums were
    kept (to record). Raises MigrationMismatch naming every file that differs: edited after it was applied,
    renamed, unknown to this code, a pre-checksum row whose file is no text in HISTORY.sha256, and (unless
    `pending_ok`) not applied yet. Reads only."""
    if not one(conn.execute(VERSION_TABLE_EXISTS).fetchone())["present"]:
        applied = []
    else:
        applied = [r["row"] for r in conn.execute(SELECT_APPLIED).fetchall()]
    by_version = {m.version: m for m in files}
    released = released_checksums(sql_dir)
    problems, legacy = [], []
    for row in applied:
        recorded = f"{row['version']:03d}_{row['name']}.sql"
        m = by_version.get(row["version"])
        if m is None:
            problems.append(
                f"{recorded}: the database applied migration {row['version']}, which core/sql does not "
                f"have: it was migrated by a newer release; run that release or a later one"
            )
        elif m.name != row["name"]:
            problems.append(
                f"{recorded}: the database applied it under that name, core/sql has {m.path.name} "
                f"instead: restore the released file name"
            )
        elif row.get("sha256") is None:
            if m.sha256 in released.get(m.path.name, ()):
                legacy.append(m)
            else:
                problems.append(
                    f"{m.path.name}: applied before checksums were kept, and its text (sha256 "
                    f"{m.sha256[:12]}) is none of the texts it had in this repository "
                    f"({HISTORY_NAME}): restore the released text and put the change in a new migration"
                )
        elif row["sha256"] != m.sha256:
            problems.append(
                f"{m.path.name} was edited after it was applied (applied sha256 {row['sha256'][:12]}, "
                f"the file now {m.sha256[:12]}): restore the applied text and put the change in a new "
                f"migration"
            )
    if not pending_ok:
        done = {row["version"] for row in applied}
        problems += [
            f"{m.path.name} is not applied yet: run `python -m core.migrate` (the migrations Job) first"
            for m in files
            if m.version not in done
        ]
    if problems:
        raise MigrationMismatch(
            "the database's migrations do not match core/sql; nothing was changed:\n"
            + "\n".join(f"- {p}" for p in problems)
        )
    return legacy


# --- what the dashboard's own database holds (issue 52): read by the start check below and by the upgrade in place
# (core/own_database.py)
# Written by the agents' side (their library, their tools, the erasure's tombstones): they stay where they are
# (docs/own-database-plan.md, section 1).
AGENTS_OWN = frozenset(
    {
        "core_memory_writes",
        "core_conversations",
        "core_replica_heartbeat",
        "core_degradation_episodes",
        "core_guard_denials",
        "core_serde_refusals",
        "core_checkpoint_dead_letters",
        "core_replayed_operations",
        "core_thread_tombstones",
        "core_serde_allowlist",
        "core_schema_migrations",
    }
)
# Rows the migrations themselves write (the extraction's initial watermark, nothing extracted yet): a copy holding only
# such rows holds nothing to keep.
PLACEHOLDER_ROWS = {"core_extract_watermark": "ts = '' AND thread_id = ''"}
CREATE_RE = re.compile(
    r"^CREATE\s+(?:OR\s+REPLACE\s+)?(?P<kind>UNLOGGED\s+TABLE|TABLE|FUNCTION|VIEW|TYPE)\s+(?:public\.)?(?P<name>\w+)",
    re.IGNORECASE | re.MULTILINE,
)
SELECT_PRESENT = """
SELECT c.relname AS name FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND c.relname = ANY(%s)"""


def declared(sql_dir: Path = DASHBOARD_SQL_DIR) -> dict[str, dict[str, str]]:
    """Kind ("table", "function", "view", "type") -> {name: file} of everything core/sql/dashboard/ creates."""
    out: dict[str, dict[str, str]] = {"table": {}, "function": {}, "view": {}, "type": {}}
    for path in sorted(sql_dir.glob("*.sql")):
        for m in CREATE_RE.finditer(path.read_text()):
            kind = m["kind"].split()[-1].lower()
            out[kind].setdefault(m["name"], path.name)
    return out


def holds(conn: psycopg.Connection[DictRow], table: str) -> bool:
    """Whether `table` holds a row worth keeping (any row but the migrations' own placeholders, PLACEHOLDER_ROWS)."""
    placeholder = sql.SQL(PLACEHOLDER_ROWS.get(table, "false"))
    query = sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE NOT ({})) AS held").format(
        sql.Identifier(table), placeholder
    )
    return bool(one(conn.execute(query).fetchone())["held"])


def left_with_rows(agents_dsn: str) -> list[str]:
    """The tables of ours (core/sql/dashboard/ declares them) still in the agents' database and holding rows: what a
    start with the dashboard's database apart would not see (empty ones, left by the agents'-side history of a new
    install, hide nothing; nor do the migrations' own placeholder rows). One `EXISTS` per table, no count."""
    names = sorted(set(declared()["table"]) - AGENTS_OWN)
    with psycopg.connect(agents_dsn, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
        present = [r["name"] for r in conn.execute(SELECT_PRESENT, (names,)).fetchall()]
        return [name for name in sorted(present) if holds(conn, name)]


def check_schema(dsn: str, dims: int, sql_dir: Path = SQL_DIR) -> None:
    """What a start without AUTO_MIGRATE checks, reading only: the embedding dims, ShallowPostgresSaver's schema
    (named, rather than as migrations never applied) and that every migration is applied with the text of its
    file; with the dashboard's database apart, its migrations too and that nothing of ours is left in the agents'.
    Raises EmbeddingDimsMismatch, ShallowCheckpointSchema, MigrationMismatch or NotMoved."""
    with psycopg.connect(dsn, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        check_dims(conn, dims)
        check_not_shallow(conn)
        check_applied(conn, migration_files(sql_dir), pending_ok=False, sql_dir=sql_dir)
    ours = dashboard_dsn_for(dsn)
    if ours != dsn and sql_dir == SQL_DIR:
        with psycopg.connect(ours, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            files = migration_files(DASHBOARD_SQL_DIR)
            check_applied(conn, files, pending_ok=False, sql_dir=DASHBOARD_SQL_DIR)
        left = left_with_rows(dsn)
        if left:
            raise NotMoved(
                f"the agents' database still holds rows in {len(left)} of the dashboard's tables ({', '.join(left[:3])}"
                "...): with PG_DASHBOARD set they are read from the dashboard's database, where they would be missing."
                " Stop the dashboard's processes and run the upgrade in place: `python -m core.own_database"
                " --dry-run`, then without --dry-run"
            )


def stored_dims(conn: psycopg.Connection[DictRow]) -> int | None:
    row = conn.execute(SELECT_VECTOR_TYPE).fetchone()
    if row is None:
        return None
    type_name = row["type"] if isinstance(row, dict) else row[0]
    m = re.search(r"\((\d+)\)", type_name)
    return int(m.group(1)) if m else None


def check_dims(conn: psycopg.Connection[DictRow], dims: int) -> None:
    """Raise EmbeddingDimsMismatch if `store_vectors.embedding` exists with other dims."""
    existing = stored_dims(conn)
    if existing is not None and existing != dims:
        raise EmbeddingDimsMismatch(
            f"EMBEDDINGS_DIMS={dims} but store_vectors.embedding is vector({existing}): "
            f"configure the embedding model that wrote this store (dims {existing}) or re-embed it"
        )


LOCK_WAIT_S = 120


def _wait_for_lock(conn: psycopg.Connection[DictRow]) -> None:
    """Take the migration lock, polling. A blocking pg_advisory_lock would sit in an open
    transaction, and the checkpointer's CREATE INDEX CONCURRENTLY (run by the lock holder)
    waits for every open transaction: a deadlock."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while not one(conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (MIGRATION_LOCK_ID,)).fetchone())["ok"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"another process has held the migration lock for over {LOCK_WAIT_S} s")
        time.sleep(0.1)


def migrate(dsn: str, dims: int, sql_dir: Path = SQL_DIR) -> list[str]:
    """Apply everything not yet applied; return the names applied now. Idempotent. Raises
    EmbeddingDimsMismatch or MigrationMismatch (see check_applied) before changing anything."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    applied_now: list[str] = []
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        _wait_for_lock(conn)
        try:
            check_dims(conn, dims)
            check_not_shallow(conn)
            files = migration_files(sql_dir)
            legacy = check_applied(conn, files, pending_ok=True, sql_dir=sql_dir)
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            # setup() only needs the dims; the embedding function is never called here.
            build_store(conn, embeddings=OfflineHashEmbeddings(dims), dims=dims).setup()
            PostgresSaver(conn).setup()
            applied_now += _apply(conn, files, legacy)
            sync_serde_allowlist(conn)
            repair_register(conn)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
    ours = dashboard_dsn_for(dsn)
    if ours != dsn:
        applied_now += migrate_dashboard(ours)
    return applied_now


def migrate_dashboard(dsn: str, sql_dir: Path = DASHBOARD_SQL_DIR) -> list[str]:
    """Apply the dashboard database's own migrations (core/sql/dashboard/, issue 52) to `dsn`, creating the database
    first when it is missing and this role may; return the names applied now (labelled `dashboard/NNN_name`)."""
    _create_database(dsn)
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        _wait_for_lock(conn)
        try:
            files = migration_files(sql_dir)
            legacy = check_applied(conn, files, pending_ok=True, sql_dir=sql_dir)
            return [f"dashboard/{label}" for label in _apply(conn, files, legacy)]
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))


def _create_database(dsn: str) -> None:
    """CREATE DATABASE for `dsn` when it does not exist (connected to the server's `postgres` database)."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    name = str(info.get("dbname") or "")
    try:
        psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S).close()
        return
    except psycopg.OperationalError as exc:
        if "does not exist" not in str(exc) or not name:
            raise
    maintenance = psycopg.conninfo.make_conninfo(dsn, dbname="postgres")
    with psycopg.connect(maintenance, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.DuplicateDatabase:
            pass  # another process created it meanwhile
        log.info("created the dashboard's database %s", name)


def _apply(conn: psycopg.Connection[DictRow], files: list[Migration], legacy: list[Migration]) -> list[str]:
    """Record the legacy rows' checksums, then apply each file not applied yet in its own transaction."""
    applied_now = []
    with conn.transaction():
        conn.execute(CREATE_VERSION_TABLE)
        conn.execute(ADD_CHECKSUM_COLUMNS)
        for m in legacy:
            conn.execute(BACKFILL_CHECKSUM, (m.sha256, m.version))
    done = {r["row"]["version"] for r in conn.execute(SELECT_APPLIED).fetchall()}
    for m in files:
        if m.version in done:
            continue
        with conn.transaction():
            conn.execute(m.path.read_text())
            conn.execute(INSERT_APPLIED, (m.version, m.name, m.sha256))
        applied_now.append(m.label)
        log.info("applied migration %s", m.label)
    return applied_now


DELETE_ALLOWLIST = "DELETE FROM core_serde_allowlist"
INSERT_ALLOWLIST = "INSERT INTO core_serde_allowlist (module, name, method, source) VALUES (%s, %s, %s, %s)"


def sync_serde_allowlist(conn: psycopg.Connection[DictRow]) -> int:
    """Rewrite `core_serde_allowlist` (migration 021) from the serializer's own allowlist
    (agent_memory_runtime.serde.allowlist_rows), in one transaction, on every migrate: the SQL decoder
    and the serializer refuse the same payloads. Returns the rows written."""
    from agent_memory_runtime.serde import allowlist_rows

    rows = allowlist_rows()
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(DELETE_ALLOWLIST)
        cur.executemany(INSERT_ALLOWLIST, rows)
    return len(rows)


def repair_register(conn: psycopg.Connection[DictRow]) -> int:
    """Migration 056's data step (Python, not SQL: the terms' token hashes are computed as the token index computes
    them): erasure requests written before it lose the values they kept (core.privacy.redaction). Idempotent."""
    from core.privacy.redaction import redact_register

    return redact_register(conn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m core.migrate", description="Apply the store, checkpointer and dashboard migrations."
    )
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    settings = load_settings()
    try:
        applied = migrate(resolve_dsn(settings), settings.embeddings_dims)
    except SchemaMismatch as exc:
        print(f"python -m core.migrate: {exc}", file=sys.stderr)
        return 2
    print(f"migrations applied: {len(applied)}" + (f" ({', '.join(applied)})" if applied else " (up to date)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
