"""Time to the first rendered page from a fresh clone: an empty AGENT_MEMORY_DATA folder, the default embedded mode
with the demo seed on, a real chromium.

    python -m bench.bench_first_page [--runs 3] [--no-seed]

Prints, per run: seconds from `streamlit run` to its health endpoint answering, to the first page rendered in the
browser (its title visible: the page's shell while the embedded database starts), to the page filled with its first
figures (the Memory page's metrics, read once the database is ready), to the seeding message in the page's main area
(issue 40), to the first documents on the page (its "Documentos guardados" metric above 0: the page is read again
every 10 s while the seed runs), and until the background seed finished (the sidebar's status). `--no-seed`
(SEED_DEMO=0) stops at the filled page: the first page does not depend on the seed, which starts after it, and a run
takes seconds."""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench import st_server
from bench.st_server import CHROMIUM_ARGS, ROOT, free_port, wait_health  # noqa: F401  (ROOT: importers' name)

# CHROMIUM_ARGS, free_port and wait_health are bench/st_server.py's (named here too for the benches importing them)
FRESH_CLONE_DROPS = ("PG_AGENTES", "SEED_DEMO", "AUTO_MIGRATE", "DEMO_REPLICAS")


def launch(data_dir: Path, port: int, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """The dashboard as a fresh clone starts it: the default embedded mode in `data_dir`, not waited for."""
    proc, _ = st_server.launch(
        {"AGENT_MEMORY_DATA": str(data_dir), **(extra_env or {})}, port=port, drop=FRESH_CLONE_DROPS
    )
    return proc


def one_run(browser, seed: bool = True) -> tuple[float, float, float, dict[str, float]]:
    data_dir = Path(tempfile.mkdtemp(prefix="first-page-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    proc = launch(data_dir, port, None if seed else {"SEED_DEMO": "0", "DEMO_REPLICAS": "0"})
    try:
        wait_health(url, proc)
        up = time.monotonic() - started
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(url)
        page.get_by_test_id("stHeading").first.wait_for(timeout=120_000)
        first = time.monotonic() - started
        page.get_by_test_id("stMetric").first.wait_for(timeout=120_000)
        filled = time.monotonic() - started
        if not seed:
            page.close()
            return up, first, filled, {}
        seeding: dict[str, float] = {}
        page.get_by_test_id("stMain").get_by_text("Sembrando los datos de demostración").first.wait_for(timeout=60_000)
        seeding["seeding message"] = time.monotonic() - started
        documents = page.get_by_test_id("stMetric").filter(has_text="Documentos guardados")
        while re.sub(r"\D", "", documents.inner_text()) in ("", "0"):
            time.sleep(0.25)
        seeding["first documents"] = time.monotonic() - started
        page.get_by_text("Sembrados en").wait_for(timeout=600_000)
        seeding["seed finished"] = time.monotonic() - started
        page.close()
        return up, first, filled, seeding
    finally:
        st_server.stop_dashboard(proc)
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-seed", action="store_true", help="SEED_DEMO=0: stop at the filled page")
    args = parser.parse_args()
    firsts, filled_all = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=st_server.CHROMIUM, args=CHROMIUM_ARGS)
        for n in range(args.runs):
            up, first, filled, seeding = one_run(browser, seed=not args.no_seed)
            firsts.append(first)
            filled_all.append(filled)
            print(
                f"run {n + 1}: server up {up:.2f} s, first page {first:.2f} s, page filled {filled:.2f} s"
                + "".join(f", {what} {s:.1f} s" for what, s in seeding.items()),
                flush=True,
            )
        browser.close()
    print(f"first page: median {statistics.median(firsts):.2f} s, max {max(firsts):.2f} s over {args.runs} runs")
    print(f"page filled: median {statistics.median(filled_all):.2f} s, max {max(filled_all):.2f} s")


if __name__ == "__main__":
    main()
