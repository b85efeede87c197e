"""Right of access (GDPR art. 15): everything the agents hold about one customer, read by SQL.

`gather(db, customer_id)` collects, without changing anything (no TTL refresh: plain SELECTs on `store`,
never `store.search`):
- the store documents of every namespace under `clientes.<id>` (nested ones too; exact prefix or escaped
  LIKE), with created/updated/expires_at, expired-not-yet-swept ones included and marked;
- the customer's conversations, as decoded messages in order (human, AI text, tool calls and results)
  from the canonical SQL views, no raw blobs; a payload the serializer would refuse, or one that cannot
  be decoded, is marked in its place;
- our own logs about them: memory writes, conversations, guard denials (table and episodes), serializer
  refusals of their threads, the dual saver's dead letters of their threads;
- the erasure-register rows (with re-checks) and earlier access exports about them.
The result is an `AccessReport` (core/privacy/access_report.py); `core.privacy.access_render` renders it (JSON,
or HTML that prints to PDF); `record_export` writes the access register row with the sha256 of the exact file
handed over.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from core.agent_server import aegra
from core.capture.status import sync as capture_sync
from core.db import Database, one
from core.history import formats
from core.ids import CustomerId
from core.memory.history import customer_history_conn, export_rows
from core.privacy import access_notice, data_views, subjects
from core.privacy import ours as ours_db
from core.privacy import residue as res
from core.privacy.access_render import FORMATS, LANGS, render
from core.privacy.access_report import AccessReport
from core.privacy.evidence import ROOT, escape_like

SELECT_DOCUMENTS = r"""
SELECT prefix, key, value, created_at, updated_at, expires_at, ttl_minutes,
       (expires_at IS NOT NULL AND expires_at < now()) AS expired
FROM store
WHERE prefix = %(prefix)s OR prefix LIKE %(pattern)s ESCAPE '\'
ORDER BY prefix, key"""

# When a checkpoint happened: its own `ts`, or the day the demo replays (metadata `core_replayed_at`, the clock the
# tool-call extraction and our logs use: core/history/tool_calls.py), so the conversations, the preferences
# they wrote and our logs read one clock.
CHECKPOINT_TIME = (
    "coalesce(core_try_timestamptz({c}.metadata ->> 'core_replayed_at'), core_try_timestamptz({c}.checkpoint ->> 'ts'))"
)
# The writes of the customer's threads that hold messages, or that the decoder cannot read, or that name a
# type the serializer's allowlist refuses (`refused_type`, from the one allowlist, core_serde_allowlist), in
# the order the conversation happened, decoded in SQL: no raw blob leaves the database.
SELECT_WRITES = f"""
SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_path, w.task_id, w.idx, w.channel,
       coalesce({CHECKPOINT_TIME.format(c="c")}, w.ts) AS ts, w.step, w.messages, w.undecodable, w.refused_type
FROM core_checkpoint_writes_view w
LEFT JOIN checkpoints c
       ON c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id
WHERE w.thread_id = ANY(%(threads)s)
  AND (jsonb_array_length(w.messages) > 0 OR w.undecodable IS NOT NULL OR w.refused_type IS NOT NULL)
ORDER BY w.thread_id, 8 NULLS LAST, w.checkpoint_id, w.task_path, w.task_id, w.idx"""
SELECT_THREADS_SUMMARY = f"""
SELECT thread_id, count(*) AS checkpoints, min({CHECKPOINT_TIME.format(c="c")}) AS first_ts,
       max({CHECKPOINT_TIME.format(c="c")}) AS last_ts,
       bool_or(core_try_timestamptz(c.metadata ->> 'core_replayed_at') IS NOT NULL) AS replayed
FROM checkpoints c WHERE thread_id = ANY(%(threads)s) GROUP BY thread_id"""

SELECT_MEMORY_WRITES = r"""
SELECT id, written_at, prefix, key, thread_id, agent FROM core_memory_writes
WHERE prefix = %(prefix)s OR prefix LIKE %(pattern)s ESCAPE '\' OR thread_id = ANY(%(threads)s)
ORDER BY written_at, id"""
SELECT_CONVERSATIONS = """
SELECT thread_id, agent, subject_root, subject_id, started_at, last_turn_at, turns FROM core_conversations
WHERE (subject_root = %(root)s AND subject_id = %(cliente_id)s) OR thread_id = ANY(%(threads)s)
ORDER BY started_at, thread_id"""
SELECT_GUARD_DENIALS = """
SELECT id, replica_id, tool, risk, thread_id, subject_root, subject_id, customer_id, reason, denied_at
FROM core_guard_denials WHERE customer_id = %(cliente_id)s OR thread_id = ANY(%(threads)s)
ORDER BY denied_at, id"""
SELECT_EPISODE_DENIALS = """
SELECT e.id AS episode_id, e.replica_id, e.degraded_from, e.degraded_to, x.elem AS denial
FROM core_degradation_episodes e,
     jsonb_array_elements(CASE WHEN jsonb_typeof(e.denials) = 'array' THEN e.denials ELSE '[]' END) AS x(elem)
WHERE x.elem ->> 'customer_id' = %(cliente_id)s OR x.elem ->> 'thread_id' = ANY(%(threads)s)
ORDER BY e.degraded_from, e.id"""
SELECT_SERDE_REFUSALS = """
SELECT id, replica_id, type_name, kind, thread_id, checkpoint_id, refused_at FROM core_serde_refusals
WHERE thread_id = ANY(%(threads)s) ORDER BY refused_at, id"""
# Operations a replica buffered for the customer's threads that PostgreSQL refused on resync (the dual saver's
# dead letters): named with their size, the payload itself stays in the database (it is the customer's data, erased
# with the thread; its journal encoding is not decoded here).
SELECT_DEAD_LETTERS = """
SELECT id, replica_id, thread_id, kind, error, created_at, octet_length(payload) AS size_bytes
FROM core_checkpoint_dead_letters WHERE thread_id = ANY(%(threads)s) ORDER BY created_at, id"""
SELECT_ERASURES = """
SELECT id, customer_id, namespace_prefix, operator, requested_at, finished_at, status, passes, thread_ids,
       counts_before, deleted, counts_after, evidence, report, last_recheck_at, last_recheck_clean
FROM core_erasure_register WHERE customer_id = %(cliente_id)s ORDER BY requested_at, id"""
SELECT_RECHECKS = """
SELECT k.id, k.request_id, k.checked_at, k.trigger, k.operator, k.clean, k.counts
FROM core_erasure_rechecks k JOIN core_erasure_register r ON r.id = k.request_id
WHERE r.customer_id = %(cliente_id)s ORDER BY k.checked_at, k.id"""
SELECT_ACCESS_EXPORTS = """
SELECT id, customer_id, operator, exported_at, format, lang, sha256, size_bytes, counts
FROM core_access_register WHERE customer_id = %(cliente_id)s ORDER BY exported_at, id"""

INSERT_EXPORT = """
INSERT INTO core_access_register (customer_id, operator, format, lang, sha256, size_bytes, counts, sources)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id, exported_at"""
SELECT_REGISTER = """
SELECT id, customer_id, operator, exported_at, format, lang, sha256, size_bytes, counts, sources
FROM core_access_register WHERE %(customer_id)s::text IS NULL OR customer_id = %(customer_id)s
ORDER BY exported_at DESC, id DESC LIMIT %(limit)s"""
REGISTER_COLUMNS = [
    "id",
    "customer_id",
    "operator",
    "exported_at",
    "format",
    "lang",
    "sha256",
    "size_bytes",
    "counts",
    "sources",
]

LOG_SOURCES = (
    "core_memory_writes",
    "core_conversations",
    "core_guard_denials",
    "core_degradation_episodes.denials",
    "core_serde_refusals",
    "core_checkpoint_dead_letters",
    "core_data_views",
)


@dataclass(frozen=True)
class Attribution:
    """The customer's threads, each with the sources that found it, what was searched (and what could not run),
    and how many threads of the database no source attributes to anyone (the coverage caveat)."""

    threads: dict[str, list[str]]
    sources: tuple[str, ...]
    errors: dict[str, str]
    unattributed_threads: int
    residue: list[dict]  # [{thread_id, term, kind}]: unattributed threads holding the id or a distinctive value
    # every attributed thread, held by the checkpoint tables or not (an agent server's row of a thread whose first
    # run failed before any checkpoint holds the customer's words)
    attributed: tuple[str, ...] = ()


def _attribute(db: Database, customer_id: CustomerId) -> Attribution:
    """The one place that says which threads are the customer's: the subject resolver (core/privacy/subjects.py),
    the same answer the Checkpoints page and erasure use; the threads it holds now (`held`), as every page counts.
    The residue scan's proposals are named on the cover
    (thread and matched term, no snippet) but not exported: no source attributes them, a DPO decides."""
    capture_sync(db)  # the threads the follower keeps by metadata key and pattern include every write until now
    found = subjects.resolve(db, customer_id)
    cover = subjects.coverage(db)
    residue = res.residue_scan(db, customer_id, subjects=found)
    proposed = [{"thread_id": m.thread_id, "term": m.term, "kind": m.kind} for m in residue.matches if not m.common]
    return Attribution(
        {t: list(s) for t, s in found.threads.items() if t in found.held},
        tuple(found.by_source),
        dict(found.errors),
        cover.unattributed_threads,
        proposed,
        tuple(found.thread_ids),
    )


def _message(write: dict, position: int, msg: dict) -> dict:
    return {
        "checkpoint_id": write["checkpoint_id"],
        "step": write["step"],
        "ts": write["ts"],
        "channel": write["channel"],
        "position": position,
        "kind": msg.get("kind"),
        "id": msg.get("id"),
        "content": msg.get("content"),
        "tool_calls": msg.get("tool_calls"),
        "tool_name": msg.get("tool_name"),
        "tool_call_id": msg.get("tool_call_id"),
        "status": msg.get("status"),
    }


def _thread_messages(writes: Iterable[dict]) -> list[dict]:
    """Messages in conversation order; a write the serializer would refuse or the decoder cannot read is
    kept as a marker in its place (kind `refused` / `undecodable`), never dropped."""
    out: list[dict] = []
    for w in writes:
        messages = w["messages"] or []
        if w["undecodable"]:
            out.append(
                {
                    "checkpoint_id": w["checkpoint_id"],
                    "step": w["step"],
                    "ts": w["ts"],
                    "channel": w["channel"],
                    "position": 0,
                    "kind": "undecodable",
                    "reason": w["undecodable"],
                }
            )
            continue
        if w["refused_type"] and not messages:  # e.g. a tampered message: kept as a marker, never dropped
            out.append(
                {
                    "checkpoint_id": w["checkpoint_id"],
                    "step": w["step"],
                    "ts": w["ts"],
                    "channel": w["channel"],
                    "position": 0,
                    "kind": "refused",
                    "refused_type": w["refused_type"],
                }
            )
        for position, msg in enumerate(messages, start=1):
            item = _message(w, position, msg)
            if w["refused_type"]:  # a refused type inside a message the decoder still recognised
                item["refused_type"] = w["refused_type"]
            out.append(item)
    return out


def _opened(write: dict, opened: dict[tuple, Any]) -> dict:
    """An encrypted write as a configured key reads it (decrypted in Python, never stored), else as SQL gave it."""
    key = (write["thread_id"], write["checkpoint_ns"], write["checkpoint_id"], write["task_id"], write["idx"])
    if key not in opened:
        return write
    payload = opened[key]
    return {
        **write,
        "messages": formats.messages_of(payload),
        "undecodable": None,
        "refused_type": formats.refused_type(payload),
    }


def _params(customer_id: str, threads: list[str]) -> dict[str, Any]:
    prefix = f"{ROOT}.{customer_id}"
    return {
        "prefix": prefix,
        "pattern": escape_like(prefix) + ".%",
        "cliente_id": customer_id,
        "root": ROOT,
        "threads": threads,
    }


def _registers(
    conn: psycopg.Connection[DictRow], params: dict[str, Any]
) -> tuple[list[DictRow], list[DictRow], list[DictRow], list[DictRow]]:
    """The customer's rows of our registers (where `conn` holds them): views, erasures, re-checks, exports."""
    return (
        conn.execute(data_views.SELECT_FOR_EXPORT, params).fetchall(),
        conn.execute(SELECT_ERASURES, params).fetchall(),
        conn.execute(SELECT_RECHECKS, params).fetchall(),
        conn.execute(SELECT_ACCESS_EXPORTS, params).fetchall(),
    )


def gather(db: Database, customer_id: str) -> AccessReport:
    """Everything the agents and our logs hold about `customer_id`, read by SQL in one snapshot (REPEATABLE
    READ), changing nothing. Raises InvalidIdentifier (as erasure does) for an unusable id (parsed here unless it
    already is a CustomerId)."""
    customer_id = CustomerId.parse(customer_id)
    with db.connection() as conn, ours_db.connect(conn) as mine:
        apart = ours_db.is_apart(conn, mine)
        attribution = _attribute(db, customer_id)
        threads = sorted(attribution.threads)
        params = _params(customer_id, threads)
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            documents = conn.execute(SELECT_DOCUMENTS, params).fetchall()
            # what we hold and how it changed: every write of each document (core.memory.history), same snapshot
            memory_history = export_rows(customer_history_conn(conn, customer_id, threads=threads))
            summaries = {r["thread_id"]: r for r in conn.execute(SELECT_THREADS_SUMMARY, params).fetchall()}
            writes: dict[str, list[dict]] = {}
            opened = formats.decrypted_writes(conn, formats.decryptor(), threads)
            for w in conn.execute(SELECT_WRITES, params).fetchall():
                writes.setdefault(w["thread_id"], []).append(_opened(w, opened))
            logs = {
                "memory_writes": conn.execute(SELECT_MEMORY_WRITES, params).fetchall(),
                "conversations": conn.execute(SELECT_CONVERSATIONS, params).fetchall(),
                "guard_denials": conn.execute(SELECT_GUARD_DENIALS, params).fetchall(),
                "episode_denials": conn.execute(SELECT_EPISODE_DENIALS, params).fetchall(),
                "serde_refusals": conn.execute(SELECT_SERDE_REFUSALS, params).fetchall(),
                "dead_letters": conn.execute(SELECT_DEAD_LETTERS, params).fetchall(),
                # who looked at the customer's data on this dashboard (art. 15: the recipients of the data)
                "data_views": [],
            }
            server = aegra.detect_conn(conn)
            if server is not None:  # what the customer sent through an Agent Protocol server, as its runs keep it
                logs["agent_server_runs"] = aegra.runs_for_export(conn, attribution.attributed)
            if not apart:  # the registers in the same snapshot
                logs["data_views"], erasures, rechecks, exports = _registers(conn, params)
            generated_at = one(conn.execute("SELECT now() AS now").fetchone())["now"]
        if apart:  # in our database (issue 52): a snapshot of its own, read right after the agents'
            with mine.transaction():
                mine.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                logs["data_views"], erasures, rechecks, exports = _registers(mine, params)
    thread_rows = []
    for thread_id in threads:
        summary = summaries.get(thread_id) or {}
        messages = _thread_messages(writes.get(thread_id, []))
        times = [m["ts"] for m in messages if m.get("ts") is not None]
        thread_rows.append(
            {
                "thread_id": thread_id,
                "sources": attribution.threads[thread_id],
                "checkpoints": int(summary.get("checkpoints") or 0),
                # its first and last message (its first and last checkpoint when it has none)
                "first_ts": min(times) if times else summary.get("first_ts"),
                "last_ts": max(times) if times else summary.get("last_ts"),
                "messages": messages,
            }
        )
    # in the order they happened: the conversations are numbered in this order
    thread_rows.sort(key=lambda r: (r["first_ts"] is None, r["first_ts"] or generated_at, r["thread_id"]))
    return AccessReport(
        customer_id=customer_id,
        namespace_prefix=params["prefix"],
        generated_at=generated_at,
        documents=[dict(d) for d in documents],
        memory_history=memory_history,
        threads=thread_rows,
        logs={k: [dict(r) for r in v] for k, v in logs.items()},
        erasures=[dict(r) for r in erasures],
        erasure_rechecks=[dict(r) for r in rechecks],
        access_exports=[dict(r) for r in exports],
        sources={
            "store": [f"store.prefix = '{params['prefix']}' OR store.prefix LIKE '{params['pattern']}'"],
            "threads": list(attribution.sources),
            **(
                {"threads_not_searched": [f"{k}: {v}" for k, v in attribution.errors.items()]}
                if attribution.errors
                else {}
            ),
            "logs": list(LOG_SOURCES),
            "registers": ["core_erasure_register", "core_erasure_rechecks", "core_access_register"],
        },
        unattributed_threads=attribution.unattributed_threads,
        residue=attribution.residue,
        formats=_formats(db, threads),
        # the demo replays past days: its conversations and our logs are dated on the replayed day, the store's own
        # created/updated on the database's clock (the export says so next to the documents)
        replayed_clock=any(bool(s.get("replayed")) for s in summaries.values()),
    )


def _formats(db: Database, threads: list[str]) -> dict[str, Any]:
    """The customer's threads' storage formats, and how many encrypted rows no configured key opens."""
    fp = formats.fingerprint(db, threads).to_json()
    with db.connection() as conn:
        opened = len(formats.decrypted_writes(conn, formats.decryptor(), threads))
    return {**fp, "encrypted_writes_read": opened}


# --- the access register ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Export:
    """One export handed over: the file, its sha256, and its access-register row."""

    data: bytes
    sha256: str
    register_id: int
    exported_at: datetime
    file_name: str
    mime: str


def record_export(
    db: Database, report: AccessReport, data: bytes, *, fmt: str, lang: str, operator: str
) -> tuple[int, datetime, str]:
    """Write the access-register row for an export of `data`; returns (id, exported_at, sha256)."""
    if not isinstance(operator, str) or not operator.strip():
        raise ValueError("operator identity is required for the access register")
    digest = hashlib.sha256(data).hexdigest()
    row = one(
        db.ours.fetch_one(
            INSERT_EXPORT,
            (
                report.customer_id,
                operator.strip(),
                fmt,
                lang,
                digest,
                len(data),
                Jsonb(report.counts),
                Jsonb(report.sources),
            ),
            read_only=False,
        )
    )
    return int(row["id"]), row["exported_at"], digest


def export(db: Database, customer_id: str, *, fmt: str, lang: str, operator: str) -> Export:
    """Gather, render and register one export (the page's single call). Nothing is kept server-side but
    the register row; raises InvalidIdentifier or ValueError on bad input, before anything is written."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; known: {', '.join(LANGS)}")
    if not isinstance(operator, str) or not operator.strip():
        raise ValueError("operator identity is required for the access register")
    info = access_notice.notice(db, lang)
    report = gather(db, customer_id)
    data = render(report, fmt, requested_by=operator.strip(), lang=lang, notice=info)
    register_id, at, digest = record_export(db, report, data, fmt=fmt, lang=lang, operator=operator)
    stamp = report.generated_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Export(
        data,
        digest,
        register_id,
        at,
        f"access-{register_id}-{stamp}.{fmt}",
        "application/json" if fmt == "json" else "text/html",
    )


def register(db: Database, limit: int = 500, customer_id: str | None = None) -> pd.DataFrame:
    """The latest `limit` exports (of one customer, or of all), newest first; `items` is the total exported."""
    rows = db.ours.fetch(SELECT_REGISTER, {"customer_id": customer_id, "limit": limit}, read_only=False)
    frame = pd.DataFrame(rows, columns=REGISTER_COLUMNS)
    frame["items"] = frame["counts"].map(
        lambda c: sum(v for k, v in c.items() if k != "expired_documents") if isinstance(c, dict) else None
    )
    return frame


__all__ = [
    "AccessReport",
    "Attribution",
    "Export",
    "FORMATS",
    "LANGS",
    "export",
    "gather",
    "record_export",
    "register",
    "render",
]
