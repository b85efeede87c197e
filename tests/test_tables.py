"""Every dataframe on every page, in both languages, on the demo data: no raw snake_case column name
(every shown column has a label in the UI language) and no "None" (or NaN) cell."""
from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest

RAW_NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
PAGES = ["app_pages/memory.py", "app_pages/preferences.py", "app_pages/sweeps.py", "app_pages/checkpoints.py",
         "app_pages/degradation.py", "app_pages/erasure.py", "app_pages/erasure_register.py"]


def shown_columns(df) -> list[tuple[str, str]]:
    """(column, label as the grid shows it) of each visible column of one st.dataframe."""
    config = json.loads(df.proto.columns or "{}")
    order = list(df.proto.column_order) or [str(c) for c in df.value.columns]
    out = []
    for col in order:
        cfg = config.get(f"column:{col}", config.get(col, {}))
        if cfg.get("hidden"):
            continue
        out.append((col, cfg.get("label") or col))
    return out


def bad_cells(df) -> list[str]:
    frame = df.value
    found = []
    for col in frame.columns:
        for value in frame[col]:
            if value is None or (not isinstance(value, (list, dict, str)) and value != value) or value == "None":
                found.append(f"{col}={value!r}")
                break
    return found


def scan(at: AppTest, page: str) -> list[str]:
    problems = []
    for i, df in enumerate(at.dataframe):
        for col, label in shown_columns(df):
            if RAW_NAME.match(label):
                problems.append(f"{page} table {i}: column {col!r} shown as {label!r}")
        problems += [f"{page} table {i}: empty cell {c}" for c in bad_cells(df)]
    return problems


@pytest.mark.parametrize("lang", ["es", "en"])
def test_no_raw_column_name_nor_none_on_any_page(demo_db, app_env, lang):
    app_env(demo_db.dsn, LOCAL_ROLES="manager,sre,dpo")
    customer = demo_db.fetch_one(
        "SELECT subject_id FROM core_conversations WHERE subject_root = 'clientes' ORDER BY thread_id LIMIT 1")["subject_id"]
    thread = demo_db.fetch_one("SELECT thread_id FROM core_conversations WHERE subject_id = %s LIMIT 1",
                               (customer,))["thread_id"]
    problems, tables = [], 0
    # each page as it opens, then with a thread and a customer picked (their own tables)
    for page, params in [(p, {}) for p in PAGES] + [(p, {"thread": thread, "cliente": customer}) for p in PAGES]:
        at = AppTest.from_file("../dashboard.py", default_timeout=60)
        at.query_params["lang"] = lang
        for name, value in params.items():
            at.query_params[name] = value
        at.run()
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        tables += len(at.dataframe)
        problems += scan(at, page)
    assert tables >= 14
    assert not problems, "\n".join(problems)
