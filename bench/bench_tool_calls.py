"""Tool-call extraction from checkpoint history (core/history/tool_calls.py) at production size,
against the live decode of the canonical view in the same run.

    python -m bench.bench_tool_calls --writes 1000000
    python -m bench.bench_tool_calls --writes 100000 --new 10000
    python -m bench.bench_tool_calls --writes 100000 --new 10000 --split

With --split the same steps run twice on the same rows in one run: first with the dashboard's tables in the agents'
database (the default layout), then with them in a database of their own on the same server (issue 52: PG_DASHBOARD;
the extraction then reads keys in ours, decodes on the agents' side and writes in ours), and the ratios apart/default
are printed.

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
from core.capture.follower import catch_up, drop_slot  # noqa: E402
from core.db import Database, embedded_dsn, forget_dashboard_database, use_dashboard_database  # noqa: E402
from core.history import tool_calls  # noqa: E402
from core.memory import preferences  # noqa: E402
from core.migrate import migrate, migrate_dashboard  # noqa: E402

RETENTION = timedelta(days=90)
LIVE_COUNT = """
SELECT count(*) AS n
FROM core_checkpoint_messages_view m CROSS JOIN LATERAL jsonb_array_elements(m.tool_calls) AS call
WHERE m.kind = 'ai' AND call ->> 'name' = 'recordar_preferencia'"""
EXTRACTED_COUNT = "SELECT count(*) AS n FROM core_tool_calls WHERE tool = 'recordar_preferencia'"
RESET = [  # on the agents' database
    "DELETE FROM checkpoint_writes WHERE thread_id LIKE 'new-%'",  # a previous run's appended threads
    "DELETE FROM checkpoint_blobs WHERE thread_id LIKE 'new-%'",
    "DELETE FROM checkpoints WHERE thread_id LIKE 'new-%'",
]
RESET_OURS = [  # where the extraction keeps its tables (the rollups are emptied by their TRUNCATE triggers)
    "TRUNCATE core_tool_calls, core_thread_days, core_refused_payloads, core_thread_summary, core_message_usage, "
    "core_message_no_usage, core_usage_threads, core_usage_days",
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


def run(base: str, writes: int, new: int, log=print, *, split: bool = False, rounds: int = 0) -> dict[str, list[tuple]]:
    """The steps on the default layout, and with --split on a dashboard database of its own too: {layout: rows}."""
    dsn, fresh = database(base, writes)
    forget_dashboard_database(dsn)
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
    live_s, live = timed(lambda: db.fetch_one(LIVE_COUNT)["n"])
    baseline = (
        "baseline: live decode of core_checkpoint_messages_view (count recordar_preferencia calls)",
        live_s,
        n["w"] / live_s,
        f"{live:,} calls",
    )
    out = {"default": [baseline, *steps(db, n["w"], live, new, log)]}
    if split:
        ours = psycopg.conninfo.make_conninfo(
            dsn, dbname=f"{psycopg.conninfo.conninfo_to_dict(dsn)['dbname']}_dashboard"
        )
        use_dashboard_database(dsn, ours)
        migrate_dashboard(ours)
        try:
            out["split"] = [baseline, *steps(db, n["w"], live, new, log)]
            rounds_done = []
            for r in range(rounds):  # full extractions alternating between the layouts (load moves in between)
                times = {}
                for layout, target in (("default", None), ("split", ours)):
                    if target is None:
                        forget_dashboard_database(dsn)
                    else:
                        use_dashboard_database(dsn, target)
                    times[layout] = full_extraction(db)
                    drop_slot(dsn)
                log(f"round {r + 1}: default {times['default']:.2f} s, apart {times['split']:.2f} s")
                rounds_done.append(times)
            out["rounds"] = [(t["default"], t["split"], t["split"] / t["default"], "") for t in rounds_done]
        finally:
            drop_slot(dsn)  # the next run's default layout recounts into the agents' database
            db.ours.close()
            forget_dashboard_database(dsn)
    return out


def full_extraction(db: Database) -> float:
    """Seconds of one full extraction from an empty watermark on the layout `db.ours` says (the follower recounted)."""
    for sql in RESET_OURS:
        db.ours.execute(sql)
    drop_slot(db.dsn)
    catch_up(db.dsn, timeout=3600)
    return timed(lambda: tool_calls.extract(db))[0]


def steps(db: Database, writes: int, live: int, new: int, log=print) -> list[tuple]:
    """Items 2-4 on the layout `db.ours` says, from an empty extraction and a change follower recounted afresh."""
    ours = db.ours
    for sql in RESET_OURS:
        ours.execute(sql)
    drop_slot(db.dsn)  # the follower's shadow, recounted where this layout keeps it
    t = time.perf_counter()
    catch_up(db.dsn, timeout=3600)
    log(f"{'apart' if ours is not db else 'default'}: change follower recounted in {time.perf_counter() - t:.1f} s")
    rows: list[tuple] = []
    full_s, full = timed(lambda: tool_calls.extract(db))
    extracted = ours.fetch_one(EXTRACTED_COUNT)["n"]
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
    count_s, _ = timed(lambda: ours.fetch_one(EXTRACTED_COUNT))
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

    append(db.dsn, new, start=10_000_000)
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
    assert ours.fetch_one(EXTRACTED_COUNT)["n"] == db.fetch_one(LIVE_COUNT)["n"]
    for sql in RESET:  # the appended threads go: the next layout starts from the same rows
        db.execute(sql)
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
    parser.add_argument(
        "--split", action="store_true", help="also with the dashboard's tables in a database of their own (issue 52)"
    )
    parser.add_argument(
        "--rounds", type=int, default=0, help="with --split: more full extractions, alternating the two layouts"
    )
    args = parser.parse_args(argv)
    found = run(embedded_dsn(args.data), args.writes, args.new, split=args.split, rounds=args.rounds)
    rounds = found.pop("rounds", [])
    for layout, rows in found.items():
        print(f"\n{layout} layout\n\n{table(rows)}", flush=True)
    if rounds:
        print("\n| round | full extraction, default (s) | apart (s) | apart / default |\n|---:|---:|---:|---:|")
        for i, (one_db, apart, ratio, _) in enumerate(rounds, 1):
            print(f"| {i} | {one_db:.2f} | {apart:.2f} | {ratio:.2f} |")
        print(f"| median | | | {statistics.median(r[2] for r in rounds):.2f} |")
    if "split" in found:
        print("\n| step | apart / default (seconds) |\n|---|---:|")
        for (name, apart, _, _), (_, one_db, _, _) in zip(found["split"], found["default"], strict=True):
            print(f"| {name} | {apart / one_db:.2f} |" if one_db else f"| {name} | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
