"""Demo helpers that run the real jobs so the pages have something to show: a sweep run plus two expired
flash notices, and one real erasure of a demo customer. Called from core.demo.seed; they live here rather
than in the job modules, which serve production."""
from __future__ import annotations

import logging
import time
from typing import Iterable

from core.config import DEFAULT_DIMS
from core.db import Database
from core.memory.store import build_store
from core.operations.sweep import SweepResult, run_sweep
from core.privacy.erasure import ErasureResult, erase
from core.privacy.evidence import ROOT

log = logging.getLogger(__name__)


def demo_sweep(db: Database) -> SweepResult:
    """The demo's sweep step: a real run (trigger 'demo') that deletes the expired flash notices,
    then two more flash notices published through the real purchasing agent, left expired and not
    yet swept so the pages have something to show. Called from core.demo.seed."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from core.agents.retail import ContextoProveedor, build_agent, run_turn
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.migrate import stored_dims
    from core.agents.scripted_model import ScriptedChatModel

    result = run_sweep(db, trigger="demo")
    if result.status != "ok":
        log.warning("demo sweep did not complete: %s", result.summary())
    with db.connection() as conn:
        dims = stored_dims(conn) or DEFAULT_DIMS
    store = build_store(db.pool, OfflineHashEmbeddings(dims), dims)
    agent = build_agent("compras", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for pid, tema in (("P002", "promocion"), ("P007", "rotura_stock")):
        run_turn(agent, ContextoProveedor(pid), f"compras-{pid}-{tema}-flash",
                 f"aviso {tema} (0.005 min): aviso relámpago de {pid}, válido unos segundos")
    time.sleep(0.5)  # 0.005 min = 0.3 s: both are expired when seeding returns
    return result


SELECT_DEMO_CANDIDATE = """
SELECT c.subject_id AS customer_id
FROM core_conversations c
WHERE c.subject_root = %(root)s AND NOT (c.subject_id = ANY(%(exclude)s))
  AND EXISTS (SELECT 1 FROM store s WHERE s.prefix = %(root)s || '.' || c.subject_id)
GROUP BY c.subject_id
ORDER BY length(c.subject_id) DESC, c.subject_id DESC LIMIT 1"""


def erase_demo_customer(db: Database, *, exclude: Iterable[str] = (), operator: str = "demo") -> ErasureResult | None:
    """A real erasure of one demo customer who has documents (the highest id not in `exclude`),
    so the register has a request to show. None if no customer qualifies."""
    row = db.fetch_one(SELECT_DEMO_CANDIDATE, {"root": ROOT, "exclude": list(exclude)}, read_only=False)
    if row is None:
        return None
    started = time.monotonic()
    result = erase(db, row["customer_id"], operator=operator)
    log.info("demo erasure of %s: %s in %.2f s", result.customer_id, result.status, time.monotonic() - started)
    return result
