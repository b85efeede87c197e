"""Helpers shared by the page tests: reading AppTest elements and waiting on the database."""

from __future__ import annotations

import base64
import re
import time

import numpy as np

from core.db import DatabaseUnavailable


def metric(at, label: str) -> str:
    """The value of the metric with this label (raises StopIteration if absent)."""
    return next(m.value for m in at.metric if m.label == label)


def frame(at, *columns: str):
    """The first dataframe on the page having these columns (plain dataframes carry no key)."""
    for df in at.dataframe:
        if set(columns) <= set(df.value.columns):
            return ids(df.value)
    raise KeyError(columns)


def ids(frame):
    """The frame with its thread/customer link columns read back as ids (see `plain`), and its coloured labels
    (ui.tables' `colours`: one-label lists) as the label they show."""
    frame = frame.copy()
    for col in frame.columns:
        if col in ("thread_id", "cliente_id", "customer_id"):
            frame[col] = plain(frame[col])
        elif len(frame) and all(isinstance(v, (list, np.ndarray)) and len(v) == 1 for v in frame[col]):
            frame[col] = [v[0] for v in frame[col]]
    return frame


def as_int(text: str) -> int:
    """An integer as a page shows it, with the thousands separators of either language (40,894 / 40.894)."""
    return int(text.replace(",", "").replace(".", ""))


def decode(values):
    """Plotly 7 encodes arrays as {"dtype", "bdata"} (base64)."""
    if isinstance(values, dict) and "bdata" in values:
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


def grid_clock(at, column: str, *columns: str) -> list[str]:
    """The instants of `column` in the first dataframe having it (and `columns`) as the grid draws them: in the
    column's configured time zone, "YYYY-MM-DD HH:MM:SS"."""
    import json

    import pandas as pd

    df = next(d for d in at.dataframe if {column, *columns} <= set(d.value.columns))
    tz = json.loads(df.proto.columns)[column]["type_config"]["timezone"]
    return [pd.Timestamp(v).tz_convert(tz).strftime("%Y-%m-%d %H:%M:%S") for v in df.value[column].dropna()]


def chart_clock(values) -> list[str]:
    """A plotly trace's dates as the chart draws them (plotly.js ignores any UTC offset): "YYYY-MM-DD HH:MM:SS"."""
    import pandas as pd

    return [pd.Timestamp(str(v)[:26]).strftime("%Y-%m-%d %H:%M:%S") for v in decode(values)]


def wait_until(check, timeout: float = 15.0) -> None:
    """Poll `check` until true; fail after `timeout`. Right after a server restart the first pooled
    call may fail (the pool is then rebuilt), so DatabaseUnavailable counts as "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except DatabaseUnavailable:
            pass
        assert time.monotonic() < deadline, f"timed out after {timeout} s"
        time.sleep(0.1)


def plain(values) -> list:
    """Cell values as ids: ui.tables shows thread and customer ids as links (`/page?thread=ID&lang=..`, the
    Memory page's customers as `/memory?ns=clientes.ID`);
    this reads the id back (other values unchanged)."""
    from urllib.parse import parse_qs, urlsplit

    out = []
    for v in values:
        if isinstance(v, str) and v.startswith("/") and "?" in v:
            query = parse_qs(urlsplit(v).query)
            v = (query.get("thread") or query.get("cliente") or query.get("ns") or [v])[0]
        out.append(v)
    return out


def resolve_escapes(markdown: str) -> str:
    """Markdown's backslash escapes resolved, as CommonMark does (a backslash before ASCII punctuation shows that
    character): the text node remark builds from a value ui.safe.md escaped (its word joiners kept)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def shown(markdown: str) -> str:
    """What a person reads of Markdown holding values escaped by ui.safe.md."""
    from ui.safe import WORD_JOINER

    return resolve_escapes(markdown).replace(WORD_JOINER, "")


# Columns whose cells are data as written (agents' texts, payloads, ids, errors verbatim), not our words: a page shows
# them as they are in either language.
VERBATIM_COLUMNS = frozenset(
    {
        "thread_id",
        "cliente_id",
        "customer_id",
        "prefix",
        "key",
        "value",
        "texto",
        "content",
        "payload",
        "tool_calls",
        "metadata",
        "error",
        "checkpoint_id",
        "parent_checkpoint_id",
        "task_id",
        "task_path",
        "replica_id",
        "host",
        "endpoint",
        "agent",
        "tool",
        "tool_name",
        "channel",
        "old_value",
        "new_value",
        "args",
        "operator",
        "note_raw",
        "query",
        "term",
        "sources",
        "namespace",
        "next_nodes",
        "updated_channels",
        "tools",
        "models",
        "model",
        "type_name",
        "refused_type",
        "undecodable",
        "refused_writes",
        "refused_value",
        "blob_type",
        "checkpoint_ns",
        "viewer",
        "purpose",
        "target",
        "reason_raw",
        "evidence",
        "sql",
        "sha256",
        "format",
        "lang",
        "message_kind",
    }
)


def visible_texts(at) -> list[str]:
    """Every text a person reads on the page that we wrote: titles, headings, Markdown (code spans left out: ids and
    values shown as code), captions, alerts, metrics, widget labels and options, table headers and the cells of
    columns that hold our words, chart titles, ticks and legends. Left out: `st.text`, `st.code` and data columns
    (VERBATIM_COLUMNS), which show what agents and customers wrote as they wrote it."""
    import json
    import re

    out: list[str] = []

    def add(value) -> None:
        if isinstance(value, str) and value.strip():
            out.append(re.sub(r"`[^`]*`", " ", value))

    for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning", "error", "success"):
        for element in getattr(at, kind):
            add(element.value)
    for m in at.metric:
        add(m.label), add(m.value), add(m.proto.help), add(m.proto.delta)
    for kind in ("selectbox", "radio", "multiselect"):
        for w in getattr(at, kind):
            add(w.label)
            for option in w.options:
                add(option)
    for kind in ("text_input", "number_input", "date_input", "button", "toggle", "checkbox", "text_area"):
        for w in getattr(at, kind):
            add(w.label)
            add(getattr(w, "placeholder", None))
    for e in at.expander:
        add(e.label)
    for t in at.tabs:
        add(t.label)
    for df in at.dataframe:
        config = json.loads(df.proto.columns or "{}")
        for column in df.value.columns:
            add((config.get(str(column)) or {}).get("label") or str(column))
            if column in VERBATIM_COLUMNS or df.value[column].dtype != object:
                continue
            for cell in df.value[column].dropna().head(50):
                add(cell[0] if isinstance(cell, (list, tuple)) and len(cell) == 1 else cell)
    for chart in at.get("plotly_chart"):
        fig = json.loads(chart.proto.spec)
        layout = fig.get("layout", {})
        for name, axis in layout.items():
            if name.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
                add((axis.get("title") or {}).get("text"))
                for tick in axis.get("ticktext") or []:
                    add(tick)
        add((layout.get("legend", {}).get("title") or {}).get("text"))
        for note in layout.get("annotations") or []:
            add(note.get("text"))
        for trace in fig.get("data", []):
            add(trace.get("name"))
    return out


def foreign_words(texts: list[str], vocabulary: dict[str, str]) -> list[tuple[str, str]]:
    """(word, text) for each give-away word (a regex) of the other language found in `texts`."""
    import re

    return [(word, text[:160]) for text in texts for word, pattern in vocabulary.items() if re.search(pattern, text)]
