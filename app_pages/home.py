"""Home (the navigation's default page, served at `/`): sends the user on to the first page of their roles."""

from __future__ import annotations

import streamlit as st

from ui.common import current_user
from ui.i18n import t
from ui.navigation import first_page, unknown_path
from ui.safe import md_code

user = current_user()
target = first_page(user.roles if user else ())
if target is None:  # dashboard.py stops users without roles before this; said, not assumed
    st.error(t("no_roles", user=(user.email or user.name) if user else "?"))
    st.stop()
# a URL naming no page (a typo, an old link): Streamlit opened this default page; said, in the page's language, with
# the way on, never a silent forward to another page
missing = unknown_path(st.context.url, st.get_option("server.baseUrlPath"))
if missing is not None:
    st.title(t("not_found_title"))
    st.error(t("not_found", path=md_code(missing)), icon=":material/link_off:")
    st.page_link(target.path, label=t(target.title), icon=target.icon)
    st.stop()
# query parameters go along: `/?lang=en` or an old shared `/?cliente=C9` keeps them on the landing page
st.switch_page(target.path, query_params=st.query_params.to_dict())
