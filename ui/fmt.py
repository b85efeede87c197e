"""Numbers, dates and durations as the UI's language writes them (Babel's CLDR data), in metrics, captions, charts
and (through ui/tables.py) table cells: Spanish 40.894 / 0,117 / 30 nov 2026 / 2 min 5 s, English 40,894 / 0.117 /
Nov 30, 2026 / 2 min 5 s. Instants in the viewer's time zone (the browser's; UTC when it does not say), named.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pandas as pd
import streamlit as st
from babel.dates import format_date, format_datetime, format_skeleton, format_time
from babel.numbers import format_decimal, format_percent, get_decimal_symbol, get_group_symbol

from ui.i18n import lang, t

DATE_INPUT_FORMATS = {"es": "DD/MM/YYYY", "en": "YYYY-MM-DD"}


def date_input_format() -> str:
    """st.date_input's `format` for the UI's language."""
    return DATE_INPUT_FORMATS.get(lang(), "YYYY-MM-DD")


def number(value: float | int, digits: int | None = None) -> str:
    """`value` with the language's separators; `digits` fixes the decimals (None: as many as it has, up to 3)."""
    pattern = None if digits is None else ("#,##0." + "0" * digits if digits else "#,##0")
    return format_decimal(value, format=pattern, locale=lang())


def count(key: str, n: int, **kwargs: object) -> str:
    """The catalogue's `key_one` or `key_other` text for `n` things ("1 llamada", "33 llamadas"), `{n}` formatted;
    `kwargs` fill its other placeholders."""
    return t(f"{key}_one" if n == 1 else f"{key}_other", n=number(n), **kwargs)


def percent(value: float) -> str:
    return format_percent(value, locale=lang())


def day(value: date | datetime, pattern: str = "medium") -> str:
    """A date in the language: "30 nov 2026" / "Nov 30, 2026" (`pattern`: Babel's, e.g. "d MMM")."""
    return format_date(value, pattern, locale=lang())


def viewer_timezone() -> str:
    """The browser's IANA time zone (UTC when unknown, e.g. headless tests without a browser)."""
    try:
        tz = st.context.timezone
        ZoneInfo(tz or "UTC")
    except (ZoneInfoNotFoundError, ValueError, RuntimeError, AttributeError):
        return "UTC"
    return tz or "UTC"


def short(value: datetime) -> str:
    """An instant in few characters, in the language and the viewer's time zone (named elsewhere, e.g. in a label):
    "3 dic 4:00" / "Dec 3 4:00"."""
    tz = ZoneInfo(viewer_timezone())
    return format_skeleton("MMMd", value, tzinfo=tz, locale=lang()) + format_datetime(
        value, " H:mm", tzinfo=tz, locale=lang()
    )


def moment(value: datetime | str) -> str:
    """An instant (a datetime, or an ISO 8601 text as evidence records it; naive ones are UTC, as the database's are)
    in the language and the viewer's time zone, naming it: "4 dic 2026, 17:52:03 Europe/Madrid" /
    "Dec 4, 2026, 5:52:03 PM UTC"."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    tz = viewer_timezone()
    return f"{format_datetime(value, 'medium', tzinfo=ZoneInfo(tz), locale=lang())} {tz}"


def clock(value: datetime | float) -> str:
    """A time of day (a datetime or a Unix time) in the language and the viewer's time zone, naming it: "21:52:03
    Europe/Madrid" / "9:52:03 PM Europe/Madrid" (the day is today's: readings the page just took)."""
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(value, UTC)
    tz = viewer_timezone()
    return f"{format_time(value, 'medium', tzinfo=ZoneInfo(tz), locale=lang())} {tz}"


def sweep_run(run_id: int | None, run_at: datetime | None, computed_at: datetime | str | None) -> str:
    """The time of a figure the sweep job keeps, as every page names it: the sweep run that computed it, by its id and
    its logged start (the Sweeps page's "last sweep"), or, computed outside a sweep, when."""
    if run_id is not None and not (isinstance(run_id, float) and math.isnan(run_id)):
        return t("as_of_sweep", id=int(run_id), at=moment(run_at) if run_at is not None else "—")
    return t("as_of_not_sweep", at="—" if computed_at is None else moment(computed_at))


DURATION_UNITS = (("unit_day", 86400), ("unit_hour", 3600), ("unit_minute", 60), ("unit_second", 1))


def duration(seconds: float) -> str:
    """A number of seconds as a person reads it, its two largest units: "0,42 s", "12 s", "2 min 5 s", "1 h 3 min",
    "2 d 4 h" (unit symbols from the catalogue)."""
    if seconds < 60:
        return f"{number(seconds, 0 if float(seconds).is_integer() else 2)} {t('unit_second')}"
    left, parts = round(seconds), list[tuple[int, str]]()
    for key, size in DURATION_UNITS:
        n, left = divmod(left, size)
        if n or parts:
            parts.append((n, key))
    return " ".join(f"{number(n)} {t(key)}" for n, key in parts[:2] if n)


def wall_clock(values: Any, tz: str) -> pd.Series:
    """Instants (aware, or naive UTC as the database's are) as the clock in `tz` reads them, without a zone: what a
    plotly chart draws (plotly.js ignores a date's UTC offset), so a chart shows the same time as the tables
    (ui/tables.py draws instants in the viewer's zone). Name `tz` on the axis."""
    return pd.Series(pd.to_datetime(values, utc=True)).dt.tz_convert(tz).dt.tz_localize(None)


def time_ticks(start: datetime, end: datetime, n: int = 6, tz: str = "UTC") -> dict[str, Any]:
    """A plotly date axis from instant `start` to instant `end`, drawn as wall clock in `tz` (`wall_clock`), labelled
    in the language, up to `n` ticks (plotly's own labels are English month names): "3 nov 14:05" / "Nov 3 14:05",
    with seconds ("3 nov 14:05:09") when ticks are less than a minute apart and milliseconds ("3 nov 14:05:09.250")
    when less than a second, so no two ticks read the same; one tick when `start` is `end`."""
    zone = ZoneInfo(tz)
    span = (end - start) / max(n - 1, 1)
    shown = [start + span * i for i in range(n)] if span else [start]
    time_of_day = (
        " HH:mm:ss.SSS" if span < timedelta(seconds=1) else " HH:mm:ss" if span < timedelta(minutes=1) else " HH:mm"
    )
    return dict(
        tickmode="array",
        tickvals=[(v if v.tzinfo else v.replace(tzinfo=UTC)).astimezone(zone).replace(tzinfo=None) for v in shown],
        ticktext=[
            format_skeleton("MMMd", v, tzinfo=zone, locale=lang())
            + format_datetime(v, time_of_day, tzinfo=zone, locale=lang())
            for v in shown
        ],
    )


def plot_separators() -> str:
    """plotly's layout.separators for the language: decimal mark then thousands separator."""
    return get_decimal_symbol(lang()) + get_group_symbol(lang())


def count_axis(largest: float) -> dict[str, Any]:
    """A plotly axis for counts: starts at 0, integer ticks only (about five), never below zero."""
    largest = max(float(largest or 0), 1.0)
    raw = largest / 5
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return dict(
        rangemode="nonnegative",
        tickmode="linear",
        tick0=0,
        dtick=max(1, int(step)),
        tickformat=",d",
        range=[0, largest * 1.08],
    )


def date_ticks(days: Iterable[date], every: int = 7) -> dict[str, Any]:
    """A plotly axis over `days` labelled in the language ("30 nov"), one tick every `every` days."""
    shown = list(days)[::every]
    # plotly.js reads no UTC offset in a date: instants as naive UTC, as plotly.py writes the bars' own dates
    values = [v.astimezone(UTC).replace(tzinfo=None) if isinstance(v, datetime) else v for v in shown]
    return dict(tickmode="array", tickvals=values, ticktext=[day(d, "d MMM") for d in shown])
