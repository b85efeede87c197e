"""Databases migrated by older commits of this repository reach today's schema (issue 24 #2).

For each commit below, a database is migrated by that commit's own code (`git archive`: its core/migrate.py
with its store/checkpointer setup() and its core/sql files, run as it ran then), then by today's; its
catalog (tests/schema_catalog.py: functions with their definition, SECURITY DEFINER, config, owner and ACL,
relations, columns, constraints, indexes, triggers, views...) must equal a freshly migrated database's.
The commits are those where an applied migration had an earlier text (003, 005, 036, 042, 043, 046 were
edited in place), and the last commit of each wave; every page then opens (AppTest) on the upgraded database. Data
tests: what the earlier 003 and 036 broke, and every page on the rows each wave's own code wrote (its demo, its sweeps:
a dry run, a real run and a run whose process died in it).
Needs the full git history (a shallow clone fails here, saying so, rather than passing)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from conftest import DIMS, ROOT, dsn_for
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from schema_catalog import differences, schema_catalog
from streamlit.testing.v1 import AppTest

from core.db import Database
from core.migrate import migrate, migration_files
from ui.i18n import STRINGS
from ui.navigation import SECTIONS

pytestmark = pytest.mark.slow

OLDER_COMMITS = {
    "67cc01381b38de8ba9990f7a704200aa6517dbde": "005 as first written; 003 before its idempotency keys",
    "6792ca174aa4f9adcf215a631af32e5c58f520f7": "005's second text",
    "79f3c50db2b5089a529e0b0b3b8c519a008f7846": "005's third text",
    "fc7d7c10715c360ddfa642c3dfa4a1b6631de5f9": "003 before its idempotency keys, 005 as today",
    "0fb98b54153bd88aef0fc600ac060b7058f4508e": "the last commit of the first wave (2026-12-02)",
    "54163d97d8feaafc30497b2431edd49c2c2d0a3a": "036 as first written, before 015 existed",
    "23117dcb6ac382910c93a37ee3da054a44fd4366": "036 as first written, 015 applied after it",
    "681c9dffde8e7ad148968037c4931850d68e740a": "the last commit of the second wave (2026-12-03)",
    "d6b4710a2a092f35d016080cf0766b43a68e9302": "042 and 043 as first written",
    "f407316ff5c940c37c186d87290b7f9747a70107": "043's second text",
    "54feda1d3a77624da1f647e2b7c76e87e87251db": "046 as first written (a PUBLIC definer core_root_counts_add)",
    "a1d09b47c354da800acdea51a5b116cbbf6d8017": "the last commit of the third wave, before 050",
    "dc1a99c893591c1c82cac1c1376972d3d9fce368": "the last commit before checksums (050 and 055 applied)",
}
EARLIER_003 = "fc7d7c10715c360ddfa642c3dfa4a1b6631de5f9"
EARLIER_036 = ("54163d97d8feaafc30497b2431edd49c2c2d0a3a", "23117dcb6ac382910c93a37ee3da054a44fd4366")
OLD_RUNNER = "import sys\nfrom core.migrate import migrate\nmigrate(sys.argv[1], int(sys.argv[2]))\n"
# The last commit of each wave, and the last before checksums: their own demo and sweeps write the rows.
WAVES = (
    "0fb98b54153bd88aef0fc600ac060b7058f4508e",
    "681c9dffde8e7ad148968037c4931850d68e740a",
    "a1d09b47c354da800acdea51a5b116cbbf6d8017",
    "dc1a99c893591c1c82cac1c1376972d3d9fce368",
)
# Run by that commit's own code: its demo, then its sweeps as an SRE and the CronJob ran them, the last one in a
# process that died at its TTL step (its row stays 'running', as a killed pod leaves it).
OLD_WRITER = """
import os, sys
from core.config import load_settings
from core.db import Database
try:
    from core.demo.seed import ensure_demo
except ImportError:  # the first wave's layout
    from core.demo import ensure_demo
try:
    from core.operations.sweep import run_sweep
except ImportError:
    from core.sweep import run_sweep

settings = load_settings()
db = Database.from_settings(settings)
assert ensure_demo(db, settings, customers=20) is not None
run_sweep(db, trigger="manual", dry_run=True, operator="sre")
run_sweep(db, trigger="scheduled")


def die(stage, fraction, detail):
    if stage == "ttl":
        os._exit(0)


run_sweep(db, trigger="manual", operator="sre", on_step=die)
sys.exit("the last run did not reach its TTL step")
"""
PAGE_SPECS = [spec for specs in SECTIONS.values() for spec in specs]
PAGES = [spec.path for spec in PAGE_SPECS]


def git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True).stdout


def require_commit(commit: str) -> None:
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    if found.returncode != 0:
        shallow = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True
        ).stdout.strip()
        pytest.fail(
            f"commit {commit} is not in this clone (shallow: {shallow}): these tests need the full "
            f"history of the repository (git fetch --unshallow)"
        )


def archived(commit: str, into) -> str:
    """That commit's core/ extracted under `into`; returns the folder (its PYTHONPATH)."""
    require_commit(commit)
    old = into / commit[:12]
    if not old.exists():
        with tarfile.open(fileobj=io.BytesIO(git("archive", "--format=tar", commit, "core"))) as archive:
            archive.extractall(old, filter="data")
    return str(old)


def run_old(commit: str, into, script: str, *args: str, **env: str) -> None:
    old = archived(commit, into)
    run = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=old,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": old, **env},
        timeout=240,
    )
    assert run.returncode == 0, f"{commit}'s own code failed:\n{run.stderr[-3000:]}"


def open_every_page(dsn: str, app_env) -> None:
    """Every page of the dashboard opens on `dsn` with no exception (AppTest, all roles), each in a session of its own.

    The dashboard runs once as a visit to `/` does (its home sends the user on to the first page); then each page is
    opened in a new session straight at its own hash, as a link to its URL opens it. Opening each page after a first
    run of home and the first page in its session (AppTest's documented way) ran them nine times more (two tests'
    pages: 5.3 s of CPU, now 3.9). AppTest can open a page before a session's first run only when it knows the pages
    st.navigation registered: those of the first session (its `_registered_pages`); the page's own title is checked,
    so that a page opened in its stead (the default one) is never taken for it."""
    app_env(dsn)
    home = AppTest.from_file("../dashboard.py", default_timeout=120)
    home.run()
    assert not home.exception, ("/", home.exception)
    registered = home._registered_pages
    assert {Path(str(info.get("script_path"))).resolve() for info in registered.values()} >= {
        (ROOT / page).resolve() for page in PAGES
    }, registered
    for spec in PAGE_SPECS:
        at = AppTest.from_file("../dashboard.py", default_timeout=120)
        at._registered_pages = dict(registered)
        at.switch_page(spec.path).run()
        assert not at.exception, (spec.path, at.exception)
        assert STRINGS[spec.heading] in [title.value for title in at.title], (spec.path, at.title)


@pytest.fixture(scope="module")
def fresh_catalog(create_database):
    return schema_catalog(create_database(prefix="fresh"))


@pytest.fixture(scope="module")
def old_templates(create_database, tmp_path_factory):
    """`old_templates(commit) -> name` of a database migrated by that commit's own code, once per module: 7 of the 20
    tests migrate a commit another test has migrated (the waves' data tests, the earlier 003 and 036)."""
    folder = tmp_path_factory.mktemp("old-code")
    made: dict[str, str] = {}

    def _template(commit: str) -> str:
        if commit not in made:
            dsn = create_database(migrated=False, prefix="oldtemplate")
            run_old(commit, folder, OLD_RUNNER, dsn, str(DIMS))
            made[commit] = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        return made[commit]

    return _template


@pytest.fixture
def migrated_as_of(pg_dsn, old_templates):
    """`migrated_as_of(commit) -> dsn`: a new database migrated by that commit's own code (a copy of the one it
    migrated: CREATE DATABASE ... TEMPLATE copies it file by file, as the same code would write it again)."""

    def _migrate(commit: str) -> str:
        template = old_templates(commit)
        name = f"old_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return dsn_for(pg_dsn, name)

    return _migrate


def applied(dsn: str) -> dict[int, dict]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return {r["version"]: r for r in conn.execute("SELECT * FROM core_schema_migrations")}


@pytest.mark.parametrize("commit", OLDER_COMMITS, ids=[f"{c[:7]} {why}" for c, why in OLDER_COMMITS.items()])
def test_a_database_of_an_older_commit_migrates_to_the_fresh_schema(commit, migrated_as_of, fresh_catalog, app_env):
    dsn = migrated_as_of(commit)
    before = applied(dsn)
    assert before and all("sha256" not in row for row in before.values())  # that runner kept no checksum

    migrate(dsn, DIMS)
    diffs = differences(fresh_catalog, schema_catalog(dsn))
    assert not diffs, f"{len(diffs)} differences from a fresh database:\n" + "\n".join(diffs)
    after = applied(dsn)
    for m in migration_files():
        assert after[m.version]["sha256"] == m.sha256, m.path.name
        assert (after[m.version]["sha256_backfilled_at"] is not None) == (m.version in before), m.path.name
    open_every_page(dsn, app_env)


@pytest.mark.parametrize("commit", WAVES, ids=[c[:7] for c in WAVES])
def test_every_page_opens_on_the_rows_an_older_release_wrote(commit, migrated_as_of, app_env, tmp_path):
    """An operator upgrading in place: that release's demo and sweeps wrote the data, today's code migrates it and
    serves it. The Sweeps page once crashed on the re-check a run in progress does not have yet."""
    dsn = migrated_as_of(commit)
    run_old(commit, tmp_path, OLD_WRITER, PG_AGENTES=dsn, EMBEDDINGS_DIMS=str(DIMS), DEMO_REPLICAS="0")
    with psycopg.connect(dsn) as conn:
        statuses = [r[0] for r in conn.execute("SELECT status FROM core_sweep_log ORDER BY id")]
    assert statuses[-3:] == ["dry_run", "ok", "running"], statuses
    migrate(dsn, DIMS)
    open_every_page(dsn, app_env)


def test_the_earlier_003_database_writes_denials_after_an_upgrade(migrated_as_of):
    """Rows written before the keys get keys of their own; the dual saver's idempotent writes work."""
    from agent_memory_runtime.replica_health import Episode, write_denials, write_episode

    dsn = migrated_as_of(EARLIER_003)
    at = datetime(2026, 12, 2, 12, tzinfo=UTC)
    with psycopg.connect(dsn, autocommit=True) as conn:
        episode_id = conn.execute(
            "INSERT INTO core_degradation_episodes (replica_id, host, pid, degraded_from, degraded_to, "
            "checkpoints_buffered, writes_buffered, ops_resynced) VALUES ('r0', 'h', 1, %s, %s, 1, 2, 3) RETURNING id",
            (at, at + timedelta(minutes=4)),
        ).fetchone()[0]
        for _ in range(2):
            conn.execute(
                "INSERT INTO core_guard_denials (episode_id, replica_id, tool, risk, denied_at) "
                "VALUES (%s, 'r0', 'anular_pedido', 'HIGH', %s)",
                (episode_id, at),
            )
        conn.execute(
            "INSERT INTO core_serde_refusals (replica_id, type_name, kind, refused_at) "
            "VALUES ('r0', 'os.system', 'msgpack_blocked', %s)",
            (at,),
        )

    migrate(dsn, DIMS)
    denial = {
        "tool": "anular_pedido",
        "risk": "HIGH",
        "thread_id": "cliente-C9-x",
        "subject_root": "clientes",
        "subject_id": "C9",
        "customer_id": "C9",
        "reason": "degraded",
        "denied_at": at,
        "key": str(uuid.uuid4()),
    }
    episode = Episode("r1", "h", 2, at, at + timedelta(minutes=1), "down", 1, 1, 2, 5.0, denials=[denial])
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert write_episode(conn, episode) is not None
        assert write_episode(conn, episode) is None  # the retry is a no-op, by its key
        write_denials(conn, "r1", [denial])  # same key: not doubled
        counts = conn.execute(
            "SELECT (SELECT count(DISTINCT denial_key) FROM core_guard_denials), "
            "(SELECT count(*) FROM core_guard_denials), "
            "(SELECT count(DISTINCT episode_key) FROM core_degradation_episodes), "
            "(SELECT count(refusal_key) FROM core_serde_refusals)"
        ).fetchone()
    assert counts == (3, 3, 2, 1)


def seal_registers(dsn: str) -> None:
    """Register rows as the code of those commits wrote them: final erasures (with NULL columns), a running
    one finished later, a re-check, an access export."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for status, report in (("complete", None), ("incomplete", "store rows came back"), ("failed", "timeout")):
            request = conn.execute(
                "INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator, status, thread_ids, "
                "counts_before, deleted) VALUES ('C9', 'clientes.C9', 'dpo@example.com', 'running', "
                "'{cliente-C9-a}', %s, '{}') RETURNING id",
                (Jsonb({"store": 4, "nested": None}),),
            ).fetchone()[0]
            conn.execute(
                "UPDATE core_erasure_register SET status = %s, report = %s, finished_at = now(), "
                "deleted = %s, passes = 1 WHERE id = %s",
                (status, report, Jsonb({"store": 4}), request),
            )
        conn.execute(
            "INSERT INTO core_erasure_rechecks (request_id, trigger, clean, counts, evidence) "
            "SELECT min(id), 'sweep', true, '{\"store\": 0}', '[]' FROM core_erasure_register"
        )
        conn.execute(
            "INSERT INTO core_access_register (customer_id, operator, format, lang, sha256, size_bytes, "
            "counts, sources) VALUES ('C9', 'dpo', 'json', 'es', repeat('a', 64), 10, '{\"store\": 1}', "
            "'[\"store\"]')"
        )


@pytest.mark.parametrize("commit", EARLIER_036, ids=["before 015", "015 after it"])
def test_registers_sealed_by_the_earlier_036_verify_after_an_upgrade(commit, migrated_as_of):
    from core.privacy.chain import verify

    dsn = migrated_as_of(commit)
    seal_registers(dsn)
    migrate(dsn, DIMS)
    db = Database(dsn)
    try:
        for chain in ("erasure", "access"):
            result = verify(db, chain)
            assert result.ok, result
        with psycopg.connect(dsn, autocommit=True) as conn:
            # after the upgrade: a resumed request's forward link, and new rows sealed by today's text
            first, failed = conn.execute("SELECT min(id), max(id) FROM core_erasure_register").fetchone()
            resumed = conn.execute(
                "INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator, "
                "status, finished_at) VALUES ('C9', 'clientes.C9', 'dpo', 'complete', now()) "
                "RETURNING id"
            ).fetchone()[0]
            conn.execute("UPDATE core_erasure_register SET resumed_by = %s WHERE id = %s", (resumed, failed))
        assert verify(db, "erasure").ok
        links = db.fetch_one("SELECT count(*) AS n FROM core_register_chain WHERE chain = 'erasure'")["n"]
        assert verify(db, "erasure").links == links == 5

        with psycopg.connect(dsn, autocommit=True) as conn:  # the seal still catches an edit of an old row
            conn.execute("UPDATE core_erasure_register SET counts_before = '{\"store\": 1}' WHERE id = %s", (first,))
        result = verify(db, "erasure")
        assert (result.ok, result.problem, result.table, result.row_id) == (
            False,
            "edited",
            "core_erasure_register",
            first,
        )
    finally:
        db.close()
