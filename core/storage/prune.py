"""History pruning of live threads (issue 27): keep the latest N checkpoints of each thread per `checkpoint_ns`,
delete the older ones, their pending writes and the blobs no kept checkpoint references.

What it never breaks (langgraph's own `get_state()` / `get_state_history()` read the same values afterwards):
- the latest checkpoint of every namespace of a thread (root graph and subgraphs) with its pending writes, which
  hold the interrupts and the writes a resumed run needs: writes are deleted only with their checkpoint; a finished
  subgraph call's namespace (`node:task_id`) goes whole with the root checkpoint its call started from;
- a pre-v4 checkpoint's parent holding its pending sends (`__pregel_tasks` writes), as langgraph's own prune keeps;
- `DeltaChannel` channels (langgraph 1.2): between snapshots such a channel has no blob and its value is rebuilt by
  replaying the writes of ancestor checkpoints back to the last snapshot, so every kept checkpoint keeps its chain of
  ancestors back to each delta channel's snapshot (blob or inline value), with their writes;
- threads written during the run: the cut is the newest checkpoint_id of each (thread, namespace) in one snapshot
  (REPEATABLE READ); a checkpoint after the cut is never counted, planned or deleted, deletes name checkpoints by
  id, and a blob is deleted only if, in the deleting statement, no checkpoint of the thread references it;
- erased threads: a thread with a tombstone (`core_thread_tombstones`, migration 010) is never touched or listed;
- what the extraction has not read (core.history.tool_calls: tool calls, token usage, from the writes): a
  checkpoint after its watermark is kept, so the sweep extracts first and pruning never lowers the Tokens and cost
  view, the exporter's cost metrics or the Preferences page. A dry run plans as the sweep runs (extraction first).

Blobs that no checkpoint referenced before the run (the checkpointer writes a blob before its checkpoint, so one may
be in flight) and writes whose checkpoint is missing (a run may commit a step's writes before its checkpoint) are
left alone: the Storage view reports them as orphans.

It runs in batches of threads, one short READ COMMITTED transaction each: agents' inserts never wait on it (it
deletes and updates old rows only). A kept checkpoint whose parent is deleted gets `parent_checkpoint_id = NULL`, as
langgraph's `PostgresSaver.prune(strategy="keep_latest")` does; that prune refuses DeltaChannel threads, this one
keeps their chains.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import DictRow

from core.db import Database
from core.history.tool_calls import Watermark, watermark_of
from core.privacy import ours as ours_db
from core.storage.prune_plan import TASKS, Checkpoint, ThreadPlan, plan_thread
from core.storage.storage import key_ranges, thread_ranges

# Threads per batch transaction; a batch reads only keys and sizes, never payloads but the checkpoints' JSON.
PRUNE_BATCH_THREADS = 200
CUT_BATCH_ROWS = 50_000  # checkpoints per range of the cut's scan (one snapshot for every range)
ROOT_KEYS = {"clientes": "cliente_id", "proveedores": "proveedor_id", "empleados": "empleado_id"}


class PruneInputError(ValueError):
    """A prune was asked with an invalid policy; nothing was changed."""


@dataclass(frozen=True)
class PrunePolicy:
    """Keep the latest `keep_latest` checkpoints per (thread, namespace); only threads idle for `idle_minutes`
    (their newest checkpoint's `ts`), only threads of `agent` (metadata `agente`, or the Agent Server's
    `graph_id`) or of the namespace `root` (its subject metadata key, e.g. `cliente_id` for `clientes`)."""

    keep_latest: int
    idle_minutes: int | None = None
    agent: str | None = None
    root: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def _whole(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise PruneInputError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    try:
        number = value if isinstance(value, int) else int(str(value).strip())
    except ValueError:
        raise PruneInputError(f"{name} must be a whole number >= {minimum}, got {value!r}") from None
    if number < minimum:
        raise PruneInputError(f"{name} must be >= {minimum}, got {number}")
    return number


def validate_policy(keep_latest: Any, idle_minutes: Any = None, agent: Any = None, root: Any = None) -> PrunePolicy:
    """A PrunePolicy from raw input (CLI, environment, page); PruneInputError with a clear message otherwise."""
    keep = _whole(keep_latest, "keep latest (checkpoints kept per thread and namespace)", 1)
    idle = None if idle_minutes in (None, "") else _whole(idle_minutes, "idle minutes", 0)
    agent = None if agent in (None, "") else str(agent)
    if agent is not None and (agent != agent.strip() or len(agent) > 200):
        raise PruneInputError(
            f"agent must be a name without surrounding spaces (at most 200 characters), got {agent!r}"
        )
    root = None if root in (None, "") else str(root)
    if root is not None and root not in ROOT_KEYS:
        raise PruneInputError(f"root must be one of {', '.join(ROOT_KEYS)}, got {root!r}")
    return PrunePolicy(keep, idle, agent, root)


# The sweep CronJob's settings (deploy/sweep-cronjob.yaml); no SWEEP_KEEP_LATEST: the job does not prune.
POLICY_ENV = {
    "keep_latest": "SWEEP_KEEP_LATEST",
    "idle_minutes": "SWEEP_IDLE_MINUTES",
    "agent": "SWEEP_PRUNE_AGENT",
    "root": "SWEEP_PRUNE_ROOT",
}


def policy_from_env(**overrides: Any) -> PrunePolicy | None:
    """The policy of POLICY_ENV's variables, each replaced by an override that is not None (the CLI's options);
    None when no keep_latest is set. PruneInputError names the variable of a bad value."""
    raw = {k: overrides[k] if overrides.get(k) is not None else os.environ.get(v) for k, v in POLICY_ENV.items()}
    if raw["keep_latest"] in (None, ""):
        if any(raw[k] not in (None, "") for k in ("idle_minutes", "agent", "root")):
            raise PruneInputError(f"a prune filter needs --keep-latest (or {POLICY_ENV['keep_latest']})")
        return None
    try:
        return validate_policy(**raw)
    except PruneInputError as exc:
        sources = ", ".join(
            f"{v}={os.environ[v]!r}" for k, v in POLICY_ENV.items() if overrides.get(k) is None and os.environ.get(v)
        )
        raise PruneInputError(f"{exc}" + (f" (from {sources})" if sources else "")) from None


# --- the cut: candidate threads in one snapshot -------------------------------------------------------------------

CUT_BATCH_END = """
SELECT (SELECT thread_id FROM checkpoints WHERE {after} ORDER BY thread_id OFFSET %(skip)s LIMIT 1) AS hi"""

# Per (thread, namespace) of the range: the newest checkpoint (the cut) and how many there are; a thread is a
# candidate when one of its namespaces holds more than keep_latest, it has no tombstone, and the policy's filters
# hold on its namespaces' newest checkpoints. Counts and maxima come from the primary key; only the heads are read.
SELECT_CUT = """
WITH heads AS (
    SELECT thread_id, checkpoint_ns, max(checkpoint_id) AS cut, count(*) AS n
    FROM checkpoints WHERE {range}
    GROUP BY thread_id, checkpoint_ns
)
SELECT h.thread_id, array_agg(h.checkpoint_ns ORDER BY h.checkpoint_ns) AS namespaces,
       array_agg(h.cut ORDER BY h.checkpoint_ns) AS cuts
FROM heads h
JOIN checkpoints c ON c.thread_id = h.thread_id AND c.checkpoint_ns = h.checkpoint_ns AND c.checkpoint_id = h.cut
WHERE NOT EXISTS (SELECT 1 FROM core_thread_tombstones t WHERE t.thread_id = h.thread_id)
GROUP BY h.thread_id
HAVING max(h.n) > %(keep)s
   AND (%(idle)s::int IS NULL
        OR max(core_try_timestamptz(c.checkpoint ->> 'ts')) < now() - make_interval(mins => %(idle)s::int))
   AND (%(agent)s::text IS NULL
        OR bool_or(coalesce(c.metadata ->> 'agente', c.metadata ->> 'graph_id') = %(agent)s::text))
   AND (%(root_key)s::text IS NULL OR bool_or(c.metadata ? %(root_key)s::text))
ORDER BY h.thread_id"""

Cut = dict[str, dict[str, str]]  # thread_id -> {checkpoint_ns: newest checkpoint_id at the cut}


def take_cut(conn: psycopg.Connection[DictRow], policy: PrunePolicy, batch_rows: int = CUT_BATCH_ROWS) -> Cut:
    """The candidate threads and their cut, read in one REPEATABLE READ snapshot (in ranges of thread_id of at most
    `batch_rows` checkpoints, so no statement sorts the whole table). `conn`: dict rows, autocommit."""
    params = {
        "keep": policy.keep_latest,
        "idle": policy.idle_minutes,
        "agent": policy.agent,
        "root_key": ROOT_KEYS.get(policy.root) if policy.root else None,
    }
    cut: Cut = {}
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        for lo, hi in thread_ranges(conn, CUT_BATCH_END, batch_rows - 1):
            for row in conn.execute(pgsql.SQL(SELECT_CUT).format(range=key_ranges(lo, hi)), params, prepare=False):
                cut[row["thread_id"]] = dict(zip(row["namespaces"], row["cuts"], strict=True))
    return cut


# --- a batch ---------------------------------------------------------------------------------------------------------

# A batch's checkpoints (keys, versions and which values are inline; never a blob), skipping threads erased since
# the cut; `after_cut` marks what was written after it, `unextracted` what the extraction (core.history.tool_calls:
# tool calls, token usage) has not read yet: after its watermark, or everything when it never ran. A dry run plans as
# the sweep runs, extraction first (`%(assume_extracted)s`).
SELECT_BATCH_CHECKPOINTS = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       coalesce(c.checkpoint -> 'channel_versions', '{}') AS versions,
       ARRAY(SELECT jsonb_object_keys(coalesce(c.checkpoint -> 'channel_values', '{}'))) AS value_keys,
       ARRAY(SELECT e.key FROM jsonb_each(coalesce(c.checkpoint -> 'channel_values', '{}')) e
             WHERE e.value = 'true'::jsonb) AS true_keys,
       ARRAY(SELECT jsonb_object_keys(CASE jsonb_typeof(c.metadata -> 'counters_since_delta_snapshot')
                                      WHEN 'object' THEN c.metadata -> 'counters_since_delta_snapshot'
                                      ELSE '{}' END)) AS delta_counters,
       c.metadata -> 'parents' ->> '' AS root,
       CASE WHEN c.checkpoint ->> 'v' ~ '^[0-9]{1,9}$' THEN (c.checkpoint ->> 'v')::int ELSE 1 END AS v,
       pg_column_size(c.checkpoint) + pg_column_size(c.metadata) AS bytes,
       cut.id IS NULL OR c.checkpoint_id > cut.id AS after_cut,
       NOT %(assume_extracted)s
       AND coalesce((c.checkpoint ->> 'ts', c.thread_id, c.checkpoint_ns, c.checkpoint_id)
                    > (%(w_ts)s::text, %(w_thread_id)s::text, %(w_checkpoint_ns)s::text, %(w_checkpoint_id)s::text),
                    true) AS unextracted
FROM checkpoints c
LEFT JOIN unnest(%(threads)s::text[], %(namespaces)s::text[], %(cuts)s::text[]) AS cut(thread_id, ns, id)
       ON cut.thread_id = c.thread_id AND cut.ns = c.checkpoint_ns
WHERE c.thread_id = ANY(%(batch)s::text[])
  AND NOT EXISTS (SELECT 1 FROM core_thread_tombstones t WHERE t.thread_id = c.thread_id)"""

SELECT_BATCH_BLOBS = """
SELECT thread_id, checkpoint_ns, channel, version, coalesce(octet_length(blob), 0) AS bytes
FROM checkpoint_blobs WHERE thread_id = ANY(%(batch)s::text[]) AND type <> 'empty'"""

SELECT_BATCH_WRITES = f"""
SELECT thread_id, checkpoint_ns, checkpoint_id, count(*) AS n, coalesce(sum(octet_length(blob)), 0) AS bytes,
       bool_or(channel = '{TASKS}') AS tasks
FROM checkpoint_writes WHERE thread_id = ANY(%(batch)s::text[])
GROUP BY thread_id, checkpoint_ns, checkpoint_id"""

# Deletes name rows by key (`unnest` of the plan's arrays, a primary-key lookup each).
DELETE_WRITES = """
DELETE FROM checkpoint_writes w USING unnest(%s::text[], %s::text[], %s::text[]) AS d(thread_id, ns, id)
WHERE w.thread_id = d.thread_id AND w.checkpoint_ns = d.ns AND w.checkpoint_id = d.id
RETURNING w.thread_id, coalesce(octet_length(w.blob), 0) AS bytes"""

DELETE_CHECKPOINTS = """
DELETE FROM checkpoints c USING unnest(%s::text[], %s::text[], %s::text[]) AS d(thread_id, ns, id)
WHERE c.thread_id = d.thread_id AND c.checkpoint_ns = d.ns AND c.checkpoint_id = d.id
RETURNING c.thread_id, pg_column_size(c.checkpoint) + pg_column_size(c.metadata) AS bytes"""

UNLINK_PARENTS = """
UPDATE checkpoints c SET parent_checkpoint_id = NULL
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS d(thread_id, ns, id, parent)
WHERE c.thread_id = d.thread_id AND c.checkpoint_ns = d.ns AND c.checkpoint_id = d.id
  AND c.parent_checkpoint_id = d.parent"""

# A blob goes only if, now, no checkpoint of its thread and namespace references it (one written since the cut
# included): the tail of both blob deletions.
UNREFERENCED_BLOB = """
  AND NOT EXISTS (SELECT 1 FROM checkpoints c
                  WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
                    AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)
RETURNING b.thread_id, coalesce(octet_length(b.blob), 0) AS bytes"""

DELETE_BLOBS = (
    """
DELETE FROM checkpoint_blobs b USING unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS d(thread_id, ns,
channel, version)
WHERE b.thread_id = d.thread_id AND b.checkpoint_ns = d.ns AND b.channel = d.channel AND b.version = d.version"""
    + UNREFERENCED_BLOB
)

# Issue 43: with a grace, the prune only records the freed blobs' keys; a run that loaded a pruned checkpoint before
# the prune (a fork, a replay) may still write a checkpoint that references them.
DEFER_BLOBS = """
INSERT INTO core_prune_pending_blobs (thread_id, checkpoint_ns, channel, version)
SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[])
ON CONFLICT DO NOTHING"""

# Pending blobs older than the grace: each goes only if, in this statement, no checkpoint of its thread and namespace
# references it; its pending row goes either way (a referenced blob is a live one again).
PURGE_PENDING_BLOBS = (
    """
WITH due AS (
    DELETE FROM core_prune_pending_blobs p WHERE p.pruned_at < now() - make_interval(mins => %(grace)s::int)
    RETURNING p.thread_id, p.checkpoint_ns, p.channel, p.version
)
DELETE FROM checkpoint_blobs b USING due d
WHERE b.thread_id = d.thread_id AND b.checkpoint_ns = d.checkpoint_ns AND b.channel = d.channel
  AND b.version = d.version"""
    + UNREFERENCED_BLOB
)

# Where our database is apart (issue 52, docs/own-database-plan.md "Prune, deferred blobs"), the purge is three steps:
# the due keys read in ours (nothing deleted), the blobs deleted on the agents' side by DELETE_BLOBS (the same
# UNREFERENCED_BLOB check), then those keys deleted in ours. A crash between repeats a delete that finds nothing.
SELECT_DUE_BLOBS = """
SELECT coalesce(array_agg(thread_id), '{}') AS threads, coalesce(array_agg(checkpoint_ns), '{}') AS namespaces,
       coalesce(array_agg(channel), '{}') AS channels, coalesce(array_agg(version), '{}') AS versions
FROM core_prune_pending_blobs WHERE pruned_at < now() - make_interval(mins => %(grace)s::int)"""
DELETE_PENDING_KEYS = """
DELETE FROM core_prune_pending_blobs p USING unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS d(thread_id, ns,
channel, version)
WHERE p.thread_id = d.thread_id AND p.checkpoint_ns = d.ns AND p.channel = d.channel AND p.version = d.version"""

# Minutes a pruned checkpoint's blobs stay (longer than the longest agent run).
BLOB_GRACE_MINUTES = 60


@dataclass
class ThreadPruned:
    """One thread's share of a run (in a dry run: what would go)."""

    thread_id: str
    checkpoints: int
    writes: int
    blobs: int
    bytes: int


def _watermark_params(conn: psycopg.Connection[DictRow]) -> dict[str, str | None]:
    """The extraction's watermark as SELECT_BATCH_CHECKPOINTS' parameters, read in the dashboard's database (issue 52:
    a value passed, not a join); all NULL (everything unextracted) when the extraction never ran."""
    mark = watermark_of(conn)
    return {f"w_{name}": None if mark is None else value for name, value in (mark or Watermark()).params().items()}


def plan_batch(
    conn: psycopg.Connection[DictRow], cut: Cut, batch: list[str], keep_latest: int, *, assume_extracted: bool = False
) -> list[ThreadPlan]:
    """The plans of `batch`'s threads (on `conn`, in the caller's transaction). A checkpoint the extraction has not
    read is kept, unless `assume_extracted` (a dry run's plan of a sweep, which extracts before it prunes)."""
    threads, namespaces, cuts = [], [], []
    for t in batch:
        for ns, cid in cut[t].items():
            threads.append(t)
            namespaces.append(ns)
            cuts.append(cid)
    params = {
        "batch": batch,
        "threads": threads,
        "namespaces": namespaces,
        "cuts": cuts,
        "assume_extracted": assume_extracted,
        **_watermark_params(conn),
    }
    rows: dict[str, list[Checkpoint]] = {}
    for r in conn.execute(SELECT_BATCH_CHECKPOINTS, params, prepare=False):
        rows.setdefault(r["thread_id"], []).append(
            Checkpoint(
                r["checkpoint_ns"],
                r["checkpoint_id"],
                r["parent_checkpoint_id"],
                {k: str(v) for k, v in r["versions"].items()},
                frozenset(r["value_keys"]),
                frozenset(r["true_keys"]),
                frozenset(r["delta_counters"]),
                int(r["v"]),
                int(r["bytes"]),
                bool(r["after_cut"]),
                r["root"],
                bool(r["unextracted"]),
            )
        )
    blobs: dict[str, dict[tuple[str, str, str], int]] = {}
    for r in conn.execute(SELECT_BATCH_BLOBS, params, prepare=False):
        blobs.setdefault(r["thread_id"], {})[(r["checkpoint_ns"], r["channel"], r["version"])] = int(r["bytes"])
    writes: dict[str, dict[tuple[str, str], tuple[int, int, bool]]] = {}
    for r in conn.execute(SELECT_BATCH_WRITES, params, prepare=False):
        writes.setdefault(r["thread_id"], {})[(r["checkpoint_ns"], r["checkpoint_id"])] = (
            int(r["n"]),
            int(r["bytes"]),
            bool(r["tasks"]),
        )
    return [plan_thread(t, rows[t], keep_latest, blobs.get(t, {}), writes.get(t, {})) for t in batch if t in rows]


def _columns(rows: Iterable[tuple]) -> list[list]:
    rows = list(rows)
    return [list(c) for c in zip(*rows, strict=True)] if rows else []


def apply_plans(
    conn: psycopg.Connection[DictRow],
    plans: list[ThreadPlan],
    blob_grace_minutes: int = 0,
    ours: psycopg.Connection[DictRow] | None = None,
) -> list[ThreadPruned]:
    """Delete what `plans` name (in the caller's transaction); returns what each thread really lost. With a
    `blob_grace_minutes`, the freed blobs are only recorded (core_prune_pending_blobs) for purge_pending_blobs.
    `ours`: an autocommit connection to our database when it is apart (issue 52): the freed blobs' keys are written
    and committed there first, then the agents' deletes run in the caller's transaction; a crash between leaves keys
    whose blobs are still referenced, which the purge's UNREFERENCED_BLOB check keeps (and drops the keys)."""
    done = {p.thread_id: ThreadPruned(p.thread_id, 0, 0, 0, 0) for p in plans}
    checkpoint_keys = [(p.thread_id, ns, cid) for p in plans for ns, ids in p.delete.items() for cid in ids]
    if not checkpoint_keys:
        return []
    blob_keys = [(p.thread_id, ns, c, v) for p in plans for ns, keys in p.blobs.items() for c, v in keys]
    apart = ours is not None and ours is not conn
    if apart and blob_keys and blob_grace_minutes > 0:
        assert ours is not None
        ours.execute(DEFER_BLOBS, _columns(blob_keys), prepare=False)  # committed before any delete
    for sql, attr in ((DELETE_WRITES, "writes"), (DELETE_CHECKPOINTS, "checkpoints")):
        for r in conn.execute(sql, _columns(checkpoint_keys), prepare=False):
            setattr(done[r["thread_id"]], attr, getattr(done[r["thread_id"]], attr) + 1)
            done[r["thread_id"]].bytes += int(r["bytes"])
    parents = [(p.thread_id, ns, cid, parent) for p in plans for ns, cid, parent in p.orphaned_parents]
    if parents:
        conn.execute(UNLINK_PARENTS, _columns(parents), prepare=False)
    if blob_keys and blob_grace_minutes > 0:
        if not apart:
            conn.execute(DEFER_BLOBS, _columns(blob_keys), prepare=False)
    elif blob_keys:
        for r in conn.execute(DELETE_BLOBS, _columns(blob_keys), prepare=False):
            done[r["thread_id"]].blobs += 1
            done[r["thread_id"]].bytes += int(r["bytes"])
    return [d for d in done.values() if d.checkpoints or d.writes or d.blobs]


def purge_pending_blobs(
    conn: psycopg.Connection[DictRow], grace_minutes: int, ours: psycopg.Connection[DictRow] | None = None
) -> list[ThreadPruned]:
    """Delete the pending blobs (core_prune_pending_blobs) recorded more than `grace_minutes` ago that no checkpoint
    references now (in the caller's transaction, or its own with an autocommit `conn`). `ours`: an autocommit
    connection to our database when it is apart, with an autocommit `conn`: the due keys read there, the blobs
    deleted and committed on `conn`, then the keys deleted in ours (SELECT_DUE_BLOBS)."""
    done: dict[str, ThreadPruned] = {}
    if ours is not None and ours is not conn:
        due = ours.execute(SELECT_DUE_BLOBS, {"grace": grace_minutes}).fetchone()
        assert due is not None
        keys = [due["threads"], due["namespaces"], due["channels"], due["versions"]]
        if not keys[0]:
            return []
        with conn.transaction():
            deleted = conn.execute(DELETE_BLOBS, keys, prepare=False).fetchall()
        ours.execute(DELETE_PENDING_KEYS, keys, prepare=False)
    else:
        deleted = conn.execute(PURGE_PENDING_BLOBS, {"grace": grace_minutes}, prepare=False).fetchall()
    for r in deleted:
        t = done.setdefault(r["thread_id"], ThreadPruned(r["thread_id"], 0, 0, 0, 0))
        t.blobs += 1
        t.bytes += int(r["bytes"])
    return list(done.values())


@dataclass
class PruneResult:
    """What a run deleted (in a dry run: would delete), per thread and in total."""

    policy: PrunePolicy
    dry_run: bool
    candidates: int = 0
    batches: int = 0
    threads: list[ThreadPruned] = field(default_factory=list)

    @property
    def checkpoints(self) -> int:
        return sum(t.checkpoints for t in self.threads)

    @property
    def writes(self) -> int:
        return sum(t.writes for t in self.threads)

    @property
    def blobs(self) -> int:
        return sum(t.blobs for t in self.threads)

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.threads)

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        return (
            f"prune (keep latest {self.policy.keep_latest}) {verb} {self.checkpoints} checkpoints, {self.writes} "
            f"writes and {self.blobs} blobs ({self.bytes} bytes) in {len(self.threads)} threads"
        )


def prune_history(
    conn: psycopg.Connection[DictRow],
    policy: PrunePolicy,
    *,
    dry_run: bool = False,
    batch_threads: int = PRUNE_BATCH_THREADS,
    on_batch: Callable[[int, int], None] | None = None,
    blob_grace_minutes: int = BLOB_GRACE_MINUTES,
) -> PruneResult:
    """Prune by `policy` on `conn` (dict rows, autocommit; the sweep job's connection): the cut in one snapshot, then
    one transaction per `batch_threads` threads. A dry run plans the same batches and deletes nothing.
    `on_batch(threads done, candidates)` after each batch. Freed blobs wait `blob_grace_minutes` (issue 43: a run
    that loaded a pruned checkpoint may still reference them) and go in a later run's purge; 0 deletes them now."""
    if batch_threads < 1:
        raise PruneInputError(f"batch_threads must be >= 1, got {batch_threads}")
    with ours_db.connect(conn) as ours:  # our database (issue 52): `conn` itself unless it is apart
        return _prune_history(conn, ours, policy, dry_run, batch_threads, on_batch, blob_grace_minutes)


def _prune_history(
    conn: psycopg.Connection[DictRow],
    ours: psycopg.Connection[DictRow],
    policy: PrunePolicy,
    dry_run: bool,
    batch_threads: int,
    on_batch: Callable[[int, int], None] | None,
    blob_grace_minutes: int,
) -> PruneResult:
    cut = take_cut(conn, policy)
    result = PruneResult(policy, dry_run, candidates=len(cut))
    threads = list(cut)
    for start in range(0, len(threads), batch_threads):
        batch = threads[start : start + batch_threads]
        with conn.transaction(force_rollback=dry_run):
            plans = plan_batch(conn, cut, batch, policy.keep_latest, assume_extracted=dry_run)
            if dry_run:
                deferred = blob_grace_minutes > 0
                result.threads += [
                    ThreadPruned(
                        p.thread_id,
                        p.checkpoints,
                        p.writes,
                        0 if deferred else p.blob_count,
                        p.bytes - (p.blob_bytes if deferred else 0),
                    )
                    for p in plans
                    if p.checkpoints
                ]
            else:
                result.threads += apply_plans(conn, plans, blob_grace_minutes, ours)
        result.batches += 1
        if on_batch is not None:
            on_batch(start + len(batch), len(threads))
    if not dry_run:
        if ours is conn:
            with conn.transaction():
                purged = purge_pending_blobs(conn, blob_grace_minutes)
        else:  # its own steps, each committed in turn (the protocol of purge_pending_blobs)
            purged = purge_pending_blobs(conn, blob_grace_minutes, ours)
        by_thread = {t.thread_id: t for t in result.threads}
        for p in purged:
            if p.thread_id in by_thread:
                by_thread[p.thread_id].blobs += p.blobs
                by_thread[p.thread_id].bytes += p.bytes
            else:
                result.threads.append(p)
    return result


def preview(db: Database, policy: PrunePolicy) -> PruneResult:
    """What pruning by `policy` would delete now, per thread (a dry run outside the sweep job, logged nowhere; on the
    read replica when one is configured: it only reads)."""
    with db.connection(read_only=True) as conn:
        return prune_history(conn, policy, dry_run=True)


# --- the sweep log -------------------------------------------------------------------------------------------------

RECORD_PRUNE = """
UPDATE core_sweep_log SET prune_policy = %(policy)s, prune_threads = %(threads)s, prune_checkpoints = %(checkpoints)s,
       prune_writes = %(writes)s, prune_blobs = %(blobs)s, prune_bytes = %(bytes)s
WHERE id = %(run_id)s"""
INSERT_PRUNE_THREADS = """
INSERT INTO core_prune_threads (run_id, thread_id, checkpoints, writes, blobs, bytes)
SELECT %s, * FROM unnest(%s::text[], %s::int[], %s::int[], %s::int[], %s::bigint[])"""


def sweep_step(
    conn: psycopg.Connection[DictRow],
    run_id: int,
    policy: PrunePolicy,
    dry_run: bool,
    step: Callable[[str, float, str], None],
) -> PruneResult:
    """The sweep job's step: prune by `policy` (or plan it, in a dry run) and record it in run `run_id`'s log."""
    result = prune_history(
        conn,
        policy,
        dry_run=dry_run,
        on_batch=lambda done, total: step("prune", 0.9 + 0.02 * done / total, f"{done}/{total}"),
    )
    record_prune(conn, run_id, result)
    return result


def record_prune(conn: psycopg.Connection[DictRow], run_id: int, result: PruneResult) -> None:
    """The run's totals in its `core_sweep_log` row and every thread it pruned in `core_prune_threads` (in our
    database, issue 52)."""
    with ours_db.connect(conn) as mine, mine.transaction():
        mine.execute(
            RECORD_PRUNE,
            {
                "run_id": run_id,
                "policy": json.dumps(result.policy.as_json()),
                "threads": len(result.threads),
                "checkpoints": result.checkpoints,
                "writes": result.writes,
                "blobs": result.blobs,
                "bytes": result.bytes,
            },
        )
        if result.threads:
            columns = _columns((t.thread_id, t.checkpoints, t.writes, t.blobs, t.bytes) for t in result.threads)
            mine.execute(INSERT_PRUNE_THREADS, [run_id, *columns], prepare=False)
