"""Read side of the Preferences page: preference writes per customer conversation, by tipo, the
conversations that wrote, and whether proposals followed the preference in force."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import pandas as pd

from core.db import Database

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
    from core.agents.retail import DEFAULT_PROPOSAL, PROPOSAL_FIELDS

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
