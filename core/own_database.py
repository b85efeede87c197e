"""Upgrade in place (issue 52 item 6): move what the dashboard keeps from the agents' database to its own.

`python -m core.own_database --dry-run` lists what would move; without `--dry-run` it moves it. Run it with the
dashboard's processes stopped (pages, sweep job, change follower; the agents keep writing: nothing of theirs moves)
and `PG_DASHBOARD` set to the dashboard's database. Downgrading is not supported: once the old tables are dropped,
an older release finds none of them.

What moves is what core/sql/dashboard/ creates (its files are read, so a dry run changes nothing anywhere):
- the change follower's state (core/sql/dashboard/001_capture.sql) is **recounted**, never copied: the follower
  recounts into ours in its slot's snapshot (or the recount mode where no slot is possible), and the agents' copies
  are dropped once every aggregate equals a recount of the agents' rows (`capture.verify.differences`);
- every other table of ours present in the agents' database is **copied** in one transaction of ours, triggers off
  (`session_replication_role = replica`: the registers' seals and the rollups' triggers do not fire again, the copied
  chain rows are the ones sealed), identity sequences set past the highest id, then verified: each table's row count
  and the sum of its rows' hashes equal on both sides, and every register's hash chain verifies in ours
  (`privacy.chain.verify`); only then are the agents' copies dropped, with the functions, views and types of ours;
- the agents' own tables (`AGENTS_OWN`: written by the agents' side) never move; where ours keeps a mirror of one,
  the follower's recount fills it.

Each step can be run again after a crash: a table of ours that already holds exactly the agents' rows is not copied
again, one that holds other rows stops the move (nothing dropped) and names the table."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psycopg
from psycopg import sql
from psycopg.rows import DictRow, dict_row

from core.db import CONNECT_TIMEOUT_S, Database, dashboard_dsn_for, describe_dsn, resolve_dsn
from core.migrate import AGENTS_OWN, declared, holds, left_with_rows, migrate_dashboard

# Functions both sides have: the agents' database keeps its own (the canonical views' decoders use it).
SHARED_FUNCTIONS = frozenset({"core_try_timestamptz"})
RECOUNTED_FILE = "001_capture.sql"  # the change follower's state: rebuilt by its recount, never copied
LOCK_TIMEOUT = "10s"

SELECT_TABLES = """
SELECT c.relname AS name, c.reltuples::bigint AS estimate, pg_total_relation_size(c.oid) AS bytes
FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
  AND c.relname = ANY(%s)"""
SELECT_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname = ANY(%s) ORDER BY 1"""
SELECT_VIEWS = """
SELECT c.relname AS name FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'v' AND c.relname = ANY(%s) ORDER BY 1"""
SELECT_TYPES = """
SELECT t.typname AS name FROM pg_type t JOIN pg_class c ON c.oid = t.typrelid
WHERE t.typnamespace = current_schema()::regnamespace AND c.relkind = 'c' AND t.typname = ANY(%s) ORDER BY 1"""
SELECT_COLUMNS = """
SELECT a.attname AS name FROM pg_attribute a
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
ORDER BY a.attnum"""
SELECT_IDENTITIES = """
SELECT a.attname AS name, pg_get_serial_sequence(%s, a.attname) AS seq FROM pg_attribute a
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
  AND pg_get_serial_sequence(%s, a.attname) IS NOT NULL"""
SELECT_LOCK_HOLDERS = """
SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (
    SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((classid::bigint << 32) | objid::bigint) = ANY(%s) AND granted"""


class MoveRefused(RuntimeError):
    """The move cannot start or go on: the message says why; nothing was dropped from the agents' database."""


@dataclass(frozen=True)
class TableMove:
    table: str
    action: str  # "copy" | "recount"
    rows: int  # exact in the agents' database (copy), an estimate (recount)
    bytes: int


@dataclass
class MovePlan:
    agents: str  # described, never with a password
    ours: str
    tables: list[TableMove] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)  # signatures dropped from the agents' database
    views: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    mirrors: list[str] = field(default_factory=list)  # agents' own tables ours keeps a copy of (recounted)
    chains: dict[str, str] = field(default_factory=dict)  # register chain -> "intact, N rows" (after a move)

    def lines(self) -> list[str]:
        """What the plan says, a line each, for a person."""
        out = [f"agents' database: {self.agents}", f"dashboard's database: {self.ours}"]
        if not self.tables:
            out.append("nothing of ours left in the agents' database: nothing to move")
        for m in self.tables:
            rows = f"{m.rows} rows" + (" (estimate)" if m.action != "copy" else "")
            how = "copied, then verified" if m.action == "copy" else "recounted by the change follower in ours"
            out.append(f"  {m.table}: {rows}, {m.bytes / 1_048_576:.1f} MB: {how}, then dropped")
        for name in self.mirrors:
            out.append(f"  {name}: stays (the agents' own); ours keeps a mirror the follower's recount fills")
        for kind, names in (("function", self.functions), ("view", self.views), ("type", self.types)):
            out += [f"  {kind} {n}: dropped from the agents' database" for n in names]
        out += [f"  chain {c}: {state}" for c, state in self.chains.items()]
        return out


def _connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection[DictRow]:
    conn = psycopg.connect(dsn, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S, autocommit=autocommit)
    conn.execute("SET TimeZone = 'UTC'")  # rows hashed as text read alike on both sides
    return conn


def plan(agents_dsn: str, ours_dsn: str | None = None) -> MovePlan:
    """What a move would do now; reads the agents' catalog only (and their row counts), changes nothing."""
    ours_dsn = ours_dsn or dashboard_dsn_for(agents_dsn)
    if ours_dsn == agents_dsn:
        raise MoveRefused("PG_DASHBOARD is not set (or names the agents' database): there is nowhere to move to")
    found = declared()
    result = MovePlan(describe_dsn(agents_dsn), describe_dsn(ours_dsn))
    with _connect(agents_dsn) as conn:
        candidates = sorted(set(found["table"]) - AGENTS_OWN)
        present = {r["name"]: r for r in conn.execute(SELECT_TABLES, (candidates,)).fetchall()}
        for name in candidates:
            if name not in present:
                continue
            recounted = found["table"][name] == RECOUNTED_FILE
            rows = (
                present[name]["estimate"]
                if recounted
                else conn.execute(sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier(name))).fetchone()["n"]  # type: ignore[index]
            )
            result.tables.append(
                TableMove(name, "recount" if recounted else "copy", max(rows, 0), present[name]["bytes"])
            )
        result.mirrors = sorted(set(found["table"]) & AGENTS_OWN - {"core_schema_migrations"})
        names = sorted(set(found["function"]) - SHARED_FUNCTIONS)
        result.functions = [r["signature"] for r in conn.execute(SELECT_FUNCTIONS, (names,)).fetchall()]
        result.views = [r["name"] for r in conn.execute(SELECT_VIEWS, (sorted(found["view"]),)).fetchall()]
        result.types = [r["name"] for r in conn.execute(SELECT_TYPES, (sorted(found["type"]),)).fetchall()]
    return result


def _refuse_while_running(conns: Iterable[psycopg.Connection[DictRow]]) -> None:
    """The dashboard's processes must be stopped: refuse while one holds the follower's or the sweep's lock."""
    from core.capture.follower import FOLLOWER_LOCK
    from core.operations.sweep import SWEEP_LOCK_ID

    keys = [FOLLOWER_LOCK, SWEEP_LOCK_ID]
    for conn in conns:
        held = conn.execute(SELECT_LOCK_HOLDERS, (keys,)).fetchone()
        if held and held["n"]:
            raise MoveRefused(
                f"a change follower or a sweep is running on {conn.info.dbname}: stop the dashboard's processes"
                " (pages, sweep job, follower) and run the move again"
            )


def _signature(conn: psycopg.Connection[DictRow], table: str, columns: list[str]) -> tuple[int, int]:
    """(rows, sum of the rows' hashes) of `table` over `columns`, read the same way on either database."""
    row = conn.execute(
        sql.SQL("SELECT count(*) AS n, coalesce(sum(hashtextextended(ROW({})::text, 0)), 0) AS h FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(table)
        )
    ).fetchone()
    assert row is not None
    return int(row["n"]), int(row["h"])


def _columns(conn: psycopg.Connection[DictRow], table: str) -> list[str]:
    return [r["name"] for r in conn.execute(SELECT_COLUMNS, (table,)).fetchall()]


def _copy(src: psycopg.Connection[DictRow], dst: psycopg.Connection[DictRow], table: str, columns: list[str]) -> None:
    cols = sql.SQL(", ").join(map(sql.Identifier, columns))
    out = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT (FORMAT binary)").format(cols, sql.Identifier(table))
    into = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT binary)").format(sql.Identifier(table), cols)
    with src.cursor().copy(out) as reader, dst.cursor().copy(into) as writer:
        for chunk in reader:
            writer.write(chunk)
    for ident in dst.execute(SELECT_IDENTITIES, (table, table, table)).fetchall():
        dst.execute(
            sql.SQL("SELECT setval(%s, greatest(coalesce(max({}), 0), 1), max({}) IS NOT NULL) FROM {}").format(
                sql.Identifier(ident["name"]), sql.Identifier(ident["name"]), sql.Identifier(table)
            ),
            (ident["seq"],),
        )


def _recount(agents_dsn: str, log: Callable[[str], None]) -> None:
    """The follower's state, rebuilt in ours from the agents' rows, and checked equal to a recount."""
    from core.capture.follower import CaptureNotAllowed, catch_up
    from core.capture.recount import recount_without_slot
    from core.capture.verify import differences

    try:
        catch_up(agents_dsn, timeout=3600)
        log("the change follower recounted into the dashboard's database from its slot")
    except CaptureNotAllowed as exc:
        recount_without_slot(agents_dsn)
        log(f"no slot possible ({exc}): recounted without one")
    diff = differences(agents_dsn)
    if diff:
        raise MoveRefused(f"the follower's recount in ours differs from the agents' rows: {sorted(diff)}")


def move(agents_dsn: str, ours_dsn: str | None = None, *, log: Callable[[str], None] = print) -> MovePlan:
    """Move everything of ours out of the agents' database (see the module's docstring); return what was done."""
    ours_dsn = ours_dsn or dashboard_dsn_for(agents_dsn)
    if dashboard_dsn_for(agents_dsn) != ours_dsn:
        raise MoveRefused("the dashboard's database given is not the one registered for these agents (PG_DASHBOARD)")
    migrate_dashboard(ours_dsn)
    with _connect(agents_dsn) as a, _connect(ours_dsn) as o:
        _refuse_while_running((a, o))
    todo = plan(agents_dsn, ours_dsn)
    if any(m.action == "recount" for m in todo.tables) or todo.mirrors:
        _recount(agents_dsn, log)
    copies = [m.table for m in todo.tables if m.action == "copy"]
    with _connect(agents_dsn, autocommit=False) as src, _connect(ours_dsn) as dst:
        # the agents' transaction holds the old tables (writes wait) until they are dropped or the move stops
        src.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        for m in todo.tables:
            src.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(sql.Identifier(m.table)))
        with dst.transaction():  # committed before the chains are verified (by other connections)
            dst.execute("SET LOCAL session_replication_role = replica")  # no trigger fires on copied rows
            for table in copies:
                columns = [c for c in _columns(src, table) if c in set(_columns(dst, table))]
                theirs = _signature(src, table, columns)
                mine = _signature(dst, table, columns)
                if mine == theirs or not holds(src, table):  # theirs has nothing to lose (a new install's copy)
                    log(f"{table}: nothing to copy ({mine[0]} rows in the dashboard's database)")
                    continue
                if mine[0] and not holds(dst, table):  # ours holds only the migrations' placeholders: replaced
                    dst.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
                elif mine[0]:
                    raise MoveRefused(
                        f"{table} holds other rows in the dashboard's database ({mine[0]} there, {theirs[0]} in the"
                        " agents'): nothing was dropped; compare the two and empty ours' copy to move again"
                    )
                _copy(src, dst, table, columns)
                if _signature(dst, table, columns) != theirs:
                    raise MoveRefused(f"{table}: the copy differs from the agents' rows; nothing was dropped")
                log(f"{table}: {theirs[0]} rows copied and verified")
        todo.chains = _verify_chains(agents_dsn, src, copies)
        drops = [sql.SQL("DROP VIEW {}").format(sql.Identifier(v)) for v in todo.views]
        if todo.tables:
            tables = sql.SQL(", ").join(sql.Identifier(m.table) for m in todo.tables)
            drops.append(sql.SQL("DROP TABLE {}").format(tables))
        drops += [sql.SQL("DROP FUNCTION {}").format(sql.SQL(f)) for f in todo.functions]
        drops += [sql.SQL("DROP TYPE {}").format(sql.Identifier(t)) for t in todo.types]
        for statement in drops:
            src.execute(statement)
        src.commit()
    log(
        f"dropped from the agents' database: {len(todo.tables)} tables, {len(todo.views)} views,"
        f" {len(todo.functions)} functions, {len(todo.types)} types"
    )
    return todo


SELECT_HEAD = "SELECT row_hash FROM core_register_chain WHERE chain = %s ORDER BY position DESC LIMIT 1"


def _verify_chains(agents_dsn: str, src: psycopg.Connection[DictRow], copied: list[str]) -> dict[str, str]:
    """Every register chain whose tables were copied, recomputed in ours (`privacy.chain.verify`) and its head equal
    to the agents' copy's head (read in `src`, before the drop); MoveRefused when either fails."""
    from core.privacy import chain

    out: dict[str, str] = {}
    if "core_register_chain" not in copied:
        return out
    db = Database(agents_dsn)  # its `ours` is the dashboard's database registered for it
    try:
        for name in chain.CHAINS:
            result = chain.verify(db, name)
            head = src.execute(SELECT_HEAD, (name,)).fetchone()
            theirs = head["row_hash"] if head else ""
            if not result.ok or (theirs and result.head_hash != theirs):  # theirs empty: ours is its own chain
                why = result.detail or f"its head {result.head_hash[:16]} is not the agents' {theirs[:16]}"
                raise MoveRefused(
                    f"register chain {name!r} does not verify in the dashboard's database ({why}): nothing was dropped"
                )
            out[name] = f"intact in the dashboard's database, {result.links} links, head {result.head_hash[:16]}"
    finally:
        db.ours.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m core.own_database",
        description="Move what the dashboard keeps from the agents' database to its own (PG_DASHBOARD). Stop the "
        "dashboard's processes first. Downgrading is not supported.",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would move; change nothing")
    args = parser.parse_args(argv)
    from core.config import load_settings

    settings = load_settings()
    agents = resolve_dsn(settings)
    try:
        result = plan(agents) if args.dry_run else move(agents)
    except (MoveRefused, psycopg.Error) as exc:
        print(f"move refused: {exc}", file=sys.stderr)
        return 2
    for line in result.lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["AGENTS_OWN", "MovePlan", "MoveRefused", "TableMove", "declared", "left_with_rows", "main", "move", "plan"]
