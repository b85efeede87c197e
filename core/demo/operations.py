"""A month of operations for the demo, through the real jobs and in the order it happened: sweeps every
few days, erasures in different weeks, a customer whose data came back after their erasure, and
degradation episodes of different lengths. Each runs inside `agent_memory_runtime.clock.simulated`, so the pages date it
on its replayed day (agent_memory_runtime.clock); the work itself is real. Called from core.demo.seed; it lives here
rather than in the job modules, which serve production."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agent_memory_runtime import clock
from core.db import Database, one
from core.operations.sweep import SweepResult, run_sweep
from core.privacy.erasure import ErasureResult, erase
from core.privacy.evidence import ROOT, preview

log = logging.getLogger(__name__)

COMEBACK_TEXT = "Por favor, contactadme siempre por WhatsApp."


@dataclass(frozen=True)
class MonthPlan:
    """When each operation happens, as replayed times: the scheduled sweep at 03:00 every 4 days, two
    erasures in different weeks, the first customer's return, three outages of different lengths."""

    sweeps: list[datetime]
    erasures: list[datetime]
    comeback: datetime
    outages: list[tuple[datetime, timedelta]]

    @classmethod
    def for_month(cls, midnight: datetime, days: int) -> MonthPlan:
        def day(fraction: float, hour: int, minute: int) -> datetime:
            ago = min(days - 1, max(1, round(days * fraction)))
            return midnight - timedelta(days=ago) + timedelta(hours=hour, minutes=minute)

        return cls(
            sweeps=[midnight - timedelta(days=d) + timedelta(hours=3) for d in range(days - 1, 0, -4)],
            erasures=[day(0.75, 11, 30), day(0.4, 16, 10)],
            comeback=day(0.55, 12, 0),
            outages=[
                (day(0.9, 10, 15), timedelta(minutes=4)),
                (day(0.5, 19, 40), timedelta(minutes=38)),
                (day(0.2, 8, 5), timedelta(hours=2, minutes=10)),
            ],
        )


@dataclass
class MonthReport:
    plan: MonthPlan
    sweeps: list[SweepResult] = field(default_factory=list)
    erasures: list[ErasureResult] = field(default_factory=list)
    comeback_customer: str | None = None


SELECT_DEMO_CANDIDATES = """
SELECT c.subject_id AS customer_id, max(c.last_turn_at) AS last_turn
FROM core_conversations c
WHERE c.subject_root = %(root)s AND NOT (c.subject_id = ANY(%(exclude)s))
  AND EXISTS (SELECT 1 FROM store s WHERE s.prefix = %(root)s || '.' || c.subject_id)
GROUP BY c.subject_id
ORDER BY max(c.last_turn_at), c.subject_id LIMIT %(limit)s"""


def demo_candidates(db: Database, *, exclude: Iterable[str] = (), limit: int = 1) -> list[tuple[str, datetime]]:
    """Demo customers who have documents, not in `exclude`, the longest silent first: (id, last turn)."""
    rows = db.fetch(SELECT_DEMO_CANDIDATES, {"root": ROOT, "exclude": list(exclude), "limit": limit}, read_only=False)
    return [(r["customer_id"], r["last_turn"]) for r in rows]


def erase_demo_customer(
    db: Database, *, exclude: Iterable[str] = (), operator: str = "demo", customer_id: str | None = None
) -> ErasureResult | None:
    """A real erasure of `customer_id`, by default the first of `demo_candidates`, so the register has a
    request to show. None if no customer qualifies."""
    if customer_id is None:
        candidates = demo_candidates(db, exclude=exclude)
        if not candidates:
            return None
        customer_id = candidates[0][0]
    started = time.monotonic()
    result = erase(db, customer_id, operator=operator)
    log.info("demo erasure of %s: %s in %.2f s", result.customer_id, result.status, time.monotonic() - started)
    return result


def month_of_operations(
    db: Database,
    plan: MonthPlan,
    *,
    exclude: Iterable[str],
    come_back: Callable[[str], Any],
    step: Callable[[int, int], None],
) -> MonthReport:
    """Sweeps, erasures and the return of the first erased customer (`come_back(customer_id)` runs their
    new conversation), in replayed-time order; `step(done, total)` after each. Each erasure is of one of
    the longest silent customers, an hour after their last turn at the earliest; the return comes two
    hours after that erasure at the earliest (always before today, whatever hour the seed runs at)."""
    report = MonthReport(plan)
    # customers whose erasure needs no residue decision (a DPO's judgement the demo does not fake): the first ones in
    # the candidates' order, each previewed (0.1-0.2 s of CPU; it changes no data) until enough are found
    candidates: list[tuple[str, datetime]] = []
    for c in demo_candidates(db, exclude=exclude, limit=4 * len(plan.erasures)):
        if len(candidates) == len(plan.erasures):
            break
        if not one(preview(db, c[0]).residue).proposed:
            candidates.append(c)
    erasures = [  # fewer candidates than planned erasures: fewer erasures
        (max(at, last + timedelta(hours=1)), "erasure", cid)
        for at, (cid, last) in zip(plan.erasures, candidates, strict=False)
    ]
    events = [(at, "sweep", None) for at in plan.sweeps] + erasures
    if erasures:
        report.comeback_customer = erasures[0][2]
        events.append((max(plan.comeback, erasures[0][0] + timedelta(hours=2)), "comeback", erasures[0][2]))
    events.sort(key=lambda e: e[0])
    for done, (at, kind, customer_id) in enumerate(events, start=1):
        with clock.simulated(at, running=True):
            if kind == "sweep":
                report.sweeps.append(run_sweep(db, trigger="demo"))
            elif kind == "erasure":
                report.erasures.append(one(erase_demo_customer(db, customer_id=customer_id)))
            else:  # the first erased customer talks to the agents again
                come_back(one(customer_id))
        step(done, len(events))
    return report


def leave_expired_notices(db: Database) -> None:
    """Two flash notices published through the real purchasing agent after the last sweep, left
    expired and not yet swept, so the pages have something to show."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from core.agents.retail import ContextoProveedor, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel
    from core.config import DEFAULT_DIMS
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store
    from core.migrate import stored_dims

    with db.connection() as conn:
        dims = stored_dims(conn) or DEFAULT_DIMS
    store = build_store(db.pool, OfflineHashEmbeddings(dims), dims)
    agent = build_agent("compras", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for pid, tema in (("P002", "promocion"), ("P007", "rotura_stock")):
        run_turn(
            agent,
            ContextoProveedor(pid),
            f"compras-{pid}-{tema}-flash",
            f"aviso {tema} (0.005 min): aviso relámpago de {pid}, válido unos segundos",
        )
    time.sleep(0.5)  # 0.005 min = 0.3 s: both are expired when seeding returns
