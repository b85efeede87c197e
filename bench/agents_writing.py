"""Agents writing while the dashboard installs (issue 52: "installing on 1M documents succeeds with the embedded
default max_slot_wal_keep_size while agents write 300/s").

    python -m bench.agents_writing DSN --rate 300

A stock `PostgresStore` (langgraph's, as the agents use it) puts a preference document `rate` times a second, paced
on the monotonic clock (behind schedule it writes without sleeping and the achieved rate says so), over a fixed set of
KEYS keys in 97 customers' namespaces (overwrites after that: the table does not grow with the run's length), the
puts due since the last batch in one `batch` call (several agents' writes landing together). On
SIGTERM it deletes every document it wrote, so the database holds what it held before (bench_production's template
stays the template), and prints one JSON line: writes, seconds, achieved rate, the longest batch.
"""

from __future__ import annotations

import argparse
import json
import signal
import time

from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore
from psycopg_pool import ConnectionPool

KEYS = 5_000
CUSTOMERS = 97
TICK_S = 0.02  # how often the schedule is looked at while ahead of it


def where(i: int) -> tuple[tuple[str, str], str]:
    """The i-th write's document: the (i mod KEYS)-th of the fixed set."""
    j = i % KEYS
    return ("clientes", f"escritor-{j % CUSTOMERS}"), f"pref-recogida-{j}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dsn")
    parser.add_argument("--rate", type=float, default=300.0, help="store puts a second")
    args = parser.parse_args()
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    with ConnectionPool(args.dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        store = PostgresStore(pool)
        started, i, longest = time.monotonic(), 0, 0.0
        while not stop:
            due = int((time.monotonic() - started) * args.rate) - i  # the puts the schedule asks for by now
            if due <= 0:
                time.sleep(TICK_S)
                continue
            due = min(due, int(args.rate) or 1)  # at most a second's worth at once
            ops = [
                PutOp(*where(n), {"tipo": "recogida", "valor": f"tienda T{n % 9:03d}"}, index=False)
                for n in range(i, i + due)
            ]
            t = time.monotonic()
            store.batch(ops)  # as several agents' puts landing together: one round trip
            longest = max(longest, time.monotonic() - t)
            i += due
        seconds = time.monotonic() - started
        store.batch([PutOp(*where(n), None) for n in range(min(i, KEYS))])  # every document written deleted
    print(
        json.dumps(
            {"writes": i, "s": round(seconds, 1), "rate": round(i / seconds, 1), "longest_batch_s": round(longest, 3)}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
