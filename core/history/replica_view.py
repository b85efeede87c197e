"""What the Degradation page may honestly say about each replica, from two sources:

- the health tables (`core.history.replica_health.replicas`), which live in the database that
  may be down: a reading is *fresh* only when it was read now; otherwise it is the last good
  reading, and a replica in it is shown as `unknown` (never `ok`) with the age of that reading;
- the replicas' own metrics endpoints (`AGENT_METRICS_URLS`, agent_memory_runtime/metrics.py), read
  directly over HTTP and parsed with prometheus_client's parser: they answer during a full outage
  of PostgreSQL and say `degraded` or `ok` live.

Heartbeat ages are computed at display time; a heartbeat older than the silent threshold
(3 intervals + 5 s, as replica_health's SQL) shows `silent`, also in the last good reading.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

from agent_memory_runtime.failures import HEARTBEAT_INTERVAL_S

ENDPOINTS_SETTING = "AGENT_METRICS_URLS"
FETCH_TIMEOUT_S = 1.5
MAX_ENDPOINTS = 200
MAX_EXPOSITION_BYTES = 2_000_000
COLUMNS = [
    "replica_id",
    "state",
    "source",
    "heartbeat_age_s",
    "reading_age_s",
    "degraded_since",
    "buffered_checkpoints",
    "buffered_writes",
    "endpoint",
    "error",
]


class BadEndpoints(ValueError):
    """AGENT_METRICS_URLS holds something that is not a list of http(s) URLs."""


def silent_after_s(heartbeat_interval_s: float) -> float:
    return 3 * float(heartbeat_interval_s) + 5


def parse_endpoints(raw: Any) -> list[str]:
    """`AGENT_METRICS_URLS`: comma- or whitespace-separated http(s) URLs (a list in secrets works too)."""
    if raw is None or raw == "":
        return []
    items = raw if isinstance(raw, (list, tuple)) else str(raw).replace(",", " ").split()
    urls = []
    for item in items:
        url = str(item).strip()
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or "\x00" in url or len(url) > 2000:
            raise BadEndpoints(f"{ENDPOINTS_SETTING}: not an http(s) URL: {url[:80]!r}")
        urls.append(url)
    if len(urls) > MAX_ENDPOINTS:
        raise BadEndpoints(f"{ENDPOINTS_SETTING}: more than {MAX_ENDPOINTS} endpoints")
    return urls


def configured_endpoints(secrets: Mapping[str, Any] | None = None) -> list[str]:
    from core.config import setting  # environment first, secrets second, like every setting

    return parse_endpoints(setting(ENDPOINTS_SETTING, secrets or {}))


def parse_exposition(text: str, endpoint: str) -> list[dict[str, Any]]:
    """One row per replica in an agent's /metrics text (agent_memory_checkpoint_* gauges)."""
    rows: dict[str, dict[str, Any]] = {}
    wanted = {
        "agent_memory_checkpoint_degraded": "degraded",
        "agent_memory_checkpoint_degraded_since_timestamp_seconds": "since",
        "agent_memory_checkpoint_buffered_checkpoints": "buffered_checkpoints",
        "agent_memory_checkpoint_buffered_writes": "buffered_writes",
        "agent_memory_checkpoint_resync_failing": "resync_failing",
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = wanted.get(sample.name)
            if key is None or "replica" not in sample.labels:
                continue
            rows.setdefault(sample.labels["replica"], {})[key] = sample.value
    out = []
    for replica, values in rows.items():
        degraded = values.get("degraded") == 1
        since = values.get("since") or 0
        out.append(
            {
                "replica_id": replica,
                "state": "degraded" if degraded else "ok",
                "source": "endpoint",
                "degraded_since": datetime.fromtimestamp(since, UTC) if degraded and since else None,
                "buffered_checkpoints": int(values.get("buffered_checkpoints", 0)),
                "buffered_writes": int(values.get("buffered_writes", 0)),
                "resync_failing": values.get("resync_failing") == 1,
                "endpoint": endpoint,
                "error": None,
            }
        )
    return out


def _fetch(url: str, timeout: float) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - http(s) checked above
            text = resp.read(MAX_EXPOSITION_BYTES).decode("utf-8", "replace")
        rows = parse_exposition(text, url)
        if not rows:
            return [
                {
                    "replica_id": None,
                    "state": "unknown",
                    "source": "endpoint",
                    "endpoint": url,
                    "error": "no agent_memory_checkpoint_degraded in the exposition",
                }
            ]
        return rows
    except Exception as exc:  # noqa: BLE001 - an endpoint that does not answer is shown as such
        return [
            {
                "replica_id": None,
                "state": "unknown",
                "source": "endpoint",
                "endpoint": url,
                "error": f"{type(exc).__name__}: {exc}"[:300],
            }
        ]


def read_endpoints(urls: Sequence[str], timeout: float = FETCH_TIMEOUT_S) -> pd.DataFrame:
    """Every configured endpoint read in parallel; an unreachable one is a row with its error."""
    if not urls:
        return pd.DataFrame(columns=COLUMNS)
    with ThreadPoolExecutor(max_workers=min(16, len(urls)), thread_name_prefix="agent-metrics-read") as pool:
        rows = [row for found in pool.map(lambda u: _fetch(u, timeout), urls) for row in found]
    return pd.DataFrame(rows)


def replica_states(
    db_replicas: pd.DataFrame | None,
    *,
    fresh: bool,
    read_at: float | None,
    endpoints: pd.DataFrame | None = None,
    now: float | None = None,
) -> pd.DataFrame:
    """One row per replica with the state the page may show: ok, degraded, silent, stopped, unknown.

    `db_replicas` is replica_health.replicas() from the reading taken at `read_at` (None: never read);
    `fresh` says whether that reading is from this refresh. Endpoint rows win over the tables
    (they are live); a table row is `ok`/`degraded` only when fresh and its heartbeat is on time."""
    now = time.time() if now is None else now
    now_dt = datetime.fromtimestamp(now, UTC)
    reading_age = None if read_at is None else round(now - read_at, 1)
    rows: dict[str, dict[str, Any]] = {}
    if db_replicas is not None and not db_replicas.empty:
        for r in db_replicas.to_dict("records"):
            reported = r.get("reported_state", r["state"])
            age = (now_dt - r["last_heartbeat"]).total_seconds() if r.get("last_heartbeat") is not None else None
            # replica_health.SELECT_REPLICAS does not return the interval yet: the saver's default then
            threshold = silent_after_s(r.get("heartbeat_interval_s") or HEARTBEAT_INTERVAL_S)
            if reported == "stopped":
                state = "stopped"
            elif age is None or age > threshold or r["state"] == "silent":
                state = "silent"
            elif not fresh:
                state = "unknown"
            else:
                state = "ok" if reported == "healthy" else reported
            rows[r["replica_id"]] = {
                "replica_id": r["replica_id"],
                "state": state,
                "source": "tables" if fresh else "last_reading",
                "heartbeat_age_s": None if age is None else round(age, 1),
                "reading_age_s": reading_age,
                "degraded_since": r.get("degraded_since"),
                "buffered_checkpoints": r.get("buffered_checkpoints"),
                "buffered_writes": r.get("buffered_writes"),
                "endpoint": None,
                "error": None,
            }
    unmatched = []
    if endpoints is not None and not endpoints.empty:
        for e in endpoints.to_dict("records"):
            if e.get("replica_id") is None or pd.isna(e.get("replica_id")):
                unmatched.append({c: e.get(c) for c in COLUMNS} | {"replica_id": e["endpoint"]})
                continue
            base = rows.get(e["replica_id"], {})
            rows[e["replica_id"]] = {
                **{c: base.get(c) for c in COLUMNS},
                "replica_id": e["replica_id"],
                "state": e["state"],
                "source": "endpoint",
                "reading_age_s": 0.0,
                "degraded_since": e.get("degraded_since"),
                "buffered_checkpoints": e.get("buffered_checkpoints"),
                "buffered_writes": e.get("buffered_writes"),
                "endpoint": e.get("endpoint"),
                "error": None,
            }
    frame = pd.DataFrame(list(rows.values()) + unmatched, columns=COLUMNS)
    order = {"degraded": 0, "silent": 1, "unknown": 2, "ok": 3, "stopped": 4}
    return frame.sort_values(
        ["state", "replica_id"], key=lambda s: s.map(order) if s.name == "state" else s, ignore_index=True
    )


def all_clear(states: pd.DataFrame, *, fresh: bool) -> bool:
    """The green "every replica persists" only on a fresh reading where every live replica is ok."""
    live = states[states["state"] != "stopped"]
    return fresh and not live.empty and bool((live["state"] == "ok").all())
