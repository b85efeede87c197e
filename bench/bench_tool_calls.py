"""Tool-call extraction from checkpoint history (core/history/tool_calls.py) at production size,
against the live decode of the canonical view in the same run.

    python -m bench.bench_tool_calls --writes 1000000
    python -m bench.bench_tool_calls --writes 100000 --new 10000

A database on an embedded PostgreSQL (folder --data, default .data/bench_tool_calls), migrations, then
real checkpoints: the retail agents (scripted model, real tools, `PostgresSaver` with the real
serializer) hold template conversations whose rows bench/bench_decoder.py's `replicate` COPYs to as
many threads as it takes to reach --writes rows in `checkpoint_writes`, spread over the 90-day retention.

Measured, in this order:
1. baseline: what the Preferences page had to do without the extraction, i.e. count the
   `recordar_preferencia` calls by decoding every write live through `core_checkpoint_messages_view`;
2. the full extraction from an empty watermark (rows/s = checkpoint writes decoded per second), and the
   same count read from `core_tool_calls` (must equal the baseline's);
3. the Preferences page's reads on the extracted tables (median of 5);
4. --new more writes (new threads, newer than the watermark) COPYed in, then the incremental step the
   page or the sweep runs (`extract`, forward from the watermark), and the sweep's step (orphans +
   24 h look-back), each against re-extracting everything from scratch would cost (item 2).
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import date, datetime, timedelta
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_decoder import (  # noqa: E402
    BLOB_COLS,
    CHECKPOINT_COLS,
    DIMS,
    WRITE_COLS,
    copy_table,
    replicate,
    unique_blob,
    write_templates,
)
from core.db import Database, embedded_dsn  # noqa: E402
from core.history import tool_calls  # noqa: E402
from core.memory import preferences  # noqa: E402
from core.migrate import migrate  # noqa: E402

RETENTION = timedelta(days=90)
LIVE_COUNT = """
SELECT count(*) AS n
FROM core_checkpoint_messages_view m CROSS JOIN LATERAL jsonb_array_elements(m.tool_calls) AS call
WHERE m.kind = 'ai' AND call ->> 'name' = 'recordar_preferencia'"""
EXTRACTED_COUNT = "SELECT count(*) AS n FROM core_tool_calls WHERE tool = 'recordar_preferencia'"
RESET = [
    "DELETE FROM checkpoint_writes WHERE thread_id LIKE 'new-%'",  # a previous run's appended threads
    "DELETE FROM checkpoint_blobs WHERE thread_id LIKE 'new-%'",
    "DELETE FROM checkpoints WHERE thread_id LIKE 'new-%'",
    "TRUNCATE core_tool_calls, core_thread_days, core_refused_payloads",
    "UPDATE core_extract_watermark SET ts = '', thread_id = '', checkpoint_ns = '', checkpoint_id = ''",
]


def timed(fn):
    t = time.perf_counter()
    value = fn()
    return time.perf_counter() - t, value


def database(base: str, writes: int) -> tuple[str, bool]:
    name = f"bench_tool_calls_{writes}"
    with psycopg.connect(base, autocommit=True) as conn:
        fresh = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None
        if fresh:
            conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(base, dbname=name), fresh


def append(dsn: str, writes: int, start: int) -> int:
    """COPY `writes` more checkpoint writes as new threads (copies of round 0), a minute newer than now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.row_factory = psycopg.rows.dict_row
        names = [
            r["thread_id"]
            for r in conn.execute(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id LIKE 'tpl-_-0000000' ORDER BY 1"
            )
        ]
        tpl = {
            t: {
                "c": conn.execute(
                    f"SELECT {', '.join(CHECKPOINT_COLS)} FROM checkpoints WHERE thread_id = %s", (t,)
                ).fetchall(),
                "b": conn.execute(
                    f"SELECT {', '.join(BLOB_COLS)} FROM checkpoint_blobs WHERE thread_id = %s", (t,)
                ).fetchall(),
                "w": conn.execute(
                    f"SELECT {', '.join(WRITE_COLS)} FROM checkpoint_writes WHERE thread_id = %s", (t,)
                ).fetchall(),
            }
            for t in names
        }
        per_round = sum(len(v["w"]) for v in tpl.values())
        rounds = -(-writes // per_round)
        base_ts = datetime.now().astimezone() + timedelta(minutes=1)
        plan = [(start + k, name) for k in range(rounds) for name in names]
        import json

        def ckpts():
            for k, name in plan:
                first = min(datetime.fromisoformat(r["checkpoint"]["ts"]) for r in tpl[name]["c"])
                for r in tpl[name]["c"]:
                    c = dict(r["checkpoint"])
                    c["ts"] = (
                        base_ts + (datetime.fromisoformat(c["ts"]) - first) + timedelta(milliseconds=k)
                    ).isoformat()
                    yield (
                        f"new-{k}-{name}",
                        r["checkpoint_ns"],
                        r["checkpoint_id"],
                        r["parent_checkpoint_id"],
                        r["type"],
                        json.dumps(c),
                        json.dumps(r["metadata"]),
                    )

        def blobs():
            for k, name in plan:
                for r in tpl[name]["b"]:
                    yield (f"new-{k}-{name}", *[r[c] for c in BLOB_COLS[1:-1]], unique_blob(r["blob"], k))

        def wr():
            n = 0
            for k, name in plan:
                for r in tpl[name]["w"]:
                    if n >= writes:
                        return
                    n += 1
                    yield (f"new-{k}-{name}", *[r[c] for c in WRITE_COLS[1:-1]], unique_blob(r["blob"], k))

        copy_table(conn, "checkpoints", CHECKPOINT_COLS, ckpts())
        copy_table(conn, "checkpoint_blobs", BLOB_COLS, blobs())
        copy_table(conn, "checkpoint_writes", WRITE_COLS, wr())
        conn.execute("ANALYZE checkpoints")
        conn.execute("ANALYZE checkpoint_writes")
    return writes


def run(base: str, writes: int, new: int, log=print) -> list[tuple]:
    dsn, fresh = database(base, writes)
    migrate(dsn, DIMS)
    db = Database(dsn)
    if fresh:
        log(f"writing templates with the real agents, then COPY to {writes:,} writes ...")
        write_templates(db)
        rounds = -(-writes // 40) or 1
        log(str(replicate(dsn, writes, age=lambda k, name: RETENTION * k / rounds)))
    for sql in RESET:
        db.execute(sql)
    n = db.fetch_one("SELECT (SELECT count(*) FROM checkpoints) AS c, (SELECT count(*) FROM checkpoint_writes) AS w")
    log(f"rows: checkpoints {n['c']:,}, writes {n['w']:,}")
    rows: list[tuple] = []

    live_s, live = timed(lambda: db.fetch_one(LIVE_COUNT)["n"])
    rows.append(
        (
            "baseline: live decode of core_checkpoint_messages_view (count recordar_preferencia calls)",
            live_s,
            n["w"] / live_s,
            f"{live:,} calls",
        )
    )
    full_s, full = timed(lambda: tool_calls.extract(db))
    extracted = db.fetch_one(EXTRACTED_COUNT)["n"]
    assert extracted == live, (extracted, live)
    rows.append(
        (
            f"full extraction, empty watermark ({full.batches} batches of {tool_calls.BATCH_CHECKPOINTS:,} "
            "checkpoints)",
            full_s,
            full.writes / full_s,
            f"{full.calls:,} calls, {full.thread_days:,} thread-days, {full.writes:,} writes decoded",
        )
    )
    count_s, _ = timed(lambda: db.fetch_one(EXTRACTED_COUNT))
    rows.append(("same count from core_tool_calls", count_s, None, f"{extracted:,} calls (= baseline)"))
    since, until = date.today() - timedelta(days=29), date.today()

    def page_reads():
        preferences.preference_daily(db, since, until)
        preferences.conversations(db, since, until)
        preferences.preference_by_tipo(db, since, until)
        preferences.writing_conversations(db, since, until)
        preferences.preferences_applied(db)

    reads = [timed(page_reads)[0] for _ in range(5)]
    rows.append(("Preferences page reads on the extracted tables (median of 5)", statistics.median(reads), None, "-"))

    append(dsn, new, start=10_000_000)
    behind = tool_calls.checkpoints_behind(db)
    inc_s, inc = timed(lambda: tool_calls.extract(db))
    rows.append(
        (
            f"incremental step after {new:,} new writes ({behind:,} checkpoints behind)",
            inc_s,
            inc.writes / inc_s if inc_s else None,
            f"{inc.calls:,} calls; vs full: {full_s / inc_s:.0f}x faster",
        )
    )
    idle_s, _ = timed(lambda: tool_calls.catch_up(db))
    rows.append(("page view when caught up (catch_up: nothing to do)", idle_s, None, "-"))
    sweep_s, sw = timed(lambda: tool_calls.sweep_step(db))
    rows.append(
        (
            "sweep step: orphans + 24 h look-back (re-reads the last day, idempotent)",
            sweep_s,
            sw.writes / sweep_s if sweep_s else None,
            f"{sw.writes:,} writes re-read, {sw.calls} new calls",
        )
    )
    assert db.fetch_one(EXTRACTED_COUNT)["n"] == db.fetch_one(LIVE_COUNT)["n"]
    return rows


def table(rows: list[tuple]) -> str:
    out = ["| step | seconds | writes/s | notes |", "|---|---:|---:|---|"]
    for name, s, rate, note in rows:
        out.append(f"| {name} | {s:.3f} | {'-' if rate is None else f'{rate:,.0f}'} | {note} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=10_000, help="writes added before the incremental step")
    parser.add_argument("--data", type=Path, default=Path(".data/bench_tool_calls"))
    args = parser.parse_args(argv)
    rows = run(embedded_dsn(args.data), args.writes, args.new)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
