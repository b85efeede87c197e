"""The sweep's decrypt step for the token index (issue 28): encrypted checkpoint rows written by an agent whose saver
has langgraph's own EncryptedSerializer are read with the configured keys and indexed like plaintext rows (token
hashes only); rows no configured key opens are named as not readable, by the index and by the erasure."""

from __future__ import annotations

import pytest
from format_agents import AES_KEY, OLD_AES_KEY, encrypted_agent

from core.db import Database
from core.memory.store import put_memory
from core.operations.sweep import run_sweep
from core.privacy import evidence, token_index, tokens
from tests.test_erasure import make_store
from tests.test_erasure_keeps_nothing import scan

PHONE = "699887766"


@pytest.fixture
def db(create_database, monkeypatch):
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    monkeypatch.delenv("LANGGRAPH_AES_KEYS", raising=False)
    database = Database(create_database(prefix="encindex"))
    yield database
    database.close()


def _candidates(db: Database, term: str) -> token_index.Candidates:
    with db.connection() as conn:
        return token_index.candidates(conn, [term])


def _indexed(db: Database) -> dict[str, int]:
    return {
        r["thread_id"]: r["encrypted_unread"]
        for r in db.fetch("SELECT thread_id, encrypted_unread FROM core_thread_tokens")
    }


def test_the_sweep_indexes_encrypted_rows_with_the_key_and_writes_no_plaintext(db, monkeypatch):
    monkeypatch.setenv("LANGGRAPH_AES_KEYS", AES_KEY)
    put_memory(make_store(db), ("clientes", "C81"), "pref-contacto", {"tipo": "contacto", "valor": PHONE})
    encrypted_agent(db.dsn, "hilo-libre", f"llámame al {PHONE} por la tarde")  # attributed to nobody
    encrypted_agent(db.dsn, "hilo-otro", "quiero cambiar la tienda de recogida")
    before = scan(db, [PHONE])

    swept = run_sweep(db, trigger="manual")
    assert swept.status == "ok", swept.error
    assert swept.threads_tokenized == 2 and "not readable" not in swept.summary()
    assert _indexed(db) == {"hilo-libre": 0, "hilo-otro": 0}

    # the index names the encrypted thread for the value, and only it: the scan reads nothing else
    found = _candidates(db, PHONE)
    assert found.threads == {"hilo-libre"} and found.hits == 1 and not found.unindexed
    assert "could not read" not in found.describe()
    preview = evidence.preview(db, "C81")
    assert preview.residue_threads == ["hilo-libre"] and preview.residue.not_scanned == []
    assert PHONE in preview.residue.matches_of("hilo-libre")[0].snippet

    # no column of any table holds the value but where the store put it before the sweep, and the index does not
    # confirm a guess without the key: the encrypted thread holds no plain hash of its tokens
    after = scan(db, [PHONE])
    assert after == before and not any(c.startswith(("checkpoint", "core_thread_tokens")) for c in after), after
    guesses = [tokens.token_hash(t) for t in (PHONE, "llámame", "tarde")]
    assert db.fetch("SELECT thread_id FROM core_thread_tokens WHERE tokens && %s::integer[]", [guesses]) == []

    # incremental: a run with nothing written decrypts nothing again
    again = run_sweep(db, trigger="manual")
    assert again.status == "ok" and again.threads_tokenized == 0


def test_rows_no_key_opens_are_named_not_readable_and_read_once_the_key_is_configured(db, monkeypatch):
    encrypted_agent(db.dsn, "hilo-viejo", "soy C82, vivo en la calle Mayor", key=OLD_AES_KEY)

    # no key at all: the index says it could not read the thread, the erasure names it as not scanned
    blind = run_sweep(db, trigger="manual")
    assert blind.status == "ok" and _indexed(db)["hilo-viejo"] > 0
    assert "1 threads with encrypted rows not readable" in blind.summary()
    found = _candidates(db, "C82")
    assert (
        "hilo-viejo" in found.threads and "1 threads hold encrypted rows the index could not read" in found.describe()
    )
    assert evidence.preview(db, "C82").residue.not_scanned == ["hilo-viejo"]

    # rotation without the old key: still not readable, the sweep does not fail
    monkeypatch.setenv("LANGGRAPH_AES_KEYS", AES_KEY)
    rotated = run_sweep(db, trigger="manual")
    assert rotated.status == "ok" and rotated.threads_tokenized == 1 and _indexed(db)["hilo-viejo"] > 0
    assert run_sweep(db, trigger="manual").threads_tokenized == 0  # the same keys are not tried again
    assert evidence.preview(db, "C82").residue.not_scanned == ["hilo-viejo"]

    # the old key configured again: the next sweep reads the thread, the index finds the id in it
    monkeypatch.setenv("LANGGRAPH_AES_KEYS", f"{AES_KEY},{OLD_AES_KEY}")
    opened = run_sweep(db, trigger="manual")
    assert opened.status == "ok" and opened.threads_tokenized == 1 and _indexed(db) == {"hilo-viejo": 0}
    found = _candidates(db, "C82")
    assert found.threads == {"hilo-viejo"} and found.hits == 1 and "could not read" not in found.describe()
    preview = evidence.preview(db, "C82")
    assert preview.residue.not_scanned == [] and preview.residue_threads == ["hilo-viejo"]

    # the keys taken away again: the index cannot answer for the thread, the erasure names it as not scanned
    monkeypatch.delenv("LANGGRAPH_AES_KEYS")
    found = _candidates(db, "C82")
    assert "hilo-viejo" in found.threads and "could not read" in found.describe()
    assert evidence.preview(db, "C82").residue.not_scanned == ["hilo-viejo"]
