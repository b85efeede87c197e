"""After an erasure nothing of the customer's documents or conversations survives anywhere (issue 25, data
protection): every column of every table is scanned (text, json/jsonb, arrays; bytea raw and through the SQL
decoder) for the customer's values. Their id stays only where the registers need it; the access register's row
of an earlier export survives; both hash chains verify; our bookkeeping (the extraction watermark) is kept;
and a re-check, holding only hashes, still finds data that comes back."""

from __future__ import annotations

import json
import re

import pytest

from core.agents.retail import ContextoCliente, run_turn
from core.db import Database, reset_pool
from core.history import tool_calls, views
from core.memory.store import put_memory
from core.operations import sweep
from core.privacy import access, chain, erasure, erasure_register, evidence, follow_up, token_index
from core.privacy import residue as res
from core.privacy.subjects import Attribution
from tests.test_erasure import agents_for, make_store

CUSTOMER, NEIGHBOUR = "C9", "C90"
ADDRESS = "Calle Mayor 5, 3B, 28013 Madrid"
SUPPORT_THREAD = "soporte-2031"  # no metadata, no pattern, no back-link: found only by the residue scan
# Where a customer id may stay after their erasure: the registers that prove it (and their chain / redactions)
REGISTERS = {
    "core_erasure_register",
    "core_erasure_rechecks",
    "core_access_register",
    "core_thread_tombstones",
    "core_register_chain",
    "core_register_redactions",
}
DEFAULT = Attribution()


@pytest.fixture
def db(create_database):
    database = Database(create_database())
    yield database
    reset_pool(database.dsn)


def untagged_turn(agent, thread_id: str, text: str) -> None:
    """A turn written by an agent we did not write: no metadata, an app-chosen thread id."""
    agent.invoke(
        {"messages": [{"role": "user", "content": text}]},
        config={"configurable": {"thread_id": thread_id}},
        context=ContextoCliente("SOPORTE"),
    )


@pytest.fixture
def shop(db):
    """C9: documents (an address, preferences declared to the agent), two tagged conversations, an untagged
    support thread holding the address (residue); C90, a look-alike neighbour, with its own."""
    store = make_store(db)
    agent = agents_for(db, store)
    put_memory(
        store,
        ("clientes", CUSTOMER),
        "direccion",
        {"texto": f"direccion: {ADDRESS}", "calle": ADDRESS},
        thread_id="cliente-C9-1",
        agent="atencion-cliente",
    )
    run_turn(
        agent, ContextoCliente(CUSTOMER), "cliente-C9-1", "Por favor contactadme siempre por whatsapp al 600 123 456."
    )
    run_turn(
        agent, ContextoCliente(CUSTOMER), "cliente-C9-2", "Quiero las entregas en la franja de 17 a 19 en el portal."
    )
    run_turn(agent, ContextoCliente(NEIGHBOUR), "cliente-C90-1", "Por favor contactadme siempre por correo postal.")
    untagged_turn(agent, SUPPORT_THREAD, f"Un cliente dicta su dirección para el envío: {ADDRESS}")
    db.agent = agent
    return db


# --- what the customer's values are, and where they are found -------------------------------------------

SELECT_DOCUMENT_STRINGS = r"""
SELECT DISTINCT v #>> '{}' AS value FROM store s, jsonb_path_query(s.value - %(skip)s::text[], 'strict $.**') AS p(v)
WHERE (s.prefix = %(prefix)s OR s.prefix LIKE %(prefix)s || '.%%') AND jsonb_typeof(v) = 'string'"""
SELECT_OTHERS_STRINGS = r"""
SELECT DISTINCT v #>> '{}' AS value FROM store s, jsonb_path_query(s.value, 'strict $.**') AS p(v)
WHERE NOT (s.prefix = %(prefix)s OR s.prefix LIKE %(prefix)s || '.%%') AND jsonb_typeof(v) = 'string'"""
SELECT_HUMAN_TEXTS = """
SELECT DISTINCT m ->> 'content' AS value, w.thread_id = ANY(%(threads)s) AS mine
FROM core_checkpoint_writes_view w, jsonb_array_elements(w.messages) m WHERE m ->> 'kind' = 'human'"""


def customer_values(db, customer: str, threads: list[str]) -> list[str]:
    """The customer's distinctive document values and what they said in their conversations (`threads`): what no
    other subject's document or conversation holds too (the article's closed schema words `tipo` / `origen` and
    the `hilo` back-link aside)."""
    params = {"prefix": f"clientes.{customer}", "skip": sorted(res.NON_TERM_KEYS), "threads": threads}
    said = db.fetch(SELECT_HUMAN_TEXTS, params)
    others = {r["value"] for r in db.fetch(SELECT_OTHERS_STRINGS, params)} | {r["value"] for r in said if not r["mine"]}
    values = {r["value"] for r in db.fetch(SELECT_DOCUMENT_STRINGS, params)} | {r["value"] for r in said if r["mine"]}
    values -= others | {None}
    return sorted(v for v in values if len(v) >= res.MIN_TERM_LENGTH and v != customer)


SELECT_COLUMNS = """
SELECT c.relname::text AS tbl, a.attname::text AS col, format_type(a.atttypid, a.atttypmod) AS type,
       EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = c.oid AND t.attname = 'type' AND NOT t.attisdropped)
           AS has_type
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
ORDER BY 1, 2"""


def scan(db, values: list[str]) -> dict[str, set[str]]:
    """Every column of every table of the schema -> the values found in it: text, json/jsonb, arrays and every
    other type as text (jsonb escapes included); bytea on its raw bytes and, where a `type` column goes with it
    (the checkpoint tables), through the SQL decoder."""
    needles = sorted(set(values) | {json.dumps(v, ensure_ascii=False)[1:-1] for v in values})
    found: dict[str, set[str]] = {}
    for c in db.fetch(SELECT_COLUMNS):
        col, tbl = f'"{c["col"]}"', f'"{c["tbl"]}"'
        if c["type"] == "bytea":
            cond = f"position(convert_to(x.v, 'UTF8') IN t.{col}) > 0"
            if c["has_type"]:
                cond += f" OR strpos(core_checkpoint_payload(t.type, t.{col})::text, x.v) > 0"
        else:
            cond = f"strpos(t.{col}::text, x.v) > 0"
        rows = db.fetch(
            f"SELECT DISTINCT x.v FROM unnest(%(v)s::text[]) AS x(v) WHERE EXISTS (SELECT 1 FROM {tbl} t WHERE {cond})",
            {"v": needles},
        )
        if rows:
            found[f"{c['tbl']}.{c['col']}"] = {r["v"] for r in rows}
    return found


def tables_naming(db, customer: str) -> set[str]:
    """Tables where the id appears as a whole token (C9, never inside C90), in any column, decoded blobs too."""
    token = r"(^|[^A-Za-z0-9_%])" + re.escape(customer) + r"([^A-Za-z0-9_%]|$)"
    out = set()
    for c in db.fetch(SELECT_COLUMNS):
        col, tbl = f'"{c["col"]}"', f'"{c["tbl"]}"'
        if c["type"] == "bytea":
            if not c["has_type"]:
                continue
            text = f"core_checkpoint_payload(t.type, t.{col})::text"
        else:
            text = f"t.{col}::text"
        if db.fetch_one(f"SELECT EXISTS (SELECT 1 FROM {tbl} t WHERE {text} ~ %(rx)s) AS hit", {"rx": token})["hit"]:
            out.add(c["tbl"])
    return out


def erase_with_residue(db, customer: str, config: Attribution = DEFAULT) -> erasure.ErasureResult:
    preview = evidence.preview(db, customer, config)
    assert preview.residue_threads, "the scenario needs a residue thread"
    result = erasure.erase(
        db, customer, operator="dpo@example.com", config=config, decisions={t: "erase" for t in preview.residue_threads}
    )
    assert result.status == "complete", result.report
    return result


def assert_nothing_left(db, customer: str, values: list[str], export_id: int, result) -> None:
    assert scan(db, values) == {}
    assert tables_naming(db, customer) <= REGISTERS
    for name in ("erasure", "access"):
        verified = chain.verify(db, name)
        assert verified.ok, verified
    # the proof that the access request was answered survives: subject and digest, not data
    row = db.fetch_one("SELECT customer_id, sha256 FROM core_access_register WHERE id = %s", (export_id,))
    assert row is not None and row["customer_id"] == customer and len(row["sha256"]) == 64
    # the register still says what was done, by reference: terms hashed, residue rows naming them by ref
    reg = db.fetch_one("SELECT * FROM core_erasure_register WHERE id = %s", (result.request_id,))
    assert reg["residue_terms"] and all("term" not in t and t["ref"] for t in reg["residue_terms"])
    refs = {t["ref"] for t in reg["residue_terms"]}
    assert reg["residue"] and all(set(r["terms"]) <= refs for r in reg["residue"])
    (residue_ev,) = [e for e in reg["evidence"] if e["table"] == "residue"]
    assert residue_ev["result"] == 0 and ":residue_terms" in residue_ev["sql"]


# --- the tests ------------------------------------------------------------------------------------------


def test_after_an_erasure_no_table_holds_the_customers_values(shop):
    db = shop
    threads = ["cliente-C9-1", "cliente-C9-2", SUPPORT_THREAD]
    values = customer_values(db, CUSTOMER, threads)
    assert ADDRESS in values and "whatsapp al 600 123 456" in values and len(values) >= 5
    export = access.export(db, CUSTOMER, fmt="json", lang="es", operator="dpo@example.com")
    assert sweep.run_sweep(db, trigger="manual").status == "ok"  # tool calls, token index, storage, coverage
    before = scan(db, values)
    # the scan sees the values where they are: documents, decoded checkpoints, extracted tool-call arguments
    assert {"store.value", "checkpoint_writes.blob", "core_tool_calls.args"} <= set(before), before
    watermark = db.fetch_one("SELECT * FROM core_extract_watermark WHERE name = 'tool_calls'")
    assert watermark["thread_id"] in threads  # extraction stopped on one of the customer's threads

    result = erase_with_residue(db, CUSTOMER)
    # bookkeeping is not customer data: the watermark stays where extraction got to, without the thread id
    kept = db.fetch_one("SELECT * FROM core_extract_watermark WHERE name = 'tool_calls'")
    assert kept is not None and kept["ts"] == watermark["ts"] and kept["thread_id"] not in threads
    assert tool_calls.checkpoints_behind(db) == 0  # extraction does not restart from the beginning of history

    assert erasure_register.recheck(db, result.request_id, operator="dpo@example.com").clean
    assert sweep.run_sweep(db, trigger="manual").status == "ok"  # re-checks once more, as every sweep does
    assert db.fetch_one("SELECT count(*) AS n FROM core_erasure_rechecks")["n"] == 2
    assert_nothing_left(db, CUSTOMER, values, export.register_id, result)
    # the neighbour keeps everything
    assert db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix = 'clientes.C90'")["n"] > 0
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = 'cliente-C90-1'")["n"] > 0


def test_on_the_article_agents_database_nothing_is_left_either(article_agents):
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        values = customer_values(db, CUSTOMER, foreign.threads_of(CUSTOMER))
        assert "correo c9@ejemplo.es" in values and "tardes de C9 a las 17h" in values
        export = access.export(db, CUSTOMER, fmt="html", lang="en", operator="dpo@example.com")
        assert sweep.run_sweep(db, trigger="manual").status == "ok"
        assert "checkpoint_writes.blob" in scan(db, values)
        result = erase_with_residue(db, CUSTOMER)
        assert sweep.run_sweep(db, trigger="manual").status == "ok"
        assert erasure_register.recheck(db, result.request_id).clean
        assert_nothing_left(db, CUSTOMER, values, export.register_id, result)
    finally:
        db.close()


def test_a_recheck_holding_only_hashes_still_finds_data_that_came_back(shop):
    """The address said again in a new untagged thread: found while the thread waits for the token indexer,
    and after it has been indexed; the re-check rows keep no value either."""
    db = shop
    result = erase_with_residue(db, CUSTOMER)
    untagged_turn(db.agent, "soporte-2032", f"Otra vez la dirección: {ADDRESS}.")
    untagged_turn(db.agent, "soporte-2033", "Calle Mayor 50, 3B, 28013 Madrid")  # a different address: not it
    waiting = erasure_register.recheck(db, result.request_id)
    assert not waiting.clean and waiting.counts["residue"] == 1
    assert token_index.index_pending(db).threads >= 2
    indexed = erasure_register.recheck(db, result.request_id)
    assert not indexed.clean and indexed.counts["residue"] == 1
    (ev,) = [e for e in indexed.evidence if e.table == "residue"]
    assert "core_thread_tokens" in ev.sql and ADDRESS not in ev.sql
    assert "Calle Mayor" not in json.dumps(db.fetch("SELECT evidence FROM core_erasure_rechecks"), default=str)
    # erased again from the register: the store no longer holds the address, yet the new request finds the thread
    # through the hashes it carries on, and leaves it to the DPO (a residue thread nobody decided on)
    again = follow_up.erase_again(db, result.request_id, operator="dpo@example.com")
    assert again.status == "incomplete" and "soporte-2032" in again.report
    assert not erasure_register.recheck(db, again.request_id).clean
    (thread,) = evidence.preview(db, CUSTOMER).residue_threads  # the Erasure page shows it, kind `erased`
    assert thread == "soporte-2032" and {m.kind for m in evidence.preview(db, CUSTOMER).residue.matches} == {"erased"}
    last = erase_with_residue(db, CUSTOMER)
    assert erasure_register.recheck(db, last.request_id).clean


def test_every_page_counts_the_customers_threads_the_same_way(shop):
    """Access, Checkpoints and the erasure's evidence count threads that hold checkpoints: before the erasure
    the same number, after it none (a thread the register remembers is not a thread the database holds)."""
    db = shop

    def counts() -> tuple[int, int, int]:
        report = access.gather(db, CUSTOMER)
        listed = views.threads_of_customer(db, CUSTOMER)
        held = evidence.preview(db, CUSTOMER).held_threads
        return report.counts["threads"], len(listed), len(held)

    assert counts() == (2, 2, 2)
    erase_with_residue(db, CUSTOMER)
    assert counts() == (0, 0, 0)
    assert access.gather(db, CUSTOMER).counts["messages"] == 0


def test_a_value_back_in_an_encrypted_thread_is_found_through_the_hashes_with_the_key(db, monkeypatch):
    """Encrypted rows hold no token the index knows: the re-check reads them with the configured keys."""
    from format_agents import AES_KEY, encrypted_agent

    monkeypatch.setenv("LANGGRAPH_AES_KEYS", AES_KEY)
    put_memory(
        make_store(db), ("clientes", CUSTOMER), "direccion", {"texto": f"direccion: {ADDRESS}", "calle": ADDRESS}
    )
    result = erasure.erase(db, CUSTOMER, operator="dpo@example.com")
    assert result.status == "complete" and erasure_register.recheck(db, result.request_id).clean
    encrypted_agent(db.dsn, "enc-back", f"mi dirección: {ADDRESS}")
    back = erasure_register.recheck(db, result.request_id)
    assert not back.clean and back.counts["residue"] == 1
