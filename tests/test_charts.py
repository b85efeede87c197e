"""Charts everywhere (issue 30): every page draws through ui.charts.show; a chart with nothing to draw says so in words;
count axes start at 0, never go negative and tick on integers (no 0.5 documents)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.db import Database
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store, put_memory
from core.operations import sweep
from tests.test_sweeps_page import DIMS, figure, open_page

ROOT = Path(__file__).resolve().parent.parent


def test_no_page_draws_a_chart_but_through_the_shared_helper():
    direct = [
        str(p.relative_to(ROOT))
        for p in [*ROOT.glob("app_pages/*.py"), *ROOT.glob("ui/*.py")]
        if p.name != "charts.py" and re.search(r"\bst\.plotly_chart\(", p.read_text())
    ]
    assert direct == []


def test_a_sweep_of_three_documents_is_drawn_on_an_integer_axis_from_zero(create_database, app_env):
    db = Database(create_database())
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    for i in range(3):
        put_memory(store, ("proveedores", f"P{i}"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=0.002)
    time.sleep(0.3)
    sweep.run_sweep(db, trigger="manual", operator="sre")
    at = open_page(db.dsn, app_env, LOCAL_ROLES="sre")
    assert not at.exception, at.exception
    axis = figure(at, "sweeps.runs_chart")["layout"]["yaxis"]
    assert axis["rangemode"] == "nonnegative" and axis["range"][0] == 0
    assert axis["tickmode"] == "linear" and axis["dtick"] == 1 and axis["tickformat"] == ",d"


def _page(kind: str) -> None:
    import plotly.graph_objects as go

    from ui import charts

    figures = {
        "none": go.Figure(go.Bar(x=[], y=[])),
        "zeros": go.Figure(go.Bar(x=["a", "b"], y=[0, 0])),
        "stacked": go.Figure(
            [go.Bar(x=["a", "b"], y=[3, 1]), go.Bar(x=["a", "b"], y=[4, 1])], layout=dict(barmode="stack")
        ),
        "timeline": go.Figure(go.Scatter(x=[], y=[])),
    }
    charts.show(figures[kind], key="chart", counts=() if kind == "timeline" else ("y",))


def test_an_empty_chart_says_so_and_stacked_counts_fit_their_axis():
    for kind in ("none", "zeros", "timeline"):
        at = AppTest.from_function(_page, args=(kind,)).run()
        assert not at.exception, at.exception
        assert [i.value for i in at.info] == ["No hay nada que dibujar: aún no hay datos."], kind
        assert not at.get("plotly_chart"), kind
    at = AppTest.from_function(_page, args=("stacked",)).run()
    import json

    axis = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["yaxis"]
    assert axis["range"][0] == 0 and axis["range"][1] >= 7 and axis["dtick"] == 2  # 3 + 4 stacked, ticks 0, 2, 4, 6
    # no plotly toolbar: on hover it covered the legends drawn above the plots (issue 40)
    assert json.loads(at.get("plotly_chart")[0].proto.config) == {"displayModeBar": False, "displaylogo": False}


def _dated(lang: str, midnight: bool) -> None:
    from datetime import UTC, datetime

    import plotly.graph_objects as go
    import streamlit as st

    from ui import charts

    st.query_params["lang"] = lang
    hour = 0 if midnight else 17
    x = [datetime(2026, 12, d, hour, 5 if hour else 0, tzinfo=UTC) for d in (3, 4)]
    charts.show(go.Figure(go.Scatter(x=x, y=[1, 2], mode="markers")), key="chart")


def test_a_date_axis_hovers_in_the_ui_language_naming_utc():
    # plotly.js writes English month names and no zone: the hover reads numeric in Spanish and names UTC
    import json

    for lang, midnight, expected in (
        ("es", False, "%d/%m/%Y %H:%M:%S UTC"),
        ("en", False, "%b %-d, %Y, %H:%M:%S UTC"),
        ("es", True, "%d/%m/%Y"),
        ("en", True, "%b %-d, %Y"),
    ):
        at = AppTest.from_function(_dated, args=(lang, midnight)).run()
        assert not at.exception, at.exception
        layout = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]
        assert layout["xaxis"]["hoverformat"] == expected, (lang, midnight)
        assert "hoverformat" not in layout.get("yaxis", {})
