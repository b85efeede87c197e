"""Helpers of the tests of the dashboard's own database (issue 52): what a table of a database was written, its rows,
and frames compared. One copy for every cluster's tests."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import pandas as pd
import psycopg

from core.capture.follower import drop_slot
from core.db import Database, forget_dashboard_database, reset_pool, use_dashboard_database
from core.migrate import PLACEHOLDER_ROWS
from tests.conftest import migrated_dashboard

SELECT_TOUCHED = """
SELECT relname, n_tup_ins + n_tup_upd + n_tup_del AS written, n_live_tup
FROM pg_stat_user_tables WHERE relname = ANY(%s) ORDER BY relname"""
OTHER_SESSIONS = """
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend'"""


def written_there(dsn: str, tables: Iterable[str]) -> dict[str, int]:
    """Rows inserted, updated or deleted in `tables` of `dsn` since the database was made, with the rows they hold
    now (each table must exist there). The statistics are flushed first: this process's pooled sessions on `dsn` are
    closed (a backend flushes its counts when it exits, otherwise at most once a second) and awaited gone, then a new
    session forces its own; the rows held are counted, not estimated (but for the migrations' placeholders)."""
    tables = list(tables)
    reset_pool(dsn)
    deadline = time.monotonic() + 10
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline and conn.execute(OTHER_SESSIONS).fetchone()[0]:  # type: ignore[index]
            time.sleep(0.1)
        conn.execute("SELECT pg_stat_force_next_flush()")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(SELECT_TOUCHED, (tables,)).fetchall()
        held = {  # the migrations' own placeholder rows (the extraction's initial watermark) are nobody's writes
            t: conn.execute(f'SELECT count(*) FROM "{t}" WHERE NOT ({PLACEHOLDER_ROWS.get(t, "false")})').fetchone()[0]  # type: ignore[index]
            for t in tables
        }
    assert len(rows) == len(tables), rows
    return {name: written + live + held[name] for name, written, live in rows if written + live + held[name]}


def contents(dsn: str, tables: Iterable[str], volatile: Iterable[str] = ()) -> dict[str, list[str]]:
    """Every row of `tables` in `dsn` as sorted JSON, without the `volatile` columns (the times of the writes)."""
    drop = "".join(f" - '{c}'" for c in volatile)
    with psycopg.connect(dsn) as conn:
        return {
            t: sorted(json.dumps(r[0], sort_keys=True) for r in conn.execute(f'SELECT to_jsonb(x){drop} FROM "{t}" x'))
            for t in tables
        }


def frames_equal(a: pd.DataFrame, b: pd.DataFrame, drop: tuple[str, ...] = ()) -> None:
    a, b = a.drop(columns=list(drop)), b.drop(columns=list(drop))
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))


def dbname(dsn: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])


def copy_of(pg_dsn: str, source: str, prefix: str) -> str:
    """A new database on `pg_dsn`'s server made from `source` as a template."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{dbname(source)}"')
    return psycopg.conninfo.make_conninfo(pg_dsn, dbname=name)


@contextmanager
def two_layouts(pg_dsn: str, written: str, tag: str) -> Iterator[tuple[str, str, str]]:
    """The same agents' rows twice: `default` (ours is the agents' database) and `split` with its own dashboard
    database `ours`, migrated from core/sql/dashboard/. Yields (default, split, ours) DSNs."""
    default = copy_of(pg_dsn, written, f"{tag}default")
    split = copy_of(pg_dsn, written, f"{tag}split")
    ours = psycopg.conninfo.make_conninfo(pg_dsn, dbname=dbname(split) + "_dashboard")
    use_dashboard_database(split, ours)
    migrated_dashboard(ours)
    try:
        yield default, split, ours
    finally:
        for dsn in (default, split, ours):
            Database(dsn).close()
        forget_dashboard_database(split)
        for dsn in (default, split):
            with contextlib.suppress(psycopg.Error):
                drop_slot(dsn)
