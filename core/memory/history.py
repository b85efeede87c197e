"""A memory document's history: every write of it, from what the database already holds (issue 56, item 2).

Nothing is written on the agents' side and nothing is asked of them. A write is read from:
- `core_tool_calls` (migration 020): the tool calls of AI messages, extracted from the checkpoints by the sweep job
  and the pages, for any agent built on LangGraph. A call of a writing tool (WRITING_TOOLS, e.g.
  `recordar_preferencia(tipo, valor)` -> `pref-{tipo}`) says which document was written, with which value, when (the
  checkpoint's `ts`, or the demo's replayed time), in which conversation and by which agent;
- `core_memory_writes` (migration 001): our agents' log of each `put` (prefix, key, thread, agent, time; no value).
  A log row confirms a tool call's write; a log row with no tool call is a write whose value is not known;
- `store` now: the value the agent holds, `expires_at` (an expired document not swept yet is still in the table and
  hidden from the agent by `omit_expired`), the `hilo` back-link of the memory article's documents. A value the store
  holds that no known write gave (its writing conversation erased or pruned before extraction, or written by some
  other path) is shown as the store's own entry, time `updated_at`;
- `core_sweep_documents`: a document no longer in `store` that a sweep deleted (when).

Which conversations are a customer's comes from the one resolver (core.privacy.subjects.resolve_conn); a tool call
whose checkpoint metadata names another customer is left out.

`customer_history` is the Memoria page's and the access export's read; `value_at(db, prefix, key, at)` is a
document's value at a time (the Checkpoints page's context at a step), "not known" when the database does not say.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import pandas as pd
import psycopg
from psycopg.rows import DictRow, dict_row

from core.db import Database, dashboard_dsn_of
from core.ids import CustomerId, validate_label
from core.memory.customer_stores import PREFIX_IN_SCOPE, Scope
from core.privacy import subjects


@dataclass(frozen=True)
class WritingTool:
    """A tool that writes one store document: its namespace root, the argument naming the key (formatted by
    `key_format`) and the argument holding the value a person reads."""

    root: str
    key_arg: str
    key_format: str
    value_arg: str

    def key(self, args: dict[str, Any]) -> str | None:
        named = args.get(self.key_arg)
        return self.key_format.format(named) if isinstance(named, str) and named else None


# The retail agents' and the memory article's writing tools (core/agents/retail.py, shared/seeds/000).
WRITING_TOOLS: dict[str, WritingTool] = {
    "recordar_preferencia": WritingTool("clientes", "tipo", "pref-{}", "valor"),
    "guardar_ajuste": WritingTool("empleados", "ajuste", "ajuste-{}", "valor"),
    "publicar_aviso": WritingTool("proveedores", "tema", "aviso-{}", "texto"),
}
ROOT = subjects.ROOT
# Where a write is known from (HistoryWrite.source).
SOURCE_TOOL_CALL, SOURCE_LOG, SOURCE_STORE = "tool_call", "log", "store"
# A document's state now (DocumentState.state).
HELD, EXPIRED, GONE = "held", "expired", "gone"

# The writing tools' calls in the customer's conversations (by thread, or tagged with the customer by metadata), with
# whether their thread and their checkpoint are still held (pruned or erased: not).
SELECT_CALLS = """
SELECT t.thread_id, t.checkpoint_ns, t.checkpoint_id, t.ts, t.clock, t.tool, t.args, t.call_id, t.agent,
       t.cliente_id,
       EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = t.checkpoint_ns
               AND c.checkpoint_id = t.checkpoint_id) AS step_held,
       EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = t.thread_id) AS thread_held
FROM core_tool_calls t
WHERE t.tool = ANY(%(tools)s) AND (t.thread_id = ANY(%(threads)s) OR t.cliente_id = %(id)s)
  AND (t.cliente_id IS NULL OR t.cliente_id = %(id)s)
ORDER BY t.ts, t.thread_id, t.checkpoint_id, t.position, t.call_index"""
# The same where the extraction's tables are in the dashboard's own database (issue 52): whether the step and the
# thread are held, from the change follower's copy of the checkpoints' keys there (core_checkpoint_shadow).
SELECT_CALLS_BY_SHADOW = SELECT_CALLS.replace("FROM checkpoints c", "FROM core_checkpoint_shadow c")
# Our agents' log of the namespace's writes (and of namespaces nested under it).
SELECT_LOG = r"""
SELECT w.id, w.written_at, w.prefix, w.key, w.thread_id, w.agent,
       (w.thread_id IS NOT NULL AND EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id))
           AS thread_held
FROM core_memory_writes w
WHERE w.prefix = %(prefix)s OR w.prefix LIKE %(prefix_like)s ESCAPE '\'
ORDER BY w.written_at, w.id"""
SELECT_STORE = r"""
SELECT s.prefix, s.key, s.value, s.created_at, s.updated_at, s.expires_at,
       (s.expires_at IS NOT NULL AND s.expires_at <= now()) AS expired, now() AS read_at,
       CASE WHEN jsonb_typeof(s.value -> 'hilo') = 'string' THEN s.value ->> 'hilo' END AS hilo
FROM store s
WHERE s.prefix = %(prefix)s OR s.prefix LIKE %(prefix_like)s ESCAPE '\'
ORDER BY s.prefix, s.key"""
# Documents no longer in the store that a sweep deleted (its run's start).
SELECT_SWEPT = r"""
SELECT d.prefix, d.key, max(l.started_at) AS swept_at
FROM core_sweep_documents d JOIN core_sweep_log l ON l.id = d.run_id
WHERE (d.prefix = %(prefix)s OR d.prefix LIKE %(prefix_like)s ESCAPE '\') AND NOT coalesce(l.dry_run, false)
GROUP BY d.prefix, d.key"""
SELECT_NOW = "SELECT now() AS now"


@dataclass(frozen=True)
class HistoryWrite:
    """One write of a document. `value` None: not known (a log row with no tool call)."""

    prefix: str
    key: str
    written_at: datetime | None
    value: str | None
    thread_id: str | None
    agent: str | None
    tool: str | None
    source: str  # SOURCE_TOOL_CALL / SOURCE_LOG / SOURCE_STORE
    confirmed_by_log: bool = False  # a core_memory_writes row of the same thread matched the tool call
    thread_held: bool | None = None  # the writing conversation is still in the checkpoints (None: not known)
    step_held: bool | None = None  # the checkpoint holding the call is still there (None: not known)
    superseded: bool = False  # a later write replaced it
    current: bool = False  # the value the store holds now


@dataclass(frozen=True)
class DocumentState:
    """A document's state now: `state` HELD (the agent sees it), EXPIRED (in the table, past `expires_at`, hidden from
    the agent until a sweep deletes it) or GONE (no longer in the store; `swept_at` when a sweep deleted it)."""

    prefix: str
    key: str
    state: str
    value: str | None = None
    expires_at: datetime | None = None
    updated_at: datetime | None = None
    swept_at: datetime | None = None
    hilo: str | None = None

    @property
    def visible_to_agent(self) -> bool:
        return self.state == HELD


@dataclass
class CustomerHistory:
    """Every write of each document of one customer (`clientes.<id>` and namespaces nested under it)."""

    customer_id: str
    read_at: datetime
    documents: dict[tuple[str, str], DocumentState] = field(default_factory=dict)
    writes: list[HistoryWrite] = field(default_factory=list)  # in time order within each document
    threads: list[str] = field(default_factory=list)  # the customer's conversations (the resolver's)
    errors: dict[str, str] = field(default_factory=dict)  # a resolver source that could not run
    # `writes` indexed by document, for the list it was built from (a customer may hold thousands of documents)
    _index: tuple[int, int, dict[tuple[str, str], list[HistoryWrite]]] | None = field(
        default=None, repr=False, compare=False
    )

    def of(self, prefix: str, key: str) -> list[HistoryWrite]:
        """The document's writes, oldest first."""
        if self._index is None or self._index[:2] != (id(self.writes), len(self.writes)):
            by_document: dict[tuple[str, str], list[HistoryWrite]] = {}
            for w in self.writes:
                by_document.setdefault((w.prefix, w.key), []).append(w)
            self._index = (id(self.writes), len(self.writes), by_document)
        return list(self._index[2].get((prefix, key), ()))

    def frame(self) -> pd.DataFrame:
        """One row per write, documents in key order, writes oldest first, with the document's state now."""
        rows = []
        for (prefix, key), doc in sorted(self.documents.items()):
            for w in self.of(prefix, key):
                rows.append(
                    {
                        "prefix": prefix,
                        "key": key,
                        "written_at": w.written_at,
                        "value": w.value,
                        "thread_id": w.thread_id,
                        "agent": w.agent,
                        "tool": w.tool,
                        "source": w.source,
                        "confirmed_by_log": w.confirmed_by_log,
                        "thread_held": w.thread_held,
                        "superseded": w.superseded,
                        "current": w.current,
                        "state": doc.state,
                        "expires_at": doc.expires_at,
                        "visible_to_agent": doc.visible_to_agent,
                    }
                )
        return pd.DataFrame(rows, columns=HISTORY_COLUMNS)


HISTORY_COLUMNS = [
    "prefix",
    "key",
    "written_at",
    "value",
    "thread_id",
    "agent",
    "tool",
    "source",
    "confirmed_by_log",
    "thread_held",
    "superseded",
    "current",
    "state",
    "expires_at",
    "visible_to_agent",
]


def document_value(value: Any) -> str:
    """A stored document's value as a person reads it: its `valor`, else `texto`, else its JSON (as the Memory page
    shows it)."""
    if isinstance(value, dict):
        for name in ("valor", "texto"):
            if isinstance(value.get(name), str):
                return value[name]
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _call_write(row: dict, prefix: str) -> HistoryWrite | None:
    tool = WRITING_TOOLS.get(row["tool"])
    args = row["args"] if isinstance(row["args"], dict) else {}
    key = tool.key(args) if tool else None
    if tool is None or key is None:
        return None
    value = args.get(tool.value_arg)
    return HistoryWrite(
        prefix=prefix,
        key=key,
        written_at=row["ts"],
        value=value if isinstance(value, str) else None if value is None else str(value),
        thread_id=row["thread_id"],
        agent=row["agent"],
        tool=row["tool"],
        source=SOURCE_TOOL_CALL,
        thread_held=row["thread_held"],
        step_held=row["step_held"],
    )


def _merge_log(writes: list[HistoryWrite], log_rows: Iterable[dict]) -> list[HistoryWrite]:
    """Each log row confirms the latest unmatched tool-call write of the same document and thread at or before it;
    a log row matching none is a write whose value is not known."""
    out = list(writes)
    matched: set[int] = set()
    calls: dict[tuple, list[int]] = {}  # (prefix, key, thread) -> positions in `out`, in time order
    for i, w in enumerate(out):
        calls.setdefault((w.prefix, w.key, w.thread_id), []).append(i)
    for row in log_rows:
        best = None
        for i in calls.get((row["prefix"], row["key"], row["thread_id"]), ()):
            w = out[i]
            if i not in matched and (w.written_at is None or w.written_at <= row["written_at"]):
                best = i  # in time order: the last one found is the latest
        if best is not None:
            matched.add(best)
            out[best] = replace(out[best], confirmed_by_log=True)
        else:
            out.append(
                HistoryWrite(
                    prefix=row["prefix"],
                    key=row["key"],
                    written_at=row["written_at"],
                    value=None,
                    thread_id=row["thread_id"],
                    agent=row["agent"],
                    tool=None,
                    source=SOURCE_LOG,
                    confirmed_by_log=True,
                    thread_held=row["thread_held"] if row["thread_id"] else None,
                )
            )
    return out


def _order(w: HistoryWrite) -> tuple:
    return (w.prefix, w.key, w.written_at is None, w.written_at or datetime.min)


def _settle(writes: list[HistoryWrite], docs: dict[tuple[str, str], DocumentState]) -> list[HistoryWrite]:
    """Mark superseded and current writes per document; add the store's value as an entry of its own when no known
    write gave it."""
    by_doc: dict[tuple[str, str], list[HistoryWrite]] = {}
    for w in sorted(writes, key=_order):
        by_doc.setdefault((w.prefix, w.key), []).append(w)
    for ident, doc in docs.items():
        if doc.state == GONE:
            continue
        seen = by_doc.setdefault(ident, [])
        last = seen[-1] if seen else None
        # the store's value came from the last known write when it reads the same; a logged write whose value is
        # not known is taken as the one that gave it (a write between them would have been logged too)
        if last is not None and (last.value == doc.value or last.value is None):
            if last.value is None:  # the logged write whose value the store holds now
                seen[-1] = replace(last, value=doc.value)
            continue
        seen.append(
            HistoryWrite(
                prefix=doc.prefix,
                key=doc.key,
                written_at=doc.updated_at,
                value=doc.value,
                thread_id=doc.hilo,
                agent=None,
                tool=None,
                source=SOURCE_STORE,
            )
        )
    out: list[HistoryWrite] = []
    for ident, seen in by_doc.items():
        state = docs.get(ident)
        held = state is not None and state.state != GONE
        for i, w in enumerate(seen):
            latest = i == len(seen) - 1
            out.append(replace(w, superseded=not latest or not held, current=latest and held))
        if state is None:
            docs[ident] = DocumentState(ident[0], ident[1], GONE)
    return out


def customer_history_conn(
    conn: psycopg.Connection[DictRow],
    customer_id: CustomerId,
    config: subjects.Attribution | None = None,
    *,
    threads: Iterable[str] | None = None,
    ours: str | None = None,
) -> CustomerHistory:
    """`customer_history` on an open connection (in the caller's snapshot), unscoped. `threads`: the customer's
    conversations when the caller resolved them already (the access export); else the resolver finds them."""
    params = subjects.subject_params(customer_id)
    if threads is None:
        resolved = subjects.resolve_conn(conn, customer_id, config or subjects.Attribution.from_settings())
        found, errors = resolved.thread_ids, dict(resolved.errors)
    else:
        found, errors = sorted(threads), {}
    now = conn.execute(SELECT_NOW).fetchone()["now"]  # type: ignore[index]
    history = CustomerHistory(customer_id, now, threads=found, errors=errors)
    for row in conn.execute(SELECT_STORE, params).fetchall():
        state = EXPIRED if row["expired"] else HELD
        history.documents[(row["prefix"], row["key"])] = DocumentState(
            row["prefix"],
            row["key"],
            state,
            value=document_value(row["value"]),
            expires_at=row["expires_at"],
            updated_at=row["updated_at"],
            hilo=row["hilo"],
        )
    prefix = params["prefix"]
    tools = [n for n, t in WRITING_TOOLS.items() if t.root == ROOT]
    call_params = {"tools": tools, "threads": found, "id": customer_id}
    ours = ours or dashboard_dsn_of(conn)  # the tool calls are kept in the dashboard's database (issue 52)
    if ours is None:
        calls = conn.execute(SELECT_CALLS, call_params).fetchall()
    else:
        with psycopg.connect(ours, row_factory=dict_row) as mine:
            calls = mine.execute(SELECT_CALLS_BY_SHADOW, call_params).fetchall()
    writes = [w for w in (_call_write(r, prefix) for r in calls) if w is not None]
    writes = _merge_log(writes, conn.execute(SELECT_LOG, params).fetchall())
    if ours is None:
        swept_rows = conn.execute(SELECT_SWEPT, params).fetchall()
    else:  # the sweep log is in the dashboard's database (issue 52)
        with psycopg.connect(ours, row_factory=dict_row) as mine:
            swept_rows = mine.execute(SELECT_SWEPT, params).fetchall()
    swept = {(r["prefix"], r["key"]): r["swept_at"] for r in swept_rows}
    for w in writes:
        ident = (w.prefix, w.key)
        if ident not in history.documents:
            history.documents[ident] = DocumentState(w.prefix, w.key, GONE, swept_at=swept.get(ident))
    history.writes = sorted(_settle(writes, history.documents), key=_order)
    return history


SELECT_IN_SCOPE = f"SELECT EXISTS (SELECT 1 WHERE {PREFIX_IN_SCOPE.strip()}) AS mine"


def customer_history(
    db: Database, customer_id: str, scope: Scope | None = None, config: subjects.Attribution | None = None
) -> CustomerHistory | None:
    """Every write of each document of `customer_id` (see the module's docstring). With a manager's `scope`, None
    unless the customer is one of the scope's stores'. Raises InvalidIdentifier for a bad id."""
    customer_id = CustomerId.parse(customer_id)
    config = config or subjects.Attribution.from_settings()
    if scope is not None:  # the mapping is kept in the dashboard's database (issue 52)
        mine = db.ours.fetch_one(SELECT_IN_SCOPE, {**scope.params(), "prefix": f"{ROOT}.{customer_id}"})
        if not mine or not mine["mine"]:
            return None
    with db.connection(read_only=True) as conn:
        return customer_history_conn(conn, customer_id, config, ours=None if db.ours is db else db.ours.dsn)


# --- a document's value at a time ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueAt:
    """A document's value at `at`. `known` False: the database does not say (`value` None, `reason` why)."""

    prefix: str
    key: str
    at: datetime
    known: bool
    value: str | None = None
    written_at: datetime | None = None  # the write that gave it
    thread_id: str | None = None
    source: str | None = None
    reason: str | None = None  # "no_write_before" / "value_not_logged" / "not_a_customer"
    expires_at_now: datetime | None = None  # the document's expiry now (its expiry then is not recorded)


def _customer_of(prefix: str) -> str | None:
    parts = prefix.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == ROOT and parts[1] else None


def value_at(db: Database, prefix: str, key: str, at: datetime, *, history: CustomerHistory | None = None) -> ValueAt:
    """The value of the document (`prefix`, `key`) at `at` (an aware datetime): the latest known write at or before
    it. Not known when no write is known before `at`, or when that write's value is not recorded. Documents of
    customers only (`clientes.<id>...`): any other prefix is `not_a_customer`. `history`: the customer's history
    already read (a page showing several documents reads it once). Raises InvalidIdentifier for a bad prefix/key."""
    validate_label(key, "key")
    for label in prefix.split("."):
        validate_label(label, "namespace")
    customer = _customer_of(prefix)
    if customer is None:
        return ValueAt(prefix, key, at, False, reason="not_a_customer")
    if history is None or history.customer_id != customer:
        history = customer_history(db, customer)
    assert history is not None  # unscoped
    doc = history.documents.get((prefix, key))
    before = [w for w in history.of(prefix, key) if w.written_at is not None and w.written_at <= at]
    expires = doc.expires_at if doc is not None else None
    if not before:
        return ValueAt(prefix, key, at, False, reason="no_write_before", expires_at_now=expires)
    w = before[-1]
    if w.value is None:
        return ValueAt(
            prefix,
            key,
            at,
            False,
            written_at=w.written_at,
            thread_id=w.thread_id,
            source=w.source,
            reason="value_not_logged",
            expires_at_now=expires,
        )
    return ValueAt(prefix, key, at, True, w.value, w.written_at, w.thread_id, w.source, expires_at_now=expires)


def export_rows(found: CustomerHistory) -> list[dict[str, Any]]:
    """The history as the access export keeps it: one row per write, documents in key order, writes oldest first,
    with the document's state now (JSON-ready values: None where not known)."""
    rows = []
    for (prefix, key), doc in sorted(found.documents.items()):
        for w in found.of(prefix, key):
            rows.append(
                {
                    "prefix": prefix,
                    "key": key,
                    "written_at": w.written_at,
                    "value": w.value,
                    "thread_id": w.thread_id,
                    "agent": w.agent,
                    "tool": w.tool,
                    "source": w.source,
                    "superseded": w.superseded,
                    "current": w.current,
                    "state": doc.state,
                    "expires_at": doc.expires_at,
                    "visible_to_agent": doc.visible_to_agent,
                }
            )
    return rows
