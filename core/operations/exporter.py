"""Database-side Prometheus exporter: `python -m core.operations.exporter [--port 9188]`.

Runs the queries below at each scrape (a custom collector, one read-only transaction with a
statement timeout) and exposes what only the database knows: replicas by state and the age of
their last heartbeat, expired-not-swept documents per root, the last sweep, erasure requests not
complete and re-checks that found data back, customers above the closed 4-document schema.

Cheap at 1M documents / 100k threads (see BENCHMARKS.md): the counts come from the small tables
(heartbeats, sweep log, erasure register, core_prefix_counts kept by the change follower) and the expired
count is a range scan of the store's own partial index on `expires_at` (expired rows only). No
query touches the checkpoint tables at scrape time; threads by status and LLM tokens/cost come from the tables the
extraction keeps (core_thread_summary, core_usage_days); an Agent Protocol server's runs by status and those stuck
(core.agent_server.aegra) from its own `runs` table, on its status index. The attribution coverage
(`core.privacy.subjects.coverage`, which reads the three checkpoint tables) is too costly for a scrape:
it is computed in a background thread at most every COVERAGE_EVERY_S and exposed with the time it was
computed (`agent_memory_attribution_computed_timestamp_seconds`); so is the checkpoint storage-format fingerprint
(`core.history.formats`: encrypted, DeltaChannel, pickle, json, older rows; `agent_memory_checkpoint_*`). While
PostgreSQL is unreachable it exposes
`agent_memory_db_up 0` (and its own scrape duration), so the alert rules can tell "down" from "ok".

Its role only reads (deploy/exporter-grants.sql).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import psycopg
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from psycopg.rows import DictRow, dict_row

from core.agent_server import aegra
from core.capture.status import read_status
from core.config import ModelPrice
from core.db import dashboard_dsn_of, one
from core.history import usage
from core.history.replica_health import SELECT_REPLICAS
from core.memory.reads import expired_counts_conns
from core.memory.store import MAX_DOCS_PER_CUSTOMER, ROOTS
from core.privacy import ours as ours_db
from core.privacy.data_views import SELECT_GAPS

log = logging.getLogger(__name__)

PREFIX = "agent_memory_"
DEFAULT_PORT = 9188
STATEMENT_TIMEOUT_MS = 5000
COVERAGE_EVERY_S = 900
CONNECT_TIMEOUT_S = 3
STATES = ("healthy", "degraded", "silent", "stopped")
SWEEP_STATUSES = ("running", "ok", "dry_run", "locked", "error", "stopped")

SELECT_LAST_SWEEPS = """
SELECT (SELECT row_to_json(l) FROM (
            SELECT extract(epoch FROM started_at)::float8 AS started, status, documents_deleted
            FROM core_sweep_log WHERE NOT dry_run AND status <> 'locked'
            ORDER BY started_at DESC, id DESC LIMIT 1) l)                                     AS last_run,
       (SELECT extract(epoch FROM max(started_at))::float8
        FROM core_sweep_log WHERE status = 'ok' AND NOT dry_run)                              AS last_ok"""

SELECT_ERASURE = "SELECT incomplete, stuck, data_back FROM core_erasure_register_counts"

SELECT_OVER_SCHEMA = """
SELECT count(*) AS customers FROM core_prefix_counts WHERE root = 'clientes' AND documents > %s"""


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, labels=labels)


# Through the partial status index: the flagged threads only (counting the idle million would be linear).
SELECT_THREAD_STATUS = """
SELECT status, count(*) AS n FROM core_thread_summary WHERE status <> 'idle' GROUP BY status"""


def _connect_ours(dsn: str) -> psycopg.Connection[DictRow]:
    """A read-only connection to the dashboard's database, under the scrape's timeouts."""
    conn = psycopg.connect(
        dsn,
        connect_timeout=CONNECT_TIMEOUT_S,
        row_factory=dict_row,
        options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
    )
    conn.read_only = True
    return conn


def usage_metrics(conn: psycopg.Connection[DictRow], prices: tuple[ModelPrice, ...]) -> list[Metric]:
    """Threads by status (the thread search's summary) and LLM tokens and cost per agent and model, from the
    rollups the extraction keeps (small tables: days x agents x models). A model without a configured price has
    no cost sample (never 0) and is counted in `llm_unpriced_models`."""
    threads = _gauge(
        "threads",
        "Threads by the status of their latest checkpoint (interrupted: a pending interrupt; "
        "paused: a node scheduled next without one, e.g. interrupt_before/after; error: the last step "
        "raised), as of the last extraction.",
        ["status"],
    )
    with contextlib.ExitStack() as stack:  # the extraction's tables are in the dashboard's database (issue 52)
        ours = dashboard_dsn_of(conn)
        mine = stack.enter_context(_connect_ours(ours)) if ours else conn
        found = {r["status"]: r["n"] for r in mine.execute(SELECT_THREAD_STATUS)}
        usage_rows = mine.execute(usage.SELECT_TOTALS).fetchall()
    for status in ("interrupted", "paused", "error"):
        threads.add_metric([status], float(found.get(status, 0)))
    totals = usage.priced_totals(usage_rows, prices)
    tokens = _gauge(
        "llm_tokens",
        "LLM tokens from the AI messages' usage_metadata (input includes cached).",
        ["agent", "model", "kind"],
    )
    cost = _gauge(
        "llm_cost_usd",
        "LLM cost in USD at the configured prices (MODEL_PRICES); models without a price have no sample.",
        ["agent", "model"],
    )
    for row in totals.itertuples():
        for kind in ("input", "output", "cached"):
            tokens.add_metric([row.agent, row.model, kind], float(getattr(row, f"{kind}_tokens")))
        if not pd.isna(row.cost_usd):
            cost.add_metric([row.agent, row.model], float(row.cost_usd))
    unpriced = _gauge("llm_unpriced_models", "Models with token usage but no configured price.")
    unpriced.add_metric([], float(totals.loc[totals["cost_usd"].isna(), "model"].nunique()))
    return [threads, tokens, cost, unpriced]


def capture_metrics(conn: psycopg.Connection[DictRow]) -> list[Metric]:
    """The change follower (core/capture): running, its lag, the WAL its slot keeps and how much more it may keep, and
    its open dead letters."""
    s = read_status(conn)
    lost = float(s.wal_status == "lost")
    values: list[tuple[str, str, float | int | None]] = [
        ("capture_running", "1 when a change follower holds this database's follower lock.", float(s.running)),
        ("capture_slot_lost", "1 when the follower's slot was invalidated (max_slot_wal_keep_size).", lost),
        ("capture_lag_seconds", "Seconds since the follower had applied every change (absent: never).", s.lag_seconds),
        ("capture_lag_bytes", "WAL bytes written since the follower had applied every change.", s.lag_bytes),
        ("capture_retained_wal_bytes", "WAL bytes the follower's slot keeps from being recycled.", s.retained_bytes),
        ("capture_safe_wal_bytes", "WAL bytes left before max_slot_wal_keep_size invalidates it.", s.safe_wal_size),
        (
            "capture_dead_letters",
            "Rows the follower could not apply since its last recount (their aggregates are unknown).",
            s.dead_letters,
        ),
    ]
    out: list[Metric] = []
    for name, text, value in values:
        if value is not None:
            g = _gauge(name, text, [])
            g.add_metric([], float(value))
            out.append(g)
    return out


def agent_server_metrics(conn: psycopg.Connection[DictRow], stuck_s: float | None = None) -> list[Metric]:
    """An Agent Protocol server's runs (core.agent_server.aegra), where the database holds its tables: runs by status,
    and runs pending/running with no update for more than `stuck_s` seconds (AGENT_SERVER_STUCK_RUN_S): a server
    process killed mid-run leaves its run so for ever. Nothing where there is no such server."""
    server = aegra.detect_conn(conn)
    if server is None:
        return []
    stuck_s = aegra.stuck_threshold_s() if stuck_s is None else stuck_s
    counts = aegra.run_counts_conn(conn, stuck_s)
    labels = ["server", "status"]
    runs = _gauge("agent_server_runs", "Runs the agent server's own tables hold, by status.", labels)
    stuck = _gauge(
        "agent_server_stuck_runs",
        "Runs pending or running with no update for longer than the threshold (agent_server_stuck_threshold_seconds).",
        labels,
    )
    name = server.name.lower()
    for status in sorted(set(counts) | set(aegra.ACTIVE_STATUSES)):
        total, late = counts.get(status, (0, 0))
        runs.add_metric([name, status], float(total))
        if status in aegra.ACTIVE_STATUSES:
            stuck.add_metric([name, status], float(late))
    threshold = _gauge("agent_server_stuck_threshold_seconds", "A run idle this long is counted as stuck.", ["server"])
    threshold.add_metric([name], float(stuck_s))
    return [runs, stuck, threshold]


def _register_figures(conn: psycopg.Connection[DictRow]) -> tuple[DictRow, DictRow]:
    """The erasure register's counts and the views log's gaps, read where they live: our database (issue 52),
    under the scrape's statement timeout."""
    with ours_db.connect(conn) as mine:
        if mine is not conn:
            mine.execute("SELECT set_config('statement_timeout', %s, false)", (str(STATEMENT_TIMEOUT_MS),))
        return one(mine.execute(SELECT_ERASURE).fetchone()), one(mine.execute(SELECT_GAPS).fetchone())


def database_metrics(
    conn: psycopg.Connection[DictRow], prices: tuple[ModelPrice, ...] = (), stuck_s: float | None = None
) -> list[Metric]:
    """Every database-side metric, read on `conn` (read-only)."""
    out: list[Metric] = usage_metrics(conn, prices)
    out += agent_server_metrics(conn, stuck_s)
    replicas = conn.execute(SELECT_REPLICAS).fetchall()
    by_state = _gauge(
        "replicas", "Agent replicas by state from their heartbeats (silent: heartbeat overdue).", ["state"]
    )
    counts = {s: 0 for s in STATES}
    for r in replicas:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    for state, n in counts.items():
        by_state.add_metric([state], n)
    age = _gauge("replica_heartbeat_age_seconds", "Seconds since each replica's last heartbeat.", ["replica", "state"])
    for r in replicas:
        if r["state"] != "stopped":
            age.add_metric([r["replica_id"], r["state"]], float(r["seconds_since_heartbeat"]))
    out += [by_state, age]

    out += capture_metrics(conn)

    expired = _gauge("store_expired_documents", "Store documents past their TTL not yet swept, per root.", ["root"])
    with ours_db.connect(conn) as mine:
        found = expired_counts_conns(conn, mine)
    for root in sorted(set(ROOTS) | set(found)):
        expired.add_metric([root if root in ROOTS else "other"], float(found.get(root, 0)))
    out.append(expired)

    with ours_db.connect(conn) as mine:  # the sweep log is in our database (issue 52)
        if mine is not conn:
            mine.execute("SELECT set_config('statement_timeout', %s, false)", (str(STATEMENT_TIMEOUT_MS),))
        sweeps = one(mine.execute(SELECT_LAST_SWEEPS).fetchone())
    last = sweeps["last_run"] or {}
    last_ts = _gauge(
        "sweep_last_run_timestamp_seconds",
        "Unix time the last (non dry-run) sweep started, by its outcome; absent if none.",
        ["status"],
    )
    if last:
        last_ts.add_metric([last["status"]], float(last["started"]))
    ok_ts = _gauge(
        "sweep_last_success_timestamp_seconds", "Unix time the last successful sweep started; 0 if none ever succeeded."
    )
    ok_ts.add_metric([], float(sweeps["last_ok"] or 0))
    out += [last_ts, ok_ts]

    erasure, gaps = _register_figures(conn)
    inc = _gauge(
        "erasure_requests_incomplete", "Erasure requests incomplete or failed, or running for more than an hour."
    )
    inc.add_metric([], float(erasure["incomplete"] + erasure["stuck"]))
    back = _gauge(
        "erasure_data_back_requests",
        "Erasure requests whose last re-check found the customer's data back, not erased again since "
        "(shown first as such in the erasure register).",
    )
    back.add_metric([], float(erasure["data_back"]))
    out += [inc, back]

    over = _gauge(
        "customers_over_schema",
        f"Customers with more than {MAX_DOCS_PER_CUSTOMER} documents (the closed preference schema was opened).",
    )
    with ours_db.connect(conn) as mine:  # core_prefix_counts: the change follower's, in our database (issue 52)
        over_schema = one(mine.execute(SELECT_OVER_SCHEMA, (MAX_DOCS_PER_CUSTOMER,)).fetchone())["customers"]
    over.add_metric([], float(over_schema))
    out.append(over)

    unrecorded = _gauge(
        "data_views_unrecorded",
        "Views of customer data the dashboards could not record in the access log (queue full or "
        "process exit), as they reported once the database took writes again (core_data_view_gaps, "
        "within the log's retention).",
    )
    killed = _gauge(
        "data_views_lost_by_killed_processes",
        "Dashboard processes killed (no clean exit) with views of customer data not yet written: an unknown number "
        "lost by each (core_data_view_gaps with no count, within the log's retention).",
    )
    unrecorded.add_metric([], float(gaps["views"]))
    killed.add_metric([], float(gaps["killed"]))
    out += [unrecorded, killed]
    return out


class BackgroundCache:
    """A figure too costly for a scrape (it reads the checkpoint tables), recomputed in a background thread at
    most every `every_s` seconds: `compute(db)` gives the value, `describe(value)` its (name, doc, value) gauges,
    exposed with the time it was computed (`<stamp>_computed_timestamp_seconds`)."""

    def __init__(
        self,
        dsn: str,
        every_s: float,
        compute: Callable[[Any], Any],
        describe: Callable[[Any], list[tuple[str, str, float]]],
        stamp: str,
    ):
        self.dsn, self.every_s = dsn, every_s
        self.compute, self.describe, self.stamp = compute, describe, stamp
        self._lock = threading.Lock()
        self.value: Any = None
        self.computed_at = 0.0
        self.started_at = 0.0
        self.error: str | None = None

    def _refresh(self) -> None:
        from core.db import Database

        db = Database(self.dsn)
        try:
            value = self.compute(db)
            with self._lock:
                self.value, self.computed_at, self.error = value, time.time(), None
        except Exception as exc:  # noqa: BLE001 - reported in the log; the last value stays exposed
            with self._lock:
                self.error = str(exc)
            log.warning("%s not computed: %s", self.stamp, exc)
        finally:
            db.close()

    def metrics(self) -> list[Metric]:
        with self._lock:
            due = time.monotonic() - self.started_at > self.every_s or not self.started_at
            if due:
                self.started_at = time.monotonic()
                threading.Thread(target=self._refresh, name=f"exporter-{self.stamp}", daemon=True).start()
            value, at = self.value, self.computed_at
        if value is None:
            return []
        out: list[Metric] = []
        for name, doc, v in [
            *self.describe(value),
            (f"{self.stamp}_computed_timestamp_seconds", f"Unix time the {self.stamp} figures were computed.", at),
        ]:
            g = _gauge(name, doc)
            g.add_metric([], float(v))
            out.append(g)
        return out


def _coverage(db: Any) -> Any:
    from core.privacy.subjects import coverage

    return coverage(db)


def _coverage_gauges(value: Any) -> list[tuple[str, str, float]]:
    return [
        ("attribution_threads", "Checkpoint threads (at the last coverage computation).", value.threads),
        (
            "attribution_unattributed_threads",
            "Checkpoint threads no source attributes to a subject.",
            value.unattributed_threads,
        ),
        ("attribution_bytes", "Bytes in the checkpoint tables.", value.bytes),
        ("attribution_unattributed_bytes", "Bytes of the unattributed threads.", value.unattributed_bytes),
    ]


def _formats(db: Any) -> Any:
    from core.history.formats import fingerprint

    return fingerprint(db)


def _formats_gauges(fp: Any) -> list[tuple[str, str, float]]:
    """The storage-format fingerprint (core.history.formats): rows are checkpoint_blobs + checkpoint_writes."""
    return [
        (
            "checkpoint_migration_version",
            "langgraph's checkpoint schema version (max v of checkpoint_migrations).",
            fp.migration_version or 0,
        ),
        (
            "checkpoint_shallow_schema",
            "1 when the checkpoint tables are ShallowPostgresSaver's (no history).",
            int(fp.shallow),
        ),
        (
            "checkpoint_encrypted_rows",
            "Encrypted checkpoint rows (EncryptedSerializer, e.g. msgpack+aes).",
            fp.encrypted,
        ),
        ("checkpoint_encrypted_threads", "Threads holding encrypted checkpoint rows.", fp.encrypted_threads),
        ("checkpoint_delta_snapshots", "DeltaChannel snapshot blobs.", fp.delta_snapshots),
        (
            "checkpoint_delta_checkpoints",
            "Checkpoints whose DeltaChannel values are rebuilt from writes.",
            fp.delta_checkpoints,
        ),
        ("checkpoint_pickle_rows", "Pickled checkpoint rows (pickle_fallback): never unpickled, refused.", fp.pickle),
        ("checkpoint_json_rows", "Checkpoint rows of the old json type.", fp.json),
        ("checkpoint_undecodable_rows", "Checkpoint rows of a blob type the decoder does not know.", fp.undecodable),
        ("checkpoint_older_checkpoints", "Checkpoints of a format older than v4.", fp.older_checkpoints),
    ]


class DatabaseCollector(Collector):
    """Queries PostgreSQL at each scrape; one scrape at a time (a slow database never piles them up)."""

    def __init__(self, dsn: str, coverage_every_s: float = COVERAGE_EVERY_S, prices: tuple[ModelPrice, ...] = ()):
        self.dsn, self.prices = dsn, prices
        # read once, here: a bad AGENT_SERVER_STUCK_RUN_S stops the exporter at its start, naming the setting, instead
        # of failing every scrape
        self.stuck_s = aegra.stuck_threshold_s()
        self._lock = threading.Lock()
        self.coverage = BackgroundCache(dsn, coverage_every_s, _coverage, _coverage_gauges, "attribution")
        self.formats = BackgroundCache(dsn, coverage_every_s, _formats, _formats_gauges, "checkpoint_formats")

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            started = time.perf_counter()
            up = _gauge("db_up", "1 when the exporter's last scrape read PostgreSQL, 0 when it could not.")
            try:
                with psycopg.connect(
                    self.dsn,
                    connect_timeout=CONNECT_TIMEOUT_S,
                    row_factory=dict_row,
                    options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
                ) as conn:
                    conn.read_only = True
                    found = database_metrics(conn, self.prices, self.stuck_s)
                up.add_metric([], 1)
                found += self.coverage.metrics() + self.formats.metrics()
            except psycopg.Error as exc:
                log.warning("exporter scrape could not read PostgreSQL: %s", exc)
                found = []
                up.add_metric([], 0)
            took = _gauge("exporter_scrape_duration_seconds", "Time the exporter's queries took.")
            took.add_metric([], time.perf_counter() - started)
        yield from found
        yield up
        yield took


def make_registry(
    dsn: str, coverage_every_s: float = COVERAGE_EVERY_S, prices: tuple[ModelPrice, ...] = ()
) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(dsn, coverage_every_s, prices))
    return registry


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {value!r}") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"port out of range: {value!r}")
    return port


def main(argv: list[str] | None = None, *, block: bool = True) -> Any:
    from core.config import load_settings
    from core.db import resolve_dsn

    parser = argparse.ArgumentParser(
        prog="python -m core.operations.exporter", description="Prometheus exporter of the agents' database health."
    )
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT)
    parser.add_argument("--addr", default="0.0.0.0")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    settings = load_settings()
    server, thread = start_http_server(
        args.port, addr=args.addr, registry=make_registry(resolve_dsn(settings), prices=settings.model_prices)
    )
    log.info("exporter on %s:%d", args.addr, args.port)
    if not block:
        return server, thread
    try:
        while thread.is_alive():
            thread.join(1)
    except KeyboardInterrupt:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
