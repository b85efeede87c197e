"""Degradation (SRE): every agent replica ok / degraded / silent / unknown, what it buffered and
resynced, the episodes, the guard's denials and the serializer's refusals. Refreshes itself; when the
database does not answer it says so, keeps showing the last good reading with its replicas as
unknown (never ok), and reads the replicas' metrics endpoints (AGENT_METRICS_URLS) directly. Layout
only: every figure comes from agent_memory_runtime.replica_health, core.history.replica_view and the database probe."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import psycopg
import streamlit as st
from psycopg_pool import PoolTimeout

from agent_memory_runtime import failures
from agent_memory_runtime.guard import Risk
from core import roles
from core.capture.status import CaptureStatus, capture_status, open_dead_letters
from core.db import CONNECT_TIMEOUT_S, Database, DatabaseBusy, DatabaseSlow, DatabaseUnavailable, Probe, failure_counts
from core.history import replica_health, replica_view
from ui import agent_server, capture, charts, fmt
from ui.common import database_answered, get_db, require_role, secrets, shared_figure
from ui.i18n import lang, t
from ui.safe import md, plot_frame
from ui.shared import SharedReading
from ui.tables import column_label, table

REFRESH_S = 5
SHARE_S = 2  # one sample (probe and health tables) per this many seconds for all the sessions on the page
READ_DEADLINE_S = 4  # a hung server blocks a query forever: the page stops waiting after this
# How much longer than the sample's own bound (probe + read deadline) the other sessions wait for it: a sample that
# ends at its bound on a loaded machine (it then says busy, or down) must not be read as "no answer" by the sessions
# waiting on it (measured: at 50 sessions on a fresh 1M install, waiters gave up just before the sample said busy).
SAMPLE_MARGIN_S = 4
LIMIT = 200
STATE_LABEL = {
    "es": {"ok": "ok", "degraded": "degradada", "silent": "silenciosa", "stopped": "parada", "unknown": "desconocido"},
    "en": {"ok": "ok", "degraded": "degraded", "silent": "silent", "stopped": "stopped", "unknown": "unknown"},
}
SOURCE_LABEL = {
    "es": {"tables": "tablas de salud", "last_reading": "última lectura", "endpoint": "endpoint de métricas"},
    "en": {"tables": "health tables", "last_reading": "last reading", "endpoint": "metrics endpoint"},
}
STATE_CELL = {"ok": "#d4edda", "degraded": "#ffe0b2", "silent": "#f8d7da", "stopped": "#e2e3e5", "unknown": "#fff3cd"}
STATE_COLORS = {"resynced": "#2ca02c", "ongoing": "#ff7f0e"}
RISKS = frozenset(r.value for r in Risk)
# what happened first (number, when, how long, why), then what it cost and where
EPISODE_COLUMNS = [
    "n",
    "replica_id",
    "degraded_from",
    "degraded_to",
    "seconds_degraded",
    "reason",
    "checkpoints_buffered",
    "writes_buffered",
    "ops_resynced",
    "resync_ms",
    "denials_count",
    "host",
    "pid",
    "recorded_at",
    "reason_raw",
]

require_role(roles.SRE)


@dataclass(frozen=True)
class Reading:
    at: float
    summary: dict
    replicas: pd.DataFrame
    episodes: pd.DataFrame
    denials: pd.DataFrame
    refusals: pd.DataFrame
    refused_in_sql: pd.DataFrame
    dead_letters: pd.DataFrame


@st.cache_resource(show_spinner=False)
def _last_good() -> dict[str, Reading]:
    """Last good reading per database, process-wide: a session opened during an outage still sees it."""
    return {}


@st.cache_resource(show_spinner=False)
def _reader() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="degradation-read")


def _read(db: Database) -> Reading:
    try:
        return _read_once(db)
    except (DatabaseBusy, DatabaseSlow):
        raise  # the server answers: a retry now would only add to its load
    except DatabaseUnavailable:
        # the probe just answered: a pooled connection from before a restart failed and the
        # pool has been rebuilt, so one retry reads the recovered database
        return _read_once(db)


def _read_once(db: Database) -> Reading:
    return Reading(
        time.time(),
        replica_health.summary(db),
        replica_health.replicas(db),
        replica_health.episodes(db, limit=LIMIT),
        replica_health.denials(db, limit=LIMIT),
        replica_health.refusals(db, limit=LIMIT),
        replica_health.refused_in_sql(db, limit=LIMIT),
        replica_health.dead_letters(db, limit=LIMIT),
    )


def tiles(reading: Reading, states: pd.DataFrame, probe: Probe | None) -> None:
    s = reading.summary
    count = states["state"].value_counts()
    n = fmt.number
    c = st.columns(5)
    stopped = int((states["state"] == "stopped").sum())  # listed below, said so, not counted as active
    c[0].metric(
        t("degr_replicas"),
        n(len(states) - stopped),
        help=t("degr_replicas_help", total=n(len(states)), stopped=n(stopped)),
    )
    c[1].metric(t("degr_degraded"), n(int(count.get("degraded", 0))))
    c[2].metric(t("degr_silent"), n(int(count.get("silent", 0))))
    c[4].metric(t("degr_unknown"), n(int(count.get("unknown", 0))))
    if probe is None:  # this run has no probe of its own time: unknown, never the previous one
        c[3].metric(t("degr_probe"), t("degr_probe_unknown"))
    else:
        c[3].metric(
            t("degr_probe"),
            t("degr_probe_ok", ms=n(probe.latency_ms, 0)) if probe.ok else t("degr_probe_down"),
            help=md(f"PostgreSQL {probe.server_version}" if probe.ok else probe.error),
        )
    c = st.columns(4)
    c[0].metric(t("degr_episodes"), n(s.get("episodes", 0)))
    c[1].metric(t("degr_denials"), n(s.get("denials", 0)))
    c[2].metric(t("degr_refusals"), n(s.get("refusals", 0)))
    scanned = s.get("refused_scanned_at")
    c[3].metric(
        t("degr_refused_sql"),
        n(s.get("refused_in_sql", 0)),
        help=t("degr_refused_sql_help", at="—" if scanned is None else fmt.moment(scanned)),
    )


def replicas_table(reading: Reading, states: pd.DataFrame, fresh: bool) -> None:
    st.subheader(t("degr_replicas_title"))
    if states.empty:
        st.info(t("degr_no_replicas"))
        return
    bad = int(states["state"].isin(["degraded", "silent"]).sum())
    unknown = int((states["state"] == "unknown").sum())
    if bad:
        st.warning(fmt.count("degr_some_degraded", bad))
    if unknown:
        st.warning(fmt.count("degr_some_unknown", unknown))
    if replica_view.all_clear(states, fresh=fresh):
        st.success(t("degr_all_ok"))
    df = states.copy()
    last = (
        reading.episodes.sort_values("degraded_from").groupby("replica_id").last()
        if not reading.episodes.empty
        else None
    )
    df["resynced_last_episode"] = df["replica_id"].map(last["ops_resynced"]) if last is not None else None
    labels = STATE_LABEL.get(lang(), STATE_LABEL["es"])
    colours = {labels.get(k, k): v for k, v in STATE_CELL.items()}
    df["state"] = df["state"].map(lambda v: labels.get(v, v))
    df["source"] = df["source"].map(lambda v: SOURCE_LABEL.get(lang(), SOURCE_LABEL["es"]).get(v, v))
    # what the SRE acts on first; where the reading comes from after
    shown = df[
        [
            "replica_id",
            "state",
            "heartbeat_age_s",
            "degraded_since",
            "buffered_checkpoints",
            "buffered_writes",
            "resynced_last_episode",
            "source",
            "reading_age_s",
            "endpoint",
            "error",
        ]
    ]
    table(shown, key="degradation.replicas", colours={"state": colours})


@shared_figure
def timeline_figure(frame: pd.DataFrame, language: str, tz: str) -> go.Figure:
    """The episodes as bars, their instants drawn in `tz` (the viewer's, as the episodes' table below)."""
    # an ongoing episode alone has no reason, resync or denials yet
    hover = [
        c
        for c in ("n", "reason", "checkpoints_buffered", "writes_buffered", "ops_resynced", "denials_count")
        if c in frame.columns
    ]
    start, end = frame["degraded_from"].min().to_pydatetime(), frame["degraded_to"].max().to_pydatetime()
    frame = frame.assign(
        degraded_from=fmt.wall_clock(frame["degraded_from"], tz), degraded_to=fmt.wall_clock(frame["degraded_to"], tz)
    )
    fig = px.timeline(
        plot_frame(frame),
        x_start="degraded_from",
        x_end="degraded_to",
        y="replica_id",
        color="status",
        color_discrete_map={t("degr_recorded"): STATE_COLORS["resynced"], t("degr_ongoing"): STATE_COLORS["ongoing"]},
        hover_data=hover,
        labels={
            **{c: column_label(c) for c in ["replica_id", "status", *hover]},
            **{c: f"{column_label(c)} ({tz})" for c in ("degraded_from", "degraded_to")},
        },
    )
    # an outline in the bar's own colour keeps seconds-long episodes visible on a long axis
    fig.for_each_trace(lambda tr: tr.update(marker_line_width=6, marker_line_color=tr.marker.color))
    fig.update_layout(
        height=160 + 40 * frame["replica_id"].nunique(),
        margin=dict(t=10, b=10),
        xaxis=dict(title=t("degr_time", tz=tz), **fmt.time_ticks(start, end, tz=tz)),
        yaxis_title="",
        legend_title_text="",
        separators=fmt.plot_separators(),
    )
    return charts.finish(fig, counts=(), tz=tz)


def reasons_in_words(episodes: pd.DataFrame) -> pd.DataFrame:
    """The episodes with `reason` in the UI's words (what kind of failure) and the saver's text verbatim beside it
    (`reason_raw`: a driver's message, as written)."""
    if episodes.empty:
        return episodes
    return episodes.assign(
        reason=[t(f"degr_reason_{failures.reason_kind(r)}") for r in episodes["reason"]],
        reason_raw=episodes["reason"],
    )


def episodes_timeline(reading: Reading) -> None:
    st.subheader(t("degr_timeline"))
    bars = []
    episodes = reasons_in_words(reading.episodes)
    if not episodes.empty:
        done = episodes.assign(status=t("degr_recorded"))
        bars.append(
            done[
                [
                    "n",
                    "replica_id",
                    "degraded_from",
                    "degraded_to",
                    "status",
                    "reason",
                    "checkpoints_buffered",
                    "writes_buffered",
                    "ops_resynced",
                    "denials_count",
                ]
            ]
        )
    replicas = reading.replicas
    if not replicas.empty:
        ongoing = replicas[(replicas["reported_state"] == "degraded") & replicas["degraded_since"].notna()]
        if not ongoing.empty:
            bars.append(
                pd.DataFrame(
                    {
                        "replica_id": ongoing["replica_id"],
                        "degraded_from": ongoing["degraded_since"],
                        "degraded_to": pd.Timestamp(reading.at, unit="s", tz="UTC"),
                        "status": t("degr_ongoing"),
                        "checkpoints_buffered": ongoing["buffered_checkpoints"],
                        "writes_buffered": ongoing["buffered_writes"],
                    }
                )
            )
    if not bars:
        st.info(t("degr_no_episodes"))
        return
    frame = pd.concat(bars, ignore_index=True)
    # the database's timestamps and the ongoing bar's "now" must be one dtype for plotly
    for column in ("degraded_from", "degraded_to"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    charts.draw(timeline_figure(frame, lang(), fmt.viewer_timezone()), key="degradation.timeline")
    if not episodes.empty:
        st.caption(t("degr_episodes_numbered"))
        table(episodes, key="degradation.episodes", columns=EPISODE_COLUMNS, config={"reason_raw": {"width": "large"}})


def risk_label(risk) -> str:
    """A guard risk level (agent_memory_runtime.guard.Risk) in the UI's words, the ones its caption uses."""
    return t(f"risk_{str(risk).lower()}") if str(risk) in RISKS else str(risk)


def events(reading: Reading) -> None:
    left, right = st.columns(2)
    with left:
        st.subheader(t("degr_denials_title"))
        if reading.denials.empty:
            st.info(t("degr_no_denials"))
        else:
            table(
                reading.denials.assign(risk=reading.denials["risk"].map(risk_label)),
                key="degradation.denials",
                columns=["denied_at", "tool", "risk", "thread_id", "customer_id", "replica_id", "episode_n"],
            )
    with right:
        st.subheader(t("degr_refusals_title"))
        if reading.refusals.empty:
            st.info(t("degr_no_refusals"))
        else:
            table(reading.refusals, key="degradation.refusals")
        st.subheader(t("degr_refused_sql_title"))
        st.caption(t("degr_refused_sql_caption"))
        if reading.refused_in_sql.empty:
            st.info(t("degr_no_refused_sql"))
        else:
            table(reading.refused_in_sql, key="degradation.refused_sql")
        st.subheader(t("degr_dead_letters_title"))
        st.caption(t("degr_dead_letters_caption"))
        if reading.dead_letters.empty:
            st.info(t("degr_no_dead_letters"))
        else:
            table(reading.dead_letters, key="degradation.dead_letters")


st.title(t("degr_title"))
st.caption(t("degr_caption", every=REFRESH_S))


@dataclass(frozen=True)
class Sample:
    """One look at the database: the dashboard's probe, and the health tables' reading when the probe answered."""

    probe: Probe
    reading: Reading | None
    error: str | None
    kind: str | None = None  # why there is no reading: down (no answer), busy or slow (the probe answered)
    capture: CaptureStatus | None = None  # the change follower and its slot (None: not read now, unknown)
    capture_dead: pd.DataFrame | None = None  # the rows it could not apply (None: not read now, unknown)


def _sample(db: Database) -> Sample:
    probe = db.probe()
    if not probe.ok:
        return Sample(probe, None, probe.error, "down")
    future = _reader().submit(_read, db)
    try:
        reading = future.result(timeout=READ_DEADLINE_S)
    except FutureTimeout:  # the server answered the probe: the read waits on a busy database
        return Sample(probe, None, f"no answer in {READ_DEADLINE_S} s", "busy")
    except DatabaseBusy as exc:
        return Sample(probe, None, str(exc), "busy")
    except DatabaseSlow as exc:
        return Sample(probe, None, str(exc), "slow")
    except (DatabaseUnavailable, psycopg.OperationalError, PoolTimeout) as exc:
        return Sample(probe, None, str(exc).strip() or type(exc).__name__, "down")
    try:  # the follower's slot: shown as unknown when it cannot be read now, never as the last one read
        slot: CaptureStatus | None = _reader().submit(capture_status, db).result(timeout=READ_DEADLINE_S)
        dead: pd.DataFrame | None = _reader().submit(open_dead_letters, db).result(timeout=READ_DEADLINE_S)
    except Exception:  # noqa: BLE001  (any failure of this read is "unknown" on the page, the reading stays)
        slot, dead = None, None
    return Sample(probe, reading, None, capture=slot, capture_dead=dead)


@st.cache_resource(show_spinner=False, max_entries=8)
def _shared_sample(dsn: str) -> SharedReading[Sample]:
    """The sample every session on this page shows: taken once per SHARE_S for the process, not per session."""
    return SharedReading(
        lambda: _sample(get_db()), SHARE_S, wait_s=CONNECT_TIMEOUT_S + READ_DEADLINE_S + SAMPLE_MARGIN_S
    )


@st.fragment(run_every=REFRESH_S)
def live() -> None:
    db = get_db()
    shared = _shared_sample(db.dsn).get()
    if shared.unknown:  # not sampled now (another session's sample hangs, or it failed): nothing is ok
        probe = None
        reading, error, kind = None, shared.error, "down"
    else:
        sample = shared.value
        probe, reading, error, kind = sample.probe, sample.reading, sample.error, sample.kind
    last_good = _last_good()
    fresh = reading is not None
    if fresh:
        last_good[db.dsn] = reading
        database_answered(reading.at)  # the sidebar must not say "not reachable" from an older probe
        st.caption(t("degr_read_at", at=fmt.clock(reading.at)))
    else:
        reading = last_good.get(db.dsn)
        # busy or slow: the server answers, the page reads again at its next refresh; down: no answer
        busy = kind in ("busy", "slow")
        key = ("degr_db_busy" if busy else "degr_db_down") + ("_never" if reading is None else "")
        said = t(
            key,
            error=md(error),
            every=REFRESH_S,
            at=fmt.clock(reading.at) if reading else "",
            ago=int(time.time() - reading.at) if reading else 0,
        )
        if busy:
            st.warning(said, icon=":material/hourglass_top:")
        else:
            st.error(said, icon=":material/cloud_off:")
    st.caption(t("degr_failures", **failure_counts()))
    capture.slot_panel(None if shared.unknown else shared.value.capture)
    if shared.unknown:
        capture.dead_letters_panel(None, None)
    else:
        capture.dead_letters_panel(shared.value.capture, shared.value.capture_dead)
    try:
        endpoints = replica_view.read_endpoints(replica_view.configured_endpoints(secrets()))
    except replica_view.BadEndpoints as exc:
        st.error(md(exc))
        endpoints = None
    if reading is None and (endpoints is None or endpoints.empty):
        return
    states = replica_view.replica_states(
        reading.replicas if reading else None, fresh=fresh, read_at=reading.at if reading else None, endpoints=endpoints
    )
    if reading is None:  # never read the tables: the endpoints alone
        reading = Reading(time.time(), {}, *(pd.DataFrame() for _ in range(6)))
    tiles(reading, states, probe)
    replicas_table(reading, states, fresh)
    episodes_timeline(reading)
    events(reading)


agent_server.server_line()  # the agent server this database serves (issue 53); nothing while it is down
live()
