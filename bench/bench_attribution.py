"""Subject attribution at production size: the residue scan for one customer and the coverage query, each against
a named baseline run on the same rows in the same run.

    python -m bench.bench_attribution --writes 1000000

Data: bench_decoder's (the retail agents' real checkpoints replicated by COPY to --writes rows of
checkpoint_writes, customers spread over 1,000 ids), with app-chosen thread ids `conv-<k>-<template>` that no
pattern matches, plus the customer's own store documents (the article's preference shape, with `hilo`).

- residue scan (`core.privacy.res.residue_scan`: raw-bytes filter, then the SQL decoder on the candidates)
  vs the naive scan that decodes every payload and matches the same terms (`core_checkpoint_payload(...)::text ~`);
- coverage (`core.privacy.subjects.coverage`) vs the live storage aggregate it extends
  (`core.history.views.LIVE_THREAD_STORAGE`: the same three full scans, no attribution).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from bench.bench_decoder import database, median_s, replicate, write_templates
from core.db import Database, embedded_dsn
from core.history import views
from core.migrate import migrate
from core.privacy import residue as res
from core.privacy import subjects as subj

CUSTOMER = "C7"
NAIVE_RESIDUE = """
SELECT count(DISTINCT thread_id) AS n FROM (
    SELECT w.thread_id FROM checkpoint_writes w, unnest(%(rxs)s::text[]) AS t(rx)
    WHERE core_checkpoint_payload(w.type, w.blob)::text ~ t.rx
    UNION ALL
    SELECT b.thread_id FROM checkpoint_blobs b, unnest(%(rxs)s::text[]) AS t(rx)
    WHERE core_checkpoint_payload(b.type, b.blob)::text ~ t.rx
) r"""


def run(writes: int, data: Path, runs: int) -> None:
    base = embedded_dsn(data)
    dsn, fresh = database(base, writes)
    migrate(dsn, 64)
    db = Database(dsn)
    if fresh:
        write_templates(db)
        info = replicate(dsn, writes, thread_id=lambda k, name: f"conv-{k:07d}-{name}")
        print(f"built {writes:,} writes, {info['threads']:,} threads in {info['load_s']:.1f} s")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for k in range(1000):  # every customer picks up at the same store: T002 is common
                conn.execute(
                    "INSERT INTO store (prefix, key, value) VALUES (%s, 'pref-recogida', %s) ON CONFLICT DO NOTHING",
                    (
                        f"clientes.C{k}",
                        Jsonb(
                            {
                                "texto": "recogida: T002",
                                "tipo": "recogida",
                                "valor": "T002",
                                "origen": "cliente",
                                "hilo": f"conv-{k:07d}-tpl-a",
                            }
                        ),
                    ),
                )
            for tipo, valor in (("recogida", "T002"), ("contacto", "correo c7@ejemplo.es"), ("horario", "tardes")):
                conn.execute(
                    "INSERT INTO store (prefix, key, value) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                    (
                        f"clientes.{CUSTOMER}",
                        f"pref-{tipo}",
                        Jsonb(
                            {
                                "texto": f"{tipo}: {valor}",
                                "tipo": tipo,
                                "valor": valor,
                                "origen": "cliente",
                                "hilo": "conv-0000007-tpl-a",
                            }
                        ),
                    ),
                )
    n = db.fetch_one("SELECT count(*) AS n FROM checkpoint_writes")["n"]
    config = subj.Attribution()
    with db.connection() as conn:
        terms = res.customer_terms(conn, CUSTOMER)
        rparams = res.residue_count_params(conn, terms, [])
    residue = None

    def scan():
        nonlocal residue
        residue = res.residue_scan(db, CUSTOMER, config)

    scan_s = median_s(scan, runs)
    naive_s = median_s(lambda: db.fetch_one(NAIVE_RESIDUE, {"rxs": rparams["rxs"]}), 1)
    cov = None

    def coverage():
        nonlocal cov
        cov = subj.coverage(db, config)

    cov_s = median_s(coverage, runs)
    live_s = median_s(lambda: db.fetch("SELECT count(*) FROM (" + views.LIVE_THREAD_STORAGE + ") x"), runs)
    print(
        f"\n{n:,} checkpoint writes; customer {CUSTOMER}: {len(residue.terms)} terms "
        f"({sum(t.common for t in residue.terms)} common), {residue.candidates:,} raw candidates, "
        f"{len(residue.proposed):,} proposed; coverage {cov.unattributed_threads:,}/{cov.threads:,} threads\n"
    )
    print("| figure | ms | baseline | baseline ms | ratio |")
    print("|---|---|---|---|---|")
    print(
        f"| residue scan, one customer | {scan_s * 1000:,.0f} | naive: decode every payload, match the same terms "
        f"| {naive_s * 1000:,.0f} | {naive_s / scan_s:.1f}x faster |"
    )
    print(
        f"| attribution coverage | {cov_s * 1000:,.0f} | live storage aggregate (same three scans, no attribution) "
        f"| {live_s * 1000:,.0f} | {cov_s / live_s:.2f}x its time |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=1_000_000)
    parser.add_argument("--data", type=Path, default=Path(".data/bench_attribution"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    run(args.writes, args.data, args.runs)


if __name__ == "__main__":
    main()
