"""The dashboard's pages, who may see them, and the navigation built from them.

Every page is registered for every signed-in user, so every page's URL resolves for everyone:
- a page of the user's roles is listed in the sidebar;
- any other page is registered `visibility="hidden"`: not listed, but its URL opens it and the page's
  own `require_role` refuses with the role it needs (instead of Streamlit's "Page not found" dialog).
The default page is a neutral, hidden home page (`app_pages/home.py`) that sends each user on to the
first page of their roles. A real page must never be the default: Streamlit serves the default page at
`/` and ignores its url_path, so `/erasure?cliente=C9` would be "not found" for a user whose default
page is Erasure (checked with streamlit 1.67).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import streamlit as st

from core import roles
from ui.i18n import t

HOME = "app_pages/home.py"
NOT_FOUND = "app_pages/not_found.py"


@dataclass(frozen=True)
class PageSpec:
    role: str
    path: str
    title: str  # i18n key
    icon: str
    url_path: str
    heading: str  # i18n key of the page's own st.title (the shell shows it while the database starts)


SECTIONS: dict[str, list[PageSpec]] = {
    "section_store": [
        PageSpec(roles.MANAGER, "app_pages/memory.py", "page_memory", ":material/database:", "memory", "memory_title"),
        PageSpec(
            roles.MANAGER,
            "app_pages/preferences.py",
            "page_preferences",
            ":material/tune:",
            "preferences",
            "prefs_title",
        ),
    ],
    "section_ops": [
        PageSpec(
            roles.SRE, "app_pages/sweeps.py", "page_sweeps", ":material/cleaning_services:", "sweeps", "sweeps_title"
        ),
        PageSpec(
            roles.SRE, "app_pages/checkpoints.py", "ckpt_page", ":material/timeline:", "checkpoints", "ckpt_title"
        ),
        PageSpec(
            roles.SRE, "app_pages/degradation.py", "degr_page", ":material/monitor_heart:", "degradation", "degr_title"
        ),
    ],
    "section_dp": [
        PageSpec(
            roles.DPO, "app_pages/erasure.py", "erasure_page", ":material/delete_forever:", "erasure", "erasure_title"
        ),
        PageSpec(
            roles.DPO,
            "app_pages/erasure_register.py",
            "erasure_register_page",
            ":material/fact_check:",
            "erasure-register",
            "erasure_register_title",
        ),
        PageSpec(roles.DPO, "app_pages/access.py", "access_page", ":material/person_search:", "access", "access_title"),
        PageSpec(
            roles.DPO,
            "app_pages/access_register.py",
            "access_register_page",
            ":material/receipt_long:",
            "access-register",
            "access_register_title",
        ),
    ],
}


def spec_for(url_path: str) -> PageSpec | None:
    """The page served at `url_path` (None for home)."""
    return next((p for pages in SECTIONS.values() for p in pages if p.url_path == url_path), None)


def unknown_path(url: str | None, base_url_path: str | None) -> str | None:
    """The path a browser asked for that names no page (`/erasure_register`), read from the URL Streamlit gives the
    default page (st.context.url) without the server's base path; None at the app's root or with no URL (a test).
    Streamlit serves the default page for a URL it does not know: home must say so, not forward to a page."""
    if not url:
        return None
    path = urlsplit(url).path.strip("/")
    base = (base_url_path or "").strip("/")
    if base and (path == base or path.startswith(base + "/")):
        path = path[len(base) :].strip("/")
    if not path or spec_for(path) is not None:
        return None
    return "/" + path


def first_page(user_roles: tuple[str, ...]) -> PageSpec | None:
    """The page a user with these roles lands on (the first of their roles, in menu order)."""
    return next((p for pages in SECTIONS.values() for p in pages if p.role in user_roles), None)


def build(user_roles: tuple[str, ...]):
    """st.navigation over every page: the user's own listed, the others hidden, a hidden home as default."""
    sections: dict[str, list] = {
        "": [st.Page(HOME, title=t("app_title"), icon=":material/home:", default=True, visibility="hidden")]
    }
    # A URL that names no page: registered for this run as a hidden page of its own that says so in the page's
    # language. Otherwise Streamlit shows its own "Page not found" dialog, in English, over the default page.
    missing = unknown_path(st.context.url, st.get_option("server.baseUrlPath"))
    if missing is not None and "/" not in missing.strip("/"):
        sections[""].append(
            st.Page(NOT_FOUND, title=t("not_found_title"), url_path=missing.strip("/"), visibility="hidden")
        )
    for section, pages in SECTIONS.items():
        sections[t(section)] = [
            st.Page(
                p.path,
                title=t(p.title),
                icon=p.icon,
                url_path=p.url_path,
                visibility="visible" if p.role in user_roles else "hidden",
            )
            for p in pages
        ]
    return st.navigation(sections)
