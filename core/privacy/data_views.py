"""Who looked at a customer's data: the dashboard's views of a customer's memory, threads and access previews or
exports, one row each in `core_data_views` (migration 085), hash-chained like the registers (chain 'views',
core/privacy/chain.py).

Logging is one INSERT per batch of views under short timeouts: it never holds a page for long, and a failure is
raised as DataViewLogError (the page shows it as a warning and goes on) and counted in
`agent_memory_data_view_log_failures_total`. Rows name ids only (namespace, thread, customer), never a value of the
customer's data; an erasure keeps them (core.privacy.evidence.PROTECTED_TABLES) as it keeps the registers. The sweep
job deletes rows older than the configured retention with their chain links and records the cut (`sweep_step`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable

import pandas as pd
import psycopg
from prometheus_client import Counter

from core.db import Database, DatabaseUnavailable

log = logging.getLogger(__name__)

KINDS = ("namespace", "thread", "search", "access_preview", "access_export")
MAX_TEXT = 1000
CUSTOMER_ROOT = "clientes"

LOG_FAILURES = Counter("agent_memory_data_view_log_failures",
                       "Views of customer data the dashboard could not log (the page was shown, with a warning).")

# Bounded: a slow or locked database costs the page at most this, never a hang.
LOG_TIMEOUTS = "SELECT set_config('statement_timeout', '2s', true), set_config('lock_timeout', '1s', true)"
INSERT_VIEWS = """
INSERT INTO core_data_views (viewer, role, kind, customer_id, target, purpose)
SELECT * FROM unnest(%(viewer)s::text[], %(role)s::text[], %(kind)s::text[], %(customer)s::text[], %(target)s::text[],
                     %(purpose)s::text[])"""
COLUMNS = ["id", "viewed_at", "viewer", "role", "kind", "customer_id", "target", "purpose"]
# A customer's views: the rows naming them, and views of threads the subject resolver attributes to them (a thread
# viewed before it could be attributed, or of agents that tag no customer).
SELECT_VIEWS = """
SELECT id, viewed_at, viewer, role, kind, customer_id, target, purpose FROM core_data_views
WHERE %(customer)s::text IS NULL OR customer_id = %(customer)s OR (kind = 'thread' AND target = ANY(%(threads)s))
ORDER BY viewed_at DESC, id DESC LIMIT %(limit)s"""
# The same, oldest first and whole, with the access export's parameters (core.privacy.access: art. 15 lists them).
SELECT_FOR_EXPORT = """
SELECT id, viewed_at, viewer, role, kind, target, purpose FROM core_data_views
WHERE customer_id = %(cliente_id)s OR (kind = 'thread' AND target = ANY(%(threads)s))
ORDER BY viewed_at, id"""

CHAIN = "views"
LOCK_CHAIN = "SELECT pg_advisory_xact_lock(hashtext('core_register_chain'), hashtext(%(chain)s))"
# The retention cut: the longest run of the chain's oldest links whose rows are all older than the retention.
SELECT_CUT = """
WITH links AS (
    SELECT c.position, c.row_id, c.row_hash, v.viewed_at < now() - make_interval(days => %(days)s) AS old
    FROM core_register_chain c LEFT JOIN core_data_views v ON v.id = c.row_id
    WHERE c.chain = %(chain)s AND c.table_name = 'core_data_views')
SELECT l.position, l.row_hash FROM links l
WHERE l.old AND l.position < coalesce((SELECT min(position) FROM links WHERE NOT old OR old IS NULL), l.position + 1)
ORDER BY l.position DESC LIMIT 1"""
DELETE_ROWS = """
DELETE FROM core_data_views v USING core_register_chain c
WHERE c.chain = %(chain)s AND c.table_name = 'core_data_views' AND c.row_id = v.id AND c.position <= %(position)s"""
DELETE_LINKS = "DELETE FROM core_register_chain WHERE chain = %(chain)s AND position <= %(position)s"
INSERT_CUT = """
INSERT INTO core_register_cuts (chain, position, row_hash, rows_deleted, retention_days)
VALUES (%(chain)s, %(position)s, %(row_hash)s, %(rows)s, %(days)s)"""


class DataViewLogError(RuntimeError):
    """A view could not be logged (the database refused or did not answer); counted in LOG_FAILURES."""


@dataclass(frozen=True)
class View:
    """One look at a customer's data: who (`viewer`, `role`), what (`kind`, `target`: a namespace prefix, a thread
    id, a request), whose (`customer_id`, None when not a customer's), why (`purpose`, when required)."""

    viewer: str
    role: str
    kind: str
    target: str
    customer_id: str | None = None
    purpose: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown view kind {self.kind!r}; known: {', '.join(KINDS)}")
        for name in ("viewer", "role", "target", "customer_id", "purpose"):
            value = getattr(self, name)
            if value is None and name in ("customer_id", "purpose"):
                continue
            if not isinstance(value, str) or not value.strip() or "\x00" in value or len(value) > MAX_TEXT:
                raise ValueError(f"view {name} must be non-empty text without NUL, at most {MAX_TEXT} characters")


def customer_of(prefix: str) -> str | None:
    """The customer a namespace belongs to (`clientes.C9` and nested `clientes.C9.x` -> C9), else None."""
    parts = prefix.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == CUSTOMER_ROOT and parts[1] else None


def log_views(db: Database, views: Iterable[View]) -> int:
    """Write `views` in one INSERT (each row sealed in the 'views' chain by its trigger); returns how many.
    Raises DataViewLogError (and counts it) when the database does not take them within the timeouts."""
    batch = list(views)
    if not batch:
        return 0
    params = {"viewer": [v.viewer for v in batch], "role": [v.role for v in batch], "kind": [v.kind for v in batch],
              "customer": [v.customer_id for v in batch], "target": [v.target for v in batch],
              "purpose": [v.purpose for v in batch]}
    try:
        with db.connection() as conn, conn.transaction():
            conn.execute(LOG_TIMEOUTS)
            conn.execute(INSERT_VIEWS, params)
    except (psycopg.Error, DatabaseUnavailable) as exc:
        LOG_FAILURES.inc(len(batch))
        log.warning("data views: %d view(s) not logged: %s", len(batch), exc)
        raise DataViewLogError(f"{len(batch)} view(s) not logged: {exc}") from exc
    return len(batch)


def views(db: Database, customer_id: str | None = None, thread_ids: Iterable[str] = (),
          limit: int = 1000) -> pd.DataFrame:
    """The latest views (newest first), all or of one customer (theirs, and of `thread_ids`: their threads)."""
    rows = db.fetch(SELECT_VIEWS, {"customer": customer_id, "threads": list(thread_ids), "limit": limit})
    return pd.DataFrame(rows, columns=COLUMNS)


def customer_views(db: Database, customer_id: str, limit: int = 1000) -> pd.DataFrame:
    """One customer's views, their threads found by the subject resolver (core.privacy.subjects)."""
    from core.privacy import subjects

    return views(db, customer_id, subjects.resolve(db, customer_id).thread_ids, limit)


def sweep_step(db: Database, retention_days: int) -> int:
    """Delete the views older than `retention_days` (the chain's oldest links, with their rows) and record the cut,
    in one transaction under the chain's seal lock; returns how many rows went."""
    params = {"chain": CHAIN, "days": int(retention_days)}
    with db.connection() as conn, conn.transaction():
        conn.execute(LOCK_CHAIN, params)
        cut = conn.execute(SELECT_CUT, params).fetchone()
        if cut is None:
            return 0
        params |= {"position": cut["position"], "row_hash": cut["row_hash"]}
        params["rows"] = conn.execute(DELETE_ROWS, params).rowcount
        conn.execute(DELETE_LINKS, params)
        conn.execute(INSERT_CUT, params)
    log.info("data views: %d view(s) older than %d days deleted (chain cut at link %d)", params["rows"],
             retention_days, cut["position"])
    return params["rows"]


__all__ = ["DataViewLogError", "KINDS", "LOG_FAILURES", "View", "customer_of", "customer_views", "log_views",
           "sweep_step", "views"]
