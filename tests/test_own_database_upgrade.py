"""Issue 52 item 6: the upgrade in place. A database the current release wrote (the demo, seeded by the real agents,
sweeps, erasures and access exports: its registers and their hash chains included; and a database the articles'
agents wrote, swept, erased from and exported by the release) moves what the dashboard keeps
into the dashboard's own database: a dry run lists it and changes nothing; the move copies and verifies, recounts the
follower's state, verifies every register chain in ours, and only then drops the old tables; nothing of ours is left
in the agents' database but what core/sql/dashboard/ does not declare yet; running it again moves nothing."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from core.capture.follower import FOLLOWER_LOCK, drop_slot
from core.capture.verify import differences
from core.config import Settings
from core.db import Database, forget_dashboard_database, use_dashboard_database
from core.migrate import NotMoved, check_schema, migrate_dashboard
from core.own_database import AGENTS_OWN, MoveRefused, declared, move, plan
from core.privacy import chain, data_views
from tests.conftest import DIMS, dsn_for

pytestmark = pytest.mark.slow  # the demo seeded by the real agents


def tables_of(dsn: str) -> dict[str, int]:
    """core_* table -> rows, in `dsn`."""
    with psycopg.connect(dsn) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 'core\\_%%'"
                " AND relnamespace = 'public'::regnamespace ORDER BY 1"
            ).fetchall()
        ]
        return {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}  # type: ignore[index]


def database_exists(base: str, name: str) -> bool:
    with psycopg.connect(base) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


@pytest.fixture(scope="module")
def released(create_database):
    """A database the current release wrote with the default layout (everything in the agents' database)."""
    from core.demo.seed import ensure_demo

    dsn = create_database(prefix="released")
    database = Database(dsn)
    with ThreadPoolExecutor(1) as pool:  # the seed's sync saver refuses pytest-playwright's loop thread
        summary = pool.submit(
            ensure_demo, database, Settings(dsn=dsn, embeddings_dims=DIMS, auto_migrate=False), customers=16
        ).result()
    assert summary is not None
    from core.privacy import access

    customer = database.fetch_one(
        "SELECT subject_id AS c FROM core_conversations WHERE subject_root = 'clientes' GROUP BY 1 ORDER BY 1 LIMIT 1"
    )
    access.export(database, customer["c"], fmt="json", lang="es", operator="dpo@example.com")  # the access register
    database.close()
    yield dsn
    with contextlib.suppress(psycopg.Error):
        drop_slot(dsn)


@pytest.fixture(scope="module")
def released_by_articles(create_database):
    """A database the memory article's agents wrote (stock store and saver, agents we did not write), on which the
    current release ran as it does in production, default layout: a sweep, an erasure, an access export."""
    from foreign_agents import CUSTOMERS, write_article_agents

    from core.operations.sweep import run_sweep
    from core.privacy import access, erasure, evidence
    from core.privacy import subjects as subj

    dsn = create_database(prefix="relarticles")
    write_article_agents(dsn)
    database = Database(dsn)
    assert run_sweep(database, trigger="manual").status == "ok"
    # the article's threads name no customer: the DPO decides on those the residue scan found holding their values
    preview = evidence.preview(database, CUSTOMERS[0], subj.Attribution())
    decisions = {t: "erase" for t in preview.residue_threads}
    erased = erasure.erase(
        database, CUSTOMERS[0], operator="dpo@example.com", config=subj.Attribution(), decisions=decisions
    )
    assert erased.status == "complete", erased
    access.export(database, CUSTOMERS[1], fmt="json", lang="es", operator="dpo@example.com")
    database.close()
    yield dsn
    with contextlib.suppress(psycopg.Error):
        drop_slot(dsn)


def test_the_move_refuses_while_a_follower_runs_and_where_ours_holds_other_rows(released, pg_dsn):
    """Runs before the move below, on the same released database (the module's tests run in file order)."""
    agents = released
    ours = dsn_for(pg_dsn, str(psycopg.conninfo.conninfo_to_dict(agents)["dbname"]) + "_refused")
    with pytest.raises(MoveRefused, match="PG_DASHBOARD is not set"):
        plan(agents)
    before = tables_of(agents)
    use_dashboard_database(agents, ours)
    try:
        migrate_dashboard(ours)
        with pytest.raises(NotMoved, match="python -m core.own_database"):  # a start without the move is refused
            check_schema(agents, DIMS)
        with psycopg.connect(agents, autocommit=True) as holder:  # a follower of the old layout still running
            holder.execute("SELECT pg_advisory_lock(%s)", (FOLLOWER_LOCK,))
            with pytest.raises(MoveRefused, match="stop the dashboard's processes"):
                move(agents, log=lambda _: None)
        assert tables_of(agents) == before
        copies = sorted((before[m.table], m.table) for m in plan(agents).tables if m.action == "copy")
        assert copies and copies[-1][0] >= 2, f"no table of ours is copied with two rows or more: {copies}"
        table = copies[-1][1]
        with psycopg.connect(agents) as src, psycopg.connect(ours) as dst:  # ours already holds all but one row
            with src.cursor().copy(f'COPY "{table}" TO STDOUT (FORMAT binary)') as out:
                with dst.cursor().copy(f'COPY "{table}" FROM STDIN (FORMAT binary)') as into:
                    for chunk in out:
                        into.write(chunk)
            dst.execute(f'DELETE FROM "{table}" WHERE ctid = (SELECT min(ctid) FROM "{table}")')
        with pytest.raises(MoveRefused, match=f"{table} holds other rows in the dashboard's database"):
            move(agents, log=lambda _: None)
        assert tables_of(agents) == before  # nothing dropped, nothing copied left half-done in the agents' database
        with psycopg.connect(ours) as conn:
            assert conn.execute(f'SELECT count(*) FROM "{table}"').fetchone() == (before[table] - 1,)
    finally:
        forget_dashboard_database(agents)


def test_a_dry_run_lists_what_moves_and_changes_nothing_then_the_move_keeps_every_row_and_chain(released, pg_dsn):
    agents = released
    ours_name = str(psycopg.conninfo.conninfo_to_dict(agents)["dbname"]) + "_ours"
    ours = dsn_for(pg_dsn, ours_name)
    before = tables_of(agents)
    kept = declared()["table"]
    registers = {"core_erasure_register", "core_access_register", "core_register_chain"}
    assert all(before.get(t) for t in registers & set(kept)), before  # the demo wrote its registers
    use_dashboard_database(agents, ours)
    try:
        dry = plan(agents)
        assert not database_exists(pg_dsn, ours_name)  # nothing created, nothing changed
        assert tables_of(agents) == before
        moving = {m.table: m for m in dry.tables}
        assert set(moving) == {t for t in kept if t in before and t not in AGENTS_OWN}
        copies = {t for t, m in moving.items() if m.action == "copy"}
        assert all(moving[t].rows == before[t] for t in copies)
        assert {t for t, m in moving.items() if m.action == "recount"} == {
            t for t in moving if kept[t] == "001_capture.sql"
        }
        text = "\n".join(dry.lines())
        assert all(t in text for t in moving) and "password" not in text

        done = move(agents, log=lambda _: None)
        after = tables_of(agents)
        assert not set(moving) & set(after)  # the old tables are gone from the agents' database
        assert {t: after[t] for t in AGENTS_OWN if t in after} == {t: before[t] for t in AGENTS_OWN if t in before}
        in_ours = tables_of(ours)
        assert {t: in_ours[t] for t in copies} == {t: before[t] for t in copies}  # every copied row, in ours
        assert differences(agents) == {}  # the follower's state recounted in ours equals the agents' rows
        db = Database(agents)
        if "core_register_chain" in copies:  # the chains verify in ours, sealed as they were
            assert set(done.chains) == set(chain.CHAINS)
            for name in chain.CHAINS:
                result = chain.verify(db, name)
                assert result.ok, result
        assert plan(agents).tables == []  # run again: nothing left to move
        check_schema(agents, DIMS)  # a start without AUTO_MIGRATE finds both databases as this code expects
        assert move(agents, log=lambda _: None).tables == []
        db.ours.close()
    finally:
        forget_dashboard_database(agents)


PAGES = [
    ("app_pages/memory.py", {}),
    ("app_pages/preferences.py", {}),
    ("app_pages/sweeps.py", {}),
    ("app_pages/checkpoints.py", {}),
    ("app_pages/checkpoints.py", {"view": "search"}),
    ("app_pages/checkpoints.py", {"view": "cost"}),
    ("app_pages/checkpoints.py", {"view": "storage"}),
    ("app_pages/degradation.py", {}),
    ("app_pages/erasure.py", {"cliente": "{customer}"}),
    ("app_pages/erasure_register.py", {}),
    ("app_pages/access.py", {"cliente": "{customer}"}),
    ("app_pages/access_register.py", {}),
]


@pytest.mark.parametrize(("written", "customer"), [("released", "C3"), ("released_by_articles", "C19")])
def test_every_page_works_on_the_moved_database_and_reads_ours(written, customer, request, pg_dsn, app_env):
    """After the move above (this module's tests run in file order; the articles' agents' database is moved here):
    the dashboard started with PG_DASHBOARD opens every page without an error, and the Memory page's figures and the
    registers it lists are those of the data the release wrote."""
    from apptools import as_int, metric
    from streamlit.testing.v1 import AppTest

    agents = request.getfixturevalue(written)
    ours = dsn_for(pg_dsn, str(psycopg.conninfo.conninfo_to_dict(agents)["dbname"]) + "_ours")
    if not plan_moved(agents, ours):  # run alone: the move the test above makes
        use_dashboard_database(agents, ours)
        move(agents, log=lambda _: None)
        forget_dashboard_database(agents)
    assert plan_moved(agents, ours)
    app_env(agents, LOCAL_ROLES="manager,sre,dpo", PG_DASHBOARD=ours)
    try:
        for path, query in PAGES:
            at = AppTest.from_file("../dashboard.py", default_timeout=120)
            for k, v in query.items():
                at.query_params[k] = v.format(customer=customer)
            at.run()
            at.switch_page(path).run()
            assert not at.exception, (path, at.exception)
            assert not at.error, (path, [e.value for e in at.error])
            if path == "app_pages/memory.py":
                with psycopg.connect(agents) as conn:
                    documents = conn.execute("SELECT count(*) FROM store").fetchone()
                assert documents and as_int(metric(at, "Documentos guardados")) == documents[0] > 0
            if path == "app_pages/erasure_register.py":  # the demo's erasures, read from the copied register
                assert len(at.dataframe[0].value) == tables_of(ours)["core_erasure_register"] > 0
        # the customer's data the pages showed is in the views log, in ours (written before the test forgets it)
        assert data_views.flush(Database(agents))
        with psycopg.connect(ours) as conn:
            viewed = conn.execute("SELECT count(*) FROM core_data_views WHERE customer_id = %s", (customer,)).fetchone()
        assert viewed and viewed[0] > 0
    finally:
        data_views.queue_for(Database(agents)).close()  # its writer's marker removed from ours, not the agents'
        forget_dashboard_database(agents)


def plan_moved(agents: str, ours: str) -> bool:
    """Nothing of ours is left in the agents' database."""
    use_dashboard_database(agents, ours)
    try:
        return plan(agents).tables == []
    finally:
        forget_dashboard_database(agents)


def test_a_new_install_written_apart_before_the_move_keeps_its_rows(split_db):
    """`python -m core.demo` then the dashboard (the benchmarks' flow): the agents'-side history left our tables empty
    in the agents' database while the demo wrote ours apart. The move (the dashboard's start) drops the empty copies
    and keeps every row of ours, its register chain included, instead of refusing ours as "other rows"."""
    from core.operations import sweep
    from core.privacy import erasure
    from tests.capture_writes import our_agent_turns

    our_agent_turns(split_db.dsn, 5, 4)
    assert sweep.run_sweep(split_db, trigger="manual").status == "ok"
    customer = split_db.fetch_one("SELECT subject_id AS c FROM core_conversations ORDER BY 1 LIMIT 1")["c"]
    assert erasure.erase(split_db, customer, operator="dpo@example.com").status == "complete"
    before = tables_of(split_db.ours.dsn)
    assert before["core_sweep_log"] and before["core_erasure_register"] and before["core_tool_calls"]
    move(split_db.dsn, log=lambda _: None)
    assert plan(split_db.dsn).tables == []
    assert not set(tables_of(split_db.dsn)) - AGENTS_OWN  # only the agents' own tables left there
    assert tables_of(split_db.ours.dsn) == before
    assert chain.verify(split_db, "erasure").ok
