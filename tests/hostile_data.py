"""A database where every text a page shows is hostile (issue 24 part 4): customer ids, thread ids, document
keys and values (the Erasure page's residue terms), a tool's argument, operators, the sweep log, the registers,
replica ids and episode reasons, each written by the real code path (the memory article's agents with stock
savers, a stock store put, core's erasure, access export, sweep and health writers).

`LINKS` holds what an attacker would try: a Markdown image and link, bare URL / www / e-mail autolinks, raw
HTML (an <a> also for plotly's labels), Streamlit's colour directive and math. An id cannot hold '.' (the
store's namespace separator), so the ids carry dotless hosts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

HOST = "attacker.example"
LINKS = (
    f"![x](https://{HOST}/p.png) [Verify your SSO session](https://{HOST}/sso) https://{HOST}/bare "
    f"www.{HOST} sso@{HOST} <a href='https://{HOST}/html'>html link</a> <img src='https://{HOST}/i.png'> "
    ":red[red] $x$ **bold**"
)
ID = (
    "![x](https://attacker-example/p) [Verify your SSO session](https://attacker-example/sso) "
    "<a href='https://attacker-example/h'>h</a>"
)
ID2 = "B" + ID  # erased by core, its residue thread left undecided: an incomplete register row with a report
# What a page shows of a hostile text when it is escaped, never as a link (a Markdown link shows only its label).
LITERAL = "[Verify your SSO session]"


@dataclass
class HostileDb:
    dsn: str
    thread_written: str  # a thread of ID with its metadata (attributed)
    thread_residue: str  # a thread of ID without metadata holding ID's document value (residue)
    thread_residue2: str  # the same for ID2, left undecided by the erasure in the register


def write_hostile(dsn: str) -> HostileDb:
    """Write every hostile value into `dsn` (an empty database), migrate it, then run core on it."""
    from foreign_agents import Conversation, run_conversations
    from langgraph.store.postgres import PostgresStore
    from psycopg_pool import ConnectionPool

    from agent_memory_runtime import replica_health
    from core.db import Database
    from core.migrate import migrate
    from core.operations import sweep
    from core.privacy import access, erasure
    from tests.conftest import DIMS

    written, residue, written2, residue2 = ("w-" + LINKS, "r-" + LINKS, "w2-" + LINKS, "r2-" + LINKS)
    convs = [
        Conversation(written, ID, "write", "contacto", "a " + LINKS),
        Conversation(written2, ID2, "write", "contacto", "b " + LINKS),
        Conversation("t-" + LINKS, ID, "write", LINKS, "c " + LINKS),  # a tool argument out of its schema
        Conversation(residue, ID, "read"),
        Conversation(residue2, ID2, "read"),
    ]
    attributed = {written, written2, "t-" + LINKS}
    run_conversations(dsn, convs, lambda conv, n: {"cliente_id": conv.customer} if conv.thread_id in attributed else {})
    with ConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True}) as pool:
        PostgresStore(pool).put(("proveedores", ID), LINKS, {"texto": LINKS})
    migrate(dsn, DIMS)

    db = Database(dsn)
    try:
        access.export(db, ID, fmt="json", lang="es", operator=LINKS)
        erasure.erase(db, ID2, operator=LINKS)  # the residue thread undecided: incomplete, named in the report
        sweep.run_sweep(db, trigger="manual", operator=LINKS)  # also sizes the threads for the Checkpoints page
        now = datetime.now(UTC)
        with db.connection() as conn:
            replica_health.publish_heartbeat(
                conn,
                {
                    "replica_id": LINKS,
                    "host": LINKS,
                    "pid": 1,
                    "state": "degraded",
                    "degraded_since": now - timedelta(seconds=30),
                    "buffered_checkpoints": 1,
                    "buffered_writes": 2,
                    "last_success": now - timedelta(seconds=31),
                    "started_at": now - timedelta(hours=1),
                    "heartbeat_interval_s": 2.0,
                    "episodes_total": 1,
                    "denials_total": 1,
                    "refusals_total": 0,
                },
            )
            denial = {
                "key": str(uuid.uuid4()),
                "tool": LINKS,
                "risk": "HIGH",
                "thread_id": residue,
                "subject_root": "clientes",
                "subject_id": ID,
                "customer_id": ID,
                "reason": LINKS,
                "denied_at": now - timedelta(minutes=8),
            }
            replica_health.write_episode(
                conn,
                replica_health.Episode(
                    replica_id=LINKS,
                    host=LINKS,
                    pid=1,
                    degraded_from=now - timedelta(minutes=9),
                    degraded_to=now - timedelta(minutes=8),
                    reason=LINKS,
                    checkpoints_buffered=3,
                    writes_buffered=5,
                    ops_resynced=8,
                    resync_ms=4.0,
                    denials=[denial],
                ),
            )
    finally:
        db.close()
    return HostileDb(dsn, written, residue, residue2)
