"""Thread search, as LangGraph's Agent Server answers `POST /threads/search`: by metadata key (and value), status,
agent and time range, sorted, paged, with the total count.

It reads `core_thread_summary` (migration 080): one row per thread, kept by the incremental extraction pass
(core/history/tool_calls.py) from each thread's latest root checkpoint and its pending writes, so a search
never scans the checkpoint tables (at 10M writes a scan is seconds; BENCHMARKS.md). A thread has exactly one of
these statuses (STATES), so their counts add up to the number of threads (`status_counts`):
- `error`: an `__error__` write on the latest checkpoint (a node raised);
- `interrupted`: an `__interrupt__` write there (a graph paused by `interrupt()`, waiting for an answer);
- `running`: nodes scheduled next (`next_nodes`), neither write, and that checkpoint within RUNNING_WINDOW: a run
  inside its step (a static breakpoint reached in that window looks the same until the window has passed);
- `paused`: the same, older: a static breakpoint (`interrupt_before` / `interrupt_after`, resumed with
  `invoke(None, config)`), or a run whose process died inside its step (migration 086);
- `finished`: none of these (the run reached its end; stored as `idle`).
`stopped` is a filter, not a status: interrupted or paused.
The rows are as current as the extraction: `SearchResult.as_of` is its watermark's time.

`ThreadQuery.from_params` reads a query from URL parameters (strings) and is the one place that validates them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pandas as pd

from core.db import Database, one

# A thread's status, one of these (in the order a person reads them), and the filters (statuses and `stopped`).
STATES = ("finished", "running", "paused", "interrupted", "error")
STATUSES = ("stopped", *STATES)
WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
SORTS = ("updated_at", "created_at")
ORDERS = ("desc", "asc")
RUNNING_WINDOW = timedelta(minutes=15)
PAGE_SIZES = (25, 50, 100)
MAX_TEXT = 200

COLUMNS = ["thread_id", "status", "next_nodes", "agent", "updated_at", "created_at", "step", "metadata"]

# Each status as a condition on the stored one (idle, paused, interrupted, error; migrations 080, 086) and the
# time of the latest checkpoint; `%(running_since)s` is now - RUNNING_WINDOW. Fixed text: the planner sees that the
# partial status index (status <> 'idle') applies to every one but `finished`.
CONDITIONS = {
    "finished": "status = 'idle'",
    "running": "(status = 'paused' AND updated_at >= %(running_since)s)",
    "paused": "(status = 'paused' AND updated_at < %(running_since)s)",
    "interrupted": "status = 'interrupted'",
    "error": "status = 'error'",
    "stopped": "(status = 'interrupted' OR (status = 'paused' AND updated_at < %(running_since)s))",
}
SHOWN_STATUS = (
    "CASE WHEN status = 'idle' THEN 'finished' "
    "WHEN status = 'paused' AND updated_at >= %(running_since)s THEN 'running' ELSE status END AS status"
)
COUNT_STATUSES = (
    "SELECT "
    + ", ".join(f"count(*) FILTER (WHERE {CONDITIONS[s]}) AS {s}" for s in STATES)
    + ", count(*) AS total FROM core_thread_summary"
)

SELECT_AS_OF = "SELECT updated_at FROM core_extract_watermark WHERE name = 'tool_calls'"
# Counting a million matches is linear (~0.8 s at 10M writes): the total is exact up to COUNT_CAP, else "more than".
COUNT_CAP = 10_000
# The distinct agents by a loose index scan (one index probe per agent, not a scan of every thread).
SELECT_AGENTS = """
WITH RECURSIVE a AS (
    SELECT min(agent) AS agent FROM core_thread_summary
    UNION ALL
    SELECT (SELECT min(s.agent) FROM core_thread_summary s WHERE s.agent > a.agent) FROM a WHERE a.agent IS NOT NULL
)
SELECT agent FROM a WHERE agent IS NOT NULL"""


class BadQuery(ValueError):
    """A search parameter that cannot be used; the message names it. Nothing is read."""


@dataclass(frozen=True)
class ThreadQuery:
    """One search. Times are aware datetimes (UTC); `window` (e.g. '1h') is relative to the time of the search
    and replaces `since`."""

    metadata_key: str = ""
    metadata_value: str = ""
    status: str = ""
    agent: str = ""
    window: str = ""
    since: datetime | None = None
    until: datetime | None = None
    sort: str = "updated_at"
    order: str = "desc"
    limit: int = 25
    offset: int = 0

    def __post_init__(self) -> None:
        for name in ("metadata_key", "metadata_value", "agent"):
            if len(getattr(self, name)) > MAX_TEXT:
                raise BadQuery(f"{name}: at most {MAX_TEXT} characters")
        if self.metadata_value and not self.metadata_key:
            raise BadQuery("metadata_value needs a metadata_key")
        if self.status and self.status not in STATUSES:
            raise BadQuery(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")
        if self.window and self.window not in WINDOWS:
            raise BadQuery(f"window must be one of {', '.join(WINDOWS)}, got {self.window!r}")
        if self.sort not in SORTS:
            raise BadQuery(f"sort must be one of {', '.join(SORTS)}, got {self.sort!r}")
        if self.order not in ORDERS:
            raise BadQuery(f"order must be asc or desc, got {self.order!r}")
        if self.limit not in PAGE_SIZES:
            raise BadQuery(f"limit must be one of {', '.join(map(str, PAGE_SIZES))}, got {self.limit!r}")
        if self.offset < 0:
            raise BadQuery(f"offset must be >= 0, got {self.offset}")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise BadQuery(f"{name} must carry a time zone")
        if self.since and self.until and self.since >= self.until:
            raise BadQuery("since is not before until")

    @classmethod
    def from_params(cls, params: Mapping[str, str], tz: str = "UTC") -> ThreadQuery:
        """A query from URL parameters (`meta_key`, `meta_value`, `status`, `agent`, `window`, `from`, `to` as
        YYYY-MM-DD, days in time zone `tz` (the reader's), `to` inclusive, `sort`, `order`, `limit`, `page` from 1).
        Raises BadQuery."""
        zone = ZoneInfo(tz)

        def text(name: str) -> str:
            return str(params.get(name, "") or "").strip()

        def day(name: str, end: bool) -> datetime | None:
            raw = text(name)
            if not raw:
                return None
            try:
                d = date.fromisoformat(raw)
            except ValueError:
                raise BadQuery(f"{name} must be a date YYYY-MM-DD, got {raw!r}") from None
            return datetime.combine(d + timedelta(days=1) if end else d, time(), zone)

        def number(name: str, default: int) -> int:
            raw = text(name)
            try:
                return int(raw) if raw else default
            except ValueError:
                raise BadQuery(f"{name} must be a whole number, got {raw!r}") from None

        limit = number("limit", 25)
        page = number("page", 1)
        if page < 1:
            raise BadQuery(f"page must be >= 1, got {page}")
        return cls(
            metadata_key=text("meta_key"),
            metadata_value=text("meta_value"),
            status=text("status"),
            agent=text("agent"),
            window=text("window"),
            since=day("from", False),
            until=day("to", True),
            sort=text("sort") or "updated_at",
            order=text("order") or "desc",
            limit=limit,
            offset=(page - 1) * limit,
        )

    def params(self) -> dict[str, str]:
        """The URL parameters that give this query back (defaults left out)."""
        out = {
            "meta_key": self.metadata_key,
            "meta_value": self.metadata_value,
            "status": self.status,
            "agent": self.agent,
            "window": self.window,
            "from": self.since.date().isoformat() if self.since else "",
            "to": (self.until - timedelta(days=1)).date().isoformat() if self.until else "",
            "sort": "" if self.sort == "updated_at" else self.sort,
            "order": "" if self.order == "desc" else self.order,
            "limit": "" if self.limit == 25 else str(self.limit),
            "page": "" if not self.offset else str(self.offset // self.limit + 1),
        }
        return {k: v for k, v in out.items() if v}

    @property
    def page(self) -> int:
        return self.offset // self.limit + 1


@dataclass(frozen=True)
class SearchResult:
    threads: pd.DataFrame  # COLUMNS, one page
    total: int  # threads matching, all pages, counted up to the cap
    as_of: datetime | None  # the extraction's time (None: never ran)
    capped: bool = False  # more than `total` match


def _metadata_filters(key: str, value: str) -> list[dict[str, Any]]:
    """The JSON objects a metadata value may be stored as: the text, or the number/boolean it spells."""
    found: list[dict[str, Any]] = [{key: value}]
    try:
        parsed = json.loads(value)
    except ValueError:
        return found
    if isinstance(parsed, (int, float, bool)) and not isinstance(parsed, str):
        found.append({key: parsed})
    return found


def _where(q: ThreadQuery, now: datetime) -> tuple[str, dict[str, Any]]:
    """SQL conditions from fixed fragments; every value a query parameter."""
    conds, params = ["true"], dict[str, Any](running_since=now - RUNNING_WINDOW)
    if q.metadata_key and q.metadata_value:
        ors = []
        for i, obj in enumerate(_metadata_filters(q.metadata_key, q.metadata_value)):
            params[f"meta{i}"] = json.dumps(obj)
            ors.append(f"metadata @> %(meta{i})s::jsonb")
        conds.append("(" + " OR ".join(ors) + ")")
    elif q.metadata_key:
        params["meta_path"] = "$." + json.dumps(q.metadata_key)
        conds.append("metadata @? %(meta_path)s::jsonpath")
    if q.status:
        conds.append(CONDITIONS[q.status])
    if q.agent:
        params["agent"] = q.agent
        conds.append("agent = %(agent)s")
    since = now - WINDOWS[q.window] if q.window else q.since
    if since:
        params["since"] = since
        conds.append(f"{q.sort} >= %(since)s")
    if q.until:
        params["until"] = q.until
        conds.append(f"{q.sort} < %(until)s")
    return " AND ".join(conds), params


def search_threads(
    db: Database, q: ThreadQuery, now: datetime | None = None, count_cap: int = COUNT_CAP
) -> SearchResult:
    """One page of threads matching `q`, the number matching in all (exact up to `count_cap`, then `capped`), and
    the time the summary is as of. The time range applies to the sort column (last activity or creation); `status`
    is one of STATES as of `now`."""
    where, params = _where(q, now or datetime.now(UTC))
    direction = "DESC" if q.order == "desc" else "ASC"
    shown = ", ".join(SHOWN_STATUS if c == "status" else c for c in COLUMNS)
    rows = db.ours.fetch(
        f"SELECT {shown} FROM core_thread_summary WHERE {where} "
        f"ORDER BY {q.sort} {direction}, thread_id {direction} LIMIT %(limit)s OFFSET %(offset)s",
        {**params, "limit": q.limit, "offset": q.offset},
    )
    total = one(
        db.ours.fetch_one(
            f"SELECT count(*) AS n FROM (SELECT 1 FROM core_thread_summary WHERE {where} LIMIT %(cap)s) m",
            {**params, "cap": count_cap + 1},
        )
    )["n"]
    as_of = db.ours.fetch_one(SELECT_AS_OF)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["metadata"] = [json.dumps(m, ensure_ascii=False, sort_keys=True) for m in frame["metadata"]]
    frame["next_nodes"] = [", ".join(n) for n in frame["next_nodes"]]
    return SearchResult(frame, min(total, count_cap), as_of["updated_at"] if as_of else None, total > count_cap)


@dataclass(frozen=True)
class StatusCounts:
    """Threads per status as of `now` (each thread counted once: the counts add up to `total`) and the time the
    summary is as of."""

    counts: dict[str, int]  # STATES -> threads
    total: int
    as_of: datetime | None


def status_counts(db: Database, now: datetime | None = None) -> StatusCounts:
    """How many threads have each status (STATES) as of `now`, and how many threads the summary holds."""
    row = one(db.ours.fetch_one(COUNT_STATUSES, {"running_since": (now or datetime.now(UTC)) - RUNNING_WINDOW}))
    as_of = db.ours.fetch_one(SELECT_AS_OF)
    return StatusCounts({s: row[s] for s in STATES}, row["total"], as_of["updated_at"] if as_of else None)


def agents(db: Database) -> list[str]:
    """The agents named in the summary (for a picker), sorted."""
    return [r["agent"] for r in db.ours.fetch(SELECT_AGENTS)]


def preset(name: str) -> ThreadQuery:
    """The SRE's first questions, one click each: 'stuck' (threads waiting on an interrupt or paused before a node,
    oldest activity first) and 'failed' (threads whose last step raised, in the last hour)."""
    if name == "stuck":
        return ThreadQuery(status="stopped", order="asc")
    if name == "failed":
        return ThreadQuery(status="error", window="1h")
    raise BadQuery(f"unknown preset {name!r}")
