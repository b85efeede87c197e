"""The context at a step (issue 56, item 1) on the production-sized database.

    python -m bench.bench_context                 # 1M documents / 250k customers / 100k threads / 1M writes
    python -m bench.bench_context --smoke         # tiny sizes, seconds
    BENCH_RUN_NAME=h1 python -m bench.bench_context --data /work/h2-bench/data --keep-template

Data: bench/bench_production.py's database (its template is built once in --data and copied per run: `store` by
COPY, checkpoints from the real retail agents' rows with langgraph's serializer replicated to --threads threads, tool
calls extracted). With --keep-template an existing template is copied as it is (another run may be using it).

Measured (median of --runs warm calls, each against a baseline named in the same run, ratio = figure / baseline):
- the Checkpoints page's context read of one answer (`answer_context.context_at`: the `messages` channel at the
  answer's checkpoint, decoded, the documents its messages name, their values then and now), for the answer after a
  `proponer_entrega` call (its state holds the earlier turn's `recordar_preferencia`) and the one after a
  `recordar_preferencia` call, against the plain checkpoint read the page
  already makes for one checkpoint (`views.checkpoint_values`, every channel's value decoded);
- the thread's answers (`answer_context.answers`) against the same baseline;
- a document's answers that used it (`answer_context.answers_using`, the Memory page) against the customer's
  documents read (`reads.namespace_items`, the table it sits under);
- on the copy, the memory article's agents (tests/foreign_agents.py: stock savers, no metadata) hold a few
  conversations first: the context of the answer after their `preferencias` (whose customer is the one holding every
  value the result shows, core_value_holders) and after their `recordar_preferencia` (the document's `hilo`), each
  against the plain checkpoint read.
Target: every figure under 300 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "tests"))  # the memory article's agents, as a team that did not write ours has them

from foreign_agents import Conversation, run_conversations, thread_id_for  # noqa: E402

from bench import bench_production as bp  # noqa: E402
from core.db import Database, embedded_dsn, reset_pool  # noqa: E402
from core.history import answer_context, tool_calls, views  # noqa: E402
from core.ids import ThreadId  # noqa: E402
from core.memory import reads  # noqa: E402

TARGET_MS = 300.0
ARTICLE_CUSTOMERS = ("ART-1", "ART-2", "ART-3")  # ids no generated document has

# A customer's thread that called the tool named and wrote a preference (in that turn or an earlier one), newest first.
SELECT_SAMPLE = """
SELECT t.thread_id, t.cliente_id FROM core_tool_calls t
WHERE t.tool = %(tool)s AND t.cliente_id IS NOT NULL AND t.thread_id LIKE 'cliente-bench-%%'
  AND EXISTS (SELECT 1 FROM core_tool_calls p WHERE p.thread_id = t.thread_id AND p.tool = 'recordar_preferencia')
ORDER BY t.ts DESC LIMIT 1"""


def median_ms(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    result = fn()  # warm: the plans, the pages in shared buffers
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), result


def sample(db: Database, tool: str) -> tuple[ThreadId, str, Any]:
    row = db.ours.fetch_one(SELECT_SAMPLE, {"tool": tool})  # the extracted calls: ours
    if row is None:
        raise SystemExit(f"no extracted `{tool}` call on a customer's bench thread: the template has none")
    thread = ThreadId.parse(row["thread_id"])
    found = answer_context.answers(db, thread)
    return thread, row["cliente_id"], found.iloc[-1]


def article_conversations() -> list[Conversation]:
    """Each article customer declares contacto and horario, then reads their preferences (writes first)."""
    convs = []
    for c in ARTICLE_CUSTOMERS:
        convs.append(Conversation(thread_id_for(f"bench/{c}/w0"), c, "write", "contacto", f"correo {c.lower()}@ej.es"))
        convs.append(Conversation(thread_id_for(f"bench/{c}/w1"), c, "write", "horario", f"tardes de {c}"))
    convs += [Conversation(thread_id_for(f"bench/{c}/r"), c, "read") for c in ARTICLE_CUSTOMERS]
    return convs


def measure(db: Database, name: str, thread: ThreadId, answer: Any, runs: int, log: Callable[[str], None]) -> list:
    """The context of `answer` against the plain checkpoint read of the same checkpoint."""
    ckpt, ns = answer["checkpoint_id"], answer["checkpoint_ns"]
    base_ms, _ = median_ms(lambda: views.checkpoint_values(db, thread, ckpt, ns), runs)
    ms, ctx = median_ms(lambda: answer_context.context_at(db, thread, ckpt, ns), runs)
    docs = ctx.documents[["prefix", "key", "found_by", "then_how"]].values.tolist()
    log(f"{name}: thread {thread}, step {ctx.step}, {len(ctx.messages)} messages, documents {docs}")
    plain = f"plain checkpoint read (views.checkpoint_values) [{name}]"
    return [(f"context of an answer {name} (context_at)", ms, plain, base_ms)]


def run(dsn: str, runs: int, log: Callable[[str], None], article: bool = True) -> list[tuple[str, float, str, float]]:
    """[(figure, ms, baseline, baseline ms)]"""
    db = Database(dsn)
    figures = []
    try:
        if article:
            convs = article_conversations()
            run_conversations(dsn, convs)
            log(f"the memory article's agents: {len(convs)} conversations of {len(ARTICLE_CUSTOMERS)} customers")
        tool_calls.catch_up(db)
        for tool in ("proponer_entrega", "recordar_preferencia"):
            thread, customer, answer = sample(db, tool)
            figures += measure(db, f"after `{tool}`", thread, answer, runs, log)
            ms, found = median_ms(lambda: answer_context.answers(db, thread), runs)  # noqa: B023
            figures.append((f"a thread's answers ({len(found)}) [{tool}]", ms, figures[-1][2], figures[-1][3]))
            if tool == "proponer_entrega":
                ctx = answer_context.context_at(db, thread, answer["checkpoint_id"], answer["checkpoint_ns"])
                assert ctx is not None and len(ctx.documents), "the sample's context names no document"
                prefix, key = ctx.documents.iloc[0]["prefix"] or f"clientes.{customer}", ctx.documents.iloc[0]["key"]
                base_ms, _ = median_ms(lambda: reads.namespace_items(db, prefix, 50, 0), runs)  # noqa: B023
                ms, uses = median_ms(lambda: answer_context.answers_using(db, prefix, key), runs)  # noqa: B023
                figures.append(
                    (
                        f"answers that used {key} ({len(uses)})",
                        ms,
                        "the namespace's documents (namespace_items)",
                        base_ms,
                    )
                )
        if article:
            for kind, what in (
                ("read", "after the article's `preferencias` (customer by value)"),
                ("write", "after the article's `recordar_preferencia` (customer by hilo)"),
            ):
                conv = next(c for c in article_conversations() if c.kind == kind)
                thread = ThreadId.parse(conv.thread_id)
                figures += measure(db, what, thread, answer_context.answers(db, thread).iloc[-1], runs, log)
    finally:
        db.close()
    return figures


def table(figures: list[tuple[str, float, str, float]], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "| figure | ms | baseline | baseline ms | ratio | target |",
        "|---|---:|---|---:|---:|---|",
    ]
    for name, ms, baseline, base_ms in figures:
        ok = "ok" if ms < TARGET_MS else "OVER"
        lines.append(f"| {name} | {ms:.1f} | {baseline} | {base_ms:.1f} | {ms / base_ms:.2f}x | {ok} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    bp.add_database_arguments(parser)
    parser.add_argument("--runs", type=int, default=7, help="warm calls per read (median)")
    parser.add_argument("--keep-template", action="store_true", help="copy an existing template as it is")
    parser.add_argument("--drop-copy", action="store_true", help="drop the run's copy afterwards")
    parser.add_argument("--no-article", action="store_true", help="without the memory article's agents' threads")
    args = parser.parse_args(argv)
    sizes = bp.database_sizes(args)
    runs = 1 if args.smoke else args.runs
    args.data.mkdir(parents=True, exist_ok=True)
    base = embedded_dsn(args.data)
    print(f"embedded PostgreSQL in {args.data}; load {os.getloadavg()}", flush=True)
    dsn, info = bp.database(
        base,
        sizes["docs"],
        sizes["customers"],
        sizes["threads"],
        sizes["writes"],
        sizes["erasure_docs"],
        lambda s: print(s, flush=True),
        touch_template=not args.keep_template,
    )
    figures = run(dsn, runs, lambda s: print(s, flush=True), article=not args.no_article)
    info["load_after"] = os.getloadavg()
    print(info)
    command = "python -m bench.bench_context " + " ".join(argv if argv is not None else sys.argv[1:])
    print("\n" + table(figures, command.strip()))
    over = [name for name, ms, _, _ in figures if ms >= TARGET_MS]
    print(f"\n{len(figures)} figures; over {TARGET_MS:.0f} ms: " + (", ".join(over) or "none"))
    if args.drop_copy:
        reset_pool(dsn)
        name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
