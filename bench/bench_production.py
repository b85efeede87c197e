"""Every page of the dashboard on ONE production-sized database, in one run, against its baselines.

    python -m bench.bench_production                    # 1M documents, 100k threads, 1M checkpoint writes
    python -m bench.bench_production --docs 100000 --customers 25000 --threads 10000 --writes 100000
    python -m bench.bench_production --smoke            # tiny sizes, seconds (what tests/test_bench_smoke.py runs)

Database (embedded PostgreSQL in --data, default .data/bench_production), built once per size and
kept as a template; every run measures a fresh copy of it (`CREATE DATABASE ... TEMPLATE`), because
the erasure and the sweep delete data:
- store: bench/generate_store.py (COPY): --docs documents, 80% over --customers customer namespaces
  (0.5% of them above the 4-document schema), 10% suppliers, 10% staff, ~8% expired, vectors for 10%;
  --threads rows of core_conversations and the memory-write log;
- checkpoints: the real retail agents (scripted model, real tools, `PostgresSaver` with langgraph's
  serializer) hold template conversations (preferences, delivery proposals, a supplier notice); their
  rows are COPYed by bench/bench_decoder.py's `replicate` to --threads threads (`cliente-bench-N` for
  customer N of core_conversations, so the Preferences page's "preferences applied" decodes real
  threads; `compras-bench-N` for suppliers) until --writes `checkpoint_writes`; 3% of the threads
  are older than the 90-day retention;
- two large customers (`C9` and `C8`, --erasure-docs documents each, 20% in a nested namespace,
  every one with its vector, written with the store's own batch, plus 3 conversations each by the
  real customer agent) on top of their generated documents and threads (bench/bench_erasure.py);
- the Degradation page's tables: 3 replicas, 200 episodes with a denial each, 100 refusals, written
  with core.replica_health's own writers.
Each database of the bench has the dashboard's own database beside it on the same server (`<name>_ours`, issue 52's
PG_DASHBOARD, as the embedded default keeps `agent_memory_dashboard` beside `postgres`): the follower's recount and the
extraction write there, never in the agents' database. The server's settings stay as `core.db.embedded_dsn` makes them
(max_slot_wal_keep_size 1GB): the template's slot is checked after its first extraction and after its token index,
and the build stops if it was lost.

Measured, in this order, each with its baseline when there is one (same database, same run):
every page's core reads (median of --runs warm calls; a call over 10 s is timed once) and its full
AppTest render with an empty data cache (median of --renders; a render over 10 s ends the series); the SQL decoder
over one thread's history vs two Python decoders; the
Erasure page's preview; the erasure of the large customer `C9` vs the seed's loop on `C8`; the
Erasure register; a sweep (`core.sweep.run_sweep`) vs the bare `sweep_ttl()` plus a set-based
retention delete (both run first in a transaction that is rolled back), then the Sweeps page again, right
after the sweep and after `VACUUM ANALYZE store`. Prints a markdown table (figure, value, baseline, ratio =
baseline / value, target); results and findings in BENCHMARKS.md, "Production-scale run (all pages)".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import dict_row

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent_memory_runtime import replica_health as replica_writes  # noqa: E402
from bench import bench_decoder, bench_erasure, bench_pages, bench_sweep, generate_store  # noqa: E402
from core.capture import follower  # noqa: E402
from core.capture.background import start_follower, stop_follower  # noqa: E402
from core.db import Database, DatabaseUnavailable, embedded_dsn, reset_pool, use_dashboard_database  # noqa: E402
from core.history import (  # noqa: E402
    replica_health,  # noqa: E402
    tool_calls,
    views,
)
from core.history.payload_json import payload_json  # noqa: E402
from core.memory import preferences, reads  # noqa: E402
from core.migrate import migrate  # noqa: E402
from core.operations import sweep, sweep_reads  # noqa: E402
from core.privacy import erasure, erasure_register, evidence, subjects, token_index  # noqa: E402
from core.storage import storage  # noqa: E402

DIMS = 64
QUERY_TARGET_MS = 300.0
RENDER_TARGET_MS = 1500.0
RENDER_TIMEOUT_S = 3600  # a render waits for the page's reads, however slow (the residue scan at 10M)
RETENTION_DAYS = 90
ERASED, SEED_LOOP_CUSTOMER = "C9", "C8"  # two large customers of the same shape
OLD_EVERY = 33  # one round of template threads in 33 is older than the retention (~3%)
# Customer conversations the real agent holds once; their rows are the templates (tpl-d, a supplier
# notice, is added by bench_decoder.write_templates): a preference then a proposal that applies it, a
# proposal that overrides the default, a preference. 40 writes per round of 4 threads: 10 per thread.
TEMPLATE_TURNS = {
    "tpl-a": ("C1", ["Prefiero recoger mis pedidos en la tienda Sol.", "¿Qué me propones para recibir el pedido?"]),
    "tpl-b": ("C2", ["Solo esta vez, recógelo en la tienda Goya."]),
    "tpl-c": ("C3", ["Prefiero que me atendáis en catalán."]),
}
CUSTOMER_TEMPLATES = {"tpl-a": 0, "tpl-b": 1, "tpl-c": 2}
SMOKE = {"docs": 2000, "customers": 500, "threads": 200, "writes": 2000, "erasure_docs": 60, "runs": 1, "renders": 1}

PAGES = {  # label -> (page file, query params, button clicked in the timed runs)
    "Memoria": (None, {"ns": f"clientes.{SEED_LOOP_CUSTOMER}"}, None),
    "Preferencias": ("app_pages/preferences.py", {}, None),
    "Barridos": ("app_pages/sweeps.py", {}, None),
    "Checkpoints": ("app_pages/checkpoints.py", {}, None),  # thread added at run time
    "Degradación": ("app_pages/degradation.py", {}, None),
    "Borrado": ("app_pages/erasure.py", {"cliente": ERASED}, "erasure.preview"),
    "Registro de borrados": ("app_pages/erasure_register.py", {}, None),
}


@dataclass
class Figure:
    page: str  # the page (or job) it belongs to
    name: str  # what was measured
    ms: float
    baseline: str = "-"
    baseline_ms: float | None = None
    target_ms: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return self.baseline_ms / self.ms if self.baseline_ms and self.ms else None

    @property
    def meets_target(self) -> bool | None:
        return None if self.target_ms is None else self.ms < self.target_ms


def timed_ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    result = fn()
    return (time.perf_counter() - t) * 1000, result


def dsn_for(base: str, name: str) -> str:
    return psycopg.conninfo.make_conninfo(base, dbname=name)


def _exists(base: str, name: str) -> bool:
    with psycopg.connect(base, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def _sql(base: str, statement: str) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(statement)


# --- the production-sized database ---------------------------------------------------------------


def _thread_id(k: int, template: str) -> str:
    j = CUSTOMER_TEMPLATES.get(template)
    return f"compras-bench-{k}" if j is None else f"cliente-bench-{3 * k + j}"


def _age(k: int, template: str) -> timedelta:
    if k % OLD_EVERY == 0:
        return timedelta(days=RETENTION_DAYS + 10 + k % 200)
    return timedelta(seconds=k * 7)


def seed_health(dsn: str, episodes: int = 200, refusals: int = 100) -> None:
    """The Degradation page's tables, through core.replica_health's writers (what the dual saver calls)."""
    now = datetime.now(UTC)
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        for r in range(3):
            replica_writes.publish_heartbeat(
                conn,
                {
                    "replica_id": f"replica-{r}",
                    "host": f"agents-{r}",
                    "pid": 100 + r,
                    # all healthy: a replica degraded now next to recorded episodes crashes the page's
                    # timeline (tz-aware datetimes of two kinds in one column; reported, not ours to fix)
                    "state": "healthy",
                    "degraded_since": None,
                    "buffered_checkpoints": 0,
                    "buffered_writes": 0,
                    "last_success": now,
                    "started_at": now - timedelta(days=2),
                    "heartbeat_interval_s": 5,
                    "episodes_total": episodes,
                    "denials_total": episodes,
                    "refusals_total": refusals,
                },
            )
        for e in range(episodes):
            start = now - timedelta(hours=3 * e + 1)
            denial = {
                "tool": "publicar_aviso",
                "risk": "HIGH",
                "thread_id": f"cliente-bench-{e}",
                "subject_root": "clientes",
                "subject_id": f"C{e + 1}",
                "customer_id": f"C{e + 1}",
                "reason": "checkpoint store degraded",
                "denied_at": start + timedelta(seconds=5),
            }
            replica_writes.write_episode(
                conn,
                replica_writes.Episode(
                    replica_id=f"replica-{e % 3}",
                    host=f"agents-{e % 3}",
                    pid=100 + e % 3,
                    degraded_from=start,
                    degraded_to=start + timedelta(seconds=20 + e % 40),
                    reason="connection refused",
                    checkpoints_buffered=e % 9,
                    writes_buffered=3 * (e % 9),
                    ops_resynced=4 * (e % 9),
                    resync_ms=12.5,
                    denials=[denial],
                ),
            )
        replica_writes.write_refusals(
            conn,
            "replica-0",
            [
                SimpleNamespace(
                    key=f"00000000-0000-4000-8000-{i:012d}",
                    qualified_name="os.system",
                    kind="msgpack_blocked",
                    thread_id=f"cliente-bench-{i}",
                    checkpoint_id=None,
                    refused_at=now - timedelta(hours=i),
                )
                for i in range(refusals)
            ],
        )


def build(
    dsn: str, docs: int, customers: int, threads: int, writes: int, erasure_docs: int, log: Callable[[str], None]
) -> dict:
    """Fill the (migrated, empty) database at `dsn`; returns what was loaded and how long it took."""
    info: dict[str, Any] = {}
    t = time.perf_counter()
    info["store"] = generate_store.generate(dsn, docs, customers, threads=threads)
    log(f"store: {info['store']}")
    db = Database(dsn)
    bench_decoder.write_templates(db, TEMPLATE_TURNS)
    info["checkpoints"] = bench_decoder.replicate(
        dsn,
        writes,
        threads=threads,
        thread_id=_thread_id,
        age=_age,
        customer=lambda k, template: f"C{int(_thread_id(k, template).rsplit('-', 1)[1]) % customers + 1}",
    )
    log(f"checkpoints: {info['checkpoints']}")
    for customer in (ERASED, SEED_LOOP_CUSTOMER):
        bench_erasure.populate(db, erasure_docs, 0, customer=customer)
    seed_health(dsn)
    reset_pool(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    info["build_s"] = round(time.perf_counter() - t, 1)
    return info


MOVE_EXPIRIES_OUT_OF_RUN = """
UPDATE store SET expires_at = expires_at + %(window)s
WHERE expires_at >= now() AND expires_at < now() + %(window)s"""


def database_bytes(base: str, name: str) -> int:
    with psycopg.connect(base, autocommit=True) as conn:
        return int(conn.execute("SELECT pg_database_size(%s)", (name,)).fetchone()[0])


def _prepare_template(
    base: str, template: str, info: dict, log: Callable[[str], None], agents_rate: float = 0.0
) -> None:
    """Migrations added since the template was built, its tool calls extracted and its token index built. With
    `agents_rate`, agents write that many store documents a second meanwhile (bench/agents_writing.py: the install
    while they work; their documents deleted at the end)."""
    migrate(apart(base, template), DIMS)
    template_db = Database(dsn_for(base, template))
    wal_before = template_db.fetch_one("SELECT pg_current_wal_lsn()::text AS lsn")["lsn"]

    def check_slot(step: str) -> None:
        """The follower's slot after `step`: the server's WAL since the step began, and what the slot keeps."""
        slot = template_db.fetch_one(
            "SELECT wal_status, pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)::bigint AS wal, "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint AS kept, "
            "current_setting('max_slot_wal_keep_size') AS limit FROM pg_replication_slots "
            "WHERE database = current_database()",
            (wal_before,),
        )
        if slot:
            info[f"slot_after_{step}"] = {
                "wal_status": slot["wal_status"],
                "wal_mb": round(slot["wal"] / 2**20, 1),
                "kept_mb": round((slot["kept"] or 0) / 2**20, 1),
                "max_slot_wal_keep_size": slot["limit"],
            }
            log(f"the follower's slot after the {step.replace('_', ' ')}: {info[f'slot_after_{step}']}")
            if slot["wal_status"] == "lost":
                raise SystemExit(f"the follower's slot was lost during the {step.replace('_', ' ')}: {info}")

    # The change follower as the dashboard runs it: its slot made and the aggregates recounted first, then following
    # in the background while the extraction and the token index write to our database (on the same server here, so
    # the slot keeps that WAL too until the follower reads past it).
    writing = (
        subprocess.Popen(
            [sys.executable, "-m", "bench.agents_writing", dsn_for(base, template), "--rate", str(agents_rate)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        if agents_rate
        else None
    )
    try:  # the agents' writes stopped whatever fails (a recount, a lost slot)
        t_recount = time.perf_counter()
        follower.catch_up(template_db.dsn, timeout=RENDER_TIMEOUT_S)
        info["template_follower_setup_s"] = round(time.perf_counter() - t_recount, 1)
        check_slot("recount")
        start_follower(template_db.dsn)
        t = time.perf_counter()
        extracted = tool_calls.extract(template_db)
        check_slot("first_extraction")
        if extracted.writes:
            info["template_tool_call_extraction"] = {
                "s": round(time.perf_counter() - t, 1),
                "writes": extracted.writes,
                "calls": extracted.calls,
            }
            log(f"tool calls extracted on the template: {info['template_tool_call_extraction']}")
        t = time.perf_counter()
        indexed = token_index.index_pending(
            template_db,
            batch=2000,
            on_batch=lambda r: (
                r.batches % 50 == 0 and log(f"  token index: {r.threads:,} threads, {r.payloads:,} payloads")
            ),
        )
        if indexed.threads:
            info["template_token_index"] = {
                "s": round(time.perf_counter() - t, 1),
                "threads": indexed.threads,
                "payloads": indexed.payloads,
                "decoded_in_sql": indexed.decoded_in_sql,
            }
            log(f"token index built on the template: {info['template_token_index']}")
        check_slot("token_index")
        if writing:
            writing.terminate()
            out, _ = writing.communicate(timeout=600)
            if writing.returncode:
                raise SystemExit(f"the agents' writes failed (exit {writing.returncode}): {out}")
            info["agents_writing"] = json.loads(out.strip().splitlines()[-1])
            log(f"the agents wrote meanwhile: {info['agents_writing']}")
            check_slot("agents_writing")
    finally:
        if writing and writing.poll() is None:
            writing.kill()
        stop_follower(template_db.dsn)
    template_db.close()
    reset_pool(dsn_for(base, template))
    reset_pool(dsn_for(base, ours_name(template)))
    info["template_bytes"] = database_bytes(base, template)
    log(f"template {template}: {info['template_bytes'] / 1e9:.2f} GB")


# The dashboard's own database beside each of the bench's (issue 52): `<name>_ours` on the same server.
OURS_SUFFIX = "_ours"


def ours_name(name: str) -> str:
    return name + OURS_SUFFIX


def apart(base: str, name: str) -> str:
    """The DSN of the bench's database `name`, with what the dashboard writes for it kept in `ours_name(name)` beside
    it (created and migrated by core.migrate.migrate on first use)."""
    dsn = dsn_for(base, name)
    use_dashboard_database(dsn, dsn_for(base, ours_name(name)))
    return dsn


TERMINATE_ON = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname IN ('%s', '%s') AND pid <> pg_backend_pid()"
)


def drop_pair(base: str, name: str) -> None:
    for each in (name, ours_name(name)):
        _sql(base, f'DROP DATABASE IF EXISTS "{each}" WITH (FORCE)')


def database(
    base: str,
    docs: int,
    customers: int,
    threads: int,
    writes: int,
    erasure_docs: int,
    log: Callable[[str], None],
    rebuild: bool = False,
    build_only: bool = False,
    temp_file_limit: str | None = None,
    in_place: bool = False,
    touch_template: bool = True,
    agents_rate: float = 0.0,
    reinstall: bool = False,
) -> tuple[str, dict]:
    """A fresh copy of the production-sized database (built first if its template does not exist,
    or if `rebuild`); with `in_place`, the template itself (for a disk without room for a copy). Without
    `touch_template`, an existing template is copied as it is (new migrations and their work only on the copy)."""
    template = f"bench_prod_{docs}_{customers}_{threads}_{writes}_{erasure_docs}"
    building = f"{template}_building"
    info: dict[str, Any] = {"template": template}
    if not rebuild and _exists(base, template) and not _exists(base, ours_name(template)):
        log(f"{template} was built before the dashboard's database was apart (issue 52): built again")
        rebuild = True
    if rebuild:
        drop_pair(base, template)
    built = not _exists(base, template)
    if built:
        log(f"building {template} ...")
        drop_pair(base, building)
        _sql(base, f'CREATE DATABASE "{building}"')
        migrate(apart(base, building), DIMS)
        info.update(build(dsn_for(base, building), docs, customers, threads, writes, erasure_docs, log))
        for name in (building, ours_name(building)):
            reset_pool(dsn_for(base, name))
        for name, final in ((building, template), (ours_name(building), ours_name(template))):
            _sql(base, f'ALTER DATABASE "{name}" RENAME TO "{final}"')
    # The Preferences page reads the tool calls the sweep job extracts from the checkpoints
    # (incrementally, from a watermark): done once on the template, as production would have done it
    # over time; a run then measures the incremental step on its copy (bench/bench_tool_calls.py
    # measures a full extraction against the live decode).
    # The same for the residue scan's token index (migration 042 lists every thread of an older template).
    apart(base, template)
    if reinstall and not built:  # installed anew on the agents' data as built: no slot, no database of ours
        follower.drop_slot(dsn_for(base, template))
        reset_pool(dsn_for(base, ours_name(template)))
        _sql(base, f'DROP DATABASE "{ours_name(template)}" WITH (FORCE)')
    if touch_template or built:
        _prepare_template(base, template, info, log, agents_rate)
    if build_only:
        return "", info
    work = (
        template
        if in_place
        else f"{template}_run" + (f"_{os.environ['BENCH_RUN_NAME']}" if os.environ.get("BENCH_RUN_NAME") else "")
    )
    if not in_place:
        drop_pair(base, work)
        t = time.perf_counter()
        # what a run in place left connected to the template (the dashboard's data-views writer in ours) is ended:
        # a template is copied only with no other session on it
        _sql(base, TERMINATE_ON % (template, ours_name(template)))
        for name, source in ((work, template), (ours_name(work), ours_name(template))):
            _sql(base, f'CREATE DATABASE "{name}" TEMPLATE "{source}" STRATEGY FILE_COPY')
        info["copy_s"] = round(time.perf_counter() - t, 1)
    # a query that would fill the disk fails instead (a failed baseline is reported); reset on a template
    _sql(
        base,
        f"ALTER DATABASE \"{work}\" SET temp_file_limit = '{temp_file_limit}'"
        if temp_file_limit
        else f'ALTER DATABASE "{work}" RESET temp_file_limit',
    )
    dsn = apart(base, work)
    migrate(dsn, DIMS)  # migrations added since the template was built (no-op otherwise)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # a template built earlier has expiries that now fall inside this run: move them past it, so
        # that the expired count and the sweep after it see the same documents
        info["expiries_moved"] = conn.execute(MOVE_EXPIRIES_OUT_OF_RUN, {"window": generate_store.RUN_WINDOW}).rowcount
        conn.execute("VACUUM ANALYZE")  # statistics and visibility map of the copy
        conn.execute("CHECKPOINT")  # the build's and the copy's writes flushed before anything is timed
    info["run_copy_bytes"] = database_bytes(base, work)
    log(f"run {'in place on the template' if in_place else 'copy'} {work}: {info['run_copy_bytes'] / 1e9:.2f} GB")
    return dsn, info


def counts(db: Database) -> dict[str, int]:
    row = db.fetch_one("""
        SELECT (SELECT count(*) FROM store) AS store, (SELECT count(*) FROM store_vectors) AS store_vectors,
               (SELECT count(DISTINCT prefix) FROM store WHERE prefix LIKE 'clientes.%%') AS customer_namespaces,
               (SELECT count(*) FROM store WHERE expires_at < now()) AS expired,
               (SELECT count(DISTINCT thread_id) FROM checkpoints) AS threads,
               (SELECT count(*) FROM checkpoints) AS checkpoints,
               (SELECT count(*) FROM checkpoint_blobs) AS checkpoint_blobs,
               (SELECT count(*) FROM checkpoint_writes) AS checkpoint_writes,
               (SELECT count(*) FROM core_conversations) AS conversations,
               (SELECT count(*) FROM core_memory_writes) AS memory_writes""")
    return {k: int(v) for k, v in row.items()}


# --- measurements ------------------------------------------------------------------------------


def python_decode_ms(db: Database, sql: str, params: dict, decode: Callable[[str, bytes], Any], runs: int) -> float:
    """Fetch rows (type, blob) and decode each in Python: the baseline of a decoder in SQL."""

    def go() -> None:
        for r in db.fetch(sql, params):
            decode(r["type"], r["blob"])

    return bench_pages.median_ms(go, runs)


# auto_explain for one more call of a query over its target: the plans of its statements over the target
# (nested ones too: the SQL decoder is PL/pgSQL), from the server's log
EXPLAIN_SETTINGS = {
    "session_preload_libraries": "auto_explain",
    "auto_explain.log_min_duration": f"{QUERY_TARGET_MS:.0f}ms",
    "auto_explain.log_analyze": "on",
    "auto_explain.log_buffers": "on",
    "auto_explain.log_nested_statements": "on",
}


def explained(dsn: str, server_log: Path, fn: Callable[[], Any]) -> str:
    """Run `fn` once more with auto_explain on for its database; returns what the server logged."""
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]

    def configure(on: bool) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for setting, value in EXPLAIN_SETTINGS.items():
                db, guc = pgsql.Identifier(name), pgsql.SQL(setting)
                conn.execute(
                    pgsql.SQL("ALTER DATABASE {} SET {} = {}").format(db, guc, pgsql.Literal(value))
                    if on
                    else pgsql.SQL("ALTER DATABASE {} RESET {}").format(db, guc)
                )
        reset_pool(dsn)  # database settings apply to new connections

    configure(True)
    start = server_log.stat().st_size
    try:
        fn()
    finally:
        configure(False)
    with server_log.open("rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    return text.strip() or f"(no single statement over {QUERY_TARGET_MS:.0f} ms: the time is in many shorter ones)"


# Baseline of "which threads are stuck on an interrupt?" without the summary: the live checkpoint tables.
LIVE_INTERRUPTED = """
SELECT w.thread_id FROM checkpoint_writes w
WHERE w.channel = '__interrupt__' AND w.checkpoint_ns = ''
  AND w.checkpoint_id = (SELECT max(c.checkpoint_id) FROM checkpoints c
                         WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = '')"""
# The summary at 10x: every row again under 9 more thread ids (what 10M writes / 1M threads would hold), plus 1 % of
# the threads stopped (interrupted, a third of them paused) and 0.5 % errored so the status searches find something.
SYNTHETIC_10X = """
INSERT INTO core_thread_summary (thread_id, created_at, updated_at, checkpoint_id, step, status, agent, metadata)
SELECT s.thread_id || '-x' || k, s.created_at - k * interval '1 minute', s.updated_at - k * interval '1 minute',
       s.checkpoint_id, s.step, s.status, s.agent, s.metadata
FROM core_thread_summary s CROSS JOIN generate_series(1, 9) AS k"""
MARK_STATUSES = """
UPDATE core_thread_summary SET status = CASE WHEN hashtext(thread_id) % 200 = 0 THEN 'error'
                                            WHEN hashtext(thread_id) % 300 = 0 THEN 'paused' ELSE 'interrupted' END
WHERE hashtext(thread_id) % 100 = 0"""


def measure_thread_search(
    db: Database, query: Callable[..., Any], log: Callable[[str], None], info: dict, label: str
) -> None:
    """Issue 31: every thread search and the token/cost reads (core/history/thread_search.py, usage.py)."""
    from core.config import DEMO_PRICES
    from core.history import thread_search as ts
    from core.history import usage
    from core.operations.exporter import usage_metrics

    n = db.ours.fetch_one(  # the summary is the dashboard's (its own database)
        "SELECT count(*) AS n, count(*) FILTER (WHERE status <> 'idle') AS flagged FROM core_thread_summary"
    )
    info[f"thread_summary_{label}"] = n
    log(f"thread summary ({label}): {n['n']:,} threads, {n['flagged']:,} interrupted, paused or errored")
    page = f"Buscar hilos ({label})"
    customer = db.ours.fetch_one(
        "SELECT metadata ->> 'cliente_id' AS c FROM core_thread_summary "
        "WHERE metadata ? 'cliente_id' ORDER BY thread_id LIMIT 1"
    )
    agent = db.ours.fetch_one("SELECT agent FROM core_thread_summary WHERE agent IS NOT NULL LIMIT 1")
    searches = {
        "stuck on an interrupt (preset)": ts.preset("stuck"),
        "errored in the last hour (preset)": ts.preset("failed"),
        "no filter, page 1 + total": ts.ThreadQuery(),
        "no filter, page 400 (offset 9,975)": ts.ThreadQuery(offset=9_975),
        "metadata cliente_id = one customer": ts.ThreadQuery(
            metadata_key="cliente_id", metadata_value=(customer or {}).get("c") or "C9"
        ),
        "metadata key cliente_id present": ts.ThreadQuery(metadata_key="cliente_id"),
        "agent = one agent, oldest first": ts.ThreadQuery(agent=(agent or {}).get("agent") or "x", order="asc"),
        "active in the last 24 h, by creation": ts.ThreadQuery(window="24h", sort="created_at"),
        "interrupted, one agent, 30 days": ts.ThreadQuery(
            status="interrupted", window="30d", agent=(agent or {}).get("agent") or "x"
        ),
    }
    for name, q in searches.items():
        baseline = (
            (
                "live checkpoint tables (latest root checkpoint with an __interrupt__ write)",
                lambda: db.fetch(LIVE_INTERRUPTED),
            )
            if name.startswith("stuck") and label == "1M"
            else ("-", None)
        )
        query(page, f"search_threads: {name}", lambda q=q: ts.search_threads(db, q), baseline[0], baseline[1])
    query(page, "agents (picker)", lambda: ts.agents(db))
    today = date.today()
    month = (today - timedelta(days=29), today)
    query(page, "usage_by_agent(30 days)", lambda: usage.usage_by_agent(db, *month, DEMO_PRICES))
    query(page, "usage_by_day(30 days)", lambda: usage.usage_by_day(db, *month, DEMO_PRICES))
    query(page, "usage_by_thread(30 days, 100)", lambda: usage.usage_by_thread(db, *month, DEMO_PRICES, 100))

    def scrape() -> Any:
        with db.connection() as conn:
            return usage_metrics(conn, DEMO_PRICES)

    query(page, "exporter: threads by status + LLM tokens/cost", scrape)


def thread_search_section(db: Database, query: Callable[..., Any], log: Callable[[str], None], info: dict) -> None:
    """Fill the summary on this copy (migration 080 rewinds the extraction once on an upgraded database: the
    backfill a production upgrade runs in its next sweep), measure at 1M, then on a 10x summary (synthetic)."""
    t = time.perf_counter()
    done = tool_calls.extract(
        db,
        on_batch=lambda r: (
            r.batches % 100 == 0 and log(f"  backfill: {r.checkpoints:,} checkpoints, {r.threads:,} thread summaries")
        ),
    )
    info["thread_summary_backfill"] = {
        "s": round(time.perf_counter() - t, 1),
        "checkpoints": done.checkpoints,
        "writes": done.writes,
        "threads": done.threads,
        "usages": done.usages,
    }
    log(f"thread summary backfill (full re-extraction): {info['thread_summary_backfill']}")
    with psycopg.connect(db.ours.dsn, autocommit=True) as conn:
        conn.execute(MARK_STATUSES)
        conn.execute("VACUUM ANALYZE core_thread_summary")
    measure_thread_search(db, query, log, info, "1M")
    with psycopg.connect(db.ours.dsn, autocommit=True) as conn:
        t = time.perf_counter()
        conn.execute(SYNTHETIC_10X)
        conn.execute("VACUUM ANALYZE core_thread_summary")
        info["synthetic_10x_s"] = round(time.perf_counter() - t, 1)
    measure_thread_search(db, query, log, info, "synthetic 10x summary")


def run(
    base: str,
    *,
    docs: int,
    customers: int,
    threads: int,
    writes: int,
    erasure_docs: int = 2500,
    runs: int = 5,
    renders: int = 3,
    rebuild: bool = False,
    server_log: Path | None = None,
    log: Callable[[str], None] = print,
    temp_file_limit: str | None = None,
    in_place: bool = False,
    only: str | None = None,
) -> tuple[list[Figure], dict]:
    """Build (or reuse) the database, measure everything on a fresh copy; returns (figures, info).
    With `in_place`, on the template itself: every read, the erasure of the large customer (then restored by
    the builder's own code path, so the template stays as built) and the sweep job's storage and coverage
    steps, but not the seed loop, the register or the sweep's deletions, which a copy would absorb.
    With `server_log` (the embedded server's log file), each query over its target is run once more
    under auto_explain and its plans are kept in info["explain"]."""
    dsn, info = database(
        base,
        docs,
        customers,
        threads,
        writes,
        erasure_docs,
        log,
        rebuild,
        temp_file_limit=temp_file_limit,
        in_place=in_place,
        touch_template=only is None,
    )
    db = Database(dsn)
    info["rows"] = counts(db)
    log(f"rows: {info['rows']}")
    figures: list[Figure] = []
    today = date.today()
    month = (today - timedelta(days=29), today)

    def query(
        page: str,
        name: str,
        fn: Callable[[], Any],
        baseline: str = "-",
        baseline_fn: Callable[[], Any] | None = None,
        target: float | None = QUERY_TARGET_MS,
    ) -> Figure:
        ms, baseline_ms = bench_pages.median_ms(fn, runs), None
        if baseline_fn:
            try:
                baseline_ms = bench_pages.median_ms(baseline_fn, runs)
            except DatabaseUnavailable as exc:  # e.g. a live aggregate's sort out of temp space at 10M
                baseline = f"{baseline} (failed: {str(exc).split(': ', 1)[-1].splitlines()[0]})"
        fig = Figure(page, name, ms, baseline, baseline_ms, target)
        figures.append(fig)
        log(f"  {page}: {name} {fig.ms:.1f} ms" + (f" (baseline {fig.baseline_ms:.1f} ms)" if fig.baseline_ms else ""))
        if fig.meets_target is False and server_log is not None:
            info.setdefault("explain", {})[f"{page}: {name}"] = explained(dsn, server_log, fn)
        return fig

    def render(page: str, thread: str | None = None) -> Figure:
        path, params, click = PAGES[page]
        params = dict(params, **({"thread": thread} if thread else {}))
        fig = Figure(
            page,
            "page render (AppTest, empty data cache)",
            bench_pages.page_render_ms(dsn, path, params, click, runs=renders, timeout=RENDER_TIMEOUT_S),
            target_ms=RENDER_TARGET_MS,
        )
        figures.append(fig)
        log(f"  {page}: render {fig.ms:.1f} ms")
        return fig

    def naive(name: str) -> Callable[[], Any]:
        return lambda: db.fetch(bench_pages.NAIVE[name].replace("%", "%%"))

    if only == "search" and in_place:
        raise SystemExit("--only search writes a synthetic summary: not on the template (--in-place)")
    if only == "search":  # issue 31's section alone (`--only search`): the rest of the run takes hours at 1M
        thread_search_section(db, query, log, info)
        return figures, info

    # Memoria
    log("Memoria")
    query("Memoria", "memory_totals", lambda: reads.memory_totals(db), "naive live count", naive("memory_totals"))
    query(
        "Memoria",
        "documents_by_root",
        lambda: reads.documents_by_root(db),
        "naive live GROUP BY",
        naive("documents_by_root"),
    )
    query(
        "Memoria", "top_prefixes(20)", lambda: reads.top_prefixes(db, 20), "naive live GROUP BY", naive("top_prefixes")
    )
    query(
        "Memoria",
        "oversized_customers",
        lambda: reads.oversized_customers(db),
        "naive live GROUP BY",
        naive("oversized_customers"),
    )
    query("Memoria", f"find_namespaces('{SEED_LOOP_CUSTOMER}')", lambda: reads.find_namespaces(db, SEED_LOOP_CUSTOMER))
    query(
        "Memoria",
        f"namespace_items(clientes.{SEED_LOOP_CUSTOMER}, 50)",
        lambda: reads.namespace_items(db, f"clientes.{SEED_LOOP_CUSTOMER}", 50, 0),
    )
    render("Memoria")

    # Preferencias
    log("Preferencias")
    # the page reads tool calls extracted from the checkpoints (done on the template): the sweep job's
    # incremental step on this copy
    extract_s, extracted = timed_ms(lambda: tool_calls.extract(db))
    info["tool_call_extraction"] = {"ms": round(extract_s, 1), "writes": extracted.writes, "calls": extracted.calls}
    log(f"tool-call extraction step: {extracted.writes:,} writes in {extract_s:,.0f} ms")
    query("Preferencias", "preference_daily(30 days)", lambda: preferences.preference_daily(db, *month))
    query("Preferencias", "preference_by_tipo(30 days)", lambda: preferences.preference_by_tipo(db, *month))
    query(
        "Preferencias",
        "writing_conversations(30 days, 50)",
        lambda: preferences.writing_conversations(db, *month, 50, 0),
    )
    query(
        "Preferencias",
        "writing_conversation_count(30 days)",
        lambda: preferences.writing_conversation_count(db, *month),
    )
    recent_threads = [r["thread_id"] for r in db.ours.fetch(preferences.RECENT_THREADS, {"threads": 500})]
    applied = preferences.preferences_applied(db, 500)
    info["preferences_applied"] = {
        "threads": len(recent_threads),
        "proposals": len(applied.proposals),
        "with_preference": applied.with_preference,
        "followed": applied.followed,
    }
    query(
        "Preferencias",
        "preferences_applied(500 recent threads, extracted tool calls)",
        lambda: preferences.preferences_applied(db, 500),
        "fetch + Python decode (core.checkpoint_json) of the same threads' writes",
        lambda: [
            payload_json(r["type"], r["blob"])
            for r in db.fetch("SELECT type, blob FROM checkpoint_writes WHERE thread_id = ANY(%s)", (recent_threads,))
        ],
    )
    query(
        "Preferencias",
        "preferences_applied(30 days, its 500 most recent threads)",
        lambda: preferences.preferences_applied(db, 500, *month),
    )
    render("Preferencias")

    # Barridos (before the sweep: expired documents waiting, empty log)
    log("Barridos")
    sweeps_calls = {
        "expired_by_root": lambda: sweep_reads.expired_by_root(db),
        "sweep_runs(200)": lambda: sweep_reads.sweep_runs(db, 200),
        "deleted_per_run(200)": lambda: sweep_reads.deleted_per_run(db, 200),
        "expiration_forecast(12 months)": lambda: sweep_reads.expiration_forecast(db),
    }
    for name, fn in sweeps_calls.items():
        query("Barridos", name, fn)
    render("Barridos")

    # Checkpoints: one thread (the newest copy of the preference + proposal template; copy 0 is old)
    log("Checkpoints")
    thread = _thread_id(1, "tpl-a")
    timeline = views.thread_timeline(db, thread)
    old_id, new_id = timeline["checkpoint_id"].iloc[-2:].tolist()
    customer = timeline["cliente_id"].dropna().iloc[0]
    info["checkpoints_thread"] = {
        "thread": thread,
        "checkpoints": len(timeline),
        "writes": int(views.thread_storage(db, thread)["writes"]),
    }
    query("Checkpoints", "find_thread", lambda: views.find_thread(db, thread))
    query("Checkpoints", "thread_storage", lambda: views.thread_storage(db, thread))
    query("Checkpoints", "thread_timeline", lambda: views.thread_timeline(db, thread))
    query(
        "Checkpoints",
        "step_writes (all steps, decoded in SQL)",
        lambda: views.step_writes(db, thread),
        "fetch + Python decode (core.checkpoint_json)",
        lambda: [
            payload_json(r["type"], r["blob"])
            for r in db.fetch("SELECT type, blob FROM checkpoint_writes WHERE thread_id = %s", (thread,))
        ],
    )
    query("Checkpoints", "checkpoint_diff (last two)", lambda: views.checkpoint_diff(db, thread, old_id, new_id))
    query("Checkpoints", "threads_of_customer (search)", lambda: views.threads_of_customer(db, customer))
    query("Checkpoints", "recent_threads (search)", lambda: views.recent_threads(db))
    # The Storage view reads core_thread_storage, which the sweep job recomputes; the refresh itself
    # (three full scans) is a job cost, measured here once with no page target.
    started = time.perf_counter()
    refreshed = storage.refresh_thread_storage(db)
    figures.append(
        Figure(
            "Checkpoints",
            f"refresh_thread_storage ({refreshed:,} threads; sweep job, not a page read)",
            (time.perf_counter() - started) * 1000,
            target_ms=None,
        )
    )
    # the rows as of that refresh (what the page shows once a sweep ran), vs counting them now
    query(
        "Checkpoints",
        "table_totals (Storage view, rows as of the last refresh)",
        lambda: storage.table_totals(db),
        "three exact count(*) now",
        lambda: db.fetch(storage.SELECT_TABLE_TOTALS),
    )
    query(
        "Checkpoints",
        "largest_threads(20) (Storage view, from core_thread_storage)",
        lambda: views.largest_threads(db, 20),
        "live aggregate over the three tables",
        lambda: db.fetch(views.LIVE_THREAD_STORAGE + " ORDER BY total_bytes DESC, thread_id LIMIT 20"),
    )
    render("Checkpoints", thread)

    # The SQL decoder over that thread's history (every write and blob), vs Python
    log("Decoder")
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    history = {"thread": thread}
    writes_sql = "SELECT type, blob FROM checkpoint_writes WHERE thread_id = %(thread)s"
    blobs_sql = "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %(thread)s"
    sql_ms = bench_pages.median_ms(
        lambda: (
            db.fetch(
                "SELECT core_checkpoint_payload(type, blob) FROM checkpoint_writes WHERE thread_id = %(thread)s",
                history,
            ),
            db.fetch(
                "SELECT core_checkpoint_payload(type, blob) FROM checkpoint_blobs WHERE thread_id = %(thread)s", history
            ),
        ),
        runs,
    )
    ref_ms = python_decode_ms(db, writes_sql, history, payload_json, runs) + python_decode_ms(
        db, blobs_sql, history, payload_json, runs
    )
    lg_ms = python_decode_ms(db, writes_sql, history, lambda t, b: serde.loads_typed((t, b)), runs) + python_decode_ms(
        db, blobs_sql, history, lambda t, b: serde.loads_typed((t, b)), runs
    )
    n = db.fetch_one(
        "SELECT (SELECT count(*) FROM checkpoint_writes WHERE thread_id = %(thread)s) + "
        "(SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %(thread)s) AS n",
        history,
    )["n"]
    name = f"SQL core_checkpoint_payload over one thread's history ({n} writes + blobs)"
    figures.append(Figure("Decoder", name, sql_ms, "fetch + Python core.checkpoint_json", ref_ms, QUERY_TARGET_MS))
    figures.append(
        Figure("Decoder", name, sql_ms, "fetch + langgraph JsonPlusSerializer.loads_typed", lg_ms, QUERY_TARGET_MS)
    )
    log(f"  decoder {sql_ms:.1f} ms vs {ref_ms:.1f} / {lg_ms:.1f} ms")
    figures.append(
        Figure(
            "Decoder",
            "one thread's writes from core_checkpoint_writes_view",
            bench_pages.median_ms(
                lambda: db.fetch("SELECT * FROM core_checkpoint_writes_view WHERE thread_id = %(thread)s", history),
                runs,
            ),
            target_ms=QUERY_TARGET_MS,
        )
    )

    # Degradación
    log("Degradación")
    query("Degradación", "summary", lambda: replica_health.summary(db))
    query("Degradación", "replicas", lambda: replica_health.replicas(db))
    query("Degradación", "episodes(200)", lambda: replica_health.episodes(db, limit=200))
    query("Degradación", "denials(200)", lambda: replica_health.denials(db, limit=200))
    query("Degradación", "refusals(200)", lambda: replica_health.refusals(db, limit=200))
    render("Degradación")

    # Borrado: the preview of the large customer (uncached on the page), then the erasure itself
    log("Borrado")
    query("Borrado", f"preview('{ERASED}')", lambda: evidence.preview(db, ERASED))
    # the page reads the coverage the sweep job computed (without one it counts it live, for at most
    # subjects.LIVE_COVERAGE_TIMEOUT_MS): that step, after the storage refresh above, as the sweep runs it
    ms, cov = timed_ms(lambda: subjects.refresh_coverage(db, storage_refreshed=True))
    figures.append(
        Figure(
            "Borrado",
            f"refresh_coverage ({cov.threads:,} threads; sweep job step, not a page read)",
            ms,
            target_ms=None,
        )
    )
    render("Borrado")
    before = evidence.preview(db, ERASED)
    info["erased_customer"] = {
        "customer": ERASED,
        "rows": {k: v for k, v in before.counts.items() if v},
        "threads": len(before.thread_ids),
    }
    if in_place:
        _erase_and_restore(db, figures, info, erasure_docs, log)
        db.ours.close()
        db.close()
        return figures, info
    seed_once_ms, seed_once_n = timed_ms(lambda: bench_erasure.seed_loop(db, SEED_LOOP_CUSTOMER))
    seed_rest_ms, seed_rest_n = timed_ms(lambda: bench_erasure.seed_loop_until_empty(db, SEED_LOOP_CUSTOMER))
    erase_ms, result = timed_ms(lambda: erasure.erase(db, ERASED, operator="bench"))
    left = {e.table: e.result for e in evidence.run_evidence(db, ERASED, evidence.find_threads(db, ERASED)) if e.result}
    assert result.status == "complete" and not left, (result.report, left)
    seed_left = {
        e.table: e.result
        for e in evidence.run_evidence(db, SEED_LOOP_CUSTOMER, evidence.find_threads(db, SEED_LOOP_CUSTOMER))
        if e.result
    }
    info["erasure"] = {
        "deleted": {k: v for k, v in result.deleted.items() if v},
        "passes": result.passes,
        "seed_loop_deleted": seed_once_n + seed_rest_n,
        "seed_loop_left_behind": seed_left,
    }
    figures.append(
        Figure(
            "Erasure job",
            f"erase('{ERASED}') complete ({result.deleted.get('store', 0):,} documents, "
            f"{len(result.thread_ids)} threads, every evidence query 0)",
            erase_ms,
            f"seed's loop on '{SEED_LOOP_CUSTOMER}', once ({seed_once_n:,} documents, nothing else)",
            seed_once_ms,
        )
    )
    figures.append(
        Figure(
            "Erasure job",
            f"erase('{ERASED}') complete",
            erase_ms,
            f"seed's loop on '{SEED_LOOP_CUSTOMER}' until its search is empty "
            f"({seed_once_n + seed_rest_n:,} documents; threads and logs left)",
            seed_once_ms + seed_rest_ms,
        )
    )
    log(f"  erase {erase_ms:.0f} ms vs seed loop {seed_once_ms:.0f} / {seed_once_ms + seed_rest_ms:.0f} ms")

    # Registro de borrados (one request now, plus its re-check)
    log("Registro de borrados")
    query("Registro de borrados", "register(500)", lambda: erasure_register.register(db))
    query("Registro de borrados", "rechecks(request)", lambda: erasure_register.rechecks(db, result.request_id))
    query(
        "Registro de borrados", "evidence_json(request)", lambda: erasure_register.evidence_json(db, result.request_id)
    )
    render("Registro de borrados")

    # A sweep: the job vs the bare store sweep + a set-based retention delete, each rolled back
    log("Sweep")
    expired_before = int(sweep_reads.expired_by_root(db)["expired"].sum())

    def rolled_back(fn: Callable[[psycopg.Connection], Any]) -> tuple[float, Any]:
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            t = time.perf_counter()
            result = fn(conn)
            elapsed = (time.perf_counter() - t) * 1000
            conn.rollback()
        return elapsed, result

    def bare_sweep(conn: psycopg.Connection) -> int:
        from core.memory.embeddings import OfflineHashEmbeddings
        from core.memory.store import build_store

        return build_store(conn, OfflineHashEmbeddings(DIMS), DIMS).sweep_ttl()

    def set_based_retention(conn: psycopg.Connection) -> int:
        old = [r["thread_id"] for r in conn.execute(sweep.SELECT_OLD_THREADS, (RETENTION_DAYS,)).fetchall()]
        for start in range(0, len(old), bench_sweep.BATCH):
            batch = old[start : start + bench_sweep.BATCH]
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                conn.execute(f"DELETE FROM {table} WHERE thread_id = ANY(%s)", (batch,))
        return len(old)

    ttl_ms, ttl_n = rolled_back(bare_sweep)
    ret_ms, ret_n = rolled_back(set_based_retention)
    job_ms, job = timed_ms(lambda: sweep.run_sweep(db, trigger="manual", retention_days=RETENTION_DAYS))
    assert job.status == "ok", job.error
    assert job.documents_deleted == ttl_n == expired_before, (job.documents_deleted, ttl_n, expired_before)
    assert job.threads_deleted == ret_n, (job.threads_deleted, ret_n)
    info["sweep"] = {
        "documents": job.documents_deleted,
        "vectors": job.vectors_deleted,
        "threads_deleted": job.threads_deleted,
    }
    figures.append(
        Figure(
            "Sweep job",
            f"run_sweep: {job.documents_deleted:,} expired documents + "
            f"{job.threads_deleted:,} threads older than {RETENTION_DAYS} days, logged",
            job_ms,
            "bare sweep_ttl() + list + set-based DELETE of the same threads",
            ttl_ms + ret_ms,
        )
    )
    log(f"  sweep job {job_ms:.0f} ms vs {ttl_ms:.0f} + {ret_ms:.0f} ms")

    # The Sweeps page right after that sweep (what an SRE sees after "sweep now"), then once `store`
    # is vacuumed (what autovacuum does later): a mass delete clears the visibility map, which the
    # index-only scans of the expiry reads depend on.
    for group, prepare in (
        ("Barridos (right after the sweep)", None),
        ("Barridos (after the sweep + VACUUM)", "VACUUM ANALYZE store"),
    ):
        log(group)
        if prepare:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(prepare)
        for name, fn in sweeps_calls.items():
            query(group, name, fn)
        figures.append(
            Figure(
                group,
                "page render (AppTest, empty data cache)",
                bench_pages.page_render_ms(dsn, PAGES["Barridos"][0], runs=renders, timeout=RENDER_TIMEOUT_S),
                target_ms=RENDER_TARGET_MS,
            )
        )
    log("Buscar hilos")  # last: its synthetic 10x summary must not reach the other sections
    thread_search_section(db, query, log, info)
    db.ours.close()
    db.close()
    return figures, info


def _erase_and_restore(
    db: Database, figures: list[Figure], info: dict, erasure_docs: int, log: Callable[[str], None]
) -> None:
    """In place: the erasure of the large customer, checked complete, then the customer written again by the
    builder's own code (bench_erasure.populate) and its threads token-indexed."""
    erase_ms, result = timed_ms(lambda: erasure.erase(db, ERASED, operator="bench"))
    left = {e.table: e.result for e in evidence.run_evidence(db, ERASED, evidence.find_threads(db, ERASED)) if e.result}
    assert result.status == "complete" and not left, (result.report, left)
    info["erasure"] = {"deleted": {k: v for k, v in result.deleted.items() if v}, "passes": result.passes}
    figures.append(
        Figure(
            "Erasure job",
            f"erase('{ERASED}') complete ({result.deleted.get('store', 0):,} documents, "
            f"{len(result.thread_ids)} threads, every evidence query 0)",
            erase_ms,
        )
    )
    log(f"  erase {erase_ms:.0f} ms; restoring {ERASED}")
    bench_erasure.populate(db, erasure_docs, 0, customer=ERASED)
    token_index.index_pending(db)


# --- output --------------------------------------------------------------------------------------


def table(figures: list[Figure], size: str, command: str) -> str:
    lines = [
        "| size | page / job | figure | ms (median) | baseline | baseline ms | ratio | target |",
        "|---|---|---|---:|---|---:|---:|---|",
    ]
    for f in figures:
        ratio = f"{f.ratio:.1f}x" if f.ratio else "-"
        target = (
            "-" if f.target_ms is None else (f"< {f.target_ms:.0f} ms " + ("ok" if f.meets_target else "**missed**"))
        )
        base = "-" if f.baseline_ms is None else f"{f.baseline_ms:.1f}"
        lines.append(f"| {size} | {f.page} | {f.name} | {f.ms:.1f} | {f.baseline} | {base} | {ratio} | {target} |")
    lines.append(f"\nCommand: `{command}`")
    return "\n".join(lines)


def _key(page: str, name: str, baseline: str) -> tuple[str, str, str]:
    """A figure's identity across sizes: names and baselines without their row counts."""
    return page, name.split(" (")[0], baseline.split(" (")[0]


def growth(figures: list[Figure], other: Path) -> str:
    """This run's figures against another size's (`--json` of that run): ms there, ms here, here / there."""
    then = json.loads(other.read_text())
    there = {_key(f["page"], f["name"], f["baseline"]): f["ms"] for f in then["figures"]}
    rows = then["info"]["rows"]
    lines = [
        f"Growth against {other} ({rows['store']:,} docs / {rows['threads']:,} threads / "
        f"{rows['checkpoint_writes']:,} writes):",
        "",
        "| page / job | figure | ms there | ms here | here / there |",
        "|---|---|---:|---:|---:|",
    ]
    for f in figures:
        was = there.get(_key(f.page, f.name, f.baseline))
        if was is not None:
            lines.append(
                f"| {f.page} | {f.name} | {was:.1f} | {f.ms:.1f} | {f.ms / was:.1f}x |"
                if was
                else f"| {f.page} | {f.name} | {was:.1f} | {f.ms:.1f} | - |"
            )
    return "\n".join(lines)


DATABASE_SIZES = ("docs", "customers", "threads", "writes", "erasure_docs")  # what names a template


def add_database_arguments(parser: argparse.ArgumentParser) -> None:
    """The production-sized database's options, for every benchmark measuring on it (its sizes, --data, --smoke)."""
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--customers", type=int, default=250_000)
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--writes", type=int, default=1_000_000)
    parser.add_argument("--erasure-docs", type=int, default=2_500, help="documents of each large customer")
    parser.add_argument("--data", type=Path, default=Path(".data/bench_production"))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run each: seconds")


def database_sizes(args: argparse.Namespace) -> dict[str, int]:
    """The sizes of `database()` from the options of `add_database_arguments` (SMOKE's with --smoke)."""
    source = SMOKE if args.smoke else vars(args)
    return {name: source[name] for name in DATABASE_SIZES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_database_arguments(parser)
    parser.add_argument("--runs", type=int, default=5, help="warm calls per query (median)")
    parser.add_argument("--renders", type=int, default=3, help="AppTest runs per page (median)")
    parser.add_argument("--rebuild", action="store_true", help="build the database again even if it exists")
    parser.add_argument("--json", type=Path, help="also write the figures and row counts here")
    parser.add_argument("--build-only", action="store_true", help="build the template (if missing) and stop")
    parser.add_argument(
        "--agents-write",
        type=float,
        default=0.0,
        metavar="RATE",
        help="with --build-only: agents put RATE store documents a second while the dashboard installs (the recount, "
        "the extraction, the token index), deleted at the end (bench/agents_writing.py)",
    )
    parser.add_argument(
        "--reinstall",
        action="store_true",
        help="with --build-only: on a template already built, drop the follower's slot and the dashboard's database, "
        "then install again (recount, extraction, token index): the install measured without building the data again",
    )
    parser.add_argument(
        "--temp-file-limit",
        help="PostgreSQL temp_file_limit of the run copy (e.g. 4GB): a query that would fill the disk fails instead",
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="measure on the template itself (no copy: for a "
        "disk without room for one); no seed loop, register or sweep deletions",
    )
    parser.add_argument(
        "--only",
        choices=["search"],
        help="measure one section only (search: thread search and "
        "token usage, issue 31, including the summary's backfill and a synthetic 10x summary)",
    )
    parser.add_argument("--compare", type=Path, help="the --json of a run at another size: print how each figure grew")
    args = parser.parse_args(argv)
    sizes = database_sizes(args) | (
        {"runs": SMOKE["runs"], "renders": SMOKE["renders"]}
        if args.smoke
        else {"runs": args.runs, "renders": args.renders}
    )
    args.data.mkdir(parents=True, exist_ok=True)
    base = embedded_dsn(args.data)
    print(f"embedded PostgreSQL in {args.data}; python {sys.version.split()[0]}; load {os.getloadavg()}", flush=True)
    started = time.perf_counter()
    if args.build_only:
        _, info = database(
            base,
            **database_sizes(args),
            log=lambda s: print(s, flush=True),
            rebuild=args.rebuild,
            build_only=True,
            agents_rate=args.agents_write,
            reinstall=args.reinstall,
        )
        print(json.dumps(info, default=str))
        return 0
    figures, info = run(
        base,
        log=lambda s: print(s, flush=True),
        rebuild=args.rebuild or args.smoke,
        server_log=args.data / "pg" / "log",
        temp_file_limit=args.temp_file_limit,
        in_place=args.in_place,
        only=args.only,
        **sizes,
    )
    info["total_s"] = round(time.perf_counter() - started, 1)
    info["load_after"] = os.getloadavg()
    command = "python -m bench.bench_production " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = info["rows"]
    size = f"{rows['store']:,} docs / {rows['threads']:,} threads / {rows['checkpoint_writes']:,} writes"
    plans = info.pop("explain", {})
    print("\n" + json.dumps(info, default=str))
    for figure, text in plans.items():
        print(f"\nEXPLAIN (ANALYZE, BUFFERS) of {figure}, by auto_explain:\n{text}")
    info["explain"] = plans
    print("\n" + table(figures, size, command.strip()))
    missed = [f for f in figures if f.meets_target is False]
    print(f"\n{len(figures)} figures; over target: " + (", ".join(f"{f.page}: {f.name}" for f in missed) or "none"))
    if args.compare:
        print("\n" + growth(figures, args.compare))
    if args.json:
        args.json.write_text(
            json.dumps({"info": info, "figures": [f.__dict__ for f in figures]}, default=str, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
