"""Issue 43, finding 6: an erasure re-check on a dashboard without AES keys ran one decode query per thread whose
encrypted rows the token index could not read (40 threads, 40 queries; 160, 160). Those threads are named not scanned
without decoding and the rest is decoded in batches: the statements a re-check sends, counted by libpq's own trace of
the connection it runs on, do not grow with the number of encrypted threads. Real agents (langgraph's
EncryptedSerializer), a real erasure, a real sweep, the real re-check."""

from __future__ import annotations

import re

import pytest
from format_agents import OLD_AES_KEY, encrypted_agents
from psycopg.pq import Trace

from core.db import Database, reset_pool
from core.memory.store import put_memory
from core.operations.sweep import run_sweep
from core.privacy import erasure, erasure_register, evidence
from tests.test_erasure import make_store

PHONE = "655443322"
SENT = re.compile(r"^F\t\d+\t(Execute|Query)\b", re.M)  # one Execute (extended protocol) or Query per statement


@pytest.fixture
def db(create_database, monkeypatch):
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    monkeypatch.delenv("LANGGRAPH_AES_KEYS", raising=False)
    database = Database(create_database(prefix="recheckq"))
    yield database
    database.close()


def _encrypted_threads(db: Database, start: int, stop: int) -> None:
    # none holds the customer; no key the dashboard has opens them
    turns = [(f"cifrado-{n}", f"consulta {n} sobre una devolución") for n in range(start, stop)]
    encrypted_agents(db.dsn, turns, key=OLD_AES_KEY)
    swept = run_sweep(db, trigger="manual")
    assert swept.status == "ok", swept.error
    assert f"{stop} threads with encrypted rows not readable" in swept.summary()


def _statements_of_a_recheck(db: Database, request_id: int, tmp_path) -> tuple[int, erasure_register.RecheckResult]:
    """The statements `recheck` sends, from libpq's trace of the pool's one connection."""
    reset_pool(db.dsn)
    db.pool.wait()  # its one connection opened before the first request
    trace = tmp_path / f"trace-{request_id}-{id(object())}.txt"
    with open(trace, "w") as out:
        with db.pool.connection() as conn:
            conn.pgconn.trace(out.fileno())
            conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
        result = erasure_register.recheck(db, request_id)
        assert db.pool.get_stats()["pool_size"] == 1  # every statement went through the traced connection
        with db.pool.connection() as conn:
            conn.pgconn.untrace()
    return len(SENT.findall(trace.read_text())), result


def test_a_recheck_sends_as_many_statements_for_160_encrypted_threads_as_for_40(db, tmp_path):
    put_memory(make_store(db), ("clientes", "C85"), "pref-contacto", {"tipo": "contacto", "valor": PHONE})
    erased = erasure.erase(db, "C85", operator="dpo@example.com")
    assert erased.status == "complete", erased

    _encrypted_threads(db, 0, 40)
    assert len(evidence.preview(db, "C85").residue.not_scanned) == 40  # named not scanned, as before
    with_40, result = _statements_of_a_recheck(db, erased.request_id, tmp_path)
    assert result.clean, result.counts

    _encrypted_threads(db, 40, 160)
    with_160, result = _statements_of_a_recheck(db, erased.request_id, tmp_path)
    assert result.clean, result.counts
    assert with_160 == with_40, f"{with_40} statements with 40 encrypted threads, {with_160} with 160"
