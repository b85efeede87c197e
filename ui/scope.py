"""Which stores' customers the manager pages show (issue 39), said on every page that is scoped or is not.

`manager_scope()` runs right after `require_role(MANAGER)`: it says whose customers the page shows (every store in
local mode or with `stores = ["*"]`; else the manager's stores, where they came from, and where each customer's store
comes from) and returns the core `Scope` every read of the page takes (None: every store). It stops the page, saying
why, when the manager sees no customer: no store configured, an unusable store claim or entry, a mapping never
computed, computed from other sources than those configured, or one of its sources in error.
"""

from __future__ import annotations

import streamlit as st

from core import roles
from core.memory import customer_stores
from core.memory.customer_stores import MappingStatus, Scope, StoreSources
from ui import fmt
from ui.common import call_expensive, current_user, forget_all, read, settings
from ui.i18n import t
from ui.safe import md

REFRESH_KEY = "scope.refresh"


def source_label(source: str) -> str:
    """A mapping source in words: the configured query, or the key in checkpoint metadata or in documents."""
    if source == customer_stores.QUERY_SOURCE:
        return t("scope_source_query")
    kind, key = source.split(":", 1)
    return t(f"scope_source_{kind}", name=md(key))


def origin_label(scope: roles.StoreScope) -> str:
    if scope.origin.startswith(roles.CLAIM_ORIGIN):
        return t("scope_origin_claim", claim=md(scope.origin.removeprefix(roles.CLAIM_ORIGIN)))
    return t(f"scope_origin_{scope.origin}")


def _refresh_button() -> None:
    if st.button(t("scope_refresh"), key=REFRESH_KEY, icon=":material/sync:"):
        try:
            call_expensive(customer_stores.refresh, settings(), trigger="manual")
        except customer_stores.StoreSourceConfigError as exc:
            st.error(md(exc))
            return
        forget_all()
        st.rerun()


def _sources_text(status: MappingStatus) -> str:
    return "; ".join(
        t("scope_source_count", source=source_label(s.source), n=fmt.number(s.customers or 0))
        for s in status.sources
        if not s.error
    )


def _unusable(status: MappingStatus) -> None:
    """Say why no customer is shown (the mapping cannot be trusted), offer to recompute it, stop the page."""
    if status.refreshed_at is None:
        st.warning(t("scope_never"), icon=":material/store:")
    elif status.errors:
        for source, error in status.errors.items():
            st.error(t("scope_source_failed", source=source_label(source), error=md(error)), icon=":material/error:")
        st.caption(t("scope_failed_nothing"))
    else:
        st.warning(
            t(
                "scope_stale_config",
                was=", ".join(source_label(s.source) for s in status.sources) or "—",
                now=", ".join(map(source_label, status.configured)) or "—",
            ),
            icon=":material/store:",
        )
    _refresh_button()
    st.stop()


def manager_scope() -> Scope | None:
    """The Scope of the signed-in manager's reads (None: every store), after saying so; stops the page when the manager
    may see no customer, saying why."""
    user = current_user()
    if user is None:  # require_role stopped the page already
        st.stop()
    scope = user.scope
    if scope.error:
        st.error(t("scope_invalid", error=md(scope.error)), icon=":material/block:")
        st.stop()
    if scope.stores is None:
        st.caption(
            t("scope_all_local" if scope.origin == roles.ORIGIN_LOCAL else "scope_all", origin=origin_label(scope))
        )
        return None
    if not scope.stores:
        st.warning(
            t("scope_none", user=md(user.email or user.name), claim=md(settings().store_claim)), icon=":material/store:"
        )
        st.stop()
    try:
        sources = StoreSources.from_settings(settings())
    except customer_stores.StoreSourceConfigError as exc:
        st.error(md(exc))
        st.stop()
    status = read(customer_stores.mapping_status, sources.names())
    if not status.usable:
        _unusable(status)
    core_scope = sources.scope(scope.stores)
    st.info(
        t(
            "scope_stores",
            stores=", ".join(map(md, scope.stores)),
            origin=origin_label(scope),
            customers=fmt.number(read(customer_stores.scope_customers, core_scope)),
            sources=_sources_text(status),
            at=fmt.moment(status.refreshed_at) if status.refreshed_at else "—",
        ),
        icon=":material/store:",
    )
    if status.without_store:
        st.caption(t("scope_without_store", n=fmt.number(status.without_store)))
    return core_scope


def unscoped_note(user_roles: tuple[str, ...], page_role: str | None) -> None:
    """On an SRE or DPO page: it is not limited to a manager's stores (said above the page)."""
    if page_role in roles.UNSCOPED_ROLES and page_role in user_roles:
        st.caption(t("scope_unscoped", role=t(f"role_{page_role}")), help=t("scope_unscoped_help"))


def scoped_label(label: str, scope: Scope | None) -> str:
    """A total's label, said to be the manager's stores' when the page is scoped."""
    return label if scope is None else t("scope_label", label=label)
