"""The connection pool and timeouts the agents' savers and the dashboard share (core.db takes them from here):
autocommit, dict rows, `prepare_threshold=0` (safe behind PgBouncer) and short timeouts, so a dead database is
reported in seconds."""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

CONNECT_TIMEOUT_S = 2
POOL_TIMEOUT_S = 3
# What every connection of ours is opened with (a pool's kwargs, or psycopg.connect's keywords).
CONNECTION_KWARGS: dict[str, Any] = {
    "autocommit": True,
    "prepare_threshold": 0,
    "row_factory": dict_row,
    "connect_timeout": CONNECT_TIMEOUT_S,
}

T = TypeVar("T")


def make_pool(
    dsn: str,
    *,
    max_size: int = 8,
    name: str = "core",
    min_size: int = 1,
    timeout: float = POOL_TIMEOUT_S,
    check: bool = False,
) -> ConnectionPool[psycopg.Connection[DictRow]]:
    """A new, opened pool. Opening does not wait: a dead server shows up at first use. With `check`, a connection
    the server dropped (a restart) is replaced when taken instead of failing the read it is handed to (one round trip
    per access; not for the agents' savers, whose watchdog cuts a call blocked on a hung server, not a check)."""
    pool = ConnectionPool(
        conninfo=dsn,
        connection_class=psycopg.Connection[DictRow],  # typed dict rows, as row_factory below
        min_size=min_size,
        max_size=max_size,
        timeout=timeout,
        name=name,
        check=ConnectionPool.check_connection if check else None,
        kwargs=dict(CONNECTION_KWARGS),
        open=False,
    )
    pool.open(wait=False)
    return pool


def one(row: T | None) -> T:
    """A value that is always there, typed as present: the row of a query that always returns one (an aggregate,
    RETURNING, SHOW, a lock attempt) or a result the caller's path guarantees; None is an error, said as such."""
    if row is None:
        raise LookupError("the query returned no row")
    return row
