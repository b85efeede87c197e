"""AppTest of the Checkpoints page's thread search and tokens/cost views (ui/thread_search.py, ui/thread_cost.py) on
threads written by real graphs (tests/search_agents.py): the SRE's two questions one click each, the search in the
URL, paging with the total, bad input refused with nothing read, "no usage data" and "no price" said in words."""

from __future__ import annotations

import json

from apptools import as_int, frame, metric
from search_agents import PRICED_MODEL, UNPRICED_MODEL
from streamlit.testing.v1 import AppTest
from test_thread_search import written  # noqa: F401  (the module's database)

APP = "../dashboard.py"
PAGE = "app_pages/checkpoints.py"
PRICES = json.dumps({PRICED_MODEL: {"input": 0.15, "output": 0.6, "cached_input": 0.075}})


def open_page(dsn: str, app_env, query: dict) -> AppTest:
    app_env(dsn, MODEL_PRICES=PRICES)
    at = AppTest.from_file(APP, default_timeout=60)
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
