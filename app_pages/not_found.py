"""Not found: a URL that names no page of the dashboard (a typo, an old link), in the page's language, with the way
on to the user's first page (ui.navigation registers this page at the URL that was asked for)."""

from __future__ import annotations

import streamlit as st

from ui.common import current_user
from ui.i18n import t
from ui.navigation import first_page, unknown_path
from ui.safe import md_code

user = current_user()
target = first_page(user.roles if user else ())
missing = unknown_path(st.context.url, st.get_option("server.baseUrlPath")) or "?"
st.title(t("not_found_title"))
st.error(t("not_found", path=md_code(missing)), icon=":material/link_off:")
if target is not None:
    st.page_link(target.path, label=t(target.title), icon=target.icon)
