"""Slot safety on screen (issue 37 item 4): the follower stopped while the agents keep writing through a stock
PostgresStore. The exporter's retained-WAL metric and the Degradation page's slot panel grow with the writes, the page
names the slot nobody reads; with no slot at all it says so, and nothing it cannot read is shown as a figure."""

from __future__ import annotations

import os
import time

import psycopg
import pytest
from apptools import metric
from conftest import DIMS
from streamlit.testing.v1 import AppTest

from core.capture.follower import catch_up, drop_slot
from core.capture.status import read_status
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.operations.exporter import capture_metrics
from ui.tables import human_bytes

APP = "../dashboard.py"
PAGE = "app_pages/degradation.py"
SHARE_S = 2  # app_pages/degradation.py: one sample per this many seconds for the process


def agents_write(dsn: str, n: int) -> None:
    """Stock store puts of n customer documents of 4,000 hex characters each (2 KB of entropy: TOAST compression
    leaves them ~2 KB of WAL each, which the slot must keep)."""
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=psycopg.rows.dict_row) as conn:
        store = build_store(conn, OfflineHashEmbeddings(DIMS), DIMS)
        for i in range(n):
            store.put(("clientes", f"C{i % 50}"), f"nota-{i}", {"texto": os.urandom(2000).hex(), "i": i}, index=False)


def retained(dsn: str) -> int:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        metrics = {m.name: m.samples[0].value for m in capture_metrics(conn)}
        assert metrics["agent_memory_capture_running"] == 0  # nobody holds the follower lock
        value = read_status(conn).retained_bytes
        assert value is not None and metrics["agent_memory_capture_retained_wal_bytes"] == value
        return value


def panel(at) -> dict[str, str]:
    return {
        label: metric(at, label)
        for label in ("Seguidor de cambios", "Retraso del seguidor", "WAL retenido por la ranura")
    }


@pytest.mark.slow  # writes megabytes of WAL through a stock store
def test_a_stopped_follower_shows_the_retained_wal_growing(create_database, app_env):
    dsn = create_database(prefix="capture_slot")
    catch_up(dsn)  # the follower creates its slot, applies everything and stops: nobody consumes the slot now
    try:
        app_env(dsn)
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        at.switch_page(PAGE).run()
        assert not at.exception
        before = retained(dsn)
        shown = panel(at)
        assert shown["Seguidor de cambios"] == "parado"
        assert shown["Retraso del seguidor"] == "desconocido"  # no follower: its lag cannot be stated
        assert any("ningún seguidor la lee" in w.value for w in at.warning)

        agents_write(dsn, 600)  # over 1.2 MB of WAL while the follower is down
        time.sleep(SHARE_S + 0.5)  # the page's next sample
        at.run()
        after = retained(dsn)
        assert after > before + 1_000_000
        grown = panel(at)["WAL retenido por la ranura"]
        assert grown != shown["WAL retenido por la ranura"]
        assert grown == human_bytes(after) or grown == human_bytes(retained(dsn))
        # the room left before invalidation is a figure (the test server sets max_slot_wal_keep_size)
        assert metric(at, "Margen hasta invalidarla") not in ("desconocido", "sin límite")
    finally:
        drop_slot(dsn)


def test_without_a_slot_the_panel_says_so(create_database, app_env):
    app_env(create_database(prefix="capture_noslot"))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception
    assert metric(at, "Seguidor de cambios") == "sin ranura"
    assert metric(at, "WAL retenido por la ranura") == "desconocido"
    assert not any("ningún seguidor la lee" in w.value for w in at.warning)
