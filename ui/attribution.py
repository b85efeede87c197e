"""Page parts for subject attribution (core/privacy/subjects.py): the coverage notice with its fix, the
attributed threads with their sources, and the residue threads with the DPO's decision per thread."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from core.privacy import residue as res
from core.privacy import subjects as subj
from core.privacy.decisions import ERASE, LEAVE
from ui import fmt
from ui.common import call_or_unknown
from ui.i18n import t
from ui.safe import md, md_code
from ui.tables import human_bytes

RESIDUE_KEY = "erasure.residue"  # widget keys: erasure.residue.<n>.decision / .reason


def _holders(customers: int) -> str:
    """Customers holding a value, as counted (up to res.COUNT_CAP)."""
    return f"> {res.COUNT_CAP}" if customers > res.COUNT_CAP else str(customers)


COVERAGE_POLL_S = 2  # while the coverage is being computed, the page looks for it this often
COVERAGE_KEY = "coverage.ready"  # the coverage the fragment found, until the next page run


def page_coverage(attribution: subj.Attribution) -> None:
    """The coverage notice of a page: the stored coverage (on the primary, uncached: one row), or, before one
    exists, that it is being computed (one computation for every session: core.privacy.subjects.stored_coverage),
    replaced by the notice once it is there. Only the fragment reruns: a rerun of the whole page would arrive in the
    middle of what the user is doing (a residue decision being typed was lost that way)."""
    cov = call_or_unknown(subj.stored_coverage, attribution)
    if not isinstance(cov, subj.CoverageComputing):
        coverage_notice(cov)
        return

    @st.fragment(run_every=COVERAGE_POLL_S)
    def computing() -> None:
        ready = st.session_state.get(COVERAGE_KEY)
        if ready is None:
            now = call_or_unknown(subj.stored_coverage, attribution, wait=False)  # one row read; the tick is the wait
            if isinstance(now, subj.Coverage):
                ready = st.session_state[COVERAGE_KEY] = now  # later ticks until the next page run read nothing
        if ready is not None:
            coverage_notice(ready)
        else:
            st.info(t("coverage_computing", s=int(time.time() - cov.since)), icon=":material/hourglass_top:")

    st.session_state.pop(COVERAGE_KEY, None)  # a page run reads the stored coverage afresh
    computing()


def coverage_notice(cov: subj.Coverage | None) -> None:
    """What share of the checkpoint data no source attributes, and how to fix it (shown only when > 0;
    None: it could not be read, which the read already said)."""
    if cov is None or not cov.unattributed_threads:
        return
    st.warning(
        t(
            "erasure_coverage",
            threads=f"{fmt.number(cov.unattributed_threads)} / {fmt.number(cov.threads)}",
            t_share=fmt.percent(cov.thread_share),
            bytes=human_bytes(cov.unattributed_bytes),
            b_share=fmt.percent(cov.byte_share),
        ),
        icon=":material/visibility_off:",
    )
    st.caption(
        t("erasure_coverage_fix")
        + (" " + t("erasure_coverage_query") if cov.query_configured else "")
        + (
            " " + t("erasure_coverage_as_of", run=fmt.sweep_run(cov.sweep_run_id, cov.sweep_started_at, cov.as_of))
            if cov.as_of
            else ""
        )
    )


def show_sources(subjects: subj.Subjects | None) -> None:
    if subjects is None:
        return
    st.subheader(t("erasure_sources_title"))
    st.caption(
        t("erasure_sources_counts", counts=", ".join(f"{md_code(s)} {len(v)}" for s, v in subjects.by_source.items()))
    )
    for source, error in subjects.errors.items():
        st.error(t("erasure_source_error", source=md(source), error=md(error)))
    if subjects.held:  # the threads held now, as every page counts them
        st.dataframe(
            pd.DataFrame(
                {
                    t("erasure_col_thread"): subjects.held,
                    t("erasure_col_sources"): [", ".join(subjects.threads[h]) for h in subjects.held],
                }
            ),
            hide_index=True,
            key="erasure.sources",
        )
    if subjects.server_only:  # never had a checkpoint, or lost it: the server's rows are counted and erased
        st.caption(t("erasure_sources_server_only", n=len(subjects.server_only)))
    gone = len(subjects.threads) - len(subjects.held) - len(subjects.server_only)
    if gone:
        st.caption(t("erasure_sources_gone", n=gone))


def show_residue(residue: res.Residue | None) -> None:
    """Residue threads, each with its matches and a decision (erase / leave with a reason), and the terms table."""
    if residue is None:
        return
    st.subheader(t("erasure_residue_title"))
    if not residue.proposed:
        st.caption(t("erasure_residue_none"))
    else:
        st.caption(t("erasure_residue_caption"))
    for n, thread_id in enumerate(residue.proposed):
        matches = residue.matches_of(thread_id)
        with st.container(border=True):
            if not matches:  # encrypted rows no configured key opens (core.privacy.residue: not_scanned)
                st.warning(t("erasure_residue_not_scanned", thread=md_code(thread_id)), icon=":material/lock:")
            else:
                st.markdown(
                    t(
                        "erasure_residue_thread",
                        thread=md_code(thread_id),
                        term=md(matches[0].term),
                        kind=term_kind(matches[0].kind),
                    )
                )
            st.dataframe(
                pd.DataFrame(
                    {
                        t("erasure_col_term"): [m.term for m in matches],
                        t("erasure_col_customers"): [_holders(m.customers) for m in matches],
                        t("erasure_col_snippet"): [m.snippet for m in matches],
                    }
                ),
                hide_index=True,
                key=f"{RESIDUE_KEY}.{n}.matches",
            )
            left, right = st.columns([1, 2])
            left.radio(
                t("erasure_residue_decision"),
                [ERASE, LEAVE],
                index=None,
                key=f"{RESIDUE_KEY}.{n}.decision",
                horizontal=True,
                format_func=lambda d: t("erasure_residue_erase" if d == ERASE else "erasure_residue_leave"),
            )
            right.text_input(t("erasure_residue_reason"), key=f"{RESIDUE_KEY}.{n}.reason")
            if st.session_state.get(f"{RESIDUE_KEY}.{n}.decision") == LEAVE and not _reason(n):
                right.caption(t("erasure_residue_reason_needed"))
    if residue.common_only:
        st.caption(fmt.count("erasure_common_only", len(residue.common_only)))
    with st.expander(t("erasure_terms_title")):
        st.dataframe(
            pd.DataFrame(
                {
                    t("erasure_col_term"): [x.term for x in residue.terms],
                    t("erasure_col_kind"): [term_kind(x.kind) for x in residue.terms],
                    t("erasure_col_customers"): [_holders(x.customers) for x in residue.terms],
                    t("erasure_col_threads_matched"): [
                        t("erasure_not_counted") if x.threads is None else str(x.threads) for x in residue.terms
                    ],
                    t("erasure_col_common"): [x.common for x in residue.terms],
                }
            ),
            hide_index=True,
            key="erasure.terms",
        )


def term_kind(kind: str) -> str:
    """What kind of residue term (core.privacy.residue: the customer's id or a value of their documents), in words."""
    return t(f"erasure_term_kind_{kind}") if kind in ("id", "value") else md(kind)


def _reason(n: int) -> str:
    return (st.session_state.get(f"{RESIDUE_KEY}.{n}.reason") or "").strip()


def decisions_of(residue: res.Residue | None) -> tuple[dict[str, tuple[str, str]], int]:
    """The DPO's decisions from the widgets, and how many residue threads are still undecided (a leave
    without a reason counts as undecided)."""
    decisions: dict[str, tuple[str, str]] = {}
    undecided = 0
    for n, thread_id in enumerate(residue.proposed if residue else []):
        action = st.session_state.get(f"{RESIDUE_KEY}.{n}.decision")
        reason = _reason(n)
        if action == ERASE or (action == LEAVE and reason):
            decisions[thread_id] = (action, reason)
        else:
            undecided += 1
    return decisions, undecided
