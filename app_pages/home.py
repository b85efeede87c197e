"""Home (the navigation's default page, served at `/`): sends the user on to the first page of their roles."""

from __future__ import annotations

import streamlit as st

from ui.common import current_user
from ui.i18n import t
from ui.navigation import first_page

user = current_user()
target = first_page(user.roles if user else ())
if target is None:  # dashboard.py stops users without roles before this; said, not assumed
    st.error(t("no_roles", user=(user.email or user.name) if user else "?"))
    st.stop()
# query parameters go along: `/?lang=en` or an old shared `/?cliente=C9` keeps them on the landing page
st.switch_page(target.path, query_params=st.query_params.to_dict())
