"""Thread search (core/history/thread_search.py) and token usage (core/history/usage.py), both kept by the
extraction pass: on threads written by real langgraph graphs (a stock `create_agent` from the article with stock
savers, and our retail agent), statuses equal what langgraph's own `get_state` says, tokens equal the AI messages'
`usage_metadata`, re-reads add nothing, bad input is refused, and the exporter's metrics pass promtool."""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, date, datetime, timedelta

import pandas as pd
import psycopg
import pytest
from conftest import DIMS
from langgraph.checkpoint.postgres import PostgresSaver
from prometheus_client import generate_latest
from search_agents import FILLER, PRICED_MODEL, STOCK_GRAPH, UNPRICED_MODEL, write_ours, write_stock

from core.config import ModelPrice, load_settings
from core.db import Database
from core.history import thread_search as ts
from core.history import tool_calls, usage
from core.migrate import migrate

PRICES = (ModelPrice(PRICED_MODEL, 0.15, 0.60, 0.075), ModelPrice("scripted-retail", 1.0, 2.0))


@pytest.fixture(scope="module")
def written(create_database):
    """One database: the article's stock agent first (before any migration, as a user's database is), then
    migrated, then our agents on it; extracted once."""
    dsn = create_database(migrated=False, prefix="search")
    stock = write_stock(dsn)
    migrate(dsn, DIMS)
    db = Database(dsn)
    ours = write_ours(db)
    first = tool_calls.extract(db)
    yield db, {**stock.threads, **ours.threads}, first
    db.close()


def found(db, **query) -> set[str]:
    return set(ts.search_threads(db, ts.ThreadQuery(limit=100, **query)).threads["thread_id"])


def test_statuses_equal_langgraphs_own_state(written):
    db, expected, _ = written
    saver = PostgresSaver(db.pool)
    for thread, status in expected.items():
        state = saver.get_tuple({"configurable": {"thread_id": thread}})
        # langgraph's view: pending writes of the latest checkpoint
        channels = {w[1] for w in state.pending_writes}
        truth = "error" if "__error__" in channels else "interrupted" if "__interrupt__" in channels else "idle"
        assert truth == status, thread
    assert (
        found(db, status="interrupted")
        == {t for t, s in expected.items() if s == "interrupted"}
        == {"conv-hitl", "cliente-C2-1"}
    )
    assert found(db, status="error") == {"conv-roto", "cliente-C3-1"}
    assert found(db, status="error", window="1h") == {"conv-roto", "cliente-C3-1"}
    assert found(db, status="finished") == {t for t, s in expected.items() if s == "idle"}
    assert "cliente-C4-1" in found(db, status="finished")  # resumed after its interrupt


def test_presets_answer_the_sres_first_questions(written):
    db, _, _ = written
    stuck = ts.search_threads(db, ts.preset("stuck"))
    assert set(stuck.threads["thread_id"]) == {"conv-hitl", "cliente-C2-1"} and stuck.total == 2
    failed = ts.search_threads(db, ts.preset("failed"))
    assert set(failed.threads["thread_id"]) == {"conv-roto", "cliente-C3-1"}
    # "in the last hour": an hour and a minute later they are out of it
    later = datetime.now(UTC) + timedelta(minutes=61)
    assert ts.search_threads(db, ts.preset("failed"), now=later).total == 0
    assert failed.as_of is not None


def test_metadata_agent_time_sort_paging_and_total(written):
    db, expected, _ = written
    assert found(db, metadata_key="cliente_id", metadata_value="C2") == {"cliente-C2-1"}
    assert found(db, metadata_key="user_id") == {t for t in expected if t.startswith("conv-")}
    assert found(db, metadata_key="user_id", metadata_value="U1") == {
        t for n, t in enumerate(t for t in expected if t.startswith("conv-")) if n % 3 == 1
    }
    assert found(db, agent=STOCK_GRAPH) == {t for t in expected if t.startswith("conv-")}
    assert found(db, agent="atencion-cliente") == {t for t in expected if t.startswith("cliente-")}
    assert found(db, metadata_key="cliente_id", metadata_value="nadie") == set()
    everything = ts.search_threads(db, ts.ThreadQuery(limit=25))
    assert everything.total == len(expected) == FILLER + 9 and len(everything.threads) == 25
    second = ts.search_threads(db, ts.ThreadQuery(limit=25, offset=25))
    assert len(second.threads) == len(expected) - 25 and second.total == everything.total
    assert not set(everything.threads["thread_id"]) & set(second.threads["thread_id"])
    times = list(everything.threads["updated_at"]) + list(second.threads["updated_at"])
    assert times == sorted(times, reverse=True)
    capped = ts.search_threads(db, ts.ThreadQuery(limit=25), count_cap=30)
    assert capped.total == 30 and capped.capped and not everything.capped
    assert ts.agents(db) == sorted({"atencion-cliente", STOCK_GRAPH})
    oldest = ts.search_threads(db, ts.ThreadQuery(order="asc", sort="created_at"))
    assert oldest.threads["thread_id"].iloc[0] == "conv-usage"
    today = date.today().isoformat()
    assert ts.search_threads(db, ts.ThreadQuery.from_params({"from": today, "to": today})).total == len(expected)
    yesterday = (date.today() - timedelta(days=1)).isoformat()
    assert ts.search_threads(db, ts.ThreadQuery.from_params({"to": yesterday})).total == 0


@pytest.mark.parametrize(
    "params, error",
    [
        ({"status": "stuck"}, "status"),
        ({"page": "0"}, "page"),
        ({"limit": "7"}, "limit"),
        ({"from": "2026-13-01"}, "from"),
        ({"meta_value": "C1"}, "metadata_key"),
        ({"sort": "thread_id; DROP TABLE store"}, "sort"),
        ({"window": "2y"}, "window"),
        ({"from": "2026-02-02", "to": "2026-02-01"}, "since"),
        ({"page": "x"}, "page"),
        ({"agent": "a" * 201}, "agent"),
    ],
)
def test_bad_input_is_refused_with_its_name(params, error):
    with pytest.raises(ts.BadQuery, match=error):
        ts.ThreadQuery.from_params(params)


def test_url_parameters_give_the_query_back():
    q = ts.ThreadQuery.from_params(
        {
            "meta_key": "cliente_id",
            "meta_value": "C'1%",
            "status": "error",
            "agent": "x",
            "from": "2026-01-02",
            "to": "2026-01-03",
            "sort": "created_at",
            "order": "asc",
            "limit": "50",
            "page": "3",
        }
    )
    assert ts.ThreadQuery.from_params(q.params()) == q
    assert q.offset == 100 and q.page == 3
    assert ts.ThreadQuery().params() == {}


def test_late_interrupt_write_is_seen_by_the_next_run(create_database):
    """The checkpoint is extracted while its step runs; the interrupt lands afterwards: the next run's re-check
    (no new checkpoint to read) marks the thread interrupted. Red without the re-check."""
    from langchain.agents import create_agent
    from langchain.tools import tool
    from langchain_core.messages import HumanMessage
    from langgraph.types import interrupt
    from search_agents import ModeloGuion, llamada

    db = Database(create_database(prefix="search_late"))
    try:

        @tool
        def aprobar(importe: int) -> str:
            """Pide aprobación humana de un reembolso."""
            tool_calls.extract(db)  # the extraction runs while this step runs
            return str(interrupt({"importe": importe}))

        agent = create_agent(
            ModeloGuion(responses=[llamada("aprobar", 1, importe=30)]),
            tools=[aprobar],
            checkpointer=PostgresSaver(db.pool),
        )
        # durability="sync": the step's checkpoint is saved before its tools run (the default saves it in the
        # background, so under load the extraction inside the tool could run before it lands)
        agent.invoke(
            {"messages": [HumanMessage("Reembolso de 30")]},
            config={"configurable": {"thread_id": "late"}},
            durability="sync",
        )
        assert found(db, status="interrupted") == set()  # extracted before the write
        # one re-check at a time across processes: while another holds it, a run skips (and waits for nothing)
        with psycopg.connect(db.dsn) as other, other.transaction():
            other.execute("SELECT pg_advisory_xact_lock(%s)", (tool_calls.STATUS_LOCK_ID,))
            skipped = tool_calls.extract(db)
        assert skipped.statuses_skipped and skipped.statuses == 0
        assert found(db, status="interrupted") == set()
        again = tool_calls.extract(db)
        assert again.checkpoints == 0 and again.statuses == 1 and not again.statuses_skipped
        assert found(db, status="interrupted") == {"late"}
    finally:
        db.close()


# --- tokens and cost -------------------------------------------------------------------------------------


def test_tokens_equal_the_messages_usage_metadata(written):
    db, expected, first = written
    saver = PostgresSaver(db.pool)
    for thread in expected:
        state = saver.get_tuple({"configurable": {"thread_id": thread}})
        msgs = [m for m in state.checkpoint["channel_values"].get("messages", []) if getattr(m, "usage_metadata", None)]
        got = usage.thread_usage(db, thread, PRICES)
        assert int(got["input_tokens"].sum()) == sum(m.usage_metadata["input_tokens"] for m in msgs), thread
        assert int(got["output_tokens"].sum()) == sum(m.usage_metadata["output_tokens"] for m in msgs), thread
        assert int(got["cached_tokens"].sum()) == sum(
            m.usage_metadata.get("input_token_details", {}).get("cache_read", 0) for m in msgs
        ), thread
    usage_row = usage.thread_usage(db, "conv-usage", PRICES).iloc[0]
    assert (usage_row.model, usage_row.input_tokens, usage_row.output_tokens, usage_row.cached_tokens) == (
        PRICED_MODEL,
        2500,
        50,
        2200,
    )
    # (2500 - 2200) x 0.15 + 2200 x 0.075 + 50 x 0.60, per million
    assert usage_row.cost_usd == pytest.approx((300 * 0.15 + 2200 * 0.075 + 50 * 0.60) / 1e6)
    ours = usage.thread_usage(db, "cliente-C1-1", PRICES)
    assert list(ours["model"]) == ["scripted-retail"] and ours["input_tokens"].iloc[0] > 0
    assert first.usages > 0


def test_no_usage_and_no_price_are_said_never_zero(written):
    db, expected, _ = written
    today = date.today()
    threads = usage.usage_by_thread(db, today, today, PRICES).set_index("thread_id")
    assert len(threads) == len(expected)
    none = threads.loc["conv-sin-uso"]
    assert none["note"] == "no_usage" and pd.isna(none["cost_usd"]) and pd.isna(none["input_tokens"])
    unpriced = threads.loc["conv-sin-precio"]
    assert unpriced["note"] == "no_price" and unpriced["no_price"] == UNPRICED_MODEL and pd.isna(unpriced["cost_usd"])
    assert unpriced["input_tokens"] == 500
    assert threads.loc["conv-usage", "note"] == "" and threads.loc["conv-usage", "cost_usd"] > 0
    # without any price table, nothing is free: every used model is "no price"
    bare = usage.usage_by_thread(db, today, today, ()).set_index("thread_id")
    assert bare.loc["conv-usage", "note"] == "no_price" and pd.isna(bare.loc["conv-usage", "cost_usd"])


def test_per_agent_and_per_day_add_up_and_rereads_add_nothing(written):
    db, expected, _ = written
    today = date.today()
    before = usage.usage_by_agent(db, today, today, PRICES)
    tool_calls.extract(db, lookback=timedelta(days=3650))  # re-read the whole history
    after = usage.usage_by_agent(db, today, today, PRICES)
    assert before.equals(after)
    threads = usage.usage_by_thread(db, today, today, PRICES)
    used = threads[threads["note"] != "no_usage"]
    assert int(after["input_tokens"].sum()) == int(used["input_tokens"].sum())
    by_agent = after.set_index("agent")
    assert set(by_agent.index) == {STOCK_GRAPH, "atencion-cliente"}
    assert by_agent.loc[STOCK_GRAPH, "note"] == "no_price"  # one of its models has no price
    days = usage.usage_by_day(db, today, today, PRICES)
    assert list(days["day"].unique()) == [today]
    assert int(days["output_tokens"].sum()) == int(after["output_tokens"].sum())


def test_prices_are_validated():
    with pytest.raises(ValueError, match="gpt.input must be a number"):
        load_settings({"model_prices": {"gpt": {"input": "caro", "output": 1}}})
    with pytest.raises(ValueError, match="needs input and output"):
        load_settings({"model_prices": {"gpt": {"input": 1}}})
    with pytest.raises(ValueError, match=">= 0"):
        load_settings({"model_prices": {"gpt": {"input": -1, "output": 1}}})
    got = load_settings({"PG_AGENTES": "postgresql://x/y", "model_prices": {"gpt": {"input": 1, "output": 2}}})
    assert got.model_prices == (ModelPrice("gpt", 1.0, 2.0),)


def test_exporter_metrics_pass_promtool(written):
    from core.operations.exporter import make_registry

    db, expected, _ = written
    text = generate_latest(make_registry(db.dsn, prices=PRICES)).decode()
    assert 'agent_memory_threads{status="interrupted"} 2.0' in text
    assert 'agent_memory_threads{status="error"} 2.0' in text
    assert 'agent_memory_threads{status="idle"}' not in text  # counting the idle million would be linear
    assert f'agent_memory_llm_tokens{{agent="{STOCK_GRAPH}",kind="input",model="{PRICED_MODEL}"}} 3400.0' in text
    assert f'agent_memory_llm_cost_usd{{agent="{STOCK_GRAPH}",model="{UNPRICED_MODEL}"}}' not in text
    assert "agent_memory_llm_unpriced_models 1.0" in text
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    run = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_demo_shows_tokens_and_cost(demo_db):
    """The demo's scripted model reports usage like a hosted model, priced by the embedded default's table."""
    from core.config import DEMO_PRICES

    tool_calls.extract(demo_db)  # what the sweep job / a page view does
    by_agent = usage.usage_by_agent(demo_db, date.today() - timedelta(days=60), date.today(), DEMO_PRICES)
    assert not by_agent.empty and set(by_agent["models"]) == {"scripted-retail"}
    assert (by_agent["note"] == "").all() and (by_agent["cost_usd"] > 0).all()
    assert (by_agent["cached_tokens"] > 0).any() and (by_agent["output_tokens"] > 0).all()
    assert load_settings({}).model_prices == DEMO_PRICES  # no PG_AGENTES: the embedded demo prices its model
