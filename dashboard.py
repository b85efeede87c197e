"""Entrypoint: `streamlit run dashboard.py`.

Opens the agents' database (the embedded one with demo data when nothing is configured),
signs the user in, and builds the navigation from the user's roles.
"""

from __future__ import annotations

import time

import streamlit as st

from ui.common import database_startup, settings

st.set_page_config(page_title="Agent memory", page_icon=":material/memory:", layout="wide")
# the embedded server and the migrations start now, in the background (once per process), while
# the rest of the imports and the first page run; an external PG_AGENTES opens below, as before
startup = database_startup()

import psycopg
from psycopg_pool import PoolTimeout

from core.config import production_refusal
from core.db import DatabaseUnavailable, describe_dsn
from core.migrate import SchemaMismatch, ShallowCheckpointSchema
from ui import db_status, navigation, replica, scope
from ui.common import (
    SEED_FRESH_S,
    DatabaseStarting,
    bootstrap,
    current_user,
    demo_seeding,
    forget_all,
    local_mode_refusal,
    read_fresh_while_seeding,
    seed_progress,
    start_demo_seed,
)
from ui.errors import shown_as_message
from ui.i18n import LANGUAGES, t

if "lang" not in st.session_state:
    st.session_state.lang = st.query_params.get("lang", "es") if st.query_params.get("lang") in LANGUAGES else "es"
# the widget's return value, not st.session_state.lang: Streamlit can drop a widget's key from the
# session state when a rerun interrupts the run that created it (seen once in a browser test)
st.query_params["lang"] = st.sidebar.selectbox(t("language"), list(LANGUAGES), format_func=LANGUAGES.get, key="lang")

refusal = production_refusal()
if refusal is not None:  # production without a required setting: no page is served (issue 54 #9)
    st.title(t("startup_refused_title"))
    st.error(t("startup_refused", setting=refusal.setting), icon=":material/block:")
    st.stop()

try:
    db = bootstrap()
except DatabaseStarting:
    db = None  # the page's shell now; the page itself once the database is ready (see below)
except (DatabaseUnavailable, psycopg.Error, PoolTimeout, SchemaMismatch) as exc:
    cfg = settings()
    st.title(t("startup_failed"))
    st.error(str(exc).strip() or type(exc).__name__)
    hint = (
        "startup_shallow_hint"
        if isinstance(exc, ShallowCheckpointSchema)
        else "startup_schema_hint"
        if isinstance(exc, SchemaMismatch)
        else "startup_hint"
    )
    st.markdown(t(hint, target=describe_dsn(cfg.dsn) if cfg.dsn else t("embedded")))
    if st.button(t("retry"), key="startup.retry"):
        database_startup(retry=True)
        st.rerun()
    st.stop()

user = current_user()
if user is None:
    st.title(t("app_title"))
    st.info(t("sign_in_prompt"))
    if st.button(t("sign_in"), key="auth.login", type="primary"):
        st.login()
    st.stop()
if not user.roles and user.local:
    st.error(local_mode_refusal() or t("no_roles", user=user.name))
    st.stop()
if not user.roles:
    st.error(t("no_roles", user=user.email or user.name))
    st.button(t("sign_out"), key="auth.logout", on_click=st.logout)
    st.stop()

nav = navigation.build(user.roles)  # every page registered for everyone: its URL opens it or refuses

with st.sidebar:
    if user.local:
        st.warning(t("local_mode", roles=", ".join(t(f"role_{r}") for r in user.roles)), icon=":material/lock_open:")
        st.caption(t("signed_in_as", user="local", roles=", ".join(user.roles)))
    else:
        st.caption(t("signed_in_as", user=user.email or user.name, roles=", ".join(user.roles)))
        st.button(t("sign_out"), key="auth.logout", on_click=st.logout)

    @st.fragment(run_every=1)
    def database_starting() -> None:
        """The embedded database's start in the sidebar, until it is ready (the page's shell reruns the app)."""
        st.caption(f"**{t('db')}:** {t('embedded')}")
        st.caption(
            ":orange[●] " + t("startup_status", step=t(f"startup_{startup.state}"), s=time.time() - startup.started_at)
        )

    if db is None:
        database_starting()
    else:
        db_status.sidebar_status()  # the shared probe; drawn again if the page's read answers after it failed
        st.fragment(run_every=15)(replica.sidebar_status)()

    progress = seed_progress() if db is not None else None
    if progress is not None and not progress.finished:
        st.session_state["seed.was_running"] = True

    if progress is not None and progress.state != "skipped":

        @st.fragment(run_every=1.5 if not progress.finished else None)
        def seed_status() -> None:
            """The background demo seed's progress; when it ends, the cached reads are dropped and
            the whole page reruns on the complete data."""
            st.caption(f"**{t('seed_title')}**")
            if progress.state == "waiting":
                st.caption(t("seed_waiting"))
            elif progress.state in ("idle", "seeding"):
                step = t(f"seed_step_{progress.step}") if progress.step else "…"
                if progress.total:
                    st.progress(
                        progress.done / progress.total,
                        text=t("seed_seeding", step=step, done=progress.done, total=progress.total),
                    )
                else:
                    st.caption(t("seed_step_only", step=step))
                st.caption(t("seed_partial"))
            elif progress.state == "failed":
                st.error(t("seed_failed", error=progress.error))
            elif progress.summary is not None:
                st.caption(
                    t(
                        "seed_done",
                        s=progress.summary.seconds,
                        turns=progress.summary.turns,
                        conversations=progress.summary.conversations,
                    )
                )
            if progress.finished and st.session_state.get("seed.was_running"):
                st.session_state["seed.was_running"] = False
                forget_all()
                st.rerun(scope="app")

        seed_status()

if db is None:
    # the selected page's shell: its title and what it waits for, no figure (none was read yet)
    # home forwards to the user's first page: its shell here, the forward once the database is ready
    spec = navigation.first_page(user.roles) if nav.url_path == "" else navigation.spec_for(nav.url_path)
    if spec is not None and spec.role not in user.roles:
        st.error(t("forbidden", role=spec.role))
    else:
        st.title(t(spec.heading) if spec else nav.title)

        @st.fragment(run_every=0.5)
        def startup_note() -> None:
            """What the page waits for; once the database is ready (or failed) the whole app reruns."""
            if startup.ready or startup.failed:
                st.rerun(scope="app")
            st.info(t("startup_page", step=t(f"startup_{startup.state}")), icon=":material/hourglass_top:")

        startup_note()
    from core.startup import warm_imports

    warm_imports()  # the page's own imports, while the server starts
    st.stop()

seeding = demo_seeding()
if seeding is not None:
    # every page says so in its main area, with the seed's progress, and is read again every SEED_FRESH_S: its
    # figures appear as they arrive (the sidebar's seed_status reruns it on the complete data at the end)
    page_read_at = time.monotonic()

    @st.fragment(run_every=1.5)
    def seed_banner() -> None:
        if seeding.finished:
            return
        step = t(f"seed_step_{seeding.step}") if seeding.step else t("seed_starting")
        if seeding.total:
            text = t("seed_main", step=step, done=seeding.done, total=seeding.total, s=SEED_FRESH_S)
            st.progress(min(seeding.done / seeding.total, 1.0), text=text)
        else:
            st.info(t("seed_main_step_only", step=step, s=SEED_FRESH_S), icon=":material/hourglass_top:")
        if time.monotonic() - page_read_at >= SEED_FRESH_S:
            read_fresh_while_seeding()
            st.rerun(scope="app")

    seed_banner()

replica.page_note()
page_spec = navigation.spec_for(nav.url_path)
scope.unscoped_note(user.roles, page_spec.role if page_spec else None)  # SRE and DPO pages: every store, said so
try:
    shown_as_message(nav.run, nav.url_path or "home")  # a failing page: a message and an error id, not a traceback
finally:
    start_demo_seed()  # after the page: it must not wait for the seed, nor for the agents' imports
