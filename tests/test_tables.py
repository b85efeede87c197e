"""Every dataframe on every page, in both languages, on the demo data: no raw snake_case column name
(every shown column has a label in the UI language) and no "None" (or NaN) cell. And how one table shows its
numbers, durations and dates: still numbers and instants (the grid sorts them as such), read in the UI's language."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from streamlit import dataframe_util
from streamlit.testing.v1 import AppTest

RAW_NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
PAGES = [
    "app_pages/memory.py",
    "app_pages/preferences.py",
    "app_pages/sweeps.py",
    "app_pages/checkpoints.py",
    "app_pages/degradation.py",
    "app_pages/erasure.py",
    "app_pages/erasure_register.py",
]


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
    """Cells the grid shows as "None" (or NaN): a missing value, but for a missing number, instant or link in a grid
    whose placeholder (what it draws for those) is "—" (a LinkColumn's missing cell is drawn as the placeholder, no
    link: a row of no customer)."""
    frame = df.value
    placeholder = df.proto.placeholder == "—"
    config = json.loads(df.proto.columns or "{}")
    found = []
    for col in frame.columns:
        kind = (config.get(f"column:{col}", config.get(col, {})).get("type_config") or {}).get("type")
        typed = (
            pd.api.types.is_numeric_dtype(frame[col])
            or pd.api.types.is_datetime64_any_dtype(frame[col])
            or kind == "link"
        )
        for value in frame[col]:
            missing = value is None or (not isinstance(value, (list, dict, str)) and value != value)
            if (missing and not (placeholder and typed)) or value == "None":
                found.append(f"{col}={value!r}")
                break
    return found


def display_texts(df) -> pd.DataFrame:
    """What the grid writes in each cell of a table shown through a Styler (its display values)."""
    return dataframe_util.convert_arrow_bytes_to_pandas_df(df.proto.arrow_data.styler.display_values)


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
        "SELECT subject_id FROM core_conversations WHERE subject_root = 'clientes' ORDER BY thread_id LIMIT 1"
    )["subject_id"]
    thread = demo_db.fetch_one("SELECT thread_id FROM core_conversations WHERE subject_id = %s LIMIT 1", (customer,))[
        "thread_id"
    ]
    assert not (problems := every_page(lang, thread, customer, at_least=14)), "\n".join(problems)


@pytest.mark.parametrize("lang", ["es", "en"])
def test_every_page_on_the_article_agents_database(article_agents_db, app_env, lang):
    """The same scan on a database only the articles' stock agents wrote (no metadata, `conv-<uuid>` threads)."""
    app_env(article_agents_db.dsn, LOCAL_ROLES="manager,sre,dpo")
    written = next(c for c in article_agents_db.conversations if c.kind == "write")
    assert not (problems := every_page(lang, written.thread_id, written.customer, at_least=16)), "\n".join(problems)


def every_page(lang: str, thread: str, customer: str, at_least: int) -> list[str]:
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
    assert tables >= at_least
    return problems


def _mixed_table() -> None:
    import pandas as pd

    from ui.tables import table

    table(
        pd.DataFrame(
            {
                "ratio": [9.25, 10.5, None, 2.5],
                "seconds_degraded": [125.0, 3780.0, None, 0.421518999],
                "requested_at": pd.to_datetime(
                    ["2026-12-04 16:52:03", "2026-11-30 09:05:00", None, "2026-12-01 00:00:00"], utc=True
                ),
                "turns": [1234, 5, 60, 7],
                "denials_count": [3, None, 1200, 0],  # an integer column with a missing value stays integers
                "resync_ms": [1234.4, 0.6, None, 12.0],  # milliseconds read whole
            }
        ),
        key="mixed",
    )


@pytest.mark.parametrize(
    "lang, ratio, at, turns, duration",
    [
        ("es", ["9,25", "10,50", "—", "2,50"], "DD/MM/YYYY, HH:mm:ss", "%'.,d", "Tiempo degradada (h:mm:ss)"),
        ("en", ["9.25", "10.50", "—", "2.50"], "MMM D, YYYY, h:mm:ss A", "%,d", "Time degraded (h:mm:ss)"),
    ],
)
def test_decimals_durations_and_dates_stay_sortable_and_read_in_the_ui_language(
    monkeypatch, lang, ratio, at, turns, duration
):
    monkeypatch.delenv("PG_AGENTES", raising=False)
    monkeypatch.setenv("LOCAL_ROLES", "manager")
    app = AppTest.from_function(_mixed_table, default_timeout=30)
    app.query_params["lang"] = lang
    app.run()
    assert not app.exception
    df = app.dataframe[0]
    frame, config = df.value, json.loads(df.proto.columns)
    # the grid sorts what it holds: numbers, durations and instants, never their text ("10,50" before "9,25")
    assert str(frame["ratio"].dtype) == "float64"
    assert pd.api.types.is_timedelta64_dtype(frame["seconds_degraded"])
    assert frame["seconds_degraded"].dt.total_seconds().tolist()[:2] == [125.0, 3780.0]
    assert pd.isna(frame["seconds_degraded"][2]) and frame["seconds_degraded"][3].total_seconds() == 0.42
    assert pd.api.types.is_datetime64_any_dtype(frame["requested_at"])
    assert pd.api.types.is_integer_dtype(frame["denials_count"]) and pd.isna(frame["denials_count"][1])
    # a decimal: a printf or named format of its own would win over the text in the UI's language
    assert config["ratio"]["type_config"]["type"] == "number" and "format" not in config["ratio"]["type_config"]
    # a duration: the grid's clock, the same in every language, named in the label (no per-cell Styler text)
    assert config["seconds_degraded"]["type_config"] == {"type": "number", "format": "compact"}
    assert config["seconds_degraded"]["label"] == duration
    # instants drawn by the grid (no per-cell Styler text: its cost per run, BENCHMARKS.md "Many sessions"), in the
    # viewer's zone, in the UI language's form (numeric in Spanish: the grid's moment.js knows English months only)
    assert config["requested_at"]["type_config"] == {"type": "datetime", "format": at, "timezone": "UTC"}
    assert config["requested_at"]["label"].endswith("(UTC)")
    texts = display_texts(df)  # only the decimals go through the Styler
    assert texts["ratio"].tolist() == ratio
    assert df.proto.placeholder == "—"  # a missing number, duration or date
    assert config["turns"]["type_config"]["format"] == turns
    assert config["denials_count"]["type_config"]["format"] == turns
    assert config["resync_ms"]["type_config"]["format"] == turns
    assert frame["resync_ms"].tolist()[:2] == [1234, 1] and frame["resync_ms"].tolist()[3] == 12


def _integers_and_durations() -> None:
    import pandas as pd

    from ui.tables import table

    table(
        pd.DataFrame({"seconds_degraded": [125.0, 3780.0], "denials_count": [3, None], "resync_ms": [0.4, 1.6]}),
        key="no styler",
    )


def test_a_table_without_decimals_is_no_styler(monkeypatch):
    """Durations and integers with missing values are drawn by the grid itself: no Styler display values, whose
    cell-by-cell rendering on every run is what a busy dashboard spent its time on."""
    monkeypatch.delenv("PG_AGENTES", raising=False)
    monkeypatch.setenv("LOCAL_ROLES", "manager")
    app = AppTest.from_function(_integers_and_durations, default_timeout=30)
    app.run()
    assert not app.exception
    assert not app.dataframe[0].proto.arrow_data.styler.display_values
