"""Every table of every page goes through `table()`: one place that turns a core DataFrame into what a
person reads, through `st.column_config` and, for decimals only, a pandas Styler's display texts:

- column labels in the UI language (`col_<name>` strings in ui/i18n.py; a column without one keeps its
  raw name, which tests/test_tables.py catches on every page);
- numbers, durations and dates stay numbers, durations and datetimes, so the grid sorts them as such, and read in
  the UI's language whatever the browser's locale: integers (also with missing values) through a printf format with
  that language's thousands separator; durations as the grid's clock, `h:mm:ss` (the same in every language, named in
  the label); decimals through the Styler's texts from ui.fmt (Streamlit shows a Styler's text in a number column
  that has no `format` of its own; its "localized" formats follow the browser's language, and printf has no decimal
  comma). The Styler is the one per-run cost that grows with a table (Streamlit re-renders it cell by cell on every
  run: BENCHMARKS.md, "Many sessions"), so nothing else goes through it; ids plain;
- dates drawn by the grid in the viewer's time zone (st.context.timezone, UTC when the browser does not say), the
  zone named in the column's label, in the UI language's form (DATE_FORMAT);
- empty cells as "—", never "None" (the grid's placeholder for a missing number or date);
- thread ids linking to the Checkpoints page (`?thread=`) and customer ids to where the reader came from: on a
  store manager's page to the customer's memory (Memory `?ns=clientes.<id>`), on an SRE's to their threads
  (Checkpoints `?cliente=`), on the DPO's to their erasure (Erasure `?cliente=`): the page's role
  (ui.common.page_role), when the viewer has it; unless the page names its own `links`.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, NamedTuple
from urllib.parse import quote

import pandas as pd
import streamlit as st

from core import roles
from ui import fmt
from ui.common import DERIVED_TTL
from ui.i18n import STRINGS, lang, t

EMPTY = "—"
THREAD_COLUMNS = frozenset({"thread_id"})
CUSTOMER_COLUMNS = frozenset({"customer_id", "cliente_id"})
# Numbers that are identifiers or steps: no thousands separator.
PLAIN_NUMBERS = frozenset(
    {"id", "pid", "step", "idx", "episode_id", "request_id", "version", "old_version", "new_version"}
)
# Seconds shown as a duration, the grid's clock ("00:02:05", "25:01:01", "00:00:00.42"), sorted as durations
DURATION_COLUMNS = frozenset({"seconds", "seconds_degraded", "seconds_to_zero", "heartbeat_age_s", "reading_age_s"})
DURATION_FORMAT = "h:mm:ss"  # named in the label: a clock alone could read as a time of day
# Streamlit's printf formats: `,` groups thousands with a comma, `'.` before it makes the separator a dot
INTEGER_FORMAT = {"es": "%'.,d", "en": "%,d"}
# Instants drawn by the grid itself (moment.js formats, in the viewer's zone): no Styler, whose per-cell rendering
# on every run cost a 50-session dashboard most of its CPU (BENCHMARKS.md, "Many sessions"). moment.js writes
# English month names, so Spanish reads its numeric form.
DATE_FORMAT = {"es": "DD/MM/YYYY, HH:mm:ss", "en": "MMM D, YYYY, h:mm:ss A"}
# Days (a date, no time: e.g. a UTC day of a rollup, named where the table is), in the same forms
DAY_FORMAT = {"es": "DD/MM/YYYY", "en": "MMM D, YYYY"}
MERGED_KEYS = frozenset({"label", "width", "help", "pinned", "hidden"})
TABLE_ENTRIES = 256  # prepared tables kept by the process (see _prepared)


class Link(NamedTuple):
    """A column shown as links to `/page?param=<value>`, the value read from column `source` (default: the column
    itself); the link's text is the value without its leading `strip`."""

    page: str
    param: str
    source: str | None = None
    strip: str = ""
    also: tuple[tuple[str, str], ...] = ()  # more (param, source column) pairs, after `param`


def human_bytes(n: float) -> str:
    """A byte count as a person reads it in the UI's language: `512 B`, `1,5 kB` / `1.5 kB`, `3,2 MB`, `1,0 GB`
    (1024 steps)."""
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{fmt.number(n, 0 if unit == 'B' else 1)} {unit}"
        n /= 1024
    return str(n)


def column_label(name: str) -> str:
    key = f"col_{name}"
    return t(key) if key in STRINGS else name


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # lists, dicts, arrays
        return False


def _number(value: Any, plain: bool) -> str:
    """A number in the UI's language (ui.fmt): Spanish 1.234,5; English 1,234.5; identifiers without separators."""
    if isinstance(value, float) and not value.is_integer():
        return fmt.number(value, 2)
    return str(int(value)) if plain else fmt.number(int(value))


def _display(kind: str):
    """The text of one cell of a decimal column shown through the Styler (`kind` as `_prepared` names it)."""
    return lambda v: _number(v, kind == "plain")


def _whole(s: pd.Series) -> bool:
    """Only integers in it (a float column may hold them: a PID read through a float, 3249.0)."""
    values = s.dropna()
    return pd.api.types.is_integer_dtype(s) or bool((values == values.round()).all())


def _text(value: Any) -> str:
    if _is_empty(value):
        return EMPTY
    if isinstance(value, bool):
        return t("yes") if value else t("no")
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _looks_like_dates(series: pd.Series) -> bool:
    values = series.dropna()
    return not values.empty and all(hasattr(v, "tzinfo") and hasattr(v, "hour") for v in values.head(50))


def _looks_like_days(series: pd.Series) -> bool:
    values = series.dropna()
    return not values.empty and all(isinstance(v, date) and not isinstance(v, datetime) for v in values.head(50))


def _link(page: str, param: str, value: Any, also: tuple[tuple[str, Any], ...] = ()) -> str:
    if _is_empty(value) or value == "":
        return EMPTY
    more = "".join(f"&{p}={quote(str(v), safe='')}" for p, v in also if not _is_empty(v))
    return f"/{page}?{param}={quote(str(value), safe='')}{more}&lang={lang()}"


def _viewer_roles() -> tuple[str, ...]:
    from ui.common import current_user

    user = current_user()
    return user.roles if user else ()


# Where a customer id leads, by the role of the page showing it (a manager came to see memory; only the DPO's pages
# lead to an erasure): (page, parameter, what the parameter's value starts with before the id).
CUSTOMER_LINKS = {
    roles.MANAGER: ("memory", "ns", "clientes."),
    roles.SRE: ("checkpoints", "cliente", ""),
    roles.DPO: ("erasure", "cliente", ""),
}


def prepare(
    df: pd.DataFrame,
    columns: list[str] | None = None,
    config: Mapping[str, Any] | None = None,
    links: Mapping[str, Link] | None = None,
) -> tuple[pd.DataFrame, dict[str, Any], dict[str, str]]:
    """The frame as shown (only `columns`; text values formatted, numbers and dates kept), its column_config and
    the decimal columns whose cells read as the Styler writes them: {column: "number" | "plain"}."""
    return _prepared(
        _frame_key(df),
        df,
        list(columns) if columns is not None else list(df.columns),
        dict(config or {}),
        dict(links or {}),
        fmt.viewer_timezone(),
        _viewer_roles(),
        lang(),
        _page_role(),
    )


def _page_role() -> str | None:
    from ui.common import page_role

    return page_role()


def _frame_key(df: pd.DataFrame) -> bytes:
    """The frame's value as a cache key: a digest of its pickle (values, index, columns, dtypes), ~14x cheaper than
    Streamlit's hash of a frame (`hash_pandas_object` column by column), which cost a 50-session dashboard a sixth of
    its time. Equal frames read from the same cache entry pickle alike; two that pickle apart only miss the cache."""
    return hashlib.blake2b(pickle.dumps(df, protocol=pickle.HIGHEST_PROTOCOL), digest_size=20).digest()


# Prepared once per process for the same frame (keyed by value: `_frame_key`) and everything the result depends
# on: the viewer's roles (which links a column gets: a manager never receives a frame prepared for a DPO), time
# zone and language. Every session on a page shows the same few frames; formatting them is a good part of a
# page's time.
@st.cache_data(ttl=DERIVED_TTL, max_entries=TABLE_ENTRIES, show_spinner=False)
def _prepared(
    frame_key: bytes,
    _df: pd.DataFrame,
    shown: list[str],
    overrides: dict[str, Any],
    links: dict[str, Link],
    tz: str,
    viewer: tuple[str, ...],
    language: str,
    page_role: str | None = None,
) -> tuple[pd.DataFrame, dict[str, Any], dict[str, str]]:
    df = _df
    out = df[shown].copy()
    column_config: dict[str, Any] = {}
    display: dict[str, str] = {}
    for col in shown:
        label = column_label(col)
        s = out[col]
        link = links.get(col)
        if link:
            out[col] = [
                _link(link.page, link.param, v, tuple((p, df[c].iloc[i]) for p, c in link.also))
                for i, v in enumerate(df[link.source or col])
            ]
            shown_text = rf"{re.escape(link.param)}={re.escape(quote(link.strip, safe=''))}([^&]*)"
            column_config[col] = st.column_config.LinkColumn(label, display_text=shown_text)
        elif col in THREAD_COLUMNS and roles.SRE in viewer:
            out[col] = s.map(lambda v: _link("checkpoints", "thread", v))
            column_config[col] = st.column_config.LinkColumn(label, display_text=r"thread=([^&]*)")
        elif col in CUSTOMER_COLUMNS and page_role in CUSTOMER_LINKS and page_role in viewer:
            page, param, before = CUSTOMER_LINKS[page_role]
            # a row of no customer (a supplier's thread: NaN, None or "") has no link, the grid's empty "—"
            out[col] = s.map(
                lambda v, page=page, param=param, before=before: (
                    None if _is_empty(v) or v == "" else _link(page, param, before + str(v))
                )
            )
            shown_text = rf"{param}={re.escape(quote(before, safe=''))}([^&]*)"
            column_config[col] = st.column_config.LinkColumn(label, display_text=shown_text)
        elif pd.api.types.is_datetime64_any_dtype(s) or (s.dtype == object and _looks_like_dates(s)):
            out[col] = pd.to_datetime(s, utc=True, errors="coerce")  # sorted as instants; read in `tz`
            column_config[col] = st.column_config.DatetimeColumn(
                f"{label} ({tz})", format=DATE_FORMAT[language], timezone=tz
            )
        elif s.dtype == object and _looks_like_days(s):
            out[col] = pd.to_datetime(s, errors="coerce")  # sorted as days, drawn as the language writes them
            column_config[col] = st.column_config.DateColumn(label, format=DAY_FORMAT[language])
        elif pd.api.types.is_bool_dtype(s) and not s.isna().any():
            column_config[col] = st.column_config.CheckboxColumn(label)
        elif pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            plain = col in PLAIN_NUMBERS
            if col.endswith("_ms"):  # milliseconds read whole (a resync of 1.234 ms): an integer, no Styler
                s = s.round()
            if col in DURATION_COLUMNS:
                # to the hundredth of a second, in whole milliseconds
                # (a float's 3.531518999 s would print all its digits)
                out[col] = pd.to_timedelta((s.astype("float64") * 100).round() * 10, unit="ms")
                column_config[col] = st.column_config.NumberColumn(f"{label} ({DURATION_FORMAT})", format="compact")
            elif not _whole(s):
                # printf has no decimal comma and "localized" is the browser's language: the Styler's text
                out[col] = s.astype("float64")
                column_config[col] = st.column_config.NumberColumn(label)
                display[col] = "plain" if plain else "number"
            else:  # sortable integers (nullable: a missing one is the grid's "—"), the UI language's
                # thousands separator
                out[col] = s.astype("Int64" if s.isna().any() else "int64")
                column_config[col] = st.column_config.NumberColumn(
                    label, format="%d" if plain else INTEGER_FORMAT[language]
                )
        else:
            out[col] = s.map(_text)
            column_config[col] = st.column_config.TextColumn(label)
        extra = overrides.get(col)
        if isinstance(extra, str):  # a label of the page's own
            extra = {"label": extra}
        if extra:  # the page's label, width, help; the type stays the one chosen here
            merged = {**column_config[col], **{k: v for k, v in extra.items() if k in MERGED_KEYS and v is not None}}
            for suffix in (f" ({tz})", f" ({DURATION_FORMAT})"):  # the zone or clock the column is read in stays named
                if "label" in extra and column_config[col].get("label", "").endswith(suffix):
                    merged["label"] = f"{extra['label']}{suffix}"
            column_config[col] = merged
    return out.reset_index(drop=True), column_config, display  # the Styler needs a unique index


def _labels(out: pd.DataFrame, column_config: dict[str, Any], colours: Mapping[str, Mapping[str, str]]) -> pd.DataFrame:
    """Columns of states shown as coloured labels: the grid's read-only multiselect cells, each value one label in
    its colour ({value: css colour}; a value without one in the grid's grey). Drawn by the grid, no Styler."""
    out = out.copy()
    for col, mapping in colours.items():
        out[col] = out[col].map(lambda v: [v])  # prepared text: a missing value already reads "—"
        options = list(dict.fromkeys([*mapping, *out[col].str[0]]))
        column_config[col] = {
            **st.column_config.MultiselectColumn(options=options, color=[mapping.get(o, "#f0f2f6") for o in options]),
            **{k: v for k, v in column_config[col].items() if k in MERGED_KEYS},
        }
    return out


def table(
    df: pd.DataFrame,
    key: str,
    *,
    columns: list[str] | None = None,
    config: Mapping[str, Any] | None = None,
    colours: Mapping[str, Mapping[str, str]] | None = None,
    links: Mapping[str, Link] | None = None,
    **kwargs: Any,
) -> Any:
    """`st.dataframe` of `df` as a person reads it (see the module's docstring). `columns`: which
    to show, in order; `config`: per-column extras (e.g. {"payload": {"width": "large"}});
    `colours`: {column: {value: css colour}} values shown as coloured labels; `links`: {column: Link} links of the
    page's own; other kwargs go to st.dataframe."""
    out, column_config, display = prepare(df, columns, config, links)
    if colours:
        column_config = dict(column_config)  # the prepared one is shared by the process's sessions
        out = _labels(out, column_config, colours)
    data: Any = out
    if display:  # decimals only
        data = out.style.format({col: _display(kind) for col, kind in display.items()}, na_rep=EMPTY)
    return st.dataframe(data, key=key, hide_index=True, column_config=column_config, placeholder=EMPTY, **kwargs)
