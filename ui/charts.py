"""Every page's charts go through `show`: a chart with nothing to draw says so in words instead of drawing empty axes,
count axes start at zero and never go below it, counts get integer ticks, and numbers use the UI's separators."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import date, datetime

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from ui import fmt
from ui.i18n import lang, t


def _values(trace, axis: str) -> list[float]:
    """The numbers a trace draws on `axis` ("x", "y", "y2"...): its own x or y when it uses that axis."""
    letter = axis[0]
    if (getattr(trace, f"{letter}axis", None) or letter) != axis:
        return []
    values = getattr(trace, letter, None)
    return [] if values is None else [float(v) for v in values if v is not None and v == v]


def largest(fig: go.Figure, axis: str) -> float:
    """The highest value drawn on `axis`, stacked bars summed per category (plotly express stacks by default)."""
    stacked = fig.layout.barmode in (None, "stack", "relative")
    sums: dict[object, float] = defaultdict(float)
    top = 0.0
    for trace in fig.data:
        values = _values(trace, axis)
        if not values:
            continue
        if trace.type == "bar" and stacked:
            other = "y" if axis[0] == "x" else "x"
            positions = getattr(trace, other, None)
            for at, v in zip(range(len(values)) if positions is None else positions, values, strict=False):
                sums[at] += max(v, 0.0)
        else:
            top = max(top, *values)
    return max([top, *sums.values()])


# plotly.js hovers a date in English and without a zone: numeric in Spanish, the zone the instants are drawn in named
HOVER_INSTANT = {"es": "%d/%m/%Y %H:%M:%S", "en": "%b %-d, %Y, %H:%M:%S"}
HOVER_DAY = {"es": "%d/%m/%Y", "en": "%b %-d, %Y"}


def _dates(values) -> list[pd.Timestamp] | None:
    """The values as instants when they are dates (datetime, date, numpy datetime64), else None."""
    found = [v for v in ([] if values is None else values) if v is not None and not (isinstance(v, float) and v != v)]
    if not found or not all(isinstance(v, (datetime, date, np.datetime64)) for v in found):
        return None
    return [pd.Timestamp(v) for v in found]


def _hover_dates(fig: go.Figure, language: str, tz: str) -> dict:
    """hoverformat of the primary x and y axes that hold dates: a day's form when every value is a midnight, else
    an instant naming `tz` (the zone the chart's instants are drawn in: fmt.wall_clock)."""
    layout = {}
    for letter in ("x", "y"):
        stamps = [
            s
            for trace in fig.data
            if (getattr(trace, f"{letter}axis", None) or letter) == letter
            for s in (_dates(getattr(trace, letter, None)) or [])
        ]
        if stamps:
            days = all(s == s.normalize() for s in stamps)
            layout[f"{letter}axis"] = dict(
                hoverformat=HOVER_DAY[language] if days else f"{HOVER_INSTANT[language]} {tz}"
            )
    return layout


def _has_points(fig: go.Figure, counts: Iterable[str]) -> bool:
    counts = list(counts)
    if counts:  # a count chart of zeros only has nothing to show
        return any(v > 0 for trace in fig.data for axis in counts for v in _values(trace, axis))
    return any(
        getattr(trace, letter, None) is not None and len(getattr(trace, letter))
        for trace in fig.data
        for letter in ("x", "y")
    )


def finish(
    fig: go.Figure, *, counts: Iterable[str] = ("y",), amounts: Iterable[str] = (), tz: str = "UTC"
) -> go.Figure | None:
    """`fig` with its count axes (`counts`: from 0, integer ticks), its other non-negative axes (`amounts`, such as
    bytes: from 0) and the language's separators, its instants hovered naming `tz` (the zone they are drawn in:
    fmt.wall_clock); None when it has nothing to draw. Pure: a chart builder shared by every session
    (ui.common.shared_figure) returns this, and takes `tz` as a parameter when it draws instants."""
    counts, amounts = list(counts), list(amounts)
    if not _has_points(fig, counts):
        return None
    layout = {"separators": fmt.plot_separators(), **_hover_dates(fig, lang(), tz)}
    for axis in counts:
        layout[f"{axis[0]}axis{axis[1:]}"] = {
            **layout.get(f"{axis[0]}axis{axis[1:]}", {}),
            **fmt.count_axis(largest(fig, axis)),
        }
    for axis in amounts:
        layout[f"{axis[0]}axis{axis[1:]}"] = {**layout.get(f"{axis[0]}axis{axis[1:]}", {}), "rangemode": "nonnegative"}
    return fig.update_layout(**layout)


# No plotly toolbar: on hover it covered the legends drawn above the plots (issue 40); zoom stays (drag a box,
# double-click to reset) and Streamlit's own element toolbar keeps the full-screen view.
PLOTLY_CONFIG = {"displayModeBar": False, "displaylogo": False}


def draw(fig: go.Figure | None, *, key: str, empty: str | None = None) -> None:
    """Draw a finished figure, or `empty` (default: the catalogue's chart_empty) for None (nothing to draw)."""
    if fig is None:
        st.info(empty or t("chart_empty"), icon=":material/bar_chart:")
    else:
        st.plotly_chart(fig, key=key, config=PLOTLY_CONFIG)


def show(
    fig: go.Figure,
    *,
    key: str,
    counts: Iterable[str] = ("y",),
    amounts: Iterable[str] = (),
    empty: str | None = None,
    tz: str = "UTC",
) -> None:
    """finish() then draw(), for a figure built by this session."""
    draw(finish(fig, counts=counts, amounts=amounts, tz=tz), key=key, empty=empty)
