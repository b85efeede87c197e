"""Read side of the store managers' pages: plain SQL, returned as DataFrames.

The dashboard reads `store` with SQL rather than `store.search`, on purpose: a search
refreshes TTLs (`refresh_on_read`), and looking at memory must never extend its retention.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import pandas as pd

from core.db import Database
from core.memory import MAX_DOCS_PER_CUSTOMER, ROOTS, InvalidIdentifier

MAX_SEARCH_LENGTH = 400

# Document counts come from `core_prefix_counts`, kept exact by triggers on `store`
# (core/sql/007_prefix_counts.sql); expired rows are counted live through the expires_at index.
EXPIRED = "expires_at IS NOT NULL AND expires_at < now()"

SELECT_TOTALS = f"""
SELECT (SELECT coalesce(sum(documents), 0)::bigint FROM core_prefix_counts) AS documents,
       (SELECT count(*) FROM store WHERE {EXPIRED})                         AS expired,
       (SELECT count(*) FROM store_vectors)                                  AS vectors,
       (SELECT count(*) FROM core_prefix_counts)                             AS namespaces"""

SELECT_BY_ROOT = f"""
WITH docs AS (
    SELECT root, sum(documents)::bigint AS documents, count(*) AS namespaces FROM core_prefix_counts GROUP BY root
), expired AS (
    SELECT split_part(prefix, '.', 1) AS root, count(*) AS expired FROM store WHERE {EXPIRED} GROUP BY 1
)
SELECT d.root, d.documents, d.namespaces, coalesce(e.expired, 0) AS expired
FROM docs d LEFT JOIN expired e USING (root) ORDER BY d.documents DESC, d.root"""

SELECT_TOP_PREFIXES = """
SELECT c.prefix, c.root, c.documents,
       (SELECT count(*) FROM store s WHERE s.prefix = c.prefix AND s.expires_at < now()) AS expired,
       c.last_write
FROM core_prefix_counts c ORDER BY c.documents DESC, c.prefix LIMIT %s"""

SELECT_OVERSIZED = """
SELECT split_part(c.prefix, '.', 2) AS cliente_id, c.prefix, c.documents,
       (SELECT string_agg(s.key, ', ' ORDER BY s.key) FROM store s WHERE s.prefix = c.prefix) AS keys,
       c.last_write
FROM core_prefix_counts c
WHERE c.root = 'clientes' AND c.documents > %s ORDER BY c.documents DESC, c.prefix LIMIT %s"""

# Exact matches only: `=` never interprets `%` or `_`.
SELECT_NAMESPACE_EXACT = """
SELECT prefix, count(*) AS documents FROM store
WHERE prefix = ANY(%s) GROUP BY prefix ORDER BY prefix"""

# The page first (LIMIT/OFFSET on the primary key), then one vector lookup per row shown.
SELECT_NAMESPACE_ITEMS = """
SELECT s.key, s.value, s.created_at, s.updated_at, s.expires_at, s.ttl_minutes,
       (s.expires_at IS NOT NULL AND s.expires_at < now()) AS expired,
       EXISTS (SELECT 1 FROM store_vectors v WHERE v.prefix = s.prefix AND v.key = s.key) AS vector
FROM (SELECT * FROM store WHERE prefix = %s ORDER BY key LIMIT %s OFFSET %s) s
ORDER BY s.key"""

SELECT_PREF_DAILY = """
WITH days AS (
    SELECT generate_series(%(since)s::date, %(until)s::date, interval '1 day')::date AS day
), conv AS (
    SELECT started_at::date AS day, count(*) AS conversations
    FROM core_conversations
    WHERE subject_root = 'clientes' AND started_at >= %(since)s AND started_at < %(until)s::date + 1
    GROUP BY 1
), writes AS (
    SELECT written_at::date AS day, count(*) AS writes
    FROM core_memory_writes
    WHERE root = 'clientes' AND key LIKE 'pref-%%' AND thread_id IS NOT NULL
      AND written_at >= %(since)s AND written_at < %(until)s::date + 1
    GROUP BY 1
)
SELECT d.day, coalesce(c.conversations, 0) AS conversations, coalesce(w.writes, 0) AS writes
FROM days d LEFT JOIN conv c USING (day) LEFT JOIN writes w USING (day) ORDER BY d.day"""

SELECT_PREF_BY_TIPO = """
SELECT substr(key, 6) AS tipo, count(*) AS writes, count(DISTINCT prefix) AS customers
FROM core_memory_writes
WHERE root = 'clientes' AND key LIKE 'pref-%%' AND thread_id IS NOT NULL
  AND written_at >= %(since)s AND written_at < %(until)s::date + 1
GROUP BY 1 ORDER BY writes DESC"""

SELECT_WRITING_CONVERSATIONS = """
SELECT w.thread_id, split_part(w.prefix, '.', 2) AS cliente_id, min(w.written_at) AS first_write,
       count(*) AS writes, string_agg(DISTINCT substr(w.key, 6), ', ') AS tipos, min(w.agent) AS agent
FROM core_memory_writes w
WHERE w.root = 'clientes' AND w.key LIKE 'pref-%%' AND w.thread_id IS NOT NULL
  AND w.written_at >= %(since)s AND w.written_at < %(until)s::date + 1
GROUP BY w.thread_id, w.prefix ORDER BY first_write DESC LIMIT %(limit)s OFFSET %(offset)s"""


@dataclass(frozen=True)
class MemoryTotals:
    documents: int
    expired: int
    vectors: int
    namespaces: int


def memory_totals(db: Database) -> MemoryTotals:
    return MemoryTotals(**db.fetch_one(SELECT_TOTALS))


def documents_by_root(db: Database) -> pd.DataFrame:
    return pd.DataFrame(db.fetch(SELECT_BY_ROOT), columns=["root", "documents", "namespaces", "expired"])


def top_prefixes(db: Database, limit: int = 20) -> pd.DataFrame:
    rows = db.fetch(SELECT_TOP_PREFIXES, (limit,))
    return pd.DataFrame(rows, columns=["prefix", "root", "documents", "expired", "last_write"])


def oversized_customers(db: Database, limit: int = 200) -> pd.DataFrame:
    """Customers whose namespace holds more documents than the closed schema allows."""
    rows = db.fetch(SELECT_OVERSIZED, (MAX_DOCS_PER_CUSTOMER, limit))
    return pd.DataFrame(rows, columns=["cliente_id", "prefix", "documents", "keys", "last_write"])


def find_namespaces(db: Database, text: str) -> pd.DataFrame:
    """Namespaces matching `text` exactly: a full prefix (`clientes.C9`) or an id under any root (`C9`).

    Raises InvalidIdentifier for empty, NUL-bearing or oversized input. `%`, `_` and quotes
    are literal characters here.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidIdentifier("type a namespace (e.g. clientes.C9) or an id (e.g. C9)")
    if "\x00" in text:
        raise InvalidIdentifier("the search contains a NUL character")
    if len(text) > MAX_SEARCH_LENGTH:
        raise InvalidIdentifier(f"the search is {len(text)} characters long (at most {MAX_SEARCH_LENGTH})")
    text = text.strip()
    candidates = [text] if "." in text else [f"{root}.{text}" for root in ROOTS]
    return pd.DataFrame(db.fetch(SELECT_NAMESPACE_EXACT, (candidates,)), columns=["prefix", "documents"])


def namespace_items(db: Database, prefix: str, limit: int = 100, offset: int = 0) -> pd.DataFrame:
    """The items of one namespace (exact prefix), without refreshing their TTL."""
    rows = db.fetch(SELECT_NAMESPACE_ITEMS, (prefix, limit, offset))
    return pd.DataFrame(
        rows, columns=["key", "value", "created_at", "updated_at", "expires_at", "ttl_minutes", "expired", "vector"]
    )


def preference_daily(db: Database, since: date, until: date) -> pd.DataFrame:
    """Per day: customer conversations started, preference writes made in conversations, and their ratio."""
    df = pd.DataFrame(db.fetch(SELECT_PREF_DAILY, {"since": since, "until": until}),
                      columns=["day", "conversations", "writes"])
    df["ratio"] = (df["writes"] / df["conversations"].where(df["conversations"] > 0)).astype(float)
    return df


def preference_by_tipo(db: Database, since: date, until: date) -> pd.DataFrame:
    return pd.DataFrame(db.fetch(SELECT_PREF_BY_TIPO, {"since": since, "until": until}),
                        columns=["tipo", "writes", "customers"])


def writing_conversations(db: Database, since: date, until: date, limit: int = 50, offset: int = 0) -> pd.DataFrame:
    """Conversations that wrote preferences (including writes later overwritten), newest first."""
    params = {"since": since, "until": until, "limit": limit, "offset": offset}
    return pd.DataFrame(db.fetch(SELECT_WRITING_CONVERSATIONS, params),
                        columns=["thread_id", "cliente_id", "first_write", "writes", "tipos", "agent"])


# --- preferences applied (from the canonical checkpoint views) ------------------------------
# The proposals (`proponer_entrega` calls) of the most recent customer conversations, and every
# `recordar_preferencia` call those customers ever made, as the agents wrote them in checkpoints.
# Bounded to recent threads because decoding is ~34 µs per write (BENCHMARKS.md): the page samples.
SELECT_PROPOSALS_AND_PREFERENCES = """
WITH recent AS (
    SELECT thread_id, subject_id FROM core_conversations
    WHERE subject_root = 'clientes' ORDER BY started_at DESC LIMIT %(threads)s
), threads AS (
    SELECT c.thread_id FROM core_conversations c
    WHERE c.subject_root = 'clientes' AND c.subject_id IN (SELECT subject_id FROM recent)
)
SELECT m.thread_id, m.cliente_id, m.ts, call ->> 'name' AS tool, call -> 'args' AS args,
       m.thread_id IN (SELECT thread_id FROM recent) AS recent
FROM core_checkpoint_messages_view m
CROSS JOIN LATERAL jsonb_array_elements(m.tool_calls) AS call
WHERE m.thread_id IN (SELECT thread_id FROM threads)
  AND m.kind = 'ai' AND m.tool_calls IS NOT NULL
  AND call ->> 'name' IN ('proponer_entrega', 'recordar_preferencia')
ORDER BY m.ts"""


@dataclass(frozen=True)
class PreferencesApplied:
    proposals: pd.DataFrame        # one row per proposal: customer, thread, ts, args, preferences in force, followed
    with_preference: int           # proposals made while the customer had at least one relevant preference
    followed: int                  # ... whose every field equals the preference in force
    changed_by_memory: int         # ... where a field took a preferred value other than the default

    @property
    def rate(self) -> float | None:
        return self.followed / self.with_preference if self.with_preference else None


def preferences_applied(db: Database, threads: int = 500) -> PreferencesApplied:
    """Share of proposals in the `threads` most recent customer conversations that followed the
    preference in force (the customer's latest `recordar_preferencia` before the proposal)."""
    from core.agents import DEFAULT_PROPOSAL, PROPOSAL_FIELDS

    rows = db.fetch(SELECT_PROPOSALS_AND_PREFERENCES, {"threads": threads})
    in_force: dict[str, dict[str, str]] = {}
    out = []
    for r in rows:  # ordered by ts: the preferences seen so far are those in force
        args = r["args"] or {}
        if r["tool"] == "recordar_preferencia":
            in_force.setdefault(r["cliente_id"], {})[args.get("tipo")] = args.get("valor")
            continue
        if not r["recent"]:
            continue
        prefs = in_force.get(r["cliente_id"], {})
        relevant = {f: prefs[t] for f, t in PROPOSAL_FIELDS.items() if t in prefs}
        out.append({
            "cliente_id": r["cliente_id"], "thread_id": r["thread_id"], "ts": r["ts"],
            "tienda": args.get("tienda"), "canal": args.get("canal"), "franja": args.get("franja"),
            "preferences": ", ".join(f"{f}={v}" for f, v in relevant.items()),
            "followed": all(args.get(f) == v for f, v in relevant.items()) if relevant else None,
            # the memory changed this proposal: a field took a preferred value other than the default
            "changed": any(args.get(f) == v != DEFAULT_PROPOSAL[f] for f, v in relevant.items()) if relevant else None,
        })
    df = pd.DataFrame(out, columns=["cliente_id", "thread_id", "ts", "tienda", "canal", "franja",
                                    "preferences", "followed", "changed"])
    with_pref = df[df["followed"].notna()]
    return PreferencesApplied(df, len(with_pref), int(with_pref["followed"].astype(bool).sum()),
                              int(with_pref["changed"].astype(bool).sum()))
