"""AppTest of the Checkpoints page's thread search and tokens/cost views (ui/thread_search.py, ui/thread_cost.py) on
threads written by real graphs (tests/search_agents.py): the SRE's two questions one click each, the search in the
URL, paging with the total, bad input refused with nothing read, "no usage data" and "no price" said in words."""

from __future__ import annotations

import json
import re

from apptools import as_int, chart_clock, frame, grid_clock, metric
from search_agents import PRICED_MODEL, UNPRICED_MODEL
from streamlit.testing.v1 import AppTest
from test_thread_search import written  # noqa: F401  (the module's database)

APP = "../dashboard.py"
PAGE = "app_pages/checkpoints.py"
PRICES = json.dumps({PRICED_MODEL: {"input": 0.15, "output": 0.6, "cached_input": 0.075}})


def open_page(dsn: str, app_env, query: dict, tz: str | None = None) -> AppTest:
    app_env(dsn, MODEL_PRICES=PRICES)
    at = AppTest.from_file(APP, default_timeout=60)
    if tz:
        at.context["timezone"] = tz
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception
    return at


def threads(at) -> set[str]:
    return set(frame(at, "thread_id", "status")["thread_id"])


def test_stuck_and_failed_are_one_click_and_live_in_the_url(written, app_env):  # noqa: F811 (the imported fixture)
    db, expected, _ = written
    at = open_page(db.dsn, app_env, {"view": "search"})
    assert as_int(metric(at, "Hilos encontrados")) == len(expected)
    at.button(key="checkpoints.search.stuck").click().run()
    assert not at.exception
    assert threads(at) == {"conv-hitl", "cliente-C2-1"} and as_int(metric(at, "Hilos encontrados")) == 2
    assert at.query_params["status"] == "stopped" and at.query_params["view"] == "search"
    at.button(key="checkpoints.search.failed").click().run()
    assert threads(at) == {"conv-roto", "cliente-C3-1"}
    assert at.query_params["window"] == "1h"
    # the URL alone gives the same search (a shared link)
    shared = open_page(db.dsn, app_env, {"view": "search", "status": "error", "window": "1h"})
    assert threads(shared) == {"conv-roto", "cliente-C3-1"}
    assert set(frame(shared, "thread_id", "status")["status"]) == {"Con error"}


def test_form_filters_and_paging(written, app_env):  # noqa: F811 (the imported fixture)
    db, expected, _ = written
    at = open_page(db.dsn, app_env, {"view": "search"})
    assert len(frame(at, "thread_id", "status")) == 25
    at.button(key="checkpoints.search.next").click().run()
    assert not at.exception and at.query_params["page"] == "2"
    assert len(frame(at, "thread_id", "status")) == len(expected) - 25
    at.text_input(key="checkpoints.search.meta_key").input("cliente_id")
    at.text_input(key="checkpoints.search.meta_value").input("C2")
    at.button(key="FormSubmitter:checkpoints.search.form-Buscar").click().run()
    assert not at.exception
    assert threads(at) == {"cliente-C2-1"} and "page" not in at.query_params
    assert at.query_params["meta_key"] == "cliente_id" and at.query_params["meta_value"] == "C2"


def test_bad_url_is_refused_and_reads_nothing(written, app_env):  # noqa: F811 (the imported fixture)
    db, _, _ = written
    at = open_page(db.dsn, app_env, {"view": "search", "status": "atascado"})
    assert any("status" in e.value for e in at.error)
    assert not [df for df in at.dataframe if "status" in df.value.columns]


def test_cost_view_says_no_usage_and_no_price(written, app_env):  # noqa: F811 (the imported fixture)
    db, _, _ = written
    at = open_page(db.dsn, app_env, {"view": "cost"})
    per_thread = frame(at, "thread_id", "cost_usd").set_index("thread_id")
    assert per_thread.loc["conv-sin-uso", "note"] == "Sin datos de uso"
    assert per_thread.loc["conv-sin-precio", "note"] == f"Sin precio: {UNPRICED_MODEL}"
    # (2500 - 2200) x 0.15 + 2200 x 0.075 + 50 x 0.60 per million: $0.000240, never rounded to a free-looking 0
    assert not per_thread.loc["conv-usage", "note"] and per_thread.loc["conv-usage", "cost_usd"] == "$0,000240"
    assert per_thread.loc["conv-sin-uso", "cost_usd"] == per_thread.loc["conv-sin-precio", "cost_usd"] == "—"
    assert any(UNPRICED_MODEL in w.value for w in at.warning)
    agents = frame(at, "agent", "cost_usd")
    assert "cliente-stock" in set(agents["agent"])


def test_thread_view_shows_its_tokens_or_says_there_are_none(written, app_env):  # noqa: F811 (the imported fixture)
    db, _, _ = written
    at = open_page(db.dsn, app_env, {"thread": "conv-usage"})
    assert any("2.500 de entrada (2.200 en caché), 50 de salida" in c.value for c in at.caption)
    at = open_page(db.dsn, app_env, {"thread": "conv-sin-uso"})
    assert any("sin datos de uso" in c.value for c in at.caption)


def test_one_time_zone_per_page(written, app_env):  # noqa: F811 (the imported fixture)
    """The viewer's zone everywhere on the page: the thread's timeline chart draws each step at the clock time its
    row in the steps' table shows; the search's summary, its date filter and the cost view's days name it or their
    UTC day once; the daily chart's ticks are Spanish days, its table's days the grid's dates."""
    db, _, _ = written
    tz = "Asia/Kolkata"  # UTC+5:30: no clock time in it reads like the UTC one
    at = open_page(db.dsn, app_env, {"thread": "conv-usage"}, tz=tz)
    fig = json.loads(next(c for c in at.get("plotly_chart")).proto.spec)
    dots = sorted(x for tr in fig["data"] if tr.get("mode") == "markers" for x in chart_clock(tr["x"]))
    # the steps' table (its own columns: the answers' table of issue 56 also has checkpoint_id, step and ts)
    steps = ("checkpoint_id", "step", "source", "updated_channels")
    in_utc = sorted(f"{v:%Y-%m-%d %H:%M:%S}" for v in frame(at, *steps, "ts")["ts"])
    assert dots and dots == sorted(grid_clock(at, "ts", *steps)) and dots != in_utc
    assert fig["layout"]["xaxis"]["title"]["text"] == f"Fecha y hora ({tz})"
    assert fig["layout"]["xaxis"]["hoverformat"].endswith(f" {tz}")
    # the ticks name the viewer's clock: each tick's value (a wall-clock time) is the time its text reads
    for value, text in zip(fig["layout"]["xaxis"]["tickvals"], fig["layout"]["xaxis"]["ticktext"], strict=True):
        assert str(value)[11:16] in text, (value, text)

    search = open_page(db.dsn, app_env, {"view": "search"}, tz=tz)
    as_of = next(c.value for c in search.caption if c.value.startswith("Resumen de hilos a"))
    assert as_of.count(tz) == 1 and "UTC" not in as_of
    assert search.date_input(key="checkpoints.search.period").label == f"Entre fechas (días en {tz})"

    cost = open_page(db.dsn, app_env, {"view": "cost"}, tz=tz)
    axis = json.loads(cost.get("plotly_chart")[0].proto.spec)["layout"]["xaxis"]
    assert axis["ticktext"] and all(re.fullmatch(r"\d{1,2} [a-z]{3}", t) for t in axis["ticktext"]), axis["ticktext"]
    days = next(df for df in cost.dataframe if {"day", "agent"} <= set(df.value.columns))
    assert json.loads(days.proto.columns)["day"]["type_config"] == {"type": "date", "format": "DD/MM/YYYY"}
    assert [c.value for c in cost.markdown].count("**Por día (UTC)**") == 1
