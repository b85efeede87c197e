"""Polling or a walsender: which way of reading the slot costs the agents' server less (issue 37)?

The follower reads its slot through the SQL interface every 0.5 s (`pg_logical_slot_peek_binary_changes`, then
`pg_replication_slot_advance` after its commit). The alternative is the streaming replication protocol: a walsender
decodes each change once as it is written and the slot moves on the client's feedback. This bench measures the
reading alone, with no aggregate applied, on the same stock workload:

- **baseline: polling**, as the follower reads: every 0.5 s a peek of everything the slot holds, then an advance to
  its end (and, like the follower, a running-transactions record so the next read starts near);
- **walsender**: START_REPLICATION on a psycopg connection in COPY BOTH mode (libpq's get/put_copy_data through
  `psycopg.pq`), every message read as it arrives, feedback of the last commit every 0.5 s.

Figures: the CPU (utime + stime from /proc) of the server processes that read (the polling backend; the walsender),
and of the writer's own backend, while `--writes` stock `PostgresStore.put`s are made at `--rate` per second (0: as
fast as one connection goes), each way on a fresh database of one embedded PostgreSQL 18. Nothing depends on the
time it runs.

    python -m bench.bench_walsender --writes 6000 --rate 300
    python -m bench.bench_walsender --writes 12000 --rate 0
"""

from __future__ import annotations

import argparse
import select
import struct
import threading
import time

import psycopg
from psycopg import pq

from bench.bench_capture import fresh_database, logical_server
from bench.bench_follower_cpu import cpu_seconds, paced_puts
from core.capture import follower as fmod
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.migrate import migrate

DIMS = 64
PERIOD_S = 0.5


def poll(dsn: str, slot: str, stop: threading.Event, pids: list[int]) -> None:
    with fmod.connect(dsn) as conn:
        pids.append(conn.info.backend_pid)
        while not stop.wait(PERIOD_S):
            rows = conn.execute(fmod.PEEK, (slot, 1_000_000, fmod.PUBLICATION)).fetchall()
            if rows:
                conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, fmod.lsn_text(rows[-1][0])))
                conn.execute("SELECT pg_log_standby_snapshot()")


def stream(dsn: str, slot: str, stop: threading.Event, pids: list[int]) -> None:
    with psycopg.connect(dsn, replication="database", autocommit=True, application_name="core_capture_bench") as conn:
        pg = conn.pgconn
        pids.append(pg.backend_pid)
        pg.send_query(
            f"START_REPLICATION SLOT {slot} LOGICAL 0/0 "
            f"(proto_version '1', publication_names '{fmod.PUBLICATION}')".encode()
        )
        result = pg.get_result()
        assert result is not None and result.status == pq.ExecStatus.COPY_BOTH, pg.error_message
        confirmed = last_commit = 0
        next_feedback = time.monotonic() + PERIOD_S
        while not stop.is_set():
            n, buf = pg.get_copy_data(1)
            if n > 0:
                data = bytes(buf)
                if data[:1] == b"w" and data[25:26] == b"C":  # XLogData carrying a pgoutput Commit
                    last_commit = struct.unpack_from("!Q", data, 1)[0]
                continue
            assert n == 0, pg.error_message
            if time.monotonic() >= next_feedback and last_commit > confirmed:
                confirmed = last_commit
                now = int((time.time() - 946_684_800) * 1_000_000)  # microseconds since 2000-01-01
                pg.put_copy_data(b"r" + struct.pack("!QQQq?", confirmed, confirmed, confirmed, now, False))
                pg.flush()
                next_feedback = time.monotonic() + PERIOD_S
            select.select([pg.socket], [], [], 0.1)
            pg.consume_input()


def run(base: str, name: str, reader, writes: int, rate: float) -> dict[str, float]:
    dsn = fresh_database(base, name)
    migrate(dsn, DIMS)
    fmod.catch_up(dsn)  # the slot, recounted: what the follower would read from
    slot = fmod.slot_name_for(name)
    stop = threading.Event()
    pids: list[int] = []
    thread = threading.Thread(target=reader, args=(dsn, slot, stop, pids), daemon=True)
    thread.start()
    while not pids:
        time.sleep(0.01)
    reader_start = cpu_seconds(pids[0])
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=psycopg.rows.dict_row) as w:
        store = build_store(w, OfflineHashEmbeddings(DIMS), DIMS)
        writer_pid = w.info.backend_pid
        writer_start = cpu_seconds(writer_pid)
        seconds = paced_puts(store, writes, rate, lambda i: {"texto": f"nota {i}", "i": i})
        writer = cpu_seconds(writer_pid) - writer_start
    time.sleep(2 * PERIOD_S)  # the last reads
    reader_cpu = cpu_seconds(pids[0]) - reader_start
    stop.set()
    thread.join(10)
    fmod.drop_slot(dsn)
    return {"reader": reader_cpu, "writer": writer, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=6000)
    parser.add_argument("--rate", type=float, default=300.0, help="writes per second; 0: as fast as they go")
    args = parser.parse_args()
    _data, base = logical_server(None, "bench-walsender-")
    results = {
        label: run(base, f"read_{label}", reader, args.writes, args.rate)
        for label, reader in (("polling", poll), ("walsender", stream))
    }
    base_cpu = results["polling"]["reader"] or float("nan")  # a tiny run may measure 0 ticks
    print(f"\n{args.writes:,} stock puts, " + (f"{args.rate:,.0f} a second" if args.rate else "as fast as they go"))
    print("| reading | reader's server CPU (s) | vs polling | writer's backend CPU (s) | writes/s |")
    print("|---|---:|---:|---:|---:|")
    for label, r in results.items():
        print(
            f"| {label} | {r['reader']:.2f} | {r['reader'] / base_cpu:.2f} | {r['writer']:.2f} "
            f"| {args.writes / r['seconds']:,.0f} |"
        )


if __name__ == "__main__":
    main()
