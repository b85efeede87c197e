"""Tokens and cost from the AI messages' `usage_metadata` (model from `response_metadata`), per thread, per agent
and per day. The extraction pass (core/history/tool_calls.py) keeps `core_message_usage` and its rollups
(migration 080); this module reads them and applies the configured prices (core.config.ModelPrice, USD per
million tokens) at read time, so a corrected price applies to the past too.

Never "free" by accident: a thread whose messages carry no usage metadata is `note = "no_usage"` (tokens and cost
empty, not 0), a thread where only some AI messages carry it has `without_usage` > 0 (partial figures, said so), and
tokens of a model without a price leave the cost empty for that part with the model named in `no_price`. Input
tokens include the cached ones (LangChain's convention): the cost is (input - cached) x input price + cached x cached
price + output x output price.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

import numpy as np
import pandas as pd

from core.config import ModelPrice
from core.db import Database

TOKENS = ["messages", "input_tokens", "output_tokens", "cached_tokens"]

SELECT_THREAD = """
SELECT model, agent, messages, input_tokens, output_tokens, cached_tokens,
       (SELECT count(*) FROM core_message_no_usage n WHERE n.thread_id = %(thread_id)s) AS without_usage
FROM core_usage_threads WHERE thread_id = %(thread_id)s ORDER BY model"""

# The threads last active in the period (the thread search's summary), most recent first, with their usage (none:
# no row in core_usage_threads).
SELECT_THREADS = """
WITH threads AS (
    SELECT thread_id, agent, updated_at FROM core_thread_summary
    WHERE updated_at >= %(since)s AND updated_at < %(until)s
    ORDER BY updated_at DESC, thread_id DESC LIMIT %(limit)s
)
SELECT t.thread_id, coalesce(t.agent, '') AS agent, t.updated_at, nu.n AS without_usage, u.model, u.messages,
       u.input_tokens, u.output_tokens, u.cached_tokens
FROM threads t LEFT JOIN core_usage_threads u ON u.thread_id = t.thread_id
CROSS JOIN LATERAL (SELECT count(*) AS n FROM core_message_no_usage n WHERE n.thread_id = t.thread_id) nu
ORDER BY t.updated_at DESC, t.thread_id DESC"""

SELECT_DAYS = """
SELECT day, agent, model, messages, input_tokens, output_tokens, cached_tokens
FROM core_usage_days WHERE day >= %(since)s AND day <= %(until)s"""

SELECT_TOTALS = """
SELECT agent, model, sum(messages)::bigint AS messages, sum(input_tokens)::bigint AS input_tokens,
       sum(output_tokens)::bigint AS output_tokens, sum(cached_tokens)::bigint AS cached_tokens
FROM core_usage_days GROUP BY agent, model ORDER BY agent, model"""


def price_of(prices: Iterable[ModelPrice], model: str) -> ModelPrice | None:
    return next((p for p in prices if p.model == model), None)


def priced(frame: pd.DataFrame, prices: Iterable[ModelPrice]) -> pd.DataFrame:
    """`frame` (model + token columns, one row per model) with `cost_usd` (NaN: the model has no price)."""
    prices = tuple(prices)
    costs = []
    for row in frame.itertuples():
        p = price_of(prices, row.model)
        if p is None or pd.isna(row.input_tokens):
            costs.append(np.nan)
            continue
        cached_price = p.input if p.cached_input is None else p.cached_input
        costs.append(
            (
                (row.input_tokens - row.cached_tokens) * p.input
                + row.cached_tokens * cached_price
                + row.output_tokens * p.output
            )
            / 1e6
        )
    return frame.assign(cost_usd=costs)


def _rollup(frame: pd.DataFrame, keys: list[str], prices: Iterable[ModelPrice]) -> pd.DataFrame:
    """Per `keys`: tokens summed, models, cost of the priced models (NaN when none is priced), the models without a
    price (`no_price`), and `note`: 'no_usage' (no usage metadata at all), 'no_price' (some tokens unpriced)."""
    rows = []
    for key, group in priced(frame, prices).groupby(keys, sort=False, dropna=False):
        used = group[group["model"].notna()]
        key = key if isinstance(key, tuple) else (key,)
        if used.empty:
            rows.append(
                {
                    **dict(zip(keys, key, strict=True)),
                    **{c: None for c in TOKENS},
                    "models": "",
                    "cost_usd": None,
                    "no_price": "",
                    "note": "no_usage",
                }
            )
            continue
        unpriced = sorted(m or "?" for m in used.loc[used["cost_usd"].isna(), "model"].unique())
        cost = used["cost_usd"].sum(min_count=1)
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                **{c: int(used[c].sum()) for c in TOKENS},
                "models": ", ".join(sorted(m or "?" for m in used["model"].unique())),
                "cost_usd": None if pd.isna(cost) else float(cost),
                "no_price": ", ".join(unpriced),
                "note": "no_price" if unpriced else "",
            }
        )
    return pd.DataFrame(rows, columns=[*keys, *TOKENS, "models", "cost_usd", "no_price", "note"])


def thread_usage(db: Database, thread_id: str, prices: tuple[ModelPrice, ...]) -> pd.DataFrame:
    """One thread's usage per model (empty: its messages carry no usage metadata, or it was not extracted yet);
    `without_usage`: its AI messages without usage metadata (their tokens are not counted: the figures are partial)."""
    frame = pd.DataFrame(
        db.ours.fetch(SELECT_THREAD, {"thread_id": thread_id}), columns=["model", "agent", *TOKENS, "without_usage"]
    )
    return priced(frame, prices)


def usage_by_thread(
    db: Database, since: date, until: date, prices: tuple[ModelPrice, ...], limit: int = 100
) -> pd.DataFrame:
    """The `limit` threads last active in [since, until] (UTC days) with tokens and cost; a thread without usage
    metadata is listed with note 'no_usage'; `without_usage`: its AI messages without usage metadata (partial)."""
    frame = pd.DataFrame(
        db.ours.fetch(SELECT_THREADS, {"since": since, "until": until + pd.Timedelta(days=1), "limit": limit}),
        columns=["thread_id", "agent", "updated_at", "without_usage", "model", *TOKENS],
    )
    return _rollup(frame, ["thread_id", "agent", "updated_at", "without_usage"], prices)


def usage_by_day(db: Database, since: date, until: date, prices: tuple[ModelPrice, ...]) -> pd.DataFrame:
    """Per UTC day and agent (agent '' = none named): tokens and cost, days without usage left out."""
    frame = pd.DataFrame(
        db.ours.fetch(SELECT_DAYS, {"since": since, "until": until}), columns=["day", "agent", "model", *TOKENS]
    )
    return _rollup(frame.sort_values(["day", "agent"]), ["day", "agent"], prices)


def usage_by_agent(db: Database, since: date, until: date, prices: tuple[ModelPrice, ...]) -> pd.DataFrame:
    """Per agent over [since, until]: tokens and cost."""
    frame = pd.DataFrame(
        db.ours.fetch(SELECT_DAYS, {"since": since, "until": until}), columns=["day", "agent", "model", *TOKENS]
    )
    return _rollup(
        frame.drop(columns="day").groupby(["agent", "model"], as_index=False).sum().sort_values("agent"),
        ["agent"],
        prices,
    )


def priced_totals(rows: list[dict], prices: tuple[ModelPrice, ...]) -> pd.DataFrame:
    """SELECT_TOTALS' rows (all-time tokens per agent and model, the exporter's metrics) with their cost."""
    return priced(pd.DataFrame(rows, columns=["agent", "model", *TOKENS]), prices)
