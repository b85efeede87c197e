"""Slot safety on screen (issue 37 item 4): the follower stopped while the agents keep writing through a stock
PostgresStore. The exporter's retained-WAL metric and the Degradation page's slot panel grow with the writes, the page
names the slot nobody reads; with no slot at all it says so, and nothing it cannot read is shown as a figure."""

from __future__ import annotations

import os
import threading
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


def shown_bytes(text: str) -> float:
    """The byte count a `human_bytes` figure in Spanish stands for ("3,2 MB": 3.2 x 1024^2, to its last digit)."""
    number, unit = text.split()
    return float(number.replace(".", "").replace(",", ".")) * 1024 ** ("B", "kB", "MB", "GB").index(unit)


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
        low = retained(dsn)
        assert low > before + 1_000_000
        at.run()
        high = retained(dsn)  # the server's WAL end moves with every database on it (other tests' writes too)
        grown = panel(at)["WAL retenido por la ranura"]
        assert grown != shown["WAL retenido por la ranura"]
        assert low <= shown_bytes(grown) + 0.05 * 1024**2 and shown_bytes(grown) - 0.05 * 1024**2 <= high, (
            grown,
            human_bytes(low),
            human_bytes(high),
        )
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


@pytest.fixture(scope="module")
def small_keep_server(tmp_path_factory):
    """A server of its own where a slot may keep 1 MB of WAL (max_slot_wal_keep_size) before it is invalidated."""
    from conftest import own_embedded_server

    servers = own_embedded_server(tmp_path_factory, "small-keep")
    base, _control = next(servers)  # started by core.db.embedded_dsn with wal_level = logical
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        conn.execute("SELECT pg_reload_conf()")
    yield base
    next(servers, None)


@pytest.mark.slow  # a server of its own, megabytes of WAL
def test_an_invalidated_slot_is_said_then_recreated_and_recounted(small_keep_server, app_env):
    """The follower down while the agents write past max_slot_wal_keep_size: PostgreSQL invalidates the slot. The
    Memory page says its figures are as of the last apply and the Degradation panel says the slot is lost; the
    follower then recreates the slot and recounts, every aggregate equals a recount, and the pages say so."""
    from conftest import dsn_for

    from core.capture.verify import differences
    from core.migrate import migrate

    with psycopg.connect(small_keep_server, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "keep"')
    dsn = dsn_for(small_keep_server, "keep")
    migrate(dsn, DIMS)
    catch_up(dsn)
    agents_write(dsn, 20)
    catch_up(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(3):  # past the 1 MB the slot may keep, in new segments, then a checkpoint invalidates it
            agents_write(dsn, 400)
            conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")
        assert conn.execute("SELECT wal_status FROM pg_replication_slots").fetchone() == ("lost",)
    app_env(dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/memory.py").run()
    assert not at.exception
    assert any("se perdió" in w.value for w in at.warning)  # as of the last apply, never shown as current
    at.switch_page(PAGE).run()
    assert metric(at, "Seguidor de cambios") == "ranura perdida"

    catch_up(dsn)  # what a follower does at its next start: a new slot, a recount
    assert differences(dsn) == {}
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT wal_status FROM pg_replication_slots").fetchone()[0] != "lost"
        assert conn.execute("SELECT recounted_at IS NOT NULL FROM core_capture_position").fetchone() == (True,)
    time.sleep(SHARE_S + 0.5)
    at.switch_page("app_pages/memory.py").run()
    assert not any("se perdió" in w.value for w in at.warning)
    drop_slot(dsn)


def write_past_the_limit(dsn: str) -> None:
    """Agents' writes over a few WAL segments, then a checkpoint: a slot held more than 1 MB behind is lost."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(3):
            agents_write(dsn, 400)
            conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")


@pytest.mark.slow  # a server of its own, megabytes of WAL
@pytest.mark.parametrize("when", ["during the recount", "before the first catch-up"])
def test_a_slot_lost_before_its_first_catch_up_stops_the_follower_with_the_wal_it_needed(small_keep_server, when):
    """Found at 10M documents: the recount after the slot's creation wrote more WAL than max_slot_wal_keep_size
    lets the new slot keep. Recreating it would recount and lose it again, forever; the follower stops instead
    with an error naming the setting and the WAL written since the slot's creation."""
    from conftest import dsn_for

    from core.capture.follower import Follower, SlotLostInRecount
    from core.migrate import migrate

    name = "lost_" + when.split()[0]
    with psycopg.connect(small_keep_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = dsn_for(small_keep_server, name)
    migrate(dsn, DIMS)
    agents_write(dsn, 20)
    follower = Follower(dsn)
    stop = threading.Event()
    if when == "during the recount":
        follower.on_slot_created.append(lambda: write_past_the_limit(dsn))
    else:
        assert follower.setup() is True
        write_past_the_limit(dsn)
    runner = threading.Thread(target=lambda: errors.append(run_until_error(follower, stop)), daemon=True)
    errors: list[BaseException | None] = []
    runner.start()
    runner.join(120)
    stop.set()
    assert not runner.is_alive(), "the follower kept recreating and recounting"
    assert isinstance(errors[0], SlotLostInRecount), errors
    message = str(errors[0])
    assert "max_slot_wal_keep_size = 1MB" in message and "MB of WAL were written since its creation" in message
    written = int(message.split("caught up after creating it: ")[1].split(" MB")[0].replace(",", ""))
    assert written >= 1  # measured, and past the 1 MB the slot could keep
    with psycopg.connect(dsn) as conn:  # one slot, the lost one: not recreated in a loop
        assert conn.execute("SELECT wal_status FROM pg_replication_slots WHERE database = %s", (name,)).fetchall() == [
            ("lost",)
        ]
    drop_slot(dsn)


def run_until_error(follower, stop) -> BaseException | None:
    try:
        follower.run(stop=stop, idle_sleep=0.05)
    except BaseException as exc:  # noqa: BLE001 - the test reads what stopped it
        return exc
    return None
