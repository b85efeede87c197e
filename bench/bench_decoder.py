"""The SQL checkpoint decoder and the canonical views at production size, against Python baselines.

    python -m bench.bench_decoder --writes 1000000

A fresh database on an embedded PostgreSQL (folder --data, default .data/bench_decoder), migrations,
then real checkpoints: the retail agents (scripted model, real tools, `PostgresSaver` with langgraph's
serializer) hold a few conversations with tool calls; their rows in the three checkpoint tables are
replicated by COPY to as many thread ids as it takes to reach --writes rows in `checkpoint_writes`
(each copy's `checkpoint->>'ts'` moved back by its index, customers spread over 1,000 ids).

Measured: the decoder over every write (rows/s, payload bytes/s) next to two named baselines run on
the same rows in the same run (Python: fetch + our reference `core.checkpoint_json`, and fetch +
langgraph's own `JsonPlusSerializer.loads_typed`, which constructs the objects); the views (without
and with decoded columns); each read function of the Checkpoints page for one thread; and the page's
full AppTest render for one thread with an empty data cache. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from datetime import datetime, timedelta
from pathlib import Path

import psycopg

from core.db import Database, embedded_dsn
from core.history import views
from core.history.payload_json import payload_json
from core.migrate import migrate
from core.storage import storage

DIMS = 64
TEMPLATE_TURNS = {
    "tpl-a": (
        "C1",
        [
            "Prefiero recoger mis pedidos en la tienda Gran Vía.",
            "¿Qué preferencias tengo guardadas?",
            "Gracias, eso es todo.",
        ],
    ),
    "tpl-b": ("C2", ["¿Hay avisos sobre vaqueros?", "Por favor, contactadme siempre por WhatsApp."]),
    "tpl-c": (
        "C3",
        [
            "Hola, quería saber el estado de mi pedido.",
            "Prefiero que me atendáis en catalán.",
            "¿Puedo cambiar una prenda sin ticket?",
        ],
    ),
}
CHECKPOINT_COLS = [
    "thread_id",
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "type",
    "checkpoint",
    "metadata",
]
BLOB_COLS = ["thread_id", "checkpoint_ns", "channel", "version", "type", "blob"]
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
WRITE_COLS = ["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx", "channel", "type", "blob"]


def median_s(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def database(base_dsn: str, writes: int) -> tuple[str, bool]:
    name = f"bench_decoder_{writes}"
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        fresh = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None
        if fresh:
            conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(base_dsn, dbname=name), fresh


def write_templates(db: Database, turns: dict[str, tuple[str, list[str]]] | None = None) -> None:
    """Conversations by the real agents; their checkpoint rows are the templates.
    `turns`: customer templates {thread: (customer, [texts])}, default TEMPLATE_TURNS."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from core.agents.retail import ContextoCliente, ContextoProveedor, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    saver = PostgresSaver(db.pool)
    model = ScriptedChatModel()
    cliente = build_agent("atencion-cliente", model, store=store, checkpointer=saver)
    for thread, (customer, texts) in (turns or TEMPLATE_TURNS).items():
        for text in texts:
            run_turn(cliente, ContextoCliente(customer), thread, text)
    compras = build_agent("compras", model, store=store, checkpointer=saver)
    run_turn(compras, ContextoProveedor("P001"), "tpl-d", "aviso retraso: Los vaqueros llegan con retraso")


def unique_blob(blob: bytes | None, k: int) -> bytes | None:
    """Each copy gets its own message ids (same length, so the msgpack stays valid): real threads
    never share ids, and identical blobs would let the planner's Memoize skip decodes."""
    if not blob:
        return blob
    prefix = f"{k:08x}".encode()
    return UUID.sub(lambda m: prefix + m.group(0)[8:], blob)


def copy_table(conn: psycopg.Connection, table: str, cols: list[str], rows) -> None:
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def replicate(
    dsn: str, target_writes: int, *, threads: int | None = None, thread_id=None, customer=None, age=None
) -> dict:
    """COPY the template threads to new thread ids until checkpoint_writes holds `target_writes` rows.

    Optional (defaults give the decoder benchmark's data): `threads`, total threads to make (else as
    many rounds of the templates as `target_writes` needs); `thread_id(k, template)`, the id of round
    k's copy of a template; `customer(k, template)`, the `cliente_id` put in its metadata;
    `age(k, template)`, how far back its `ts` is moved (a timedelta)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.row_factory = psycopg.rows.dict_row
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
            for t in ["tpl-a", "tpl-b", "tpl-c", "tpl-d"]
        }
        per_round = sum(len(v["w"]) for v in tpl.values())
        rounds = -(-target_writes // per_round) if threads is None else -(-threads // len(tpl))
        thread_id = thread_id or (lambda k, name: f"{name}-{k:07d}")
        customer = customer or (lambda k, name: f"C{k % 1000}")
        age = age or (lambda k, name: timedelta(seconds=k * 7))
        now = datetime.now().astimezone()

        def copies():
            for k in range(rounds):
                for name, rows in tpl.items():
                    yield k, name, rows

        def checkpoint_rows():
            for k, name, rows in copies():
                tid, shift = thread_id(k, name), age(k, name)
                cliente = customer(k, name)
                for r in rows["c"]:
                    ckpt = dict(r["checkpoint"])
                    ckpt["ts"] = (datetime.fromisoformat(ckpt["ts"]) - shift).isoformat()
                    meta = dict(r["metadata"])
                    if "cliente_id" in meta:
                        meta["cliente_id"] = cliente
                    yield (
                        tid,
                        r["checkpoint_ns"],
                        r["checkpoint_id"],
                        r["parent_checkpoint_id"],
                        r["type"],
                        json.dumps(ckpt),
                        json.dumps(meta),
                    )

        def blob_rows():
            for k, name, rows in copies():
                tid = thread_id(k, name)
                for r in rows["b"]:
                    yield (tid, *[r[c] for c in BLOB_COLS[1:-1]], unique_blob(r["blob"], k))

        def write_rows():
            n = 0
            for k, name, rows in copies():
                tid = thread_id(k, name)
                for r in rows["w"]:
                    if n >= target_writes:
                        return
                    n += 1
                    yield (tid, *[r[c] for c in WRITE_COLS[1:-1]], unique_blob(r["blob"], k))

        started = time.perf_counter()
        conn.execute("DELETE FROM checkpoint_writes")  # the templates themselves are replaced by copy 0
        conn.execute("DELETE FROM checkpoint_blobs")
        conn.execute("DELETE FROM checkpoints")
        copy_table(conn, "checkpoints", CHECKPOINT_COLS, checkpoint_rows())
        copy_table(conn, "checkpoint_blobs", BLOB_COLS, blob_rows())
        copy_table(conn, "checkpoint_writes", WRITE_COLS, write_rows())
        conn.execute("ANALYZE checkpoints")
        conn.execute("ANALYZE checkpoint_blobs")
        conn.execute("ANALYZE checkpoint_writes")
        return {"threads": rounds * len(tpl), "load_s": time.perf_counter() - started, "now": now.isoformat()}


def python_baseline(dsn: str, decode) -> tuple[float, int, int]:
    """Fetch every write with a server-side cursor and decode it in Python; (seconds, rows, bytes)."""
    rows = size = 0
    started = time.perf_counter()
    with psycopg.connect(dsn) as conn, conn.cursor(name="all_writes") as cur:
        cur.itersize = 5000
        cur.execute("SELECT type, blob FROM checkpoint_writes")
        for blob_type, blob in cur:
            decode(blob_type, blob)
            rows += 1
            size += len(blob or b"")
    return time.perf_counter() - started, rows, size


def page_render_s(dsn: str, thread_id: str) -> float:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ.update({"PG_AGENTES": dsn, "EMBEDDINGS_DIMS": str(DIMS), "AUTO_MIGRATE": "0", "SEED_DEMO": "0"})
    st.cache_resource.clear()
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "dashboard.py"), default_timeout=120)
    at.query_params["thread"] = thread_id
    at.run()
    at.switch_page("app_pages/checkpoints.py").run()
    assert not at.exception, at.exception
    times = []
    for _ in range(3):
        st.cache_data.clear()
        t = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - t)
        assert not at.exception, at.exception
        assert any(m.label == "Checkpoints" for m in at.metric), "the thread did not render"
    return statistics.median(times)


def run(writes: int, data: Path) -> None:
    base = embedded_dsn(data)
    dsn, fresh = database(base, writes)
    migrate(dsn, DIMS)
    db = Database(dsn)
    if fresh:
        print(f"writing templates with the real agents, then COPY to {writes:,} writes ...", flush=True)
        write_templates(db)
        print(replicate(dsn, writes), flush=True)
    counts = db.fetch_one(
        "SELECT (SELECT count(*) FROM checkpoints) AS c, (SELECT count(*) FROM checkpoint_blobs) AS b, "
        "(SELECT count(*) FROM checkpoint_writes) AS w, "
        "(SELECT count(*) FROM checkpoint_writes WHERE type = 'msgpack') AS wm, "
        "(SELECT sum(octet_length(blob)) FROM checkpoint_writes) AS wbytes"
    )
    print(
        f"\nrows: checkpoints {counts['c']:,}, blobs {counts['b']:,}, writes {counts['w']:,} "
        f"({counts['wm']:,} msgpack, {counts['wbytes']:,} payload bytes)\n",
        flush=True,
    )

    print("| decoding every checkpoint write | seconds | rows/s | payload MB/s | vs SQL |")
    print("|---|---:|---:|---:|---:|")
    sql_s = median_s(lambda: db.fetch("SELECT count(core_checkpoint_payload(type, blob)) FROM checkpoint_writes"), 1)

    def serial() -> None:
        with db.connection() as conn:
            conn.execute("SET max_parallel_workers_per_gather = 0")
            try:
                conn.execute("SELECT count(core_checkpoint_payload(type, blob)) FROM checkpoint_writes").fetchall()
            finally:
                conn.execute("RESET max_parallel_workers_per_gather")

    serial_s = median_s(serial, 1)
    mb = counts["wbytes"] / 1e6
    print(
        f"| SQL `core_checkpoint_payload` (parallel query as planned) | {sql_s:.1f} | "
        f"{counts['w'] / sql_s:,.0f} | {mb / sql_s:.2f} | 1.00 |"
    )
    print(
        f"| SQL `core_checkpoint_payload`, one backend (no parallel workers) | {serial_s:.1f} | "
        f"{counts['w'] / serial_s:,.0f} | {mb / serial_s:.2f} | {serial_s / sql_s:.2f} |"
    )
    ref_s, n, _ = python_baseline(dsn, lambda t, b: json.dumps(payload_json(t, b)))
    print(
        f"| **baseline** Python: fetch + `core.checkpoint_json` (same JSON, nothing constructed) | {ref_s:.1f} "
        f"| {n / ref_s:,.0f} | {mb / ref_s:.2f} | {ref_s / sql_s:.2f} |"
    )
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    lg_s, n, _ = python_baseline(dsn, lambda t, b: serde.loads_typed((t, b)))
    print(
        "| **baseline** Python: fetch + langgraph `JsonPlusSerializer.loads_typed` (constructs objects) | "
        f"{lg_s:.1f} | {n / lg_s:,.0f} | {mb / lg_s:.2f} | {lg_s / sql_s:.2f} |"
    )
    fetch_s, n, _ = python_baseline(dsn, lambda t, b: None)
    print(
        f"| fetch only (what both Python baselines pay before decoding) | {fetch_s:.1f} | {n / fetch_s:,.0f} | "
        f"{mb / fetch_s:.2f} | {fetch_s / sql_s:.2f} |"
    )

    thread = db.fetch_one(
        "SELECT thread_id FROM checkpoints WHERE thread_id LIKE 'tpl-a-%' ORDER BY thread_id DESC LIMIT 1"
    )["thread_id"]
    customer = db.fetch_one(
        "SELECT metadata->>'cliente_id' AS c FROM checkpoints WHERE thread_id = %s LIMIT 1", (thread,)
    )["c"]
    view_queries = {
        "`count(*)` over `core_checkpoint_writes_view` (no decoded column)": (
            "SELECT count(*) FROM core_checkpoint_writes_view"
        ),
        "`count(payload)` over `core_checkpoint_writes_view` (decodes every write)": (
            "SELECT count(payload) FROM core_checkpoint_writes_view"
        ),
        "`message_kind, count(*) ... GROUP BY` over `core_checkpoint_writes_view`": (
            "SELECT message_kind, count(*) FROM core_checkpoint_writes_view GROUP BY 1"
        ),
        "tool calls per tool over `core_checkpoint_messages_view`": (
            "SELECT tool_name, count(*) FROM core_checkpoint_messages_view WHERE kind = 'tool' GROUP BY 1"
        ),
        "one thread's writes from `core_checkpoint_writes_view`": (
            f"SELECT * FROM core_checkpoint_writes_view WHERE thread_id = '{thread}'"
        ),
        "one thread's checkpoints with decoded `channel_values`": (
            f"SELECT * FROM core_checkpoints_view WHERE thread_id = '{thread}'"
        ),
        "threads of one customer from `core_checkpoints_view` (index)": (
            f"SELECT thread_id, count(*) FROM core_checkpoints_view WHERE cliente_id = '{customer}' GROUP BY 1"
        ),
    }
    print("\n| view query | seconds |\n|---|---:|")
    for label, sql in view_queries.items():
        runs = 3 if "thread" in label or "customer" in label else 1
        print(f"| {label} | {median_s(lambda sql=sql: db.fetch(sql), runs):.3f} |", flush=True)

    calls = {
        "find_thread": lambda: views.find_thread(db, thread),
        "threads_of_customer": lambda: views.threads_of_customer(db, customer),
        "recent_threads": lambda: views.recent_threads(db),
        "thread_timeline": lambda: views.thread_timeline(db, thread),
        "step_writes (all steps)": lambda: views.step_writes(db, thread),
        "checkpoint_diff (last two)": lambda: views.checkpoint_diff(
            db, thread, *views.thread_timeline(db, thread)["checkpoint_id"].iloc[-2:].tolist()
        ),
        "thread_storage": lambda: views.thread_storage(db, thread),
        "largest_threads (Storage view; scans the three tables)": lambda: views.largest_threads(db, 20),
        "table_totals (Storage view)": lambda: storage.table_totals(db),
    }
    print(f"\n| Checkpoints page read function (thread `{thread}`) | seconds (median of 3) |\n|---|---:|")
    for label, call in calls.items():
        call()
        print(f"| {label} | {median_s(call):.3f} |", flush=True)
    print(
        "| **page render**: AppTest of the Checkpoints page for one thread, empty data cache | "
        f"{page_render_s(dsn, thread):.3f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=1_000_000)
    parser.add_argument("--data", type=Path, default=Path(".data/bench_decoder"))
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    run(args.writes, args.data)


if __name__ == "__main__":
    main()
