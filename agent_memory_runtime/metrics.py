"""Prometheus metrics of an agent replica's dual checkpoint saver (prometheus-client).

Two sources, neither of which needs PostgreSQL (they keep working during an outage):

- **State read at scrape time** by `SaverCollector`, a custom collector over the saver's public
  `status()`: `agent_memory_checkpoint_degraded` (0/1), when it degraded, what it buffers, whether
  the last resync failed, degraded episodes and refusals counted so far.
- **Events counted where they happen**, through the hooks below, which the saver, the guard path
  and the serializer call: put/get latency by backend, resynced operations and resync duration,
  guard denials by tool and risk, serializer refusals by type.

Labels are bounded by construction: backend/op from a fixed set, tool names sanitised (an unknown
or odd name becomes "other"), risk and refusal type from their enums. Never a customer id or a
thread id: that cardinality would overwhelm Prometheus and a label would carry personal data.

Serving: `start_metrics_server(saver, port)` in the agent process (setting `AGENT_METRICS_PORT`).
Several workers per pod (gunicorn/uvicorn workers, multiprocessing): set `PROMETHEUS_MULTIPROC_DIR`
to an empty directory wiped at pod start, before Python starts. Then the counters and histograms
are written to per-process files, the status gauges are refreshed into multiprocess gauges by a
small thread (`livemax` for degraded/failing: any worker degraded shows 1; `livesum` for the
buffers), and the first worker that binds the port serves all workers' files through
`MultiProcessCollector` (the others find the port taken and serve nothing). Call
`prometheus_client.multiprocess.mark_process_dead(pid)` from the worker manager when a worker exits.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

PREFIX = "agent_memory_"
BACKENDS = ("postgres", "memory")
OPS = ("get", "put", "put_writes", "list", "delete")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RESYNC_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_SAFE_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,63}")

CALL_SECONDS = Histogram(
    PREFIX + "checkpoint_call_duration_seconds",
    "Duration of checkpoint calls by backend (postgres or the in-memory buffer) and operation.",
    ["backend", "op"],
    buckets=LATENCY_BUCKETS,
)
RESYNC_SECONDS = Histogram(
    PREFIX + "checkpoint_resync_duration_seconds",
    "Duration of successful resyncs of the buffered operations to PostgreSQL.",
    buckets=RESYNC_BUCKETS,
)
RESYNCED_OPERATIONS = Counter(
    PREFIX + "checkpoint_resynced_operations", "Buffered checkpoint operations written to PostgreSQL by resyncs."
)
DEAD_LETTERS = Counter(
    PREFIX + "checkpoint_dead_letters",
    "Buffered operations PostgreSQL refused on replay (not a connection failure), and buffered thread deletions "
    "not applied because the thread was written after them, kept in core_checkpoint_dead_letters so the rest "
    "of the buffer went through.",
)
GUARD_DENIALS = Counter(
    PREFIX + "guard_denials",
    "Tool calls denied by the fail-closed guard while checkpoint persistence was degraded.",
    ["tool", "risk"],
)
SERIALIZER_REFUSALS = Counter(
    PREFIX + "serializer_refusals",
    "Checkpoint payloads the allowlist serializer refused to load (possible tampering).",
    ["type"],
)
# Known kinds start at 0, so that the first refusal is an increase the alert rule sees.
REFUSAL_KINDS = ("msgpack_blocked", "msgpack_method_blocked", "json_blocked", "pickle")
for _kind in REFUSAL_KINDS:
    SERIALIZER_REFUSALS.labels(_kind)


def _label(value: Any) -> str:
    text = "" if value is None else str(getattr(value, "value", value))
    return text if _SAFE_LABEL.fullmatch(text) else "other"


# --- hooks: one line each where the event happens ---------------------------------------------

_CALL_CHILDREN: dict[tuple[str, str], Any] = {}  # the labelled histograms, looked up once (hot path)


def observe(backend: str, op: str, seconds: float) -> None:
    """One checkpoint call took `seconds` on `backend` ("postgres"|"memory")."""
    child = _CALL_CHILDREN.get((backend, op))
    if child is None:
        child = _CALL_CHILDREN[(backend, op)] = CALL_SECONDS.labels(
            backend if backend in BACKENDS else "other", op if op in OPS else "other"
        )
    child.observe(seconds)


def resynced(operations: int, seconds: float) -> None:
    """A resync wrote `operations` buffered operations in `seconds`."""
    RESYNCED_OPERATIONS.inc(max(0, int(operations)))
    RESYNC_SECONDS.observe(max(0.0, seconds))


def dead_lettered(operations: int) -> None:
    """A resync moved `operations` refused (or conflicting) operations to the dead letters."""
    DEAD_LETTERS.inc(operations)


def denied(tool: Any, risk: Any) -> None:
    """The guard denied a call of `tool` (a tool name, never a customer or thread) of `risk`."""
    GUARD_DENIALS.labels(_label(tool), _label(risk)).inc()


def refused(kind: Any) -> None:
    """The serializer refused a payload of `kind` (msgpack_blocked, json_blocked, pickle, ...)."""
    SERIALIZER_REFUSALS.labels(_label(kind)).inc()


class timed:
    """`with timed("postgres", "put"): ...` observes the block's duration (also when it raises)."""

    __slots__ = ("backend", "op", "started")

    def __init__(self, backend: str, op: str):
        self.backend, self.op = backend, op

    def __enter__(self) -> timed:
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        observe(self.backend, self.op, time.perf_counter() - self.started)


# --- state at scrape time ------------------------------------------------------------------------


def _epoch(value: Any) -> float:
    return value.timestamp() if value is not None else 0.0


def status_metrics(statuses: Iterable[dict[str, Any]]) -> list[Metric]:
    """The gauges and counters of the savers' `status()` dicts, one `replica` label each."""
    fam: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
        "degraded": GaugeMetricFamily(
            PREFIX + "checkpoint_degraded",
            "1 while checkpoint persistence is degraded (PostgreSQL unreachable).",
            labels=["replica"],
        ),
        "since": GaugeMetricFamily(
            PREFIX + "checkpoint_degraded_since_timestamp_seconds",
            "Unix time the current degradation started; 0 when healthy.",
            labels=["replica"],
        ),
        "checkpoints": GaugeMetricFamily(
            PREFIX + "checkpoint_buffered_checkpoints",
            "Checkpoints buffered in memory in the current degradation.",
            labels=["replica"],
        ),
        "writes": GaugeMetricFamily(
            PREFIX + "checkpoint_buffered_writes",
            "Pending writes buffered in memory in the current degradation.",
            labels=["replica"],
        ),
        "ops": GaugeMetricFamily(
            PREFIX + "checkpoint_buffered_operations",
            "Operations waiting for the resync to PostgreSQL.",
            labels=["replica"],
        ),
        "limit": GaugeMetricFamily(
            PREFIX + "checkpoint_buffer_limit_operations",
            "Operations the buffer holds before it refuses more (max_buffered_ops).",
            labels=["replica"],
        ),
        "failing": GaugeMetricFamily(
            PREFIX + "checkpoint_resync_failing",
            "1 while degraded and the last resync attempt failed.",
            labels=["replica"],
        ),
        "success": GaugeMetricFamily(
            PREFIX + "checkpoint_last_success_timestamp_seconds",
            "Unix time of the last call that reached PostgreSQL; 0 if none.",
            labels=["replica"],
        ),
        "episodes": CounterMetricFamily(
            PREFIX + "checkpoint_degraded_episodes",
            "Degradation episodes ended by a successful resync.",
            labels=["replica"],
        ),
    }
    for st in statuses:
        rid = [str(st["replica_id"])]
        degraded = st["state"] == "degraded"
        fam["degraded"].add_metric(rid, 1.0 if degraded else 0.0)
        fam["since"].add_metric(rid, _epoch(st.get("degraded_since")) if degraded else 0.0)
        fam["checkpoints"].add_metric(rid, float(st.get("buffered_checkpoints") or 0))
        fam["writes"].add_metric(rid, float(st.get("buffered_writes") or 0))
        fam["ops"].add_metric(rid, float(st.get("buffered_ops") or 0))
        fam["limit"].add_metric(rid, float(st.get("buffer_limit") or 0))
        fam["failing"].add_metric(rid, 1.0 if degraded and st.get("last_resync_error") else 0.0)
        fam["success"].add_metric(rid, _epoch(st.get("last_success")))
        fam["episodes"].add_metric(rid, float(st.get("episodes_total") or 0))
    return list(fam.values())


class SaverCollector(Collector):
    """Reads `status()` of the registered savers at each scrape (no PostgreSQL involved)."""

    def __init__(self, savers: Iterable[Any] = ()):
        self._lock = threading.Lock()
        self._savers: dict[str, Any] = {}
        for saver in savers:
            self.add(saver)

    def add(self, saver: Any) -> None:
        with self._lock:
            self._savers[saver.replica_id] = saver

    def remove(self, saver: Any) -> None:
        with self._lock:
            replica_id = saver.replica_id
            if self._savers.get(replica_id) is saver:  # not a newer saver with the same id
                del self._savers[replica_id]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            savers = list(self._savers.values())
        yield from status_metrics(s.status() for s in savers)


# --- multiprocess mode: the same state as multiprocess gauges ----------------------------------


class _MultiprocessMirror:
    """Copies `status()` into multiprocess gauges every `interval` s (custom collectors do not cross
    processes: only the per-process files do)."""

    def __init__(self, collector: SaverCollector, interval: float = 0.5):
        self.collector, self.interval = collector, interval
        self.gauges: dict[str, Gauge] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="agent-metrics-mirror", daemon=True)

    def _gauge(self, metric: Metric) -> Gauge:
        name = metric.name
        if name not in self.gauges:
            self.gauges[name] = Gauge(
                name,
                metric.documentation,
                ["replica"],
                multiprocess_mode="livesum" if "buffered" in name else "livemax",
                registry=None,
            )
        return self.gauges[name]

    def refresh(self) -> None:
        for metric in self.collector.collect():
            if metric.type != "gauge":
                continue
            gauge = self._gauge(metric)
            live = {sample.labels["replica"] for sample in metric.samples}
            for sample in metric.samples:
                gauge.labels(sample.labels["replica"]).set(sample.value)
            for (replica,) in set(gauge._metrics) - {(r,) for r in live}:  # a closed saver leaves
                gauge.remove(replica)

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - a metrics hiccup must never touch the agent
                log.exception("agent metrics refresh failed")
            self.stop.wait(self.interval)


_COLLECTOR: SaverCollector | None = None
_STATE_LOCK = threading.Lock()


def register(saver: Any, registry: CollectorRegistry = REGISTRY) -> SaverCollector:
    """Add `saver` to this process's collector (registered once in `registry`)."""
    global _COLLECTOR
    with _STATE_LOCK:
        if _COLLECTOR is None:
            _COLLECTOR = SaverCollector()
            if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                registry.register(_COLLECTOR)
        _COLLECTOR.add(saver)
        return _COLLECTOR


def unregister(saver: Any) -> None:
    """Take `saver` out of this process's collector (its `close()` does): a closed saver persists
    nothing, so its endpoint must not keep reporting it as ok."""
    with _STATE_LOCK:
        if _COLLECTOR is not None:
            _COLLECTOR.remove(saver)


def configured_port() -> int | None:
    """`AGENT_METRICS_PORT` from the environment; None when unset or empty (no endpoint)."""
    raw = os.environ.get("AGENT_METRICS_PORT", "").strip()
    if not raw:
        return None
    port = int(raw)
    if not 0 < port < 65536:
        raise ValueError(f"AGENT_METRICS_PORT out of range: {raw!r}")
    return port


def start_metrics_server(saver: Any, port: int | None = None, addr: str = "0.0.0.0") -> bool:
    """Expose this process's agent metrics on `port` (default: AGENT_METRICS_PORT; None: no server).

    Returns True when this process serves the endpoint. In multiprocess mode a worker that finds
    the port taken returns False: another worker serves every worker's files."""
    collector = register(saver)
    port = configured_port() if port is None else port
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        mirror = _MultiprocessMirror(collector)
        mirror.refresh()
        mirror.thread.start()
        if port is None:
            return False
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        try:
            start_http_server(port, addr=addr, registry=registry)
        except OSError:
            log.info("agent metrics port %s served by another worker", port)
            return False
        return True
    if port is None:
        return False
    start_http_server(port, addr=addr)
    return True
