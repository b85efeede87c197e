"""The Memory page's flags (issue 56, item 3): each condition made by the real retail agent and its tools, the real
sweep (retention and pruning), then counted per store; a manager of another store sees none of them; bad thresholds
are refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from conftest import DIMS, settings_for
from langgraph.checkpoint.postgres import PostgresSaver

from agent_memory_runtime import clock
from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.config import load_settings
from core.db import Database
from core.history import tool_calls
from core.memory import customer_stores, flags
from core.memory.customer_stores import StoreSources
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store, put_memory
from core.operations import sweep
from core.storage.prune import validate_policy

RECOGIDA = "Prefiero recoger mis pedidos en la tienda {}."


class Shop:
    """The retail customer agent on `db` (its store, a PostgresSaver), customers of store T001 unless told."""

    def __init__(self, db: Database):
        self.db = db
        self.store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
        self.agent = build_agent(
            "atencion-cliente", ScriptedChatModel(), store=self.store, checkpointer=PostgresSaver(db.pool)
        )

    def say(self, customer: str, thread: str, text: str, tienda: str = "T001", at: datetime | None = None) -> None:
        context = ContextoCliente(customer, tienda=tienda)
        if at is None:
            run_turn(self.agent, context, thread, text)
        else:
            with clock.simulated(at):
                run_turn(self.agent, context, thread, text)

    def settle(self) -> None:
        """What the sweep job does before the page reads: extract tool calls, map customers to stores."""
        tool_calls.extract(self.db)
        assert not customer_stores.refresh(self.db, settings_for(self.db.dsn)).errors


def scope_of(db: Database, *stores: str):
    return StoreSources.from_settings(settings_for(db.dsn)).scope(stores)


def flagged(found: flags.MemoryFlags, flag: str) -> set[tuple[str, str]]:
    rows = found.rows[found.rows["flag"] == flag]
    return set(zip(rows["cliente_id"], rows["key"], strict=True))


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_expiring_while_used_counts_the_documents_of_customers_who_talked_recently(db):
    shop = Shop(db)
    shop.say("A1", "cliente-A1-1", RECOGIDA.format("Sierpes"))
    shop.say("A1", "cliente-A1-1", "Prefiero que me atendáis en catalán.")
    old = datetime.now(UTC) - timedelta(days=60)  # B1 talked two months ago (the demo's replayed clock)
    shop.say("B1", "cliente-B1-1", RECOGIDA.format("Goya"), at=old)
    shop.settle()
    # every customer document lives 365 days: within 400 days all expire, within 30 none does
    found = flags.memory_flags(db, flags.Thresholds(expiring_days=400, used_days=30))
    assert flagged(found, "expiring") == {("A1", "pref-recogida"), ("A1", "pref-idioma")}
    assert found.count("expiring", "T001") == 2
    assert found.total("expiring") == 2
    assert flags.memory_flags(db, flags.Thresholds(expiring_days=400, used_days=90)).count("expiring", "T001") == 3
    assert flags.memory_flags(db, flags.Thresholds(expiring_days=30, used_days=90)).total("expiring") == 0
    expected = db.fetch_one(
        "SELECT count(*) AS n FROM store WHERE prefix = 'clientes.A1' AND expires_at > now() "
        "AND expires_at <= now() + interval '400 days'"
    )["n"]
    assert expected == 2
    mine = flags.memory_flags(db, flags.Thresholds(expiring_days=400, used_days=30), scope=scope_of(db, "T001"))
    assert mine.count("expiring", "T001") == 2
    other = flags.memory_flags(db, flags.Thresholds(expiring_days=400, used_days=30), scope=scope_of(db, "T002"))
    assert other.counts.empty and other.rows.empty


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_flapping_counts_a_document_written_more_than_k_times_in_a_week(db):
    shop = Shop(db)
    for n, tienda in enumerate(["Sierpes", "Goya", "Sol", "Triana", "Nervión"]):
        shop.say("F1", f"cliente-F1-{n}", RECOGIDA.format(tienda))
    for n, tienda in enumerate(["Sierpes", "Goya", "Sol"]):
        shop.say("F2", f"cliente-F2-{n}", RECOGIDA.format(tienda))
    eight_days_ago = datetime.now(UTC) - timedelta(days=8)
    for n, tienda in enumerate(["Sierpes", "Goya", "Sol", "Triana"]):  # F3 flapped, but more than a week ago
        shop.say("F3", f"cliente-F3-{n}", RECOGIDA.format(tienda), at=eight_days_ago)
    shop.settle()
    found = flags.memory_flags(db, flags.Thresholds(flapping_writes=3))
    assert flagged(found, "flapping") == {("F1", "pref-recogida")}
    row = found.rows[found.rows["flag"] == "flapping"].iloc[0]
    assert row["writes"] == 5 and row["value"] == "Nervión"
    assert found.count("flapping", "T001") == 1
    assert flags.memory_flags(db, flags.Thresholds(flapping_writes=2)).count("flapping", "T001") == 2
    # the same from the checkpoints alone (an agent without our write log): the tool calls count them
    db.execute("DELETE FROM core_memory_writes")
    assert flags.memory_flags(db, flags.Thresholds(flapping_writes=3)).count("flapping", "T001") == 1
    assert flags.memory_flags(db, flags.Thresholds(flapping_writes=3), scope=scope_of(db, "T009")).rows.empty


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_contradiction_counts_one_kind_of_preference_with_two_values(db):
    shop = Shop(db)
    shop.say("K1", "cliente-K1-1", RECOGIDA.format("Sierpes"))
    shop.say("K2", "cliente-K2-1", RECOGIDA.format("Goya"))
    # no tool of the closed schema writes a second document of one tipo: an agent with a wider namespace would, through
    # the same write every tool makes (put_memory)
    put_memory(
        shop.store,
        ("clientes", "K1", "web"),
        "pref-recogida",
        {"tipo": "recogida", "valor": "Goya", "texto": "recogida: Goya"},
        thread_id="web-K1",
        agent="web",
    )
    put_memory(  # K2's second document agrees with the first: nothing to look at
        shop.store,
        ("clientes", "K2", "web"),
        "pref-recogida",
        {"tipo": "recogida", "valor": "Goya", "texto": "recogida: Goya"},
        thread_id="web-K2",
        agent="web",
    )
    shop.settle()  # the change follower's namespaces (a manager's scope reads them) include the nested ones now
    found = flags.memory_flags(db, flags.Thresholds())
    rows = found.rows[found.rows["flag"] == "contradiction"]
    assert list(zip(rows["cliente_id"], rows["tipo"], strict=True)) == [("K1", "recogida")]
    assert rows.iloc[0]["others"] == [
        "clientes.K1 / pref-recogida: Sierpes",
        "clientes.K1.web / pref-recogida: Goya",
    ]
    assert found.count("contradiction", "T001") == 1
    assert flags.memory_flags(db, flags.Thresholds(), scope=scope_of(db, "T001")).count("contradiction", "T001") == 1
    assert flags.memory_flags(db, flags.Thresholds(), scope=scope_of(db, "T002")).rows.empty


def _age(db: Database, thread_id: str, days: int) -> None:
    """The checkpointer stamps `ts` with the real time: the sweep tests' way of making a thread old (only `ts`)."""
    assert db.execute(
        "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{ts}', "
        "to_jsonb(((checkpoint->>'ts')::timestamptz - make_interval(days => %(d)s))::text)) WHERE thread_id = %(t)s",
        {"t": thread_id, "d": days},
    )


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_provenance_gone_counts_documents_whose_writing_conversation_was_pruned_or_deleted(db):
    shop = Shop(db)
    shop.say("P1", "cliente-P1-1", RECOGIDA.format("Sierpes"))
    shop.say("P1", "cliente-P1-1", "Gracias, eso es todo.")
    pruned = sweep.run_sweep(db, trigger="manual", prune=validate_policy(1, 0))  # the real sweep, history pruning
    assert pruned.prune is not None and [t.thread_id for t in pruned.prune.threads] == ["cliente-P1-1"]
    shop.say("P2", "cliente-P2-1", RECOGIDA.format("Goya"))
    _age(db, "cliente-P2-1", 120)
    swept = sweep.run_sweep(db, trigger="manual", retention_days=30)  # the real sweep, retention
    assert swept.threads_deleted == 1
    shop.say("P3", "cliente-P3-1", RECOGIDA.format("Sol"))  # written after both: its conversation is whole
    shop.settle()
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = 'cliente-P2-1'")["n"] == 0
    found = flags.memory_flags(db, flags.Thresholds())
    rows = found.rows[found.rows["flag"] == "provenance_gone"]
    assert sorted(zip(rows["cliente_id"], rows["key"], rows["thread_id"], rows["detail"], strict=True)) == [
        ("P1", "pref-recogida", "cliente-P1-1", "step_pruned"),
        ("P2", "pref-recogida", "cliente-P2-1", "thread_gone"),
    ]
    # P2's store was named only by its deleted conversation's metadata: no source names it now, so it is counted
    # apart, and no store's manager sees it (core.memory.customer_stores)
    assert found.count("provenance_gone", "T001") == 1 and found.count("provenance_gone", flags.NO_STORE) == 1
    assert flags.memory_flags(db, flags.Thresholds(), scope=scope_of(db, "T001")).count("provenance_gone", "T001") == 1
    assert flags.memory_flags(db, flags.Thresholds(), scope=scope_of(db, "T002")).rows.empty


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_flags_are_counted_per_store_and_a_customer_of_no_store_is_counted_apart(db):
    shop = Shop(db)
    shop.say("S1", "cliente-S1-1", RECOGIDA.format("Sierpes"), tienda="T001")
    shop.say("S2", "cliente-S2-1", RECOGIDA.format("Goya"), tienda="T002")
    put_memory(shop.store, ("clientes", "S3"), "pref-recogida", {"tipo": "recogida", "valor": "Sol"}, thread_id="x-S3")
    shop.settle()
    found = flags.memory_flags(db, flags.Thresholds(expiring_days=400))
    by_store = {(r.flag, r.tienda): r.documents for r in found.counts.itertuples()}
    # S3's writing conversation (x-S3) was never a checkpoint thread: its provenance is not in the database
    assert by_store == {
        ("expiring", "T001"): 1,
        ("expiring", "T002"): 1,
        ("provenance_gone", flags.NO_STORE): 1,
    }
    only_t2 = flags.memory_flags(db, flags.Thresholds(expiring_days=400), scope=scope_of(db, "T002"))
    assert {(r.flag, r.tienda): r.documents for r in only_t2.counts.itertuples()} == {("expiring", "T002"): 1}
    assert set(only_t2.rows["cliente_id"]) == {"S2"}


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_flags_change_nothing(db):
    shop = Shop(db)
    shop.say("S1", "cliente-S1-1", RECOGIDA.format("Sierpes"))
    shop.settle()
    before = db.fetch("SELECT prefix, key, value, updated_at, expires_at FROM store ORDER BY 1, 2")
    flags.memory_flags(db, flags.Thresholds(expiring_days=400))
    assert db.fetch("SELECT prefix, key, value, updated_at, expires_at FROM store ORDER BY 1, 2") == before


@pytest.mark.parametrize("value", [0, -1, "x", 1.5, True, None])
def test_a_bad_threshold_is_a_clear_error(value):
    with pytest.raises(flags.FlagSettingError, match="expiring_days must be a whole number >= 1"):
        flags.Thresholds(expiring_days=value)


@pytest.mark.parametrize(
    ("name", "raw"), [("FLAG_EXPIRING_DAYS", "0"), ("FLAG_USED_DAYS", "x"), ("FLAG_FLAPPING_WRITES", "-2")]
)
def test_a_bad_threshold_setting_is_refused_with_its_name(monkeypatch, name, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError, match=name):
        load_settings({})
