"""What the sweep's decrypt step costs the token index, and what it saves the residue scan (issue 28).

    python -m bench.bench_encrypted_index --threads 300 --turns 4

On a fresh database of the embedded server: `--threads` conversations of `--turns` turns each written by a stock
PostgresSaver with langgraph's EncryptedSerializer, and as many plaintext ones (the baseline, same run). Prints the
token indexer's time for each set (every thread re-listed, `--rounds` times, median), then one customer's residue
scan with the index (decrypts only its candidates) against the scan reading every encrypted row (as it did before).
The load average is printed: on a shared machine read the ratios, not the times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from pathlib import Path

import psycopg
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import END, START, MessagesState, StateGraph
from psycopg.rows import dict_row

from core.db import Database, embedded_dsn
from core.history import formats
from core.migrate import migrate
from core.privacy import residue, token_index

DIMS = 64
KEY = "clave-de-16-byte"
RELIST = "INSERT INTO core_token_dirty (thread_id) SELECT thread_id FROM core_thread_tokens WHERE thread_id LIKE %s"


def write(dsn: str, prefix: str, threads: int, turns: int, serde=None) -> None:
    def reply(state: MessagesState) -> dict:
        return {"messages": [AIMessage(content=f"anotado: {state['messages'][-1].content}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        app = graph.compile(checkpointer=PostgresSaver(conn, serde=serde) if serde else PostgresSaver(conn))
        for n in range(threads):
            for turn in range(turns):
                text = f"soy C{n}, mi teléfono es 6{n:08d}" if n == 7 and turn == 0 else f"turno {turn} del hilo {n}"
                app.invoke({"messages": [HumanMessage(content=text)]}, {"configurable": {"thread_id": f"{prefix}-{n}"}})


def index_time(db: Database, prefix: str, rounds: int) -> tuple[float, token_index.IndexResult]:
    times, result = [], None
    for _ in range(rounds):
        db.execute(RELIST, (f"{prefix}-%",))
        start = time.perf_counter()
        result = token_index.index_pending(db)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(".data/bench_encrypted_index"))
    parser.add_argument("--threads", type=int, default=300)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ["LANGGRAPH_AES_KEYS"] = KEY
    base = embedded_dsn(args.data)
    name = f"bench_encidx_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(base, dbname=name)
    db = Database(dsn)
    try:
        migrate(dsn, DIMS)
        write(dsn, "plain", args.threads, args.turns)
        write(dsn, "enc", args.threads, args.turns, EncryptedSerializer.from_pycryptodome_aes(key=KEY.encode()))
        token_index.index_pending(db)
        plain_s, plain = index_time(db, "plain", args.rounds)
        enc_s, enc = index_time(db, "enc", args.rounds)
        print(
            f"load average {os.getloadavg()[0]:.1f}; {args.threads} threads x {args.turns} turns per set, "
            f"median of {args.rounds}"
        )
        print(f"token index, plaintext threads: {plain_s:.2f} s ({plain.payloads} rows)")
        print(
            f"token index, encrypted threads: {enc_s:.2f} s ({enc.payloads} rows, {enc.encrypted_read} decrypted); "
            f"ratio {enc_s / plain_s:.2f}"
        )
        decryptor = formats.decryptor()
        with db.connection() as conn:
            start = time.perf_counter()
            found = residue.residue_conn(conn, "C7", [], decryptor=decryptor)
            narrowed_s = time.perf_counter() - start
            start = time.perf_counter()
            formats.encrypted_texts(conn, decryptor, [])
            every_s = time.perf_counter() - start
        print(
            f"residue scan of C7 through the index: {narrowed_s * 1000:.0f} ms, threads {found.proposed}; "
            f"decrypting every encrypted row alone (before): {every_s * 1000:.0f} ms"
        )
    finally:
        db.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
