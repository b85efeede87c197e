"""Real browser: a decimal column of a table (ui.tables.table) sorts as numbers, not as their text, and reads in
the UI's language (a Spanish decimal comma in a browser set to English)."""

from __future__ import annotations

import pytest
from conftest import start_streamlit, stop_streamlit
from playwright.sync_api import expect
from table_sort_app import DURATIONS, RATIOS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def sort_app_url():
    proc, url = start_streamlit({"LOCAL_ROLES": "manager", "PG_AGENTES": ""}, script="tests/table_sort_app.py")
    yield url
    stop_streamlit(proc)


@pytest.fixture
def browser_context_args(browser_context_args):
    return {**browser_context_args, "locale": "en-US"}  # the UI's language decides, never the browser's


def _column(page, col: int = 0) -> list[str]:
    """The cells of one column of the grid, top to bottom, as its accessibility tree holds them."""
    return [page.get_by_test_id(f"glide-cell-{col}-{row}").inner_text() for row in range(len(RATIOS))]


def _number(text: str) -> float | None:
    if not text.strip() or text.strip() == "—":
        return None
    return float(text.replace(".", "").replace(",", ".") if "," in text else text)


def _sorted_column(page, url: str, col: int) -> list[str]:
    """Column `col` (0: the first, 1: the last) after one click on its header (ascending), top to bottom."""
    page.goto(f"{url}/?lang=es")
    grid = page.get_by_test_id("stDataFrame")
    expect(grid).to_be_visible(timeout=60_000)
    first = page.get_by_test_id(f"glide-cell-{col}-0")
    expect(first).to_be_attached()
    unsorted = first.inner_text()
    box = grid.bounding_box()
    page.mouse.click(box["x"] + (40 if col == 0 else box["width"] - 40), box["y"] + 17)  # the column's header
    expect(first).not_to_have_text(unsorted)
    return _column(page, col)


def test_a_decimal_column_sorts_numerically(page, sort_app_url, screenshot):
    shown = [v for v in map(_number, _sorted_column(page, sort_app_url, 0)) if v is not None]
    screenshot("table-sort-decimals")
    assert shown == sorted(v for v in RATIOS if v is not None), shown


def test_a_duration_column_sorts_as_durations(page, sort_app_url, screenshot):
    """Durations are the grid's clock ("100:00:00", "00:02:05"), sorted as the durations they hold (as text,
    "100:00:00" would come before "25:00:00")."""
    # the seconds each cell holds (the accessibility tree's value; the clock is drawn on the canvas: screenshot)
    shown = [float(v) for v in _sorted_column(page, sort_app_url, 1) if v.strip() and v.strip() != "—"]
    screenshot("table-sort-durations")
    assert shown == sorted(v for v in DURATIONS if v is not None), shown
