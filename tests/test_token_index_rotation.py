"""Issue 51 #1: TERM_HASH_KEY rotated. The token index keeps each thread's token hashes under the key they were made
with, and the fingerprint of that key (core.privacy.tokens.term_key_fingerprint). After a rotation, before the sweep
has re-indexed anything, a thread not attributed to the customer that holds their value is read on its bytes and
proposed (the erasure does not say `complete` while nobody decided on it, and the register says why the index was not
trusted); the sweep lists every thread of the old key again and re-indexes it, after which the index itself names the
thread. On a database written by our agents and on one written by the memory article's agents."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from foreign_agents import CUSTOMERS
from langgraph.checkpoint.postgres import PostgresSaver

from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.config import term_hash_key
from core.db import Database, reset_pool
from core.memory.store import put_memory
from core.privacy import erasure, evidence
from core.privacy import subjects as subj
from core.privacy import token_index as ti
from core.privacy import tokens as tok
from tests.test_erasure import make_store

DEFAULT = subj.Attribution()
PHONE = "677123456"


@contextmanager
def term_key(hex_key: str) -> Iterator[None]:
    """Every process reading or erasing (this one) runs with `hex_key` as TERM_HASH_KEY: the rotation."""
    before = os.environ.get("TERM_HASH_KEY")
    os.environ["TERM_HASH_KEY"] = hex_key
    term_hash_key.cache_clear()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TERM_HASH_KEY", None)
        else:
            os.environ["TERM_HASH_KEY"] = before
        term_hash_key.cache_clear()


@dataclass
class Case:
    db: Database
    customer: str
    terms: list[str]  # the customer's distinctive terms the unattributed threads hold (each holds one of them)
    threads: list[str]  # threads attributed to nobody (or to another customer) that hold the customer's values


def _ours(create_database) -> Case:
    """Our retail agent: the customer's phone in their store document; another customer's conversation (thread
    attributed to C82 only) holds the same phone."""
    db = Database(create_database(prefix="rotation"))
    put_memory(make_store(db), ("clientes", "C81"), "pref-contacto", {"tipo": "contacto", "valor": PHONE})
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=None, checkpointer=PostgresSaver(db.pool))
    run_turn(agent, ContextoCliente("C82"), "hilo-libre", f"Mi cuñado me dio el {PHONE}, llamadle por la tarde.")
    return Case(db, "C81", [PHONE], ["hilo-libre"])


def _article(article_agents) -> Case:
    """The memory article's agents: the read and chat threads carry no back-link and no metadata, and hold the
    customer's values and id."""
    foreign = article_agents()
    customer = CUSTOMERS[0]
    threads = foreign.threads_of(customer, "read") + foreign.threads_of(customer, "chat")
    return Case(Database(foreign.dsn), customer, [customer, f"correo {customer.lower()}@ejemplo.es"], threads)


@pytest.mark.parametrize("agents", ["ours", "article"])
def test_after_a_term_key_rotation_the_erasure_reads_the_old_keys_threads_until_the_sweep_reindexes(
    agents, create_database, request
):
    case = _ours(create_database) if agents == "ours" else _article(request.getfixturevalue("article_agents"))
    db = case.db
    try:
        indexed = ti.sweep_step(db)  # every thread indexed under the key in force (K1)
        assert indexed.pending == 0 and indexed.threads >= len(case.threads)
        with db.connection() as conn:
            assert set(case.threads) <= ti.candidates(conn, case.terms).hit_threads

        with term_key(uuid.uuid4().hex + uuid.uuid4().hex):  # K2: the dashboard and the sweep restarted with it
            # the index cannot answer for the threads hashed under K1: they are candidates, read on their bytes
            with db.connection() as conn:
                found = ti.candidates(conn, case.terms)
            assert set(case.threads) <= found.threads, found.describe()
            assert set(case.threads) <= found.stale and not found.hit_threads & set(case.threads)
            assert "token index built under another term key; re-indexing" in found.describe()

            # the erasure proposes them; left undecided, it does not say complete, and the register says why
            result = erasure.erase(db, case.customer, operator="dpo@example.com", config=DEFAULT)
            assert result.status != "complete", result.report
            proposed = {r["thread_id"] for r in result.residue}
            assert set(case.threads) <= proposed, result.residue
            assert "token index built under another term key; re-indexing" in (result.report or "")
            row = db.fetch_one(
                "SELECT report FROM core_erasure_register WHERE id = %s", (result.request_id,), read_only=False
            )
            assert row is not None and "another term key" in row["report"]

            # the sweep lists every thread of the old key again and re-indexes it under K2
            reindexed = ti.sweep_step(db)
            assert reindexed.threads >= len(case.threads) and reindexed.pending == 0
            assert ti.sweep_step(db).threads == 0  # once: nothing is listed again afterwards
            with db.connection() as conn:
                rows = conn.execute("SELECT DISTINCT term_key FROM core_thread_tokens").fetchall()
                assert [r["term_key"] for r in rows] == [tok.term_key_fingerprint()]
                found = ti.candidates(conn, case.terms)
            assert not found.stale and set(case.threads) <= found.hit_threads, found.describe()

            # the residue scan now proposes the threads through the index (the store documents are gone: the terms
            # are those the first request keeps hashed under K2), and erasing them completes the request
            preview = evidence.preview(db, case.customer, DEFAULT)
            assert set(case.threads) <= set(preview.residue_threads), preview.residue_threads
            assert preview.residue is not None and preview.residue.index_stale == 0
            again = erasure.erase(
                db,
                case.customer,
                operator="dpo@example.com",
                config=DEFAULT,
                decisions={t: "erase" for t in preview.residue_threads},
            )
            assert again.status == "complete", again.report
            assert "another term key" not in (again.report or "")
    finally:
        reset_pool(db.dsn)
