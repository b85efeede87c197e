"""The demo looks like a month of operations, all through the real jobs (issue 13 item 2): sweeps spread
over days, erasures in different weeks, a customer whose data came back after an erasure, dated on their
replayed days (agent_memory_runtime.clock) and never in the future, whatever the hour the seed ran at. (The degradation
episodes need the embedded server:
tests/test_checkpointer.py::test_demo_seed_includes_real_outage_episodes_across_the_month.)"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from agent_memory_runtime import clock
from core.demo.operations import MonthPlan
from core.privacy import erasure_register


def _midnight(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.mark.parametrize("hour", [0, 12, 23])
def test_the_plan_depends_on_the_day_only_and_stays_in_the_past(hour):
    day = datetime(2026, 12, 3, tzinfo=UTC)
    plan = MonthPlan.for_month(_midnight(day + timedelta(hours=hour, minutes=30)), 30)
    assert plan == MonthPlan.for_month(day, 30)
    times = plan.sweeps + plan.erasures + [plan.comeback] + [at + length for at, length in plan.outages]
    assert max(times) < day and min(times) >= day - timedelta(days=29)
    assert len({s.date() for s in plan.sweeps}) == len(plan.sweeps) == 8
    assert len({length for _, length in plan.outages}) == 3


def test_the_clock_replays_a_moment_or_runs_on_from_it():
    at = datetime(2026, 11, 10, 3, 0, tzinfo=UTC)
    assert clock.shift() == timedelta(0) and clock.simulated_now() is None
    with clock.simulated(at):
        time.sleep(0.02)
        assert clock.now() == at and clock.simulated_now() == at
    with clock.simulated(at, running=True):
        time.sleep(0.05)
        assert at + timedelta(seconds=0.04) < clock.now() < at + timedelta(seconds=5)
        shift = clock.shift()
        assert abs((clock.real_now() + shift) - clock.now()) < timedelta(milliseconds=50)
    assert clock.shift() == timedelta(0)
    manual = clock.ManualClock(at)
    manual.advance(timedelta(minutes=38))
    assert manual() == at + timedelta(minutes=38)


def test_sweeps_every_four_days_dated_on_their_replayed_day(demo_db):
    rows = demo_db.fetch(
        "SELECT started_at, finished_at, status FROM core_sweep_log WHERE trigger = 'demo' ORDER BY started_at"
    )
    plan = demo_db.summary.month.plan
    assert [r["started_at"].replace(second=0, microsecond=0) for r in rows] == plan.sweeps
    assert all(r["status"] == "ok" for r in rows)
    # the real duration of each run, on its replayed day
    assert all(timedelta(0) <= r["finished_at"] - r["started_at"] < timedelta(minutes=2) for r in rows)


def test_erasures_weeks_apart_and_a_customer_whose_data_came_back(demo_db):
    register = erasure_register.register(demo_db).sort_values("requested_at")
    month = demo_db.summary.month
    assert list(register["customer_id"]) == [e.customer_id for e in month.erasures] and len(register) == 2
    assert (register["status"] == "complete").all()
    assert register["requested_at"].iloc[1] - register["requested_at"].iloc[0] >= timedelta(days=7)
    assert register["requested_at"].max() < _midnight(datetime.now(UTC))

    back = register.set_index("customer_id").loc[month.comeback_customer]
    assert bool(back["came_back"]) and back["rechecks_dirty"] > 0
    checks = erasure_register.rechecks(demo_db, int(back["id"])).sort_values("checked_at")
    # clean at the sweeps before the customer's return, dirty at every sweep after it
    assert list(checks["trigger"].unique()) == ["sweep_demo"]  # the demo month's sweeps, named as such (issue 54 #4)
    clean = list(checks["clean"])
    assert clean[0] and not clean[-1] and clean == sorted(clean, reverse=True)
    returned = demo_db.fetch_one(
        "SELECT min(started_at) AS at FROM core_conversations WHERE subject_id = %s", (month.comeback_customer,)
    )["at"]
    assert checks[checks["clean"]]["checked_at"].max() < returned < checks[~checks["clean"]]["checked_at"].min()
    assert back["requested_at"] < returned
    # what came back is real: the customer's new conversation wrote a preference document again
    assert (
        demo_db.fetch_one(
            "SELECT count(*) AS n FROM store WHERE prefix = %s", (f"clientes.{month.comeback_customer}",)
        )["n"]
        > 0
    )
    other = register.set_index("customer_id").drop(month.comeback_customer).iloc[0]
    assert not bool(other["came_back"]) and other["rechecks_dirty"] == 0


def test_one_last_sweep_on_every_page(demo_db, app_env):
    """Barridos, Almacenamiento and Borrado name the same run as the last sweep, by its id and logged start (the
    demo's replayed day), never the real time its refresh ran at (issue 40)."""
    import re

    from apptools import metric
    from babel.dates import format_datetime
    from streamlit.testing.v1 import AppTest

    last = demo_db.fetch_one(
        "SELECT id, started_at FROM core_sweep_log WHERE NOT dry_run AND status = 'ok' ORDER BY started_at DESC LIMIT 1"
    )
    named = (
        f"el barrido n.º {last['id']} ({format_datetime(last['started_at'], 'medium', tzinfo=UTC, locale='es')} UTC)"
    )
    app_env(demo_db.dsn, LOCAL_ROLES="sre,dpo")

    def page(path: str, **query: str) -> AppTest:
        at = AppTest.from_file("../dashboard.py", default_timeout=90)
        for k, v in query.items():
            at.query_params[k] = v
        at.run()
        at.switch_page(path).run()
        assert not at.exception, at.exception
        return at

    sweeps = page("app_pages/sweeps.py")
    assert metric(sweeps, f"Último barrido, n.º {last['id']}")
    storage = page("app_pages/checkpoints.py", view="storage")
    captions = [c.value for c in storage.caption]
    assert f"Filas exactas según {named} (las cuenta cada barrido)." in captions
    assert f"Calculados por {named}." in captions
    erasure = page("app_pages/erasure.py")
    coverage = [c.value for c in erasure.caption if "Cifras según" in c.value]
    assert coverage and all(c.endswith(f"Cifras según {named}.") for c in coverage), coverage
    # every run any of the three pages names is that one
    named_runs = {int(n) for at in (storage, erasure) for c in at.caption for n in re.findall(r"n\.º (\d+)", c.value)}
    assert named_runs == {last["id"]}


def test_the_demo_has_threads_to_practise_on(demo_db):
    """The SRE's one-click searches and the DPO's residue decision find something in the demo (issue 40): an
    interrupted and a paused thread (stuck), an errored one in the last hour (failed), and a residue thread in one
    customer's erasure preview, all written by the real agents on the seed's saver."""
    from core.demo.seed import PRACTICE
    from core.history import thread_search as ts
    from core.history import tool_calls
    from core.privacy.evidence import preview

    practice = demo_db.summary.practice
    assert sorted(practice.values()) == sorted(PRACTICE)
    while tool_calls.extract(demo_db).checkpoints:  # what the sweep (and a page view's catch-up) does
        pass
    kind = {v: k for k, v in practice.items()}
    stuck = set(ts.search_threads(demo_db, ts.preset("stuck")).threads["thread_id"])
    assert {kind["interrupted"], kind["paused"]} <= stuck
    failed = ts.search_threads(demo_db, ts.preset("failed")).threads
    assert kind["error"] in set(failed["thread_id"]) and set(failed["status"]) == {"error"}
    counts = ts.status_counts(demo_db)
    assert min(counts.counts[s] for s in ("interrupted", "paused", "error")) >= 1
    assert sum(counts.counts.values()) == counts.total
    # the staff note names a customer: their erasure preview proposes it, for the DPO to decide
    named = demo_db.fetch_one(
        "SELECT substring(d.payload::text FROM 'el cliente (C[0-9]+)') AS c FROM core_checkpoint_writes_view d "
        "WHERE d.thread_id = %s AND d.payload::text LIKE '%%el cliente C%%' LIMIT 1",
        (kind["residue"],),
    )["c"]
    residue = preview(demo_db, named).residue
    assert residue is not None and kind["residue"] in residue.proposed
