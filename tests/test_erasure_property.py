"""Issue 51 item 3: a property of the whole erasure chain. Random agent histories on a real database (the articles'
agents on stock savers, our retail agent, TOASTed documents, far-future TTLs, follower restarts, TERM_HASH_KEY
rotations, writes arriving with checkpoint times hours old, supplier notices quoting a customer, late writes that
recreate an erased thread; with the change follower, and in the recount mode) with erasures between them; whenever
`erase()` says `complete`, a scan that shares nothing with it finds none of the customer's declared values in any row
of any table (bytea read as its bytes), and once the sweep's settle step says "overwritten", none in any relation file
either (heap, TOAST, indexes).

Seeded and reproducible: a failure names its seed and the operations that led to it; rerun one with
`ERASURE_PROPERTY_SEED=<seed> python -m pytest tests/test_erasure_property.py -m slow`. The fast tier runs two short
histories, the slow tier twelve longer ones with the follower and four in the recount mode. Not scanned here: the
retained WAL (the register itself says the values stay there until its retention, core/privacy/physical.py) and
compressed TOAST (its bytes are not the value's).
"""

from __future__ import annotations

import base64
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import time_machine
from foreign_agents import Conversation, run_conversations, thread_id_for
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.capture.follower import drop_slot
from core.capture.status import sync as capture_sync
from core.config import term_hash_key
from core.db import Database, reset_pool
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.privacy import erasure, evidence, physical
from core.privacy import subjects as subj
from tests.conftest import DIMS, database_factory, small_wal_server

CUSTOMERS = ("C1", "C2", "C3", "C%4", "C_5")
OPERATIONS = (
    "article_write",
    "retail_turn",
    "toast_document",
    "far_future_ttl",
    "restart_follower",
    "late_write",
    "supplier_mention",
    "rotate_term_key",
    "old_times_write",
)


def _sql(dsn: str, statement: str, params=None) -> list[dict]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


class History:
    """One database, its agents, and what each customer declared (the values the test holds in clear)."""

    def __init__(self, db: Database, rng: random.Random):
        self.db, self.rng = db, rng
        self.declared: dict[str, set[str]] = {c: set() for c in CUSTOMERS}
        # values written by the article's agents: their threads carry no link to the customer (no metadata, no
        # back-link), so once the customer's document is overwritten such a value is known to nobody (see `known`)
        self.article_values: dict[str, set[str]] = {c: set() for c in CUSTOMERS}
        # what earlier complete requests of each customer erased: a later request's settle speaks for its own values
        self.erased: dict[str, set[str]] = {c: set() for c in CUSTOMERS}
        self.erased_threads: dict[str, list[str]] = {}
        self.log: list[str] = []
        self.store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
        self.agent = build_agent(
            "atencion-cliente", ScriptedChatModel(), store=self.store, checkpointer=PostgresSaver(db.pool)
        )

    def value(self, kind: str) -> str:
        n = self.rng.randrange(10**7, 10**8)
        return {"contacto": f"tel 6{n}", "horario": f"tardes {n} h", "recogida": f"tienda Calle {n}"}[kind]

    def step(self, op: str, customer: str) -> None:
        self.log.append(f"{op}({customer})")
        getattr(self, op)(customer)

    # --- operations --------------------------------------------------------------------------------------------
    def article_write(self, customer: str) -> None:
        """The memory article's agent on stock PostgresStore/PostgresSaver: a preference write, then a read."""
        tipo = self.rng.choice(("contacto", "horario", "recogida"))
        valor = self.value(tipo)
        self.declared[customer].add(valor)
        self.article_values[customer].add(valor)
        tag = f"{customer}/{len(self.log)}"
        run_conversations(
            self.db.dsn,
            [
                Conversation(thread_id_for(tag), customer, "write", tipo, valor),
                Conversation(thread_id_for(tag + "/r"), customer, "read"),
            ],
        )

    def retail_turn(self, customer: str) -> None:
        """Our retail agent: the customer states a phone number (kept in the thread and the tool's arguments)."""
        phone = f"6{self.rng.randrange(10**7, 10**8)}"
        self.declared[customer].add(f"teléfono {phone}")  # the value as the tool stores it (a document's value)
        run_turn(
            self.agent,
            ContextoCliente(customer),
            f"cliente-{customer}-{len(self.log)}",
            f"Contactadme siempre por teléfono {phone}.",
        )

    def toast_document(self, customer: str) -> None:
        """A document too big to stay inline (stored out of line, incompressible), holding a declared value."""
        valor = self.value("contacto")
        self.declared[customer].add(valor)
        noise = [base64.urlsafe_b64encode(self.rng.randbytes(2250)).decode() for _ in range(2)]  # seeded, random
        body = f"{noise[0]} {valor} {noise[1]}"
        self.store.put(
            ("clientes", customer),
            f"nota-{len(self.log)}",
            {"tipo": "contacto", "valor": valor, "texto": body},
            index=False,
        )

    def far_future_ttl(self, customer: str) -> None:
        """A document expiring after year 9999 (issue 51 finding 4): PostgresStore cannot write one through its API
        (its TTL is minutes from now), so its expiry is moved by SQL, the one row shape the finding is about."""
        valor = self.value("horario")
        self.declared[customer].add(valor)
        key = f"lejana-{len(self.log)}"
        self.store.put(("clientes", customer), key, {"tipo": "horario", "valor": valor, "texto": valor}, index=False)
        _sql(
            self.db.dsn,
            "UPDATE store SET expires_at = '11026-12-06 00:00:00+00' WHERE prefix = %s AND key = %s",
            (f"clientes.{customer}", key),
        )

    def supplier_mention(self, customer: str) -> None:
        """A supplier notice (another namespace) that quotes one of the customer's declared values."""
        if self.declared[customer]:
            valor = self.rng.choice(sorted(self.declared[customer]))
            self.store.put(
                ("proveedores", "P001"), f"aviso-{len(self.log)}", {"texto": f"Avisar en {valor}"}, index=False
            )

    def rotate_term_key(self, customer: str) -> None:
        """TERM_HASH_KEY rotated for every process (this one): the token index holds the old key's hashes until the
        sweep re-indexes (issue 51 finding 1)."""
        os.environ["TERM_HASH_KEY"] = self.rng.randbytes(32).hex()
        term_hash_key.cache_clear()

    def old_times_write(self, customer: str) -> None:
        """A write that arrives now with checkpoint times hours old, as a dual saver's replayed buffer or journal
        carries them (issue 51 finding 3): the article's agents with their clock three hours behind."""
        with time_machine.travel(datetime.now(UTC) - timedelta(hours=3), tick=True):
            self.article_write(customer)

    def restart_follower(self, customer: str) -> None:
        """The change follower starts again from its slot (what a restarted dashboard or sweep job does)."""
        capture_sync(self.db)

    def late_write(self, customer: str) -> None:
        """A stock saver's late write with a pre-delete config recreates an erased thread (langgraph#7206)."""
        threads = self.erased_threads.get(customer)
        if not threads:
            return
        thread = self.rng.choice(threads)
        phone = f"6{self.rng.randrange(10**7, 10**8)}"
        self.declared[customer].add(f"teléfono {phone}")
        run_turn(self.agent, ContextoCliente(customer), thread, f"Contactadme siempre por teléfono {phone}.")

    def known(self, customer: str) -> tuple[set[str], set[str]]:
        """(the customer's declared values the database can tie to them now, those it cannot). A value the article's
        agents wrote and a later write of the same document replaced is held only by a thread with no link to the
        customer: the database no longer says whose it is (issue 51 item 3's finding, named in the note), so it is
        left out of the property and counted apart."""
        held = {
            r["v"]
            for r in _sql(
                self.db.dsn,
                "SELECT DISTINCT v #>> '{}' AS v FROM store s, jsonb_path_query(s.value, 'strict $.**') AS p(v) "
                "WHERE s.prefix = %s AND jsonb_typeof(v) = 'string'",
                (f"clientes.{customer}",),
            )
        }
        superseded = self.article_values[customer] - held
        return self.declared[customer] - superseded, superseded

    def erase(self, customer: str) -> erasure.ErasureResult:
        self.log.append(f"erase({customer})")
        preview = evidence.preview(self.db, customer, subj.Attribution())
        result = erasure.erase(
            self.db,
            customer,
            operator="dpo@example.com",
            config=subj.Attribution(),
            decisions={t: "erase" for t in preview.residue_threads},
        )
        self.erased_threads[customer] = result.thread_ids
        return result

    # --- the independent scans -----------------------------------------------------------------------------------
    def rows_holding(self, values: set[str]) -> list[str]:
        """Every row of every table (this database's schema), as text; bytea as hex, so a value is looked for as its
        UTF-8 bytes in hex too. Returns `table: value` for each table holding one."""
        tables = _sql(
            self.db.dsn,
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'm')",
        )
        found = []
        needles = {v: (v, v.encode().hex()) for v in values}
        with psycopg.connect(self.db.dsn, autocommit=True) as conn:
            for t in tables:
                name = psycopg.sql.Identifier(t["relname"])
                text = "\n".join(r[0] for r in conn.execute(psycopg.sql.SQL("SELECT x::text FROM {} x").format(name)))
                found += [f"{t['relname']}: {v}" for v, forms in needles.items() if any(f in text for f in forms)]
        return found

    def files_holding(self, values: set[str]) -> list[str]:
        """Every relation file of this database (heap, TOAST, indexes, every segment), read as bytes."""
        datadir = Path(_sql(self.db.dsn, "SHOW data_directory")[0]["data_directory"])
        paths = _sql(
            self.db.dsn,
            "SELECT c.relname, pg_relation_filepath(c.oid) AS path FROM pg_class c "
            "WHERE pg_relation_filepath(c.oid) IS NOT NULL AND c.relkind IN ('r', 't', 'i', 'm', 'p')",
        )
        found = []
        for p in paths:
            base = datadir / p["path"]
            for f in [base, *sorted(base.parent.glob(base.name + ".[0-9]*"))]:
                if f.exists():
                    data = f.read_bytes()
                    found += [f"{p['relname']} ({f.name}): {v}" for v in values if v.encode() in data]
        return found


def run_history(db: Database, seed: int, steps: int) -> int:
    """Run one history; returns how many `complete` erasures the scans checked."""
    rng = random.Random(seed)
    h = History(db, rng)
    checked = 0

    def erase_and_check(customer: str) -> int:
        known, superseded = h.known(customer)
        result = h.erase(customer)
        where = f"seed {seed}, after {h.log} (superseded article values left out: {len(superseded)})"
        if result.status != "complete":
            return 0  # a withheld claim is allowed; the property is about what `complete` claims
        assert result.proof is not None and result.proof.clean, where
        assert h.rows_holding(known) == [], where
        # the register's physical claim is per request: "overwritten" speaks for what this request erased (an
        # earlier request's values were already gone by SQL; that request's own row says where their bytes are)
        own = known - h.erased[customer]
        h.erased[customer] |= known
        physical.settle(db)
        row = physical.record(db, result.request_id)
        if row is not None and row["files_status"] == physical.OVERWRITTEN:
            _sql(db.dsn, "CHECKPOINT")
            assert h.files_holding(own) == [], where
        return 1

    for _ in range(steps):
        customer = rng.choice(CUSTOMERS)
        if rng.random() < 0.25 and any(h.declared.values()):
            checked += erase_and_check(rng.choice([c for c in CUSTOMERS if h.declared[c]]))
        else:
            h.step(rng.choice(OPERATIONS), customer)
    for customer in [c for c in CUSTOMERS if h.declared[c]]:  # and at the end, every customer who declared anything
        checked += erase_and_check(customer)
    return checked


@pytest.fixture(autouse=True)
def _term_key_restored():
    """A history may rotate TERM_HASH_KEY (process-wide): the next test gets the session's key back."""
    before = os.environ.get("TERM_HASH_KEY")
    yield
    if before is not None:
        os.environ["TERM_HASH_KEY"] = before
    term_hash_key.cache_clear()


@pytest.fixture(scope="module")
def pg_dsn(tmp_path_factory):
    servers = small_wal_server(tmp_path_factory, "erasure-property")
    base, _control = next(servers)
    yield base
    next(servers, None)


@pytest.fixture(scope="module")
def create_database(pg_dsn):
    return database_factory(pg_dsn)


@pytest.fixture
def db(create_database):
    database = Database(create_database())
    yield database
    reset_pool(database.dsn)
    drop_slot(database.dsn)


@pytest.fixture(scope="module")
def recount_server(tmp_path_factory):
    """Like conftest's `replica_wal_server` (restarted with `wal_level = replica`: no slot can follow its databases,
    the recount mode), with the small pg_wal of `small_wal_server`. Yields (base DSN, control)."""
    servers = small_wal_server(tmp_path_factory, "erasure-recount", (("wal_level", "replica"),))
    base, control = next(servers)
    with psycopg.connect(base, autocommit=True) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("replica",)
    yield base, control
    next(servers, None)


@pytest.fixture(scope="module")
def create_recount_database(recount_server):
    base, _control = recount_server
    return database_factory(base)


@pytest.fixture
def recount_db(create_recount_database):
    """A migrated database (a copy of one migrated once, as `db`'s) on a server with `wal_level = replica`: no slot can
    follow it, every sync recounts from the tables (the recount mode)."""
    database = Database(create_recount_database(prefix="property"))
    yield database
    reset_pool(database.dsn)


@pytest.mark.parametrize("seed", [20261206, 51])
def test_complete_erasures_leave_no_declared_value_short(db, seed):
    assert run_history(db, seed, steps=10) >= 1  # never true for want of a complete erasure to check


# ERASURE_PROPERTY_SEED=<seed> reruns the one seed a failure named
SEEDS = [int(os.environ["ERASURE_PROPERTY_SEED"])] if os.environ.get("ERASURE_PROPERTY_SEED") else list(range(1, 13))


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_complete_erasures_leave_no_declared_value(db, seed):
    assert run_history(db, seed, steps=24) >= 1


@pytest.mark.slow  # a server of its own
@pytest.mark.parametrize("seed", SEEDS[:4])
def test_complete_erasures_leave_no_declared_value_in_the_recount_mode(recount_db, seed):
    assert run_history(recount_db, seed, steps=24) >= 1
