"""Erased values cannot be recovered from what a non-DPO role reads after an erasure (issue 43, finding 1).

A real erasure of a customer whose documents and conversation hold a Spanish mobile and an address; then everything
the exporter role, the sweeper role (deploy/*-grants.sql) and a role with an agent's grants can SELECT is read, and
every hash-like value in it (integers, hex strings, in columns, arrays and JSON) is attacked by guessing: the mobile
numbers around the customer's, and the words of Spanish addresses, hashed as the token index and the register hash
them, and whole terms digested with every salt found. Nothing erased may be confirmed by a guess."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import psycopg
import pytest
from conftest import login_role
from psycopg.rows import dict_row

from core.agents.retail import ContextoCliente, run_turn
from core.db import Database, reset_pool
from core.memory.store import put_memory
from core.operations import sweep
from core.privacy import erasure, evidence
from core.privacy import residue as res
from core.privacy.tokens import term_tokens
from tests.test_erasure import agents_for, make_store

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
CUSTOMER = "C77"
PHONE = "612345678"
ADDRESS = "Calle Mayor Madrid 3B 5 28013"
AGENT_TABLES = (
    "store, store_vectors, store_migrations, vector_migrations, "
    "checkpoints, checkpoint_blobs, checkpoint_writes, checkpoint_migrations"
)
# An attacker's dictionary of Spanish street words, floors, doors and Madrid postcodes
STREET_WORDS = ["Calle", "Avenida", "Plaza", "Paseo", "Mayor", "Alcala", "Gran", "Via", "Madrid", "Barcelona"]
ADDRESS_WORDS = (
    STREET_WORDS
    + [f"{n}{d}" for n in range(1, 10) for d in "ABCD"]
    + [str(n) for n in range(1, 100)]
    + [f"280{n:02d}" for n in range(1, 60)]
)
PHONE_GUESSES = [str(n) for n in range(612_300_000, 612_400_000)]
READABLE = """
SELECT c.relname::text AS tbl FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
  AND has_table_privilege(c.oid, 'SELECT') ORDER BY 1"""
HEX = re.compile(r"^[0-9a-f]{16,}$")


def token_hash(token: str) -> int:
    """The hash an attacker computes: the token index's and the register's before issue 43, without a key."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest(), "big", signed=True)


@pytest.fixture
def db(create_database):
    database = Database(create_database(prefix="secrecy"))
    yield database
    reset_pool(database.dsn)


def _erase_customer(db: Database) -> None:
    """The customer's phone and address through the real store and agent, swept, then erased with its residue."""
    store = make_store(db)
    agent = agents_for(db, store)
    put_memory(store, ("clientes", CUSTOMER), "pref-contacto", {"tipo": "contacto", "valor": PHONE})
    put_memory(store, ("clientes", CUSTOMER), "direccion", {"texto": f"direccion: {ADDRESS}", "calle": ADDRESS})
    run_turn(agent, ContextoCliente(CUSTOMER), "cliente-C77-1", f"Llamadme siempre al {PHONE}, gracias.")
    run_turn(agent, ContextoCliente(CUSTOMER), "cliente-C77-2", f"Enviadlo a {ADDRESS} por la tarde.")
    agent.invoke(
        {"messages": [{"role": "user", "content": f"Un cliente dicta su dirección: {ADDRESS}, teléfono {PHONE}"}]},
        config={"configurable": {"thread_id": "soporte-77"}},
        context=ContextoCliente("SOPORTE"),
    )
    assert sweep.run_sweep(db, trigger="manual").status == "ok"
    preview = evidence.preview(db, CUSTOMER)
    assert preview.residue_threads == ["soporte-77"]
    result = erasure.erase(db, CUSTOMER, operator="dpo@example.com", decisions={"soporte-77": "erase"})
    assert result.status == "complete", result.report
    assert sweep.run_sweep(db, trigger="manual").status == "ok"  # the sweep re-checks the request


def _values(value, ints: set[int], texts: set[str]) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int):
            ints.add(v)
        elif isinstance(v, str):
            texts.add(v)
            if v[:1] in "[{":
                try:
                    stack.append(json.loads(v))
                except ValueError:
                    pass
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())


def _readable(dsn: str) -> tuple[set[int], set[str]]:
    """Every integer and string of every row of every table and view the role may SELECT."""
    ints: set[int] = set()
    texts: set[str] = set()
    with psycopg.connect(dsn, row_factory=dict_row, autocommit=True) as conn:
        for (tbl,) in (tuple(r.values()) for r in conn.execute(READABLE).fetchall()):
            for row in conn.execute(f'SELECT * FROM "{tbl}"').fetchall():
                _values(list(row.values()), ints, texts)
    return ints, texts


def _recovered(ints: set[int], texts: set[str]) -> set[str]:
    """What a guess confirms: a token whose hash is readable, a whole term whose digest is, with a readable salt."""
    found = {g for g in PHONE_GUESSES if token_hash(g) in ints}
    found |= {w for w in ADDRESS_WORDS if len(w) >= 3 and token_hash(w) in ints and w not in ("Calle", "Madrid")}
    salts = [bytes.fromhex(t) for t in texts if len(t) == 32 and HEX.match(t)]
    digests = {t for t in texts if HEX.match(t)}
    for term in (PHONE, ADDRESS, f"direccion: {ADDRESS}", f"Llamadme siempre al {PHONE}, gracias."):
        text = res.json_text(term).encode("utf-8")
        if any(hashlib.blake2b(text, key=s, digest_size=16).hexdigest() in digests for s in salts):
            found.add(term)
    return found


def test_no_erased_value_is_recovered_by_guessing_from_what_non_dpo_roles_read(db):
    _erase_customer(db)
    with psycopg.connect(db.dsn, autocommit=True) as owner:
        owner.execute((DEPLOY / "exporter-grants.sql").read_text())
        owner.execute((DEPLOY / "sweeper-grants.sql").read_text())
    readers = {
        "exporter": psycopg.conninfo.make_conninfo(db.dsn, user="agent_memory_exporter"),
        "sweeper": psycopg.conninfo.make_conninfo(db.dsn, user="agent_memory_sweeper"),
        "agent": login_role(db.dsn, "agente", AGENT_TABLES),
    }
    # the attack works: it recognises the customer's tokens when their hashes are at hand
    assert set(term_tokens(ADDRESS)) & set(ADDRESS_WORDS) >= {"Mayor", "3B", "28013"}
    assert _recovered({token_hash(PHONE), token_hash("28013")}, set()) == {PHONE, "28013"}
    for name, dsn in readers.items():
        ints, texts = _readable(dsn)
        assert not any(PHONE in t or "Calle Mayor" in t for t in texts), name
        assert _recovered(ints, texts) == set(), name


def test_the_key_is_required_in_production_and_checked(monkeypatch, tmp_path):
    from core.config import term_hash_key

    load = term_hash_key.__wrapped__  # the cached key aside: read the configuration again
    monkeypatch.delenv("TERM_HASH_KEY")
    monkeypatch.setenv("PG_AGENTES", "postgresql://example.invalid/agentes")
    with pytest.raises(ValueError, match="TERM_HASH_KEY is not set"):
        load()
    monkeypatch.setenv("TERM_HASH_KEY", "not hex")
    with pytest.raises(ValueError, match="32 to 128 hexadecimal"):
        load()
    # the embedded demo generates one into its data folder, readable by its owner only, and keeps it
    monkeypatch.delenv("TERM_HASH_KEY")
    monkeypatch.delenv("PG_AGENTES")
    monkeypatch.setenv("AGENT_MEMORY_DATA", str(tmp_path))
    key = load()
    assert len(key) == 32 and (tmp_path / "term_hash.key").stat().st_mode & 0o777 == 0o600
    assert load() == key
