"""The dashboard's own database as data protection reaches it from a connection to the agents' (issue 52, cluster E).

The registers, their hash chains, the log of who viewed a customer's data and the erasure's own records live in our
database (PG_DASHBOARD; core/sql/dashboard/030_registers.sql). Code holding a connection to the agents' database
reaches ours with `connect(conn)`: the same connection where ours is the agents' own (the default), else a connection
of its own to ours, closed on exit. Statements never join the two: values cross as parameters and arrays.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row

from core.db import CONNECT_TIMEOUT_S, DatabaseUnavailable, connection_key, dashboard_dsn_of, describe_dsn


class OursUnreachable(DatabaseUnavailable):
    """The dashboard's own database does not answer: what needs a record there (an erasure's register row) does not
    start."""


def is_apart(conn: psycopg.Connection[Any], ours: psycopg.Connection[Any]) -> bool:
    """`ours` is another database than `conn`'s (PG_DASHBOARD set)."""
    return ours is not conn and connection_key(ours) != connection_key(conn)


@contextmanager
def connect(conn: psycopg.Connection[DictRow]) -> Iterator[psycopg.Connection[DictRow]]:
    """Our database for the agents' connection `conn`: `conn` itself where ours is the agents' database, else a new
    autocommit connection (dict rows) to ours, closed on exit. OursUnreachable when it does not answer."""
    dsn = dashboard_dsn_of(conn)
    if dsn is None:
        yield conn
        return
    try:
        mine = psycopg.connect(
            dsn, autocommit=True, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S, prepare_threshold=None
        )
    except psycopg.OperationalError as exc:
        raise OursUnreachable(f"the dashboard's database {describe_dsn(dsn)} is not reachable: {exc}") from exc
    with mine:
        yield mine


__all__ = ["OursUnreachable", "connect", "is_apart"]
