"""Smoke run of the production-scale benchmark (bench/bench_production.py) at tiny sizes, on the
session's embedded PostgreSQL: it builds its database (real agents, real serializer, COPY), then
produces every figure of every page, the decoder, the erasure and the sweep without an exception.
Timings are measured by the benchmark, never asserted here."""

from __future__ import annotations

import math

import psycopg
import pytest

from bench import bench_production as bp

pytestmark = pytest.mark.slow  # a benchmark


@pytest.fixture(scope="module", autouse=True)
def one_unit():
    """The module's tests share their worker's benchmark templates (bench_prod_*): one unit of work, in file order
    (tests/_scheduling.py), so no test copies a template while another's sessions are still on it."""
    return


PAGES = ["Memoria", "Preferencias", "Barridos", "Checkpoints", "Degradación", "Borrado", "Registro de borrados"]
RENDER = "page render (AppTest, empty data cache)"


def test_production_benchmark_smoke(pg_dsn, monkeypatch):
    import streamlit as st

    # the renders set these in os.environ; recording them here restores (or removes) them afterwards
    for key in ("PG_AGENTES", "EMBEDDINGS_DIMS", "AUTO_MIGRATE", "SEED_DEMO", "PG_DASHBOARD"):
        monkeypatch.setenv(key, "")
    monkeypatch.delenv("PG_DASHBOARD")  # unset during the run as before it (set above only to be removed afterwards)
    lines: list[str] = []
    try:
        figures, info = bp.run(pg_dsn, rebuild=True, log=lines.append, **bp.SMOKE)
    finally:
        st.cache_resource.clear()
        st.cache_data.clear()

    assert sorted(bp.PAGES) == sorted(PAGES)
    by_page: dict[str, list[bp.Figure]] = {}
    for f in figures:
        by_page.setdefault(f.page, []).append(f)
        assert isinstance(f.ms, float) and math.isfinite(f.ms), f
        if f.baseline != "-":
            assert f.baseline_ms is not None and math.isfinite(f.baseline_ms) and f.ratio is not None, f
    for page in PAGES + ["Barridos (right after the sweep)", "Barridos (after the sweep + VACUUM)"]:
        names = [f.name for f in by_page.get(page, [])]
        assert RENDER in names, (page, names)
        assert len(names) >= 2, (page, names)  # its core reads and its render
    # the figures compared against a baseline: naive queries, Python decoding, the seed's loop, the bare sweep
    assert {f.name for f in by_page["Memoria"] if f.baseline_ms} == {
        "memory_totals",
        "documents_by_root",
        "top_prefixes(20)",
        "oversized_customers",
    }
    assert any(f.baseline_ms for f in by_page["Preferencias"] if f.name.startswith("preferences_applied"))
    assert len([f for f in by_page["Decoder"] if f.baseline_ms]) == 2
    assert len([f for f in by_page["Erasure job"] if f.baseline_ms]) == 2
    assert len([f for f in by_page["Sweep job"] if f.baseline_ms]) == 1

    # the data the figures were measured on, and what the jobs did to it
    rows = info["rows"]
    assert rows["store"] > bp.SMOKE["docs"] and rows["store_vectors"] > 0 and rows["expired"] > 0
    assert rows["threads"] >= bp.SMOKE["threads"] and rows["checkpoint_writes"] >= bp.SMOKE["writes"]
    assert info["preferences_applied"]["proposals"] > 0 and info["preferences_applied"]["with_preference"] > 0
    assert info["erasure"]["deleted"]["store"] > bp.SMOKE["erasure_docs"] and info["erasure"]["seed_loop_left_behind"]
    assert info["sweep"]["documents"] == rows["expired"] and info["sweep"]["threads_deleted"] > 0

    printed = bp.table(figures, "smoke", "python -m bench.bench_production --smoke")
    assert printed.count("\n| smoke |") == len(figures)


def test_production_benchmark_in_place_keeps_the_template_as_built(pg_dsn, monkeypatch):
    """`--in-place` (a disk without room for a copy): every read and the erasure measured on the template itself,
    the erased customer written again by the builder's code, no run copy made."""
    import streamlit as st

    for key in ("PG_AGENTES", "EMBEDDINGS_DIMS", "AUTO_MIGRATE", "SEED_DEMO", "PG_DASHBOARD"):
        monkeypatch.setenv(key, "")
    monkeypatch.delenv("PG_DASHBOARD")  # unset during the run as before it (set above only to be removed afterwards)
    sizes = {k: v for k, v in bp.SMOKE.items()}
    template = "bench_prod_{docs}_{customers}_{threads}_{writes}_{erasure_docs}".format(**sizes)
    try:
        bp.run(pg_dsn, rebuild=True, log=lambda _s: None, **sizes)  # the template, as the copy-based run builds it
        with psycopg.connect(bp.dsn_for(pg_dsn, "postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{template}_run" WITH (FORCE)')
        figures, info = bp.run(pg_dsn, log=lambda _s: None, in_place=True, **sizes)
    finally:
        st.cache_resource.clear()
        st.cache_data.clear()
    (erase,) = [f for f in figures if f.page == "Erasure job"]
    assert erase.name.startswith(f"erase('{bp.ERASED}') complete") and math.isfinite(erase.ms)
    assert info["erasure"]["deleted"]["store"] > bp.SMOKE["erasure_docs"]
    assert any(f.name.startswith("refresh_coverage") for f in figures)
    assert not any(f.page.startswith("Sweep") or f.page == "Registro de borrados" for f in figures)
    with psycopg.connect(bp.dsn_for(pg_dsn, "postgres"), autocommit=True) as conn:
        assert not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (f"{template}_run",)).fetchone()
    with psycopg.connect(bp.dsn_for(pg_dsn, template)) as conn:
        n = conn.execute(
            "SELECT count(*) FROM store WHERE prefix = %s OR prefix LIKE %s",
            (f"clientes.{bp.ERASED}", f"clientes.{bp.ERASED}.%"),
        ).fetchone()[0]
        threads = conn.execute(
            "SELECT count(DISTINCT thread_id) FROM checkpoints WHERE thread_id LIKE %s", (f"cliente-{bp.ERASED}-%",)
        ).fetchone()[0]
    # written again as the builder wrote it: its documents (and the preference its conversations save), 3 threads
    assert bp.SMOKE["erasure_docs"] <= n <= bp.SMOKE["erasure_docs"] + 1 and threads == 3


def test_scope_benchmark_times_every_scoped_read(pg_dsn):
    """The store managers' scope benchmark (bench/bench_scope.py) on a copy of the smoke template: every read, scoped
    and not, timed; the mapping's refresh names stores for the customers."""
    from bench import bench_scope

    lines: list[str] = []
    scoped, scoped_info = bench_scope.run(pg_dsn, dict(bench_scope.SMOKE), 100, lines.append)
    assert scoped_info["refresh"]["with_store"] > 0 and scoped_info["customers_one_store"] > 0
    assert len(scoped) == 2 * 16 + 3 and all(isinstance(f[2], float) and math.isfinite(f[2]) for f in scoped)


def test_memory_history_benchmark_times_each_read_against_its_baseline(pg_dsn):
    """Issue 56's benchmark (bench/bench_memory_history.py) on a copy of the smoke template: every history, value at a
    time and flags read is timed with its baseline, the flags found in every scope."""
    from bench import bench_memory_history

    lines: list[str] = []
    figures, info = bench_memory_history.run(pg_dsn, dict(bench_memory_history.SMOKE), 100, lines.append)
    assert len(figures) == 10 and all(math.isfinite(ms) and math.isfinite(base) for _, ms, _, base in figures)
    assert info["history C9 (2,500 documents)"]["documents"] > 0 and "flags every store" in info


def test_generated_expiries_stay_out_of_the_run(create_database):
    """A 1M run crashed with `AssertionError: (195419, 195418, 195418)`: a document expired between
    the expired count and the sweep. Generated documents never expire within RUN_WINDOW of the build,
    and a template copied later has the expiries of its run's window moved past it."""
    from bench import generate_store

    dsn = create_database()
    generate_store.generate(dsn, 20_000, 5_000, threads=100)
    with psycopg.connect(dsn, autocommit=True) as conn:
        window = "expires_at >= now() AND expires_at < now() + interval '23 hours'"
        assert conn.execute(f"SELECT count(*) FROM store WHERE {window}").fetchone()[0] == 0
        expired = conn.execute("SELECT count(*) FROM store WHERE expires_at < now()").fetchone()[0]
        assert expired > 0  # the sweep still has expired documents to delete
        # a template built two days ago: what now falls in the run's window is moved out of it
        conn.execute("UPDATE store SET expires_at = expires_at - interval '2 days' WHERE expires_at >= now()")
        in_window = conn.execute(f"SELECT count(*) FROM store WHERE {window}").fetchone()[0]
        assert in_window > 0
        expired = conn.execute("SELECT count(*) FROM store WHERE expires_at < now()").fetchone()[0]
        moved = conn.execute(bp.MOVE_EXPIRIES_OUT_OF_RUN, {"window": generate_store.RUN_WINDOW}).rowcount
        assert moved == in_window
        assert conn.execute(f"SELECT count(*) FROM store WHERE {window}").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM store WHERE expires_at < now()").fetchone()[0] == expired


def test_the_benchmark_keeps_the_dashboards_tables_apart_and_the_servers_slot_setting(pg_dsn):
    """Issues 55 #4 and 52 #4: at 1M documents the follower's slot was lost during its recount while the dashboard's
    tables were in the agents' database (the recount's WAL past the embedded server's 1GB max_slot_wal_keep_size), and
    the bench raised the setting. It now keeps them in a database of their own beside each of its databases, as the
    embedded default does, and leaves the server's setting as it is: on the smoke template (built here if the tests
    above did not), nothing of ours holds a row in the agents' database, ours holds the follower's position and the
    extracted tool calls, and the template's slot was kept with the session server's setting untouched."""
    from core.migrate import left_with_rows

    sizes = {name: bp.SMOKE[name] for name in bp.DATABASE_SIZES}
    template = "bench_prod_{docs}_{customers}_{threads}_{writes}_{erasure_docs}".format(**sizes)
    bp.database(pg_dsn, **sizes, log=lambda _s: None, build_only=True)
    agents = bp.dsn_for(pg_dsn, template)
    assert left_with_rows(agents) == []
    with psycopg.connect(bp.dsn_for(pg_dsn, bp.ours_name(template))) as conn:
        slot = f"core_capture_{template}"
        assert (
            conn.execute("SELECT count(*) FROM core_capture_position WHERE slot_name = %s", (slot,)).fetchone()[0] == 1
        )
        assert conn.execute("SELECT count(*) FROM core_tool_calls").fetchone()[0] > 0
    with psycopg.connect(agents) as conn:
        kept = conn.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
        assert kept is not None and kept[0] != "lost"
        assert conn.execute("SHOW max_slot_wal_keep_size").fetchone()[0] == "128MB"  # tests/conftest.py's, as set
