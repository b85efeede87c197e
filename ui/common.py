"""What every page shares: the database handle, cached reads, the signed-in user, role checks."""

from __future__ import annotations

import inspect
import ipaddress
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import streamlit as st
from streamlit.errors import StreamlitSecretNotFoundError
from streamlit.runtime.context import StreamlitHeaders
from streamlit.runtime.scriptrunner import get_script_run_ctx

from core import roles
from core.admission import Admission
from core.config import Settings, load_settings
from core.db import CONNECT_TIMEOUT_S, Database, DatabaseBusy, DatabaseSlow, DatabaseUnavailable, Probe, probe
from core.migrate import SchemaMismatch
from core.read_replica import ReadRouter, router_for
from core.roles import LOCAL_SCOPE, StoreScope
from ui.i18n import STRINGS, t
from ui.safe import md
from ui.shared import Shared, SharedReading

log = logging.getLogger(__name__)

CACHE_TTL = 30  # seconds a read is reused; the pages are for humans, not alarms
# Bounds of the process-wide caches (every session shares them): reads (a page's read with its arguments, e.g. one
# customer's documents) and charts (one per data and language); the least recently used entry goes first. A chart is
# keyed by the data it shows, so its ttl only frees memory: new data is a new key.
CACHE_ENTRIES = 512
FIGURE_ENTRIES = 128
DERIVED_TTL = 600  # seconds a chart or a prepared table (ui.tables) is kept
# One colour per namespace root on every chart.
ROOT_COLORS = {"clientes": "#1f77b4", "proveedores": "#ff7f0e", "empleados": "#2ca02c", "unknown": "#7f7f7f"}


def root_label(root: str) -> str:
    """A namespace root in the UI's words ("Clientes" / "Customers"): the namespace stays as agents write it in data
    and URLs, the label is translated; a root the dashboard does not know is shown as it is."""
    return t(f"mem_root_{root}") if f"mem_root_{root}" in STRINGS else root


def root_colors() -> dict[str, str]:
    """ROOT_COLORS keyed by `root_label`, for a chart whose legend names the roots."""
    return {root_label(r): c for r, c in ROOT_COLORS.items()}


def secrets() -> dict:
    try:
        return st.secrets.to_dict()
    except (StreamlitSecretNotFoundError, FileNotFoundError):
        return {}


@st.cache_resource(show_spinner=False)
def settings() -> Settings:
    return load_settings(secrets())


class DatabaseStarting(RuntimeError):
    """The embedded database is still starting (its state: starting | migrating)."""


def database_startup(*, retry: bool = False):
    """The embedded database's background start (core.startup.Startup), started on the first call
    of the process; None with an external PG_AGENTES, which opens in the foreground as before."""
    from core.startup import start_in_background

    cfg = settings()
    return start_in_background(cfg, retry=retry) if cfg.embedded else None


@st.cache_resource(show_spinner="Preparando la base de datos… / Preparing the database…")
def _open_external() -> Database:
    from core.startup import open_database

    return open_database(settings())


def bootstrap() -> Database:
    """The agents' database, once per process: the embedded server and migrations (started in the
    background by `database_startup`; raises DatabaseStarting until they are done, or their error),
    or the external PG_AGENTES (opened and migrated here). The demo data come after the first page,
    in the background: `start_demo_seed`. Raises on failure (the next run retries)."""
    startup = database_startup()
    if startup is None:
        return _open_external()
    if startup.failed:
        error = startup.error
        if isinstance(error, (DatabaseUnavailable, psycopg.Error, SchemaMismatch)):
            raise error
        raise DatabaseUnavailable(f"the embedded PostgreSQL did not start: {error}") from error
    if not startup.ready:
        raise DatabaseStarting(startup.state)
    return startup.db


def seed_progress():
    """This process's demo seed (core.demo.progress.SeedProgress), or None when no seed is configured."""
    from core.demo.progress import background_seed

    return background_seed(get_db().dsn) if settings().seed_demo else None


SEED_FRESH_S = 10  # while the demo seeds, a page is read again this often: its figures appear as they arrive


def demo_seeding():
    """This process's demo seed while it runs, or is about to (it starts after the first page, and seeds only an
    empty database); None otherwise."""
    progress = seed_progress()
    if progress is None or progress.finished:
        return None
    if progress.running:
        return progress
    from core.demo.seed_progress import database_empty

    return progress if call_or_unknown(database_empty) else None


@st.cache_resource(show_spinner=False)
def _fresh_reads() -> dict[str, float]:
    return {"at": 0.0}


def read_fresh_while_seeding() -> None:
    """Drop the cached reads, at most once per SEED_FRESH_S for the whole process (every session reading the seed's
    new rows then shares one read of them)."""
    fresh = _fresh_reads()
    if time.monotonic() - fresh["at"] >= SEED_FRESH_S:
        fresh["at"] = time.monotonic()
        forget_all()


def start_demo_seed() -> None:
    """Start the demo seed in the background, once per process (a no-op afterwards or without
    SEED_DEMO). Called after the first page rendered: the agents' imports take seconds of CPU.
    The replicas (live heartbeats for the operations pages) start once the seed is done."""
    cfg = settings()
    if cfg.seed_demo:
        from core.demo.progress import start_background_seed

        start_background_seed(get_db(), cfg, replicas=cfg.demo_replicas)


def get_db() -> Database:
    return bootstrap()


PROBE_INTERVAL_S = 15  # the sidebar's database status: one probe per process per interval, shown to every session


@st.cache_resource(show_spinner=False, max_entries=8)
def _probe_reading(dsn: str) -> SharedReading[Probe]:
    return SharedReading(lambda: probe(dsn), PROBE_INTERVAL_S, wait_s=CONNECT_TIMEOUT_S + 1)


def database_probe() -> Shared[Probe]:
    """The database's probe (a direct connection, not the pool), shared by every session of the process: taken
    at most once per PROBE_INTERVAL_S; unknown (never the previous "ok") when it cannot be taken now. A failed probe
    that a page's read answered after (`database_answered`) is outdated: taken again, once (no load otherwise)."""
    dsn = get_db().dsn
    reading = _probe_reading(dsn)
    shared = reading.get()
    answered = _answered().get(dsn, 0.0)
    if (shared.value is None or not shared.value.ok) and answered > shared.at:
        shared = reading.get(newer_than=answered)
    return shared


@st.cache_resource(show_spinner=False)
def _answered() -> dict[str, float]:
    return {}  # dsn -> wall clock when the database last answered a page's read (any session of the process)


def _note_answer(dsn: str, at: float | None = None) -> None:
    answered = _answered()
    answered[dsn] = max(answered.get(dsn, 0.0), time.time() if at is None else at)


# Session state: what the sidebar's database status shows, {"ok": bool, "at": the probe's time, "redraw": callable}
# (ui.db_status draws it before the page; a page's answered read after a failed probe draws it again).
STATUS_SHOWN = "db_status.shown"


def database_answered(at: float | None = None) -> None:
    """A page's own read was answered by the database at `at` (wall clock; now by default): the sidebar's status,
    if it shows a failed probe older than that, probes again and is drawn again (`read`, `call_now` and
    `call_or_unknown` say so themselves; a page reading by other means calls this)."""
    _note_answer(get_db().dsn, at)
    _follow_answer()


def _follow_answer() -> None:
    """Draw the sidebar's status again when it shows a failed probe older than the last answered read. Only in a
    full run: a rerun of a page's fragment cannot draw in the sidebar (its own fragment follows, ui.db_status)."""
    shown = st.session_state.get(STATUS_SHOWN)
    if shown is None or shown["ok"] or _answered().get(get_db().dsn, 0.0) <= shown["at"]:
        return
    ctx = get_script_run_ctx()
    if ctx is None or ctx.fragment_ids_this_run:
        return
    shown["redraw"]()


def read_router() -> ReadRouter:
    """Where page reads go: the replica (PG_AGENTES_REPLICA) while it answers, else the primary."""
    return router_for(get_db())


@st.cache_data(ttl=CACHE_TTL, max_entries=CACHE_ENTRIES, show_spinner=False)
def _cached(fn_name: str, module: str, dsn: str, args: tuple, kwargs: tuple, source: str = "primary") -> Any:
    import importlib

    fn = getattr(importlib.import_module(module), fn_name)
    result = fn(read_router().database(source), *args, **dict(kwargs))
    _note_answer(dsn)  # the database answered (drawn in the sidebar by `read`, outside this cache)
    return result


def shared_figure(build: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: a chart built once per process for its arguments (frames hashed by value) and shared by every
    session that shows the same data. Building a plotly figure costs tens of milliseconds,
    showing one only its serialisation (st.plotly_chart reads a figure, never changes it: return the finished figure
    and never modify it afterwards). The builder's texts come from t(), in the session's language, so `language`
    must be one of its parameters: a Spanish chart is never shown to an English session."""
    if "language" not in inspect.signature(build).parameters:
        raise TypeError(f"{build.__qualname__}: a shared chart takes the `language` its labels are in")
    return st.cache_resource(ttl=DERIVED_TTL, max_entries=FIGURE_ENTRIES, show_spinner=False)(build)


def _key(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[str, str, str, tuple, tuple]:
    return (fn.__name__, fn.__module__, get_db().dsn, args, tuple(sorted(kwargs.items())))


BUSY_RETRY_S = 5  # a page the database was too busy to read runs again after this


def _busy(exc: DatabaseBusy) -> None:
    """The database is busy, not down: say so, and run the page again in BUSY_RETRY_S."""
    st.warning(t("db_busy", s=BUSY_RETRY_S, error=md(exc)), icon=":material/hourglass_top:")
    since = time.monotonic()

    @st.fragment(run_every=BUSY_RETRY_S)
    def retry() -> None:
        if time.monotonic() - since >= BUSY_RETRY_S:
            st.rerun(scope="app")

    retry()


def _or_stop(call: Callable[[], Any]) -> Any:
    """A dead database stops the page with a clear error instead of a traceback; a busy one with a note that the
    page is read again shortly."""
    try:
        return call()
    except DatabaseBusy as exc:
        _busy(exc)
        st.stop()
    except DatabaseSlow as exc:
        st.error(t("read_slow", error=md(exc)), icon=":material/timer_off:")
        st.stop()
    except DatabaseUnavailable as exc:
        st.error(t("read_failed", error=md(exc)))
        st.stop()


def read(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a core read function `fn(db, ...)` through the cache, on the read replica when one is
    configured (on the primary while it does not answer; ui.replica shows which)."""
    key = _key(fn, args, kwargs)
    result = _or_stop(lambda: read_router().run(lambda _db, source: _cached(*key, source)))
    _follow_answer()
    return result


def _or_unknown(call: Callable[[], Any]) -> Any:
    """`call()`, or None when the database does not give it now (said on the page: busy, or unknown)."""
    try:
        return call()
    except DatabaseBusy as exc:
        _busy(exc)
        return None
    except DatabaseUnavailable as exc:
        st.warning(t("read_part_failed", error=md(exc)), icon=":material/help:")
        return None


def call_or_unknown(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Like `call_now` (the primary, uncached), for a part of a page the rest does not need: a failed call is said
    on the page (its figures are unknown, or the database busy) and gives None, instead of stopping the page (e.g.
    the Erasure page's coverage must not keep the DPO from a customer's preview)."""
    return _or_unknown(lambda: _answered_call(fn, args, kwargs))


def _answered_call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """`fn(db, ...)` on the primary; its answer outdates a failed probe older than it (`database_answered`)."""
    result = fn(get_db(), *args, **kwargs)
    database_answered()
    return result


def call_now(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a core function `fn(db, ...)` on the primary, uncached (e.g. the DPO must see the
    database as it is now, and the register what was just recorded)."""
    return _or_stop(lambda: _answered_call(fn, args, kwargs))


# What is expensive by nature (the erasure preview's residue scan, the access export, the semantic search): this many
# at a time per process, each under this statement timeout; the others wait in line with their place shown.
EXPENSIVE_SLOTS = 2
EXPENSIVE_TIMEOUT_MS = 120_000


@st.cache_resource(show_spinner=False)
def _admission() -> Admission:
    return Admission(EXPENSIVE_SLOTS)


def call_expensive(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Like `call_now`, for a call expensive by nature: it waits for one of EXPENSIVE_SLOTS (its place in line shown;
    leaving or rerunning the page leaves the line) and runs under EXPENSIVE_TIMEOUT_MS."""
    note = st.empty()

    def waiting(place: int) -> None:
        note.info(t("expensive_queued", place=place, slots=EXPENSIVE_SLOTS), icon=":material/hourglass_top:")

    with _admission().slot(on_wait=waiting):
        note.empty()
        return _or_stop(lambda: fn(get_db().with_statement_timeout(EXPENSIVE_TIMEOUT_MS), *args, **kwargs))


def forget(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Drop one cached read (same arguments as `read`), after a write that changed it."""
    for source in ("primary", "replica"):
        _cached.clear(*_key(fn, args, kwargs), source)


def forget_all() -> None:
    """Drop every cached read (after a write that may change any page, e.g. an erasure)."""
    _cached.clear()


@dataclass(frozen=True)
class User:
    name: str
    email: str | None
    roles: tuple[str, ...]
    local: bool
    # which stores' customers the manager pages show (core.roles.StoreScope): every store in local mode
    scope: StoreScope = LOCAL_SCOPE


def auth_configured() -> bool:
    """An `[auth]` section in the secrets (asked on every run: st.secrets.get reads one key, to_dict copies all)."""
    try:
        return bool(st.secrets.get("auth"))
    except (StreamlitSecretNotFoundError, FileNotFoundError):
        return False


LOOPBACK_ADDRESSES = frozenset({"127.0.0.1", "localhost", "::1"})
# a Host header: a name or IPv4 address, or an IPv6 address in brackets, and an optional port
_HOST = re.compile(r"(?:(?P<name>[^\s:\[\]/@]+)|\[(?P<ipv6>[0-9A-Fa-f:.]+)\])(?::\d{1,5})?")


def loopback_host(host: str) -> bool:
    """localhost, 127.x.y.z or [::1], with or without a port."""
    match = _HOST.fullmatch(host)
    if match is None:
        return False
    if match["name"] and match["name"].lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(match["name"] or match["ipv6"])
    except ValueError:
        return False
    return address.is_loopback and (address.version == 6) == bool(match["ipv6"])


def local_request_refusal(headers: StreamlitHeaders) -> str | None:
    """Why local mode grants no role to this request (a message key), or None: a proxy forwarded it
    (any Forwarded / X-Forwarded-* header), or the browser did not open it by a loopback name (DNS
    rebinding, a proxy passing its own name). `headers`: st.context.headers, the websocket handshake's;
    none at all without a browser (AppTest, a bare run), while every handshake has some."""
    if not headers:
        return None
    if any(name.lower() == "forwarded" or name.lower().startswith("x-forwarded-") for name in headers):
        return "local_mode_forwarded"
    hosts = headers.get_all("host")
    return None if len(hosts) == 1 and loopback_host(hosts[0]) else "local_mode_foreign_host"


def local_mode_refusal() -> str | None:
    """Why local mode grants no role here (the message for the page), or None when it grants LOCAL_ROLES:
    the server must listen on loopback only, and the browser have opened it by a loopback name, unforwarded."""
    address = st.get_option("server.address") or ""
    if address not in LOOPBACK_ADDRESSES:  # unset: every interface
        return t("local_mode_unsafe", address=address or "0.0.0.0")
    key = local_request_refusal(st.context.headers)
    return t(key, port=st.get_option("server.port")) if key else None


def current_user() -> User | None:
    """The signed-in user (None if signed out). Without an identity provider: the local user, with
    LOCAL_ROLES only while local_mode_refusal() has nothing against it (else no role at all)."""
    cfg = settings()
    if not auth_configured():
        granted = () if local_mode_refusal() else roles.parse_roles(cfg.local_roles)
        return User("local", None, granted, local=True)
    if not st.user.is_logged_in:
        return None
    claim, name = st.user.get("email"), st.user.get("name")
    email = claim if isinstance(claim, str) else None  # claims are typed str | bool | tokens; these are strings
    # an e-mail the identity provider says it has not verified must not pick up someone's roles
    verified = st.user.get("email_verified") is not False
    granted = roles.roles_for(email, cfg.role_map) if verified else ()
    scope = (
        roles.store_scope_for(email, cfg.role_map, st.user.to_dict(), cfg.store_claim)
        if verified
        else StoreScope((), roles.ORIGIN_NONE)
    )
    return User((name if isinstance(name, str) else None) or email or "?", email, granted, local=False, scope=scope)


PAGE_ROLE_KEY = "page.role"


def require_role(role: str) -> User:
    """Stop the page unless the current user has `role` (checked on every run, server-side); the page is then
    `role`'s (page_role: where its links lead)."""
    user = current_user()
    st.session_state[PAGE_ROLE_KEY] = role
    if user is None or role not in user.roles:
        st.error(t("forbidden", role=role))
        st.stop()
    return user


def page_role() -> str | None:
    """The role of the page this run shows (set by its require_role): a customer id on it leads where its reader
    came from (ui.tables.CUSTOMER_LINKS)."""
    role = st.session_state.get(PAGE_ROLE_KEY)
    return role if isinstance(role, str) else None
