"""Compare what the change follower keeps with a full recount from the agents' tables (tests, the bench, and an
operator's `python -m core.capture.verify DSN`). Exact only when nobody writes meanwhile and the follower has caught
up (core.capture.follower.catch_up). The agents' rows are read on their primary in one snapshot and copied into
temporary tables of the dashboard's database (core.capture.follower.RECOUNT_SOURCES), where each recount below is
computed with SQL of its own, independent of the follower's: nothing is written to either database. Where ours is the
dashboard's own database, its mirrors of the agents' own logs are compared with the agents' rows too."""

from __future__ import annotations

import sys
from typing import Any

import psycopg

from core.capture.changes import MIRROR, MIRRORED
from core.capture.follower import copy_sources
from core.db import dashboard_dsn_for, server_key

# (name, what the follower keeps, the same from the tables); rows compared as sets.
CHECKS: tuple[tuple[str, str, str], ...] = (
    (
        "documents per prefix",
        "SELECT prefix, documents FROM core_prefix_counts",
        "SELECT prefix, count(*) FROM core_recount_store GROUP BY prefix",
    ),
    (
        "documents, namespaces and vectors per root",
        """SELECT root, sum(documents), sum(namespaces), sum(vectors) FROM core_root_counts GROUP BY root
           HAVING sum(documents) <> 0 OR sum(namespaces) <> 0 OR sum(vectors) <> 0""",
        """SELECT root, sum(documents), sum(namespaces), sum(vectors) FROM (
               SELECT split_part(prefix, '.', 1) AS root, count(*) AS documents, 1 AS namespaces, 0 AS vectors
               FROM core_recount_store GROUP BY prefix
               UNION ALL SELECT root, 0, 0, vectors FROM core_recount_vectors) x
           GROUP BY root""",
    ),
    (
        "documents per expiry day and root",
        "SELECT day::text, root, documents FROM core_expiry_days WHERE documents <> 0",  # text: years 11026, BC
        """SELECT (expires_at AT TIME ZONE 'UTC')::date::text, split_part(prefix, '.', 1), count(*)
           FROM core_recount_store WHERE expires_at IS NOT NULL GROUP BY 1, 2""",
    ),
    (
        "documents per value hash and customer",
        "SELECT value_hash, cliente_id, documents FROM core_value_holders",
        """SELECT v.value_hash, v.cliente_id, count(*) FROM core_recount_store s
           CROSS JOIN LATERAL core_value_holders_of(s.prefix, s.value) v GROUP BY 1, 2""",
    ),
    (
        "the customers' documents' hilo back-links",
        "SELECT prefix, key, hilo FROM core_store_shadow WHERE hilo IS NOT NULL",
        """SELECT prefix, key, value ->> 'hilo' FROM core_recount_store
           WHERE prefix LIKE 'clientes.%' AND jsonb_typeof(value -> 'hilo') = 'string'""",
    ),
    (
        "each checkpoint's key, the subjects its metadata names and its ts",
        "SELECT thread_id, checkpoint_ns, checkpoint_id, subjects::text, ts FROM core_checkpoint_shadow",
        """SELECT thread_id, checkpoint_ns, checkpoint_id, core_metadata_subjects(metadata)::text, ts
           FROM core_recount_checkpoints""",
    ),
    (
        "last write per prefix (never older than the newest document)",
        """SELECT 0 FROM core_prefix_counts c JOIN core_recount_store s USING (prefix)
           WHERE s.updated_at > c.last_write LIMIT 1""",
        "SELECT 0 WHERE false",
    ),
)


# The mirrors of the agents' own logs (changes.MIRRORED; only where ours is the dashboard's own database): every
# column, read in ours and, in the same snapshot as the checks above, in the agents' database; compared in Python.
SELECT_MIRRORED = "SELECT {columns} FROM {table}"


def differences(dsn: str) -> dict[str, dict[str, list[Any]]]:
    """Aggregate name -> {"kept_only": rows, "recount_only": rows}; empty when everything equals the recount (and
    each mirror of the agents' own logs equals their rows)."""
    out: dict[str, dict[str, list[Any]]] = {}
    ours_dsn = dashboard_dsn_for(dsn)
    with psycopg.connect(dsn) as src, psycopg.connect(ours_dsn) as ours:
        src.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        copy_sources(src, ours)
        found = [(name, ours, kept_sql, ours, recount_sql) for name, kept_sql, recount_sql in CHECKS]
        if server_key(ours_dsn) != server_key(dsn):
            for table, (columns, _) in MIRRORED.items():
                query = SELECT_MIRRORED.format(columns=", ".join(columns), table=table)
                found.append((f"{MIRROR} {table}", ours, query, src, query))
        for name, kept_in, kept_sql, recount_in, recount_sql in found:
            kept = {tuple(r) for r in kept_in.execute(kept_sql).fetchall()}
            recount = {tuple(r) for r in recount_in.execute(recount_sql).fetchall()}
            if kept != recount:
                out[name] = {"kept_only": sorted(kept - recount)[:20], "recount_only": sorted(recount - kept)[:20]}
        ours.rollback()
    return out


if __name__ == "__main__":
    found = differences(sys.argv[1])
    for name, diff in found.items():
        print(f"{name}: {diff}")
    print("every aggregate equals the recount" if not found else f"{len(found)} aggregate(s) differ")
    sys.exit(1 if found else 0)
