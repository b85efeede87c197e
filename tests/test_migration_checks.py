"""Applied migrations are matched by their text, not only their number (issue 24 #2): each row of
core_schema_migrations keeps the sha256 of the file it applied, and `python -m core.migrate` and the
dashboard's start stop, naming the file, when an applied file was edited, when the database has a
migration this code does not know, or (without AUTO_MIGRATE) when one is not applied yet. Rows applied
before checksums were kept are accepted when the file's text is one it had in this repository's history
(core/sql/HISTORY.sha256, checked against git here). The databases of older commits: test_migration_history.py."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import psycopg
import pytest
from conftest import DIMS, ROOT
from streamlit.testing.v1 import AppTest

from core.migrate import SQL_DIR, MigrationMismatch, check_schema, main, migrate, migration_files, released_checksums

APP = "../dashboard.py"
# Migrations that runners keeping no checksum applied (every text they had is in HISTORY.sha256): up to 050,
# and 055, which landed before the checksums.
LAST_UNCHECKED_VERSION = 50
UNCHECKED_VERSIONS = {*range(1, LAST_UNCHECKED_VERSION + 1), 55}


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def applied_rows(dsn: str) -> dict[int, dict]:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        return {r["version"]: r for r in conn.execute("SELECT * FROM core_schema_migrations ORDER BY version")}


def sql_copy(tmp_path, without_last: bool = False, without_newer_than: int | None = None):
    """A copy of core/sql (HISTORY.sha256 included) to edit; optionally without its newest migration (moved
    next to the copy) or without the migrations after version `without_newer_than`."""
    copy = tmp_path / "sql"
    shutil.copytree(SQL_DIR, copy)
    if without_last:
        newest = migration_files()[-1]
        (copy / newest.path.name).rename(tmp_path / newest.path.name)
    for m in migration_files(copy):
        if without_newer_than is not None and m.version > without_newer_than:
            m.path.unlink()
    return copy


def test_each_applied_migration_keeps_the_sha256_of_its_file(db):
    rows = applied_rows(db.dsn)
    files = migration_files()
    assert sorted(rows) == [m.version for m in files]
    for m in files:
        assert rows[m.version]["sha256"] == sha256_of(m.path.read_bytes()), m.path.name
        assert rows[m.version]["sha256_backfilled_at"] is None
    check_schema(db.dsn, DIMS)


def test_an_edited_applied_migration_stops_migrate_naming_the_file_and_changes_nothing(create_database, tmp_path):
    dsn = create_database(migrated=False)
    sql = sql_copy(tmp_path, without_last=True)
    migrate(dsn, DIMS, sql_dir=sql)
    newest = migration_files()[-1]
    shutil.move(tmp_path / newest.path.name, sql / newest.path.name)  # a pending migration...
    edited = sql / "036_register_chain.sql"  # ...and an applied one edited
    edited.write_text(edited.read_text() + "\n-- a fix someone made in place\n")
    before = applied_rows(dsn)

    with pytest.raises(MigrationMismatch) as caught:
        migrate(dsn, DIMS, sql_dir=sql)
    message = str(caught.value)
    assert "036_register_chain.sql" in message and "edited after it was applied" in message
    assert before[36]["sha256"][:12] in message and sha256_of(edited.read_bytes())[:12] in message
    assert "new migration" in message  # what to do instead
    assert applied_rows(dsn) == before  # the pending one was not applied either
    with pytest.raises(MigrationMismatch, match="036_register_chain.sql"):
        check_schema(dsn, DIMS, sql_dir=sql)


def test_a_version_the_code_does_not_know_stops_migrate_and_the_check(db):
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO core_schema_migrations (version, name, sha256) VALUES (998, 'from_a_newer_release', 'ab')"
        )
    for run in (lambda: migrate(db.dsn, DIMS), lambda: check_schema(db.dsn, DIMS)):
        with pytest.raises(MigrationMismatch) as caught:
            run()
        assert "998_from_a_newer_release.sql" in str(caught.value)
        assert "newer release" in str(caught.value)


def test_a_renamed_applied_migration_is_a_mismatch(create_database, tmp_path):
    dsn = create_database(migrated=False)
    sql = sql_copy(tmp_path)
    migrate(dsn, DIMS, sql_dir=sql)
    (sql / "036_register_chain.sql").rename(sql / "036_register_links.sql")
    with pytest.raises(MigrationMismatch, match=r"036_register_chain\.sql.*036_register_links\.sql"):
        migrate(dsn, DIMS, sql_dir=sql)


def test_without_auto_migrate_a_pending_migration_stops_the_check(create_database, tmp_path):
    dsn = create_database(migrated=False)
    migrate(dsn, DIMS, sql_dir=sql_copy(tmp_path, without_last=True))
    newest = migration_files()[-1].path.name
    with pytest.raises(MigrationMismatch, match=rf"{newest}.*python -m core.migrate"):
        check_schema(dsn, DIMS)
    assert migrate(dsn, DIMS) == [newest.removesuffix(".sql")]
    check_schema(dsn, DIMS)


def pre_checksum_database(create_database, tmp_path) -> str:
    """A database as the runners before checksums left it: migrations up to LAST_UNCHECKED_VERSION applied,
    core_schema_migrations without the checksum columns."""
    sql = sql_copy(tmp_path / "pre", without_newer_than=LAST_UNCHECKED_VERSION)
    dsn = create_database(migrated=False)
    migrate(dsn, DIMS, sql_dir=sql)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE core_schema_migrations DROP COLUMN sha256, DROP COLUMN sha256_backfilled_at")
    return dsn


def test_rows_applied_before_checksums_are_recorded_when_the_file_is_a_released_text(create_database, tmp_path):
    dsn = pre_checksum_database(create_database, tmp_path)
    check_schema(dsn, DIMS, sql_dir=sql_copy(tmp_path, without_newer_than=LAST_UNCHECKED_VERSION))  # read-only
    newer = [m.label for m in migration_files() if m.version > LAST_UNCHECKED_VERSION]
    assert migrate(dsn, DIMS) == newer
    rows = applied_rows(dsn)
    for m in migration_files():
        assert rows[m.version]["sha256"] == m.sha256
        assert (rows[m.version]["sha256_backfilled_at"] is not None) == (m.version <= LAST_UNCHECKED_VERSION)


def test_a_row_applied_before_checksums_with_an_unreleased_text_stops_migrate(create_database, tmp_path):
    dsn = pre_checksum_database(create_database, tmp_path)
    sql = sql_copy(tmp_path)
    edited = sql / "003_replica_health.sql"
    edited.write_text(edited.read_text().replace("-- One row per degradation episode", "-- One episode"))
    with pytest.raises(MigrationMismatch) as caught:
        migrate(dsn, DIMS, sql_dir=sql)
    assert "003_replica_health.sql" in str(caught.value) and "HISTORY.sha256" in str(caught.value)
    assert str(caught.value).count("\n- ") == 1  # the other files are released texts
    with psycopg.connect(dsn) as conn:  # nothing recorded, not even the column
        assert (
            conn.execute(
                "SELECT count(*) FROM information_schema.columns WHERE table_name = "
                "'core_schema_migrations' AND column_name = 'sha256'"
            ).fetchone()[0]
            == 0
        )


def test_the_cli_stops_with_the_message_and_a_nonzero_code(db, monkeypatch, capsys):
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute("UPDATE core_schema_migrations SET sha256 = repeat('0', 64) WHERE version = 36")
    monkeypatch.setenv("PG_AGENTES", db.dsn)
    monkeypatch.setenv("EMBEDDINGS_DIMS", str(DIMS))
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "036_register_chain.sql" in err and "Traceback" not in err


@pytest.mark.parametrize("auto_migrate", ["1", "0"])
def test_the_dashboard_start_stops_with_the_message(db, app_env, auto_migrate):
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute("UPDATE core_schema_migrations SET sha256 = repeat('0', 64) WHERE version = 36")
    app_env(db.dsn, AUTO_MIGRATE=auto_migrate)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert at.title[0].value == "No se puede abrir la base de datos de los agentes"
    assert "036_register_chain.sql" in at.error[0].value and "edited after it was applied" in at.error[0].value
    assert "esquema" in at.markdown[0].value  # the hint is about the schema, not the connection
    assert not at.metric


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def history_texts(path: str) -> set[str]:
    """sha256 of every text `path` had in the commits reachable from HEAD."""
    blobs = {
        git("rev-parse", f"{c}:{path}").strip() for c in git("rev-list", "--full-history", "HEAD", "--", path).split()
    }
    return {
        sha256_of(
            subprocess.run(["git", "-C", str(ROOT), "cat-file", "blob", b], check=True, capture_output=True).stdout
        )
        for b in blobs
    }


def test_history_lists_every_text_each_unchecked_migration_had_in_git():
    shallow = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True
    )
    assert shallow.stdout.strip() == "false", (
        f"HISTORY.sha256 is checked against the repository's full git history, which this checkout lacks "
        f"({shallow.stdout.strip() or shallow.stderr.strip()}): use a full clone (git fetch --unshallow)"
    )
    listed = released_checksums()
    unchecked = [m for m in migration_files() if m.version in UNCHECKED_VERSIONS]
    assert len(unchecked) > 20
    for m in unchecked:
        in_git = history_texts(f"core/sql/{m.path.name}")
        assert in_git, f"{m.path.name} has no history in git: a clone without history cannot check HISTORY.sha256"
        assert listed.get(m.path.name) == in_git, m.path.name
    assert set(listed) == {m.path.name for m in unchecked}
    assert len(listed["005_msgpack_decoder.sql"]) == 4 and len(listed["003_replica_health.sql"]) == 2
