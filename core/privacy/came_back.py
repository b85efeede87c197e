"""What came back after an erasure (issue 51 item 4): the threads and documents of an erased customer that exist
again in the agents' tables, each with when it was written and by which agent, read live.

A stock saver's late `put`/`put_writes` with a pre-delete config recreates a thread after `delete_thread`
(langgraph#7206); an agent that still serves the customer writes new documents. The register's re-check counts
them (`erasure_register.recheck`, the data-back alert); this names them, so the DPO sees what came back before
erasing it again (`follow_up.erase_again`).
"""

from __future__ import annotations

import pandas as pd

from core.db import Database
from core.ids import CustomerId
from core.privacy import subjects as subj
from core.privacy.erasure import SELECT_REQUEST, ErasureError
from core.privacy.evidence import evidence_params, find_threads_conn

# Threads that exist now, among those named: first and last checkpoint time (the saver's own `ts`), the agent that
# wrote the latest one as its metadata names it (`agente`: ours; `graph_id`: LangGraph's Agent Server), none else.
SELECT_THREADS = """
SELECT thread_id, min(checkpoint ->> 'ts') AS first_write, max(checkpoint ->> 'ts') AS last_write,
       (array_agg(coalesce(metadata ->> 'agente', metadata ->> 'graph_id') ORDER BY checkpoint_id DESC))[1] AS agent
FROM checkpoints WHERE thread_id = ANY(%(threads)s) GROUP BY thread_id ORDER BY thread_id"""
# The customer's documents that exist now, with the agent our memory-write log names for the latest write, if any.
SELECT_DOCUMENTS = r"""
SELECT s.prefix, s.key, s.created_at AS first_write, s.updated_at AS last_write, w.agent
FROM store s
LEFT JOIN LATERAL (SELECT m.agent FROM core_memory_writes m WHERE m.prefix = s.prefix AND m.key = s.key
                   ORDER BY m.written_at DESC LIMIT 1) w ON true
WHERE s.prefix = %(prefix)s OR s.prefix LIKE %(pattern)s ESCAPE '\'
ORDER BY s.prefix, s.key"""
COLUMNS = ["kind", "where", "first_write", "last_write", "agent"]
RECREATED, NEW_THREAD, DOCUMENT = "recreated_thread", "new_thread", "document"


def came_back(db: Database, request_id: int, config: subj.Attribution | None = None) -> pd.DataFrame:
    """The erased customer's threads and documents that exist now: `kind` (a thread the request erased and that
    exists again, a thread attributed to the customer since, a document), `where` (thread id, or prefix/key),
    `first_write`, `last_write`, `agent` (None: the agent wrote no name the database keeps). Raises ErasureError for
    an unknown request."""
    row = db.ours.fetch_one(SELECT_REQUEST, (request_id,))
    if row is None:
        raise ErasureError(f"no erasure request {request_id}")
    customer_id = CustomerId.parse(row["customer_id"])
    erased = set(row["thread_ids"] or ())
    with db.connection() as conn:
        threads = erased | set(find_threads_conn(conn, customer_id, config or subj.Attribution.from_settings()))
        rows = [
            {**r, "kind": RECREATED if r["thread_id"] in erased else NEW_THREAD, "where": r["thread_id"]}
            for r in conn.execute(SELECT_THREADS, {"threads": sorted(threads)}).fetchall()
        ]
        rows += [
            {**r, "kind": DOCUMENT, "where": f"{r['prefix']}/{r['key']}"}
            for r in conn.execute(SELECT_DOCUMENTS, evidence_params(customer_id, ())).fetchall()
        ]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for column in ("first_write", "last_write"):
        frame[column] = pd.to_datetime(frame[column], utc=True, format="ISO8601")
    return frame


__all__ = ["DOCUMENT", "NEW_THREAD", "RECREATED", "came_back"]
