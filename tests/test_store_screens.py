"""Issue 30, store manager: the Memory and Preferences pages read right for a store manager (AppTest on the demo
database; every figure against SQL). Numbers and dates in the UI's language (ui.fmt, Babel), charts sorted with
integer count axes, empty charts and grids said in words."""

from __future__ import annotations

import json
from datetime import date, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from apptools import frame, metric, shown
from babel.dates import format_date
from babel.numbers import format_decimal
from streamlit.testing.v1 import AppTest

from core.memory import preferences

APP = "../dashboard.py"


def es(n) -> str:
    return format_decimal(n, locale="es")


def chart(at, key: str) -> dict:
    return json.loads(
        next(c for c in at.get("plotly_chart") if c.proto.id.endswith(key) or key in c.proto.id).proto.spec
    )


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


@pytest.fixture
def at(demo_db, app_env):
    app_env(demo_db.dsn)
    app = AppTest.from_file(APP, default_timeout=60)
    app.run()
    assert not app.exception
    return app


def test_alarm_links_each_customer_to_their_memory_not_to_erasure(at, demo_db):
    links = list(at.dataframe(key="memory.alarm").value["cliente_id"])
    assert links and all(urlsplit(u).path == "/memory" for u in links)
    assert sorted(parse_qs(urlsplit(u).query)["ns"][0] for u in links) == sorted(
        f"clientes.{c}" for c in demo_db.summary.legacy_customers
    )
    # the link opens the page with that customer's memory
    cid = demo_db.summary.legacy_customers[0]
    at.query_params["ns"] = f"clientes.{cid}"
    at.session_state["memory.ns"] = f"clientes.{cid}"
    at.run()
    assert len(frame(at, "tipo", "valor")) > 4


def test_customer_count_and_figures_in_spanish(at, demo_db):
    customers = demo_db.fetch_one("SELECT count(DISTINCT prefix) AS n FROM store WHERE prefix LIKE 'clientes.%%'")["n"]
    assert customers > 0 and metric(at, "Clientes con preferencias") == es(customers)
    docs = demo_db.fetch_one("SELECT count(*) AS n FROM store")["n"]
    assert metric(at, "Documentos guardados") == es(docs)


def test_search_suggests_existing_customers(at, demo_db):
    at.text_input(key="memory.ns").input("C1").run()
    assert not at.exception
    pills = at.pills(key="memory.suggest")
    sql = [
        r["prefix"]
        for r in demo_db.fetch(
            "SELECT prefix FROM store WHERE split_part(prefix, '.', 2) LIKE 'C1%%' GROUP BY prefix "
            "ORDER BY prefix LIMIT 10"
        )
    ]
    assert len(sql) > 1 and [shown(o) for o in pills.options] == [
        f"{p} ({es(n)})"
        for p, n in ((p, demo_db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix=%s", (p,))["n"]) for p in sql)
    ]
    pills.set_value(sql[1]).run()
    assert not at.exception
    assert at.text_input(key="memory.ns").value == sql[1]
    keys = [r["key"] for r in demo_db.fetch("SELECT key FROM store WHERE prefix=%s ORDER BY key", (sql[1],))]
    assert list(frame(at, "tipo", "valor")["key"]) == keys


@pytest.mark.parametrize("text", ["%", "_", "C_", "\\", "clientes.%"])
def test_search_metacharacters_suggest_nothing(at, text):
    at.text_input(key="memory.ns").input(text).run()
    assert not at.exception and not at.get("button_group")


def test_a_preference_reads_as_tipo_valor_expiry_and_the_conversation_that_wrote_it(at, demo_db):
    row = demo_db.fetch_one(
        "SELECT w.prefix, w.key, w.thread_id FROM core_memory_writes w JOIN store s USING (prefix, key) "
        "WHERE w.key LIKE 'pref-%%' AND w.thread_id IS NOT NULL ORDER BY w.written_at DESC, w.id DESC LIMIT 1"
    )
    at.text_input(key="memory.ns").input(row["prefix"]).run()
    items = frame(at, "tipo", "valor", "expires_at", "ttl_days", "thread_id").set_index("key")
    doc = demo_db.fetch_one("SELECT value FROM store WHERE prefix=%s AND key=%s", (row["prefix"], row["key"]))["value"]
    assert items.loc[row["key"], "tipo"] == doc["tipo"] and items.loc[row["key"], "valor"] == doc["valor"]
    assert items.loc[row["key"], "thread_id"] == row["thread_id"]
    assert (items["ttl_days"] == 365).all() and "value" not in items.columns


def test_charts_sorted_with_integer_count_axes(at, demo_db):
    top = chart(at, "memory.top_chart")
    sql = [
        r["prefix"]
        for r in demo_db.fetch("SELECT prefix FROM store GROUP BY prefix ORDER BY count(*) DESC, prefix LIMIT 20")
    ]
    assert top["layout"]["yaxis"]["categoryarray"] == sql[::-1]  # largest on top
    for axis in (top["layout"]["xaxis"], chart(at, "memory.by_root_chart")["layout"]["yaxis"]):
        assert axis["dtick"] >= 1 and float(axis["dtick"]).is_integer() and axis["tickformat"] == ",d"
        assert axis["range"][0] == 0 and axis["rangemode"] == "nonnegative"
    assert top["layout"]["separators"] == ",."


def test_preferences_chart_has_spanish_months_and_integer_conversation_ticks(at):
    at.switch_page("app_pages/preferences.py").run()
    assert not at.exception
    daily = chart(at, "preferences.daily_chart")
    xaxis = daily["layout"]["xaxis"]
    first = date.today() - timedelta(days=29)
    assert xaxis["ticktext"][0] == format_date(first, "d MMM", locale="es") and len(xaxis["ticktext"]) == 5
    assert not any(m in " ".join(xaxis["ticktext"]) for m in ("Nov", "Dec", "Jan"))
    y2 = daily["layout"]["yaxis2"]
    assert float(y2["dtick"]).is_integer() and y2["tickformat"] == ",d"
    tipo = chart(at, "preferences.tipo_chart")["layout"]["yaxis"]
    assert float(tipo["dtick"]).is_integer()


def test_ratio_says_in_words_where_it_stands_against_the_target(at):
    at.switch_page("app_pages/preferences.py").run()
    m = next(m for m in at.metric if m.label == "Escrituras por conversación")
    assert "," in m.value and ("por encima del objetivo (0,1)" in m.delta or "por debajo del objetivo (0,1)" in m.delta)


def test_writers_paging_has_a_total_and_bounds(at, demo_db):
    at.switch_page("app_pages/preferences.py").run()
    since, until = date.today() - timedelta(days=29), date.today()
    writers = demo_db.fetch_one(
        "SELECT count(DISTINCT thread_id) AS n FROM core_tool_calls WHERE tool = 'recordar_preferencia' "
        "AND ts >= %s::date::timestamp AT TIME ZONE 'UTC' AND ts < (%s::date + 1)::timestamp AT TIME ZONE 'UTC'",
        (since, until),
    )["n"]
    assert 0 < writers <= 50 and preferences.writing_conversation_count(demo_db, since, until) == writers
    # one page: no page box to type 10000 into, and the total said
    assert not [n for n in at.number_input if n.key == "preferences.page"]
    assert any(c.value == f"Filas 1–{es(writers)} de {es(writers)}" for c in at.caption)


def test_preferences_applied_follows_the_period(at, demo_db):
    at.switch_page("app_pages/preferences.py").run()
    since, until = date.today() - timedelta(days=6), date.today()
    at.date_input(key="preferences.period").set_value((since, until)).run()
    assert not at.exception
    applied = preferences.preferences_applied(demo_db, 500, since, until)
    everything = preferences.preferences_applied(demo_db, 500)
    assert 0 < len(applied.proposals) < len(everything.proposals)
    assert metric(at, "Propuestas con preferencia vigente") == es(applied.with_preference)
    caption = next(c.value for c in at.caption if "más recientes del periodo" in c.value)
    assert (
        format_date(since, "medium", locale="es") in caption and f"{es(len(applied.proposals))} propuestas" in caption
    )
    shown = frame(at, "tienda", "canal", "franja", "clock")
    assert set(shown["clock"]) <= {"reproducido (demo)", "escritura del checkpoint"}


def test_empty_store_charts_say_so_in_words(db, app_env):
    app_env(db.dsn, SEED_DEMO="0")
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert not at.get("plotly_chart")
    assert sum("No hay nada que dibujar" in i.value for i in at.info) == 2
    assert not [d for d in at.dataframe if d.key == "memory.by_root"]  # no grid saying "empty" in English


def test_no_jargon_and_english_subtitle(demo_db, app_env):
    app_env(demo_db.dsn)
    for language, jargon in (
        ("es", ("Namespaces", "Vectores", "raíz", "Prefijos", "TTL")),
        ("en", ("Namespaces", "Vectors", "root", "Prefixes", "TTL", "tipos")),
    ):
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params["lang"] = language
        at.run()
        assert not at.exception
        visible = (
            [m.label for m in at.metric]
            + [s.value for s in at.subheader]
            + [at.caption[0].value]
            + [e.label for e in at.expander]
        )
        assert not [v for v in visible if any(j in v for j in jargon)], visible
    assert at.caption[0].value.startswith("What the agents remember")


@pytest.mark.parametrize(
    "language, number, ratio, day",
    [("es", "40.894", "0,117", "30 nov 2026"), ("en", "40,894", "0.117", "Nov 30, 2026")],
)
def test_fmt_writes_numbers_and_dates_in_the_ui_language(monkeypatch, language, number, ratio, day):
    from ui import fmt

    monkeypatch.setattr(fmt, "lang", lambda: language)
    assert (fmt.number(40894), fmt.number(0.11712, 3), fmt.day(date(2026, 11, 30))) == (number, ratio, day)


@pytest.mark.parametrize(
    "largest, step", [(0, 1), (1, 1), (3, 1), (7, 2), (13, 5), (60, 20), (123, 50), (40894, 10000)]
)
def test_count_axis_ticks_are_integers_from_zero(largest, step):
    from ui import fmt

    axis = fmt.count_axis(largest)
    assert axis["dtick"] == step and axis["tick0"] == 0 and axis["range"][0] == 0 and axis["range"][1] >= largest
