"""A page of one table through ui.tables.table: decimals whose text order is not their numeric order ("10,50"
sorts before "9,25" as text), and durations whose clock text is not their order either ("100:00:00" before
"25:00:00"), in the language of `?lang=`. Served by tests/test_browser_table_sort.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402

from ui.tables import table  # noqa: E402

RATIOS = [9.25, 10.5, 100.75, 2.5, None, 1234.5]
DURATIONS = [360_000.0, 125.0, 0.42, None, 90_000.0, 3780.0]  # seconds: 100 h, 2 min 5 s, ... 25 h, 1 h 3 min

if __name__ == "__main__":  # as Streamlit runs it (the test imports RATIOS)
    table(pd.DataFrame({"ratio": RATIOS, "seconds_degraded": DURATIONS}), key="sort")
