"""Demo data produced by the real code paths: the retail agents (a scripted model, the real
tools, store and checkpointer) replaying a month of conversations.

`python -m core.demo` seeds the configured database if it is empty. Deterministic for a
given seed (ids, texts, days); the database's own timestamps are real time.
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from agent_memory_runtime import clock
from agent_memory_runtime.clock import ManualClock
from agent_memory_runtime.dual_saver import DualCheckpointSaver
from core.agents.retail import ContextoCliente, ContextoEmpleado, ContextoProveedor, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.capture.follower import catch_up
from core.config import Settings, load_settings
from core.db import Database, one
from core.demo.operations import COMEBACK_TEXT, MonthPlan, leave_expired_notices, month_of_operations
from core.demo.seed_progress import IS_EMPTY, SeedProgress
from core.history.tool_calls import extract as extract_tool_calls
from core.memory.embeddings import make_embeddings
from core.memory.preferences import conversations
from core.memory.store import build_store, put_memory
from core.operations.outage import demo_outage

log = logging.getLogger(__name__)

SEED_LOCK_ID = 0x636F7265_64656D6F  # "coredemo": one seeding process at a time

TIENDAS = ["Gran Vía", "Diagonal", "Sierpes", "Calle Larios", "Colón", "Uría", "Independencia", "Ensanche"]
CANALES = ["WhatsApp", "correo electrónico", "SMS", "teléfono"]
FRANJAS = ["de mañana", "de tarde", "de 8 a 10", "de 18 a 21", "del sábado"]
IDIOMAS = ["catalán", "euskera", "gallego", "inglés", "portugués"]
PREFERENCE_TEMPLATES = [
    lambda r: f"Prefiero recoger mis pedidos en la tienda {r.choice(TIENDAS)}.",
    lambda r: f"Por favor, contactadme siempre por {r.choice(CANALES)}.",
    lambda r: f"Las entregas mejor en la franja {r.choice(FRANJAS)}.",
    lambda r: f"Prefiero que me atendáis en {r.choice(IDIOMAS)}.",
]
PRODUCTOS = ["zapatillas deportivas", "abrigos de invierno", "vaqueros", "camisetas básicas", "mochilas", "chaquetas"]
OTHER_TURNS = [
    lambda r: f"¿Hay avisos sobre {r.choice(PRODUCTOS)}?",
    lambda r: "¿Qué preferencias tengo guardadas?",
    lambda r: "Hola, quería saber el estado de mi pedido.",
    lambda r: "¿Puedo cambiar una prenda sin ticket?",
    lambda r: "Gracias, eso es todo.",
    lambda r: "Quiero recoger un pedido, ¿qué me propones?",
    lambda r: "Tengo un pedido listo, ¿qué me propones?",
    lambda r: f"Solo esta vez, que lo recoja en la tienda {r.choice(TIENDAS)}.",
]
AVISOS = [
    ("retraso", "Los pedidos de {p} llegan con retraso de una semana"),
    ("rotura_stock", "Rotura de stock de {p} hasta nuevo aviso"),
    ("cambio_precio", "Sube el precio de {p} un 5% desde el lunes"),
    ("promocion", "Promoción de {p}: segunda unidad a mitad de precio"),
]
AJUSTES = {
    "idioma": ["es", "ca", "eu", "gl", "en"],
    "tienda_base": TIENDAS,
    "turno": ["mañana", "tarde", "partido"],
    "notificaciones": ["sí", "no"],
}
# The demo chain's stores, as its customer conversations name them (checkpoint metadata `tienda`, issue 39).
STORES = ("T001", "T002", "T003", "T004")


def demo_store(n: int, conversation: int) -> str | None:
    """The store of customer C{n}'s conversation number `conversation` (0-based): each customer has a home store;
    every seventh customer holds its second conversation at the next store (a customer of two stores); every tenth
    customer's conversations name no store (customers without a store)."""
    if n % 10 == 0:
        return None
    return STORES[(n + (1 if n % 7 == 0 and conversation == 1 else 0)) % len(STORES)]


# Keys a pre-schema agent version wrote before `tipo` became a closed Literal.
LEGACY_KEYS = ["pref-color", "pref-marca", "pref-estilo", "nota-libre"]


@dataclass
class DemoSummary:
    customers: int = 0
    suppliers: int = 0
    employees: int = 0
    conversations: int = 0  # the pages' count: threads with a human message (core.memory.preferences.conversations)
    customer_conversations: int = 0  # the customers' conversations planned by the seed (its progress counts them)
    turns: int = 0
    legacy_customers: list[str] = field(default_factory=list)
    expiring_notices: int = 0
    month: Any = None  # core.demo.operations.MonthReport
    practice: dict[str, str] = field(default_factory=dict)  # thread id -> what it is (practice_threads)
    outages: list = field(default_factory=list)  # core.operations.outage.OutageReport per episode
    seconds: float = 0.0  # the seed's whole time (SeedProgress.started_at to finished_at), said in the sidebar


def _agents(db: Database, settings: Settings, replica_id: str = "demo-seed", saver_clock: ManualClock | None = None):
    store = build_store(db.pool, make_embeddings(settings), settings.embeddings_dims)
    # Checkpoints through the dual saver (PostgreSQL, in-memory buffer while it is unreachable); the
    # demo's last step (core.operations.outage.demo_outage) closes it.
    saver = DualCheckpointSaver(db.dsn, replica_id=replica_id, clock=saver_clock)
    model = ScriptedChatModel()
    return store, {
        k: build_agent(k, model, store=store, checkpointer=saver)
        for k in ("atencion-cliente", "compras", "ajustes-personal")
    }


def seed(
    db: Database,
    settings: Settings,
    *,
    customers: int = 240,
    days: int = 30,
    seed: int = 7,
    workers: int = 4,
    now: datetime | None = None,
    progress: SeedProgress | None = None,
) -> DemoSummary:
    """Replay `days` days of agent conversations into `db` (which must be migrated); `progress`
    (optional) is updated step by step."""
    progress = progress or SeedProgress()
    rng = random.Random(seed)
    now = now or datetime.now(UTC)
    # Our logs' replayed times are whole days before `now`'s UTC day, in office hours (08:00-18:03), so
    # every date lands in a page's "last `days` days" window [today - days + 1, today] and never in the
    # future, whatever hour the seed runs at (a CI run at 00:30 UTC as at 23:30).
    midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    month = MonthPlan.for_month(midnight, days)
    # the seed's saver dates its degradation episodes by this clock, which the outages move
    saver_clock = ManualClock(midnight - timedelta(days=days))
    store, agents = _agents(db, settings, saver_clock=saver_clock)

    def past_day(minutes: int = 0) -> datetime:
        return midnight - timedelta(days=rng.randint(1, days - 1)) + timedelta(hours=8, minutes=minutes)

    summary = DemoSummary(customers=customers)

    # Purchasing: supplier notices; a few flash notices valid for ~1 s become expired rows to sweep.
    suppliers = [f"P{n:03d}" for n in range(1, 13)]
    progress.at("suppliers", 0, len(suppliers))
    for i, pid in enumerate(suppliers):
        for tema, texto in rng.sample(AVISOS, rng.randint(1, 3)):
            flash = i % 4 == 0
            msg = f"aviso {tema}{' (0.02 min)' if flash else ''}: {texto.format(p=rng.choice(PRODUCTOS))}"
            with clock.simulated(past_day()):
                run_turn(agents["compras"], ContextoProveedor(pid), f"compras-{pid}-{tema}", msg)
            summary.expiring_notices += flash
            summary.turns += 1
        progress.done = i + 1
    summary.suppliers = len(suppliers)

    # Staff settings.
    employees = [f"E{n:03d}" for n in range(1, 21)]
    progress.at("employees", 0, len(employees))
    for i, eid in enumerate(employees):
        for ajuste in rng.sample(sorted(AJUSTES), rng.randint(1, 3)):
            with clock.simulated(past_day()):
                run_turn(
                    agents["ajustes-personal"],
                    ContextoEmpleado(eid),
                    f"personal-{eid}",
                    f"ajuste {ajuste} = {rng.choice(AJUSTES[ajuste])}",
                )
            summary.turns += 1
        progress.done = i + 1
    summary.employees = len(employees)

    # Customers: conversations spread over the month; about one in five declares a preference.
    plan: list[tuple[ContextoCliente, str, datetime, list[str]]] = []
    for n in range(1, customers + 1):
        cid = f"C{n}"
        for c in range(rng.choice([1, 1, 2, 2, 3])):
            when = past_day(rng.randint(0, 600))
            turns = [rng.choice(OTHER_TURNS)(rng) for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.22:
                turns.insert(rng.randint(0, len(turns)), rng.choice(PREFERENCE_TEMPLATES)(rng))
            plan.append((ContextoCliente(cid, tienda=demo_store(n, c)), f"cliente-{cid}-{c + 1}", when, turns))
    plan.sort(key=lambda p: p[2])
    progress.at("customers", 0, len(plan))
    done_lock = threading.Lock()

    def converse(item: tuple[ContextoCliente, str, datetime, list[str]]) -> int:
        context, thread_id, when, turns = item
        for k, text in enumerate(turns):
            with clock.simulated(when + timedelta(minutes=k)):
                run_turn(agents["atencion-cliente"], context, thread_id, text)
        with done_lock:
            progress.done += 1
        return len(turns)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        summary.turns += sum(pool.map(converse, plan))
    summary.customer_conversations = len(plan)

    # A pre-schema agent version wrote free keys for a few customers: the >4 documents alarm.
    progress.at("legacy")
    legacy = [f"C{n}" for n in rng.sample(range(1, customers + 1), 3)]
    for cid in legacy:
        for key in [f"pref-{t}" for t in ("recogida", "contacto")] + LEGACY_KEYS:
            put_memory(
                store,
                ("clientes", cid),
                key,
                {"texto": f"{key}: valor heredado", "valor": "heredado"},
                thread_id=None,
                agent="atencion-cliente-v0",
            )
    summary.legacy_customers = legacy

    # The month's operations through their own code paths, in replayed-time order: real sweeps (trigger
    # demo), real erasures in the register, the first erased customer back with a new preference (the
    # next sweeps' re-checks find it), then 2 fresh expired notices; and real outages (embedded server
    # only: degraded turns, a denied HIGH tool, resync), the last of which closes the seed's saver.
    progress.at("operations")

    def come_back(cid: str) -> None:
        run_turn(agents["atencion-cliente"], ContextoCliente(cid), f"cliente-{cid}-vuelve", COMEBACK_TEXT)

    def step(done: int, total: int) -> None:
        progress.done, progress.total = done, total

    summary.month = month_of_operations(db, month, exclude=legacy, come_back=come_back, step=step)
    leave_expired_notices(db)
    progress.at("practice", 0, len(PRACTICE))
    erased = [e.customer_id for e in summary.month.erasures]
    summary.practice = practice_threads(
        db, settings, store, agents, exclude=legacy + erased, paused_at=past_day(30), step=step
    )
    progress.at("outage", 0, len(month.outages))
    summary.outages = demo_outage(db, settings, agents, episodes=month.outages, saver_clock=saver_clock) or []
    progress.done = len(summary.outages)
    return summary


# What the SRE's one-click searches and the DPO's residue decision find in the demo (practice_threads).
PRACTICE = ("interrupted", "paused", "error", "residue")
PROPOSAL_TEXT = "Quiero recoger un pedido, ¿qué me propones?"


class ProviderDown(ScriptedChatModel):
    """The model provider failing (HTTP 503): the agent's model node raises and langgraph records the error on
    the thread (an `__error__` write), as with a hosted model that is down."""

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("model provider unavailable (HTTP 503)")


def practice_threads(
    db: Database,
    settings: Settings,
    store: Any,
    agents: dict[str, Any],
    *,
    exclude: list[str],
    paused_at: datetime,
    step: Any = None,
) -> dict[str, str]:
    """Threads to practise on, written by the real agents on the seed's saver, for customers with documents (not
    in `exclude`): one interrupted (a delivery proposal awaiting a person's approval: LangChain's
    HumanInTheLoopMiddleware), one paused before its tools on a past day (a breakpoint given at run time), one
    errored now (the model provider down: "errored in the last hour" finds it for an hour), and one residue thread
    (a staff member's note naming a customer, which no attribution source gives for them: the DPO decides on it
    in that customer's erasure preview). Returns thread id -> its kind (PRACTICE)."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    from core.demo.operations import demo_candidates

    customers = [c for c, _ in demo_candidates(db, exclude=exclude, limit=len(PRACTICE))]
    if len(customers) < len(PRACTICE):
        log.warning("demo: %d customers to practise on, %d needed: none written", len(customers), len(PRACTICE))
        return {}
    saver = agents["atencion-cliente"].checkpointer
    model = ScriptedChatModel()
    approval = build_agent(
        "atencion-cliente",
        model,
        store=store,
        checkpointer=saver,
        middleware=[HumanInTheLoopMiddleware({"proponer_entrega": True})],
    )
    down = build_agent("atencion-cliente", ProviderDown(), store=store, checkpointer=saver)
    written: dict[str, str] = {}
    first, second, third, named = customers
    with clock.simulated(paused_at):
        thread = f"cliente-{first}-aprobacion"
        run_turn(approval, ContextoCliente(first), thread, PROPOSAL_TEXT)
        written[thread] = "interrupted"
        thread = f"cliente-{second}-pausa"
        run_turn(agents["atencion-cliente"], ContextoCliente(second), thread, PROPOSAL_TEXT, interrupt_before=["tools"])
        written[thread] = "paused"
        thread = "personal-E003-nota"
        note = f"Nota para el equipo: el cliente {named} ha pedido que le llamemos por la tarde."
        run_turn(agents["ajustes-personal"], ContextoEmpleado("E003"), thread, note)
        written[thread] = "residue"
    thread = f"cliente-{third}-error"
    try:
        run_turn(down, ContextoCliente(third), thread, "Hola, quería saber el estado de mi pedido.")
    except RuntimeError:
        written[thread] = "error"
    else:
        log.warning("demo: the errored thread %s did not fail", thread)
    if step is not None:
        step(len(written), len(PRACTICE))
    return written


def run_replica(
    db: Database,
    settings: Settings,
    replica_id: str,
    stop: threading.Event,
    *,
    every_s: float = 4.0,
    customers: int = 240,
    seed: int | None = None,
) -> int:
    """A live demo agent replica: real agents on their own dual saver (which publishes the replica's
    heartbeat), one customer turn every `every_s` seconds until `stop` is set. Returns the turns run.

    A turn that fails (e.g. the store is unreachable during an outage) is logged and the replica
    goes on, as a real agent service would; the dual saver itself never loses a checkpoint."""
    rng = random.Random(seed)
    store, agents = _agents(db, settings, replica_id=replica_id)
    saver = agents["atencion-cliente"].checkpointer
    turns = 0
    try:
        while not stop.wait(every_s):
            n = rng.randint(1, customers)
            cid = f"C{n}"
            text = rng.choice(OTHER_TURNS + PREFERENCE_TEMPLATES)(rng)
            thread_id = f"cliente-{cid}-live-{replica_id}-{turns // 3}"
            try:
                run_turn(agents["atencion-cliente"], ContextoCliente(cid, tienda=demo_store(n, 0)), thread_id, text)
                turns += 1
            except Exception:  # noqa: BLE001 - reported, and the replica keeps serving
                log.warning("replica %s: turn on %s failed", replica_id, thread_id, exc_info=True)
    finally:
        saver.close()
    return turns


@dataclass
class LiveReplicas:
    """Live demo replicas running in daemon threads; `close()` stops them and waits for each one's saver to close
    (its final heartbeat says `stopped`, and a degraded saver writes its journal)."""

    stop: threading.Event
    threads: list[threading.Thread]

    def close(self, timeout_s: float = 30.0) -> bool:
        """Stop every replica and wait up to `timeout_s` in all; True when every one has closed its saver."""
        self.stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self.threads)


# The live replicas together write the seeded month's average day, spread evenly: at one turn every 4 s, one
# replica wrote a day of the month every 40 minutes, and "today" looked 15 times busier than the month on every
# page counting turns, writes or tokens per day (issue 40). Without a month to match (no seed): every 4 s.
UNSEEDED_EVERY_S = 4.0
SELECT_MONTH_TURNS_PER_DAY = """
SELECT coalesce(sum(turns), 0) / 30.0 AS per_day FROM core_conversations
WHERE last_turn_at > now() - interval '30 days' AND thread_id NOT LIKE '%%-live-demo-replica-%%'"""


def realistic_every_s(db: Database, count: int) -> float:
    """Seconds between two turns of each of `count` replicas so that they write the seeded month's turns a day."""
    per_day = float(one(db.fetch_one(SELECT_MONTH_TURNS_PER_DAY))["per_day"])
    return 86_400 * count / per_day if per_day else UNSEEDED_EVERY_S


def start_replicas(
    db: Database, settings: Settings, count: int, *, every_s: float | None = None, customers: int = 240
) -> LiveReplicas:
    """Start `count` live replicas in daemon threads (stable ids `demo-replica-N`, so a restarted process replays
    their journals), a turn each every `every_s` seconds (default: the seeded month's pace, realistic_every_s);
    `close()` the result to stop them."""
    every_s = realistic_every_s(db, count) if every_s is None else every_s
    log.info("demo: %d live replicas, a turn each every %.0f s (the seeded month's pace)", count, every_s)
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=run_replica,
            args=(db, settings, f"demo-replica-{i}", stop),
            kwargs={"every_s": every_s, "seed": i, "customers": customers},
            name=f"demo-replica-{i}",
            daemon=True,
        )
        for i in range(1, count + 1)
    ]
    for thread in threads:
        thread.start()
    return LiveReplicas(stop, threads)


TRY_LOCK = "SELECT pg_try_advisory_lock(%s) AS locked"
LOCK = "SELECT pg_advisory_lock(%s)"
UNLOCK = "SELECT pg_advisory_unlock(%s)"


def ensure_demo(
    db: Database, settings: Settings, *, progress: SeedProgress | None = None, **kwargs
) -> DemoSummary | None:
    """Seed once: only when the database is empty, under an advisory lock (a second process
    waits for the first, then finds data and skips). Returns None if skipped."""
    progress = progress or SeedProgress()
    if progress.started_at is None:  # the background seed started counting before the agents' imports
        progress.started_at = time.time()
    with db.connection() as conn:
        if not one(conn.execute(TRY_LOCK, (SEED_LOCK_ID,)).fetchone())["locked"]:
            progress.state = "waiting"
            conn.execute(LOCK, (SEED_LOCK_ID,))
        try:
            if not one(conn.execute(IS_EMPTY).fetchone())["empty"]:
                progress.state = "skipped"
                return None
            progress.state = "seeding"
            summary = seed(db, settings, progress=progress, **kwargs)
            catch_up(db.dsn)  # the pages' aggregates include everything the seed wrote
            extract_tool_calls(db)  # and the thread-days the pages count conversations by (the watermark to the end)
            # the pages' count of conversations (threads with a human message, every day the seed wrote), not the
            # seed's plan: suppliers' notices, practice threads, come-backs and outages are conversations too
            summary.conversations = conversations(db, date.min, datetime.now(UTC).date() + timedelta(days=1))
            progress.finished_at = time.time()
            summary.seconds = progress.finished_at - progress.started_at  # from the start the dashboard saw
            progress.summary = summary
            log.info("demo data seeded: %s", summary)
            progress.state = "done"
            return summary
        finally:
            if progress.finished_at is None:
                progress.finished_at = time.time()
            conn.execute(UNLOCK, (SEED_LOCK_ID,))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m core.demo", description="Seed demo data through the real agents (only into an empty database)."
    )
    parser.add_argument("--customers", type=int, default=240)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="then run N live agent replicas (a turn every --every seconds) until interrupted",
    )
    parser.add_argument(
        "--every", type=float, default=None, help="seconds between two turns of a replica (default: the month's pace)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    from core.migrate import migrate

    settings = load_settings()
    db = Database.from_settings(settings)
    migrate(db.dsn, settings.embeddings_dims)
    summary = ensure_demo(db, settings, customers=args.customers, seed=args.seed)
    print("database not empty: nothing seeded" if summary is None else f"seeded: {summary}")
    if args.replicas > 0:
        replicas = start_replicas(db, settings, args.replicas, every_s=args.every)
        print(f"{args.replicas} live replica(s) running against {db.target}; Ctrl-C or SIGTERM stops them")
        signal.signal(signal.SIGTERM, _interrupt)  # a pod's stop: close the savers like Ctrl-C does
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            if not replicas.close():
                log.error("a replica did not close its saver within 30 s")
                return 1
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
