"""Read side of the Preferences page: preference writes per customer conversation, by tipo, the
conversations that wrote, and whether proposals followed the preference in force."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

import pandas as pd

from core.db import Database, one
from core.memory.customer_stores import Scope, scope_customer_ids

# Everything below reads the tool calls extracted from checkpoint history (core_tool_calls and
# core_thread_days, core/history/tool_calls.py) through their rollups (migration 047, kept exact by
# triggers): right for any agent that calls a tool named `recordar_preferencia`, ours or not. Days are
# UTC days of the extracted `ts` (see its `clock`). Each query reads rows per day (and tipo) of the
# period, or LIMIT rows by index, never the calls themselves: flat in the number of calls (BENCHMARKS.md).
# tests/test_preference_rollups.py keeps the live queries over core_tool_calls these replace and checks
# both give the same results.
PREF_TOOL = "recordar_preferencia"

SELECT_PREF_DAILY = """
WITH days AS (
    SELECT generate_series(%(since)s::date, %(until)s::date, interval '1 day')::date AS day
), conv AS (
    SELECT day, sum(threads) AS conversations
    FROM core_thread_day_pairs
    WHERE day BETWEEN %(since)s AND %(until)s
    GROUP BY 1
), writes AS (
    SELECT day, sum(calls) AS writes
    FROM core_tool_call_days
    WHERE tool = %(tool)s AND day BETWEEN %(since)s AND %(until)s
    GROUP BY 1
)
SELECT d.day, coalesce(c.conversations, 0)::bigint AS conversations, coalesce(w.writes, 0)::bigint AS writes
FROM days d LEFT JOIN conv c USING (day) LEFT JOIN writes w USING (day) ORDER BY d.day"""

# Threads with a human message in the period (a thread active on several days counts once): each thread
# counts on its first day in the period, the one whose previous active day is before it.
SELECT_CONVERSATIONS = """
SELECT coalesce(sum(threads), 0)::bigint AS n FROM core_thread_day_pairs
WHERE day BETWEEN %(since)s AND %(until)s AND prev_day < %(since)s"""

SELECT_CLOCKS = """
SELECT clock, sum(calls)::bigint AS calls FROM core_tool_call_days
WHERE tool = %(tool)s AND day BETWEEN %(since)s AND %(until)s
GROUP BY 1 HAVING sum(calls) > 0 ORDER BY 1"""

# customers = distinct coalesce(cliente_id, 'thread:' || thread_id) per tipo in the period, each counted on
# its first active day in the period (core_tool_call_day_pairs).
SELECT_PREF_BY_TIPO = """
WITH w AS (
    SELECT tipo, sum(calls) AS writes FROM core_tool_call_days
    WHERE tool = %(tool)s AND day BETWEEN %(since)s AND %(until)s GROUP BY 1
), c AS (
    SELECT tipo, sum(subjects) AS customers FROM core_tool_call_day_pairs
    WHERE tool = %(tool)s AND day BETWEEN %(since)s AND %(until)s AND prev_day < %(since)s GROUP BY 1
)
SELECT w.tipo, w.writes::bigint AS writes, coalesce(c.customers, 0)::bigint AS customers
FROM w LEFT JOIN c USING (tipo) WHERE w.writes > 0
ORDER BY writes DESC, tipo"""

# The threads whose first call in the period is newest: their first thread-day in the period (none of
# theirs before it in the period), by the (tool, first_ts DESC, thread_id) index, LIMIT rows; then each
# one's calls, tipos, agent and customer over its thread-days in the period.
SELECT_WRITING_CONVERSATIONS = """
WITH firsts AS (
    SELECT d.thread_id, d.first_ts AS first_write
    FROM core_tool_call_thread_days d
    WHERE d.tool = %(tool)s
      AND d.first_ts >= %(since)s::date::timestamp AT TIME ZONE 'UTC'
      AND d.first_ts < (%(until)s::date + 1)::timestamp AT TIME ZONE 'UTC'
      AND NOT EXISTS (SELECT 1 FROM core_tool_call_thread_days e
                      WHERE e.thread_id = d.thread_id AND e.tool = d.tool AND e.day >= %(since)s AND e.day < d.day)
    ORDER BY d.first_ts DESC, d.thread_id LIMIT %(limit)s OFFSET %(offset)s
)
SELECT f.thread_id, a.cliente_id, f.first_write, a.writes, t.tipos, a.agent
FROM firsts f
CROSS JOIN LATERAL (
    SELECT max(e.cliente_id) AS cliente_id, sum(e.calls)::bigint AS writes, max(e.agent) AS agent
    FROM core_tool_call_thread_days e
    WHERE e.thread_id = f.thread_id AND e.tool = %(tool)s AND e.day BETWEEN %(since)s AND %(until)s) a
CROSS JOIN LATERAL (
    SELECT string_agg(DISTINCT x.tipo, ', ') AS tipos
    FROM core_tool_call_thread_days e CROSS JOIN LATERAL unnest(e.tipos) AS x(tipo)
    WHERE e.thread_id = f.thread_id AND e.tool = %(tool)s AND e.day BETWEEN %(since)s AND %(until)s) t
ORDER BY f.first_write DESC, f.thread_id"""


SELECT_WRITING_CONVERSATION_COUNT = """
SELECT count(DISTINCT thread_id) AS n FROM core_tool_call_thread_days
WHERE tool = %(tool)s AND first_ts >= %(since)s::date::timestamp AT TIME ZONE 'UTC'
  AND first_ts < (%(until)s::date + 1)::timestamp AT TIME ZONE 'UTC'"""


# --- a store manager's figures (issue 39): the conversations and calls of the customers of their stores only, in SQL.
# A thread's customer is its `cliente_id` (the checkpoint metadata the extraction read); a thread with none is no
# store's. The rollups above hold no customer, so these read the per-customer rows by their cliente_id indexes:
# rows of the scope's customers, not of the chain. The scope's customers (customer_stores.MINE) are read where the
# store mapping is kept and passed as an array `%(mine)s` (issue 52: the extraction's tables are in the dashboard's
# own database; no join across the two).
MINE_GIVEN = "SELECT unnest(%(mine)s::text[])"
IN_MINE = f"cliente_id IN ({MINE_GIVEN})"
PERIOD_TS = (
    "ts >= %(since)s::date::timestamp AT TIME ZONE 'UTC' AND ts < (%(until)s::date + 1)::timestamp AT TIME ZONE 'UTC'"
)
SELECT_SCOPED_PREF_DAILY = f"""
WITH days AS (
    SELECT generate_series(%(since)s::date, %(until)s::date, interval '1 day')::date AS day
), conv AS (
    SELECT day, count(*) AS conversations FROM core_thread_days
    WHERE {IN_MINE} AND day BETWEEN %(since)s AND %(until)s GROUP BY 1
), writes AS (
    SELECT day, sum(calls) AS writes FROM core_tool_call_subject_days
    WHERE tool = %(tool)s AND {IN_MINE} AND day BETWEEN %(since)s AND %(until)s GROUP BY 1
)
SELECT d.day, coalesce(c.conversations, 0)::bigint AS conversations, coalesce(w.writes, 0)::bigint AS writes
FROM days d LEFT JOIN conv c USING (day) LEFT JOIN writes w USING (day) ORDER BY d.day"""
SELECT_SCOPED_CONVERSATIONS = f"""
SELECT count(DISTINCT thread_id) AS n FROM core_thread_days WHERE {IN_MINE} AND day BETWEEN %(since)s AND %(until)s"""
SELECT_SCOPED_CLOCKS = f"""
SELECT clock, count(*)::bigint AS calls FROM core_tool_calls
WHERE tool = %(tool)s AND {IN_MINE} AND {PERIOD_TS} GROUP BY 1 ORDER BY 1"""
SELECT_SCOPED_PREF_BY_TIPO = f"""
SELECT tipo, sum(calls)::bigint AS writes, count(DISTINCT subject)::bigint AS customers
FROM core_tool_call_subject_days
WHERE tool = %(tool)s AND {IN_MINE} AND day BETWEEN %(since)s AND %(until)s
GROUP BY tipo HAVING sum(calls) > 0 ORDER BY writes DESC, tipo"""
# The scope's threads with a call in the period, each by its first call in the period, newest first.
SCOPED_WRITERS = f"""
    SELECT d.thread_id, min(d.first_ts) AS first_write, max(d.cliente_id) AS cliente_id, sum(d.calls)::bigint AS writes,
           max(d.agent) AS agent
    FROM core_tool_call_thread_days d
    WHERE d.tool = %(tool)s AND d.{IN_MINE} AND d.day BETWEEN %(since)s AND %(until)s
    GROUP BY d.thread_id"""
SELECT_SCOPED_WRITING_CONVERSATIONS = f"""
WITH w AS ({SCOPED_WRITERS}
), page AS (
    SELECT * FROM w ORDER BY first_write DESC, thread_id LIMIT %(limit)s OFFSET %(offset)s
)
SELECT p.thread_id, p.cliente_id, p.first_write, p.writes, t.tipos, p.agent
FROM page p
CROSS JOIN LATERAL (
    SELECT string_agg(DISTINCT x.tipo, ', ') AS tipos
    FROM core_tool_call_thread_days e CROSS JOIN LATERAL unnest(e.tipos) AS x(tipo)
    WHERE e.thread_id = p.thread_id AND e.tool = %(tool)s AND e.day BETWEEN %(since)s AND %(until)s) t
ORDER BY p.first_write DESC, p.thread_id"""
SELECT_SCOPED_WRITING_CONVERSATION_COUNT = f"SELECT count(*) AS n FROM ({SCOPED_WRITERS}) w"


def _params(db: Database, scope: Scope | None, **params: Any) -> dict[str, Any]:
    """The parameters of a read, with the scope's customers (`mine`) when scoped."""
    return {**params, **({"mine": scope_customer_ids(db, scope)} if scope is not None else {})}


def preference_daily(db: Database, since: date, until: date, scope: Scope | None = None) -> pd.DataFrame:
    """Per UTC day: threads with a human message, `recordar_preferencia` calls, and their ratio (of the customers of
    a manager's stores with a `scope`)."""
    sql = SELECT_PREF_DAILY if scope is None else SELECT_SCOPED_PREF_DAILY
    df = pd.DataFrame(
        db.ours.fetch(sql, _params(db, scope, since=since, until=until, tool=PREF_TOOL)),
        columns=["day", "conversations", "writes"],
    )
    df["ratio"] = (df["writes"] / df["conversations"].where(df["conversations"] > 0)).astype(float)
    return df


def conversations(db: Database, since: date, until: date, scope: Scope | None = None) -> int:
    """Threads with a human message in [since, until] (UTC days)."""
    sql = SELECT_CONVERSATIONS if scope is None else SELECT_SCOPED_CONVERSATIONS
    return one(db.ours.fetch_one(sql, _params(db, scope, since=since, until=until)))["n"]


def clocks(db: Database, since: date, until: date, scope: Scope | None = None) -> dict[str, int]:
    """Preference calls in the period by the clock that dates them ('checkpoint' or 'replayed')."""
    sql = SELECT_CLOCKS if scope is None else SELECT_SCOPED_CLOCKS
    rows = db.ours.fetch(sql, _params(db, scope, since=since, until=until, tool=PREF_TOOL))
    return {r["clock"]: r["calls"] for r in rows}


def preference_by_tipo(db: Database, since: date, until: date, scope: Scope | None = None) -> pd.DataFrame:
    sql = SELECT_PREF_BY_TIPO if scope is None else SELECT_SCOPED_PREF_BY_TIPO
    return pd.DataFrame(
        db.ours.fetch(sql, _params(db, scope, since=since, until=until, tool=PREF_TOOL)),
        columns=["tipo", "writes", "customers"],
    )


def writing_conversations(
    db: Database, since: date, until: date, limit: int = 50, offset: int = 0, scope: Scope | None = None
) -> pd.DataFrame:
    """Threads that called `recordar_preferencia` in the period (every call, also those later
    overwritten in the store), newest first."""
    sql = SELECT_WRITING_CONVERSATIONS if scope is None else SELECT_SCOPED_WRITING_CONVERSATIONS
    params = _params(db, scope, since=since, until=until, limit=limit, offset=offset, tool=PREF_TOOL)
    return pd.DataFrame(
        db.ours.fetch(sql, params), columns=["thread_id", "cliente_id", "first_write", "writes", "tipos", "agent"]
    )


def writing_conversation_count(db: Database, since: date, until: date, scope: Scope | None = None) -> int:
    """How many threads `writing_conversations` pages through."""
    sql = SELECT_WRITING_CONVERSATION_COUNT if scope is None else SELECT_SCOPED_WRITING_CONVERSATION_COUNT
    return one(db.ours.fetch_one(sql, _params(db, scope, since=since, until=until, tool=PREF_TOOL)))["n"]


# --- preferences applied (from the extracted tool calls) -------------------------------------
# The proposals (`proponer_entrega` calls) of the most recent conversations (core_thread_last, migration 047), and every
# `recordar_preferencia` call of the same customers. A customer is the run's `cliente_id` metadata
# when the agent tagged it; otherwise only the thread itself is known, so only preferences declared
# earlier in the same thread count for its proposals.
RECENT_THREADS = """
    SELECT thread_id, cliente_id FROM core_thread_last ORDER BY last_human_at DESC, thread_id LIMIT %(threads)s"""
# ... of the customers of a manager's stores (issue 39).
RECENT_SCOPED_THREADS = f"""
    SELECT thread_id, cliente_id FROM core_thread_last WHERE cliente_id IN ({MINE_GIVEN})
    ORDER BY last_human_at DESC, thread_id LIMIT %(threads)s"""
# The most recent conversations of a period (UTC days): threads with a human message in it, newest last message first.
RECENT_THREADS_IN_PERIOD = """
    SELECT thread_id, max(cliente_id) AS cliente_id FROM core_thread_days
    WHERE day BETWEEN %(since)s AND %(until)s
    GROUP BY thread_id ORDER BY max(last_human_at) DESC, thread_id LIMIT %(threads)s"""
RECENT_SCOPED_THREADS_IN_PERIOD = f"""
    SELECT thread_id, max(cliente_id) AS cliente_id FROM core_thread_days
    WHERE cliente_id IN ({MINE_GIVEN}) AND day BETWEEN %(since)s AND %(until)s
    GROUP BY thread_id ORDER BY max(last_human_at) DESC, thread_id LIMIT %(threads)s"""
SELECT_PROPOSALS_AND_PREFERENCES = """
WITH recent AS ({recent}
), subjects AS (
    SELECT DISTINCT coalesce(cliente_id, 'thread:' || thread_id) AS subject FROM recent
), calls AS (
    -- coalesce(cliente_id, 'thread:' || thread_id) IN subjects, as two index lookups: by cliente_id, and by
    -- thread_id for the rows without one
    SELECT t.* FROM core_tool_calls t
    WHERE t.cliente_id IN (SELECT subject FROM subjects)
    UNION ALL
    SELECT t.* FROM core_tool_calls t
    WHERE t.cliente_id IS NULL
      AND t.thread_id IN (SELECT substr(subject, 8) FROM subjects WHERE left(subject, 7) = 'thread:')
)
SELECT t.thread_id, coalesce(t.cliente_id, 'thread:' || t.thread_id) AS subject, t.cliente_id, t.ts, t.clock,
       t.tool, t.args, t.thread_id IN (SELECT thread_id FROM recent) AND {in_period} AS recent
FROM calls t
WHERE t.tool IN ('proponer_entrega', 'recordar_preferencia')
ORDER BY t.ts, t.thread_id, t.checkpoint_id, t.task_id, t.idx, t.position, t.call_index"""
IN_PERIOD = (
    "t.ts >= %(since)s::date::timestamp AT TIME ZONE 'UTC' "
    "AND t.ts < (%(until)s::date + 1)::timestamp AT TIME ZONE 'UTC'"
)


@dataclass(frozen=True)
class PreferencesApplied:
    proposals: pd.DataFrame  # one row per proposal: customer, thread, ts, args, preferences in force, followed
    with_preference: int  # proposals made while the customer had at least one relevant preference
    followed: int  # ... whose every field equals the preference in force
    changed_by_memory: int  # ... where a field took a preferred value other than the default

    @property
    def rate(self) -> float | None:
        return self.followed / self.with_preference if self.with_preference else None


def preferences_applied(
    db: Database, threads: int = 500, since: date | None = None, until: date | None = None, scope: Scope | None = None
) -> PreferencesApplied:
    """Share of proposals in the `threads` most recent customer conversations that followed the
    preference in force (the customer's latest `recordar_preferencia` before the proposal). With a period
    (`since`, `until`, UTC days): the `threads` most recent conversations of the period, and their proposals in it.
    With a `scope`: the conversations of the customers of a manager's stores only."""
    from core.agents.retail import DEFAULT_PROPOSAL, PROPOSAL_FIELDS

    if (since is None) != (until is None):
        raise ValueError("a period needs both since and until")
    if scope is None:
        recent = RECENT_THREADS if since is None else RECENT_THREADS_IN_PERIOD
    else:
        recent = RECENT_SCOPED_THREADS if since is None else RECENT_SCOPED_THREADS_IN_PERIOD
    sql = SELECT_PROPOSALS_AND_PREFERENCES.format(recent=recent, in_period="true" if since is None else IN_PERIOD)
    rows = db.ours.fetch(sql, _params(db, scope, threads=threads, since=since, until=until))
    in_force: dict[str, dict[str | None, Any]] = {}  # as the tool call wrote them
    out = []
    for r in rows:  # ordered by ts: the preferences seen so far are those in force
        args: dict[str, Any] = r["args"] or {}
        if r["tool"] == "recordar_preferencia":
            in_force.setdefault(r["subject"], {})[args.get("tipo")] = args.get("valor")
            continue
        if not r["recent"]:
            continue
        prefs = in_force.get(r["subject"], {})
        relevant = {f: prefs[t] for f, t in PROPOSAL_FIELDS.items() if t in prefs}
        out.append(
            {
                "cliente_id": r["cliente_id"],
                "thread_id": r["thread_id"],
                "ts": r["ts"],
                "clock": r["clock"],
                "tienda": args.get("tienda"),
                "canal": args.get("canal"),
                "franja": args.get("franja"),
                "preferences": ", ".join(f"{f}={v}" for f, v in relevant.items()),
                "followed": all(args.get(f) == v for f, v in relevant.items()) if relevant else None,
                # the memory changed this proposal: a field took a preferred value other than the default
                "changed": any(args.get(f) == v != DEFAULT_PROPOSAL[f] for f, v in relevant.items())
                if relevant
                else None,
            }
        )
    df = pd.DataFrame(
        out,
        columns=[
            "cliente_id",
            "thread_id",
            "ts",
            "clock",
            "tienda",
            "canal",
            "franja",
            "preferences",
            "followed",
            "changed",
        ],
    )
    with_pref = df[df["followed"].notna()]
    return PreferencesApplied(
        df, len(with_pref), int(with_pref["followed"].astype(bool).sum()), int(with_pref["changed"].astype(bool).sum())
    )
