"""What an SRE reads on the Checkpoints and Degradation pages (issue 30): a diff that lists the messages added,
removed and changed; no raw names (chart legends, risk levels, headings, settings); storage figures without
fake deltas, each with its own time and a total; episodes numbered 1..n; integers as integers; numbers in the UI's
language whatever the browser's. Real embedded PostgreSQL, checkpoints written by the real agents."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from apptools import as_int, frame, metric
from babel.dates import format_skeleton
from conftest import DIMS
from langgraph.checkpoint.postgres import PostgresSaver
from streamlit.testing.v1 import AppTest

from agent_memory_runtime import replica_health
from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database
from core.history import views
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.storage import storage as ckpt_storage

APP = "../dashboard.py"
THREAD = "cliente-C301-1"


def human(id_, text):
    return {
        "type": "langchain_core.messages.human.HumanMessage",
        "value": {"id": id_, "type": "human", "content": text, "additional_kwargs": {}},
    }


def ai(id_, text, calls=()):
    return {
        "type": "langchain_core.messages.ai.AIMessage",
        "value": {"id": id_, "type": "ai", "content": text, "tool_calls": list(calls), "response_metadata": {}},
    }


# --- the message diff (pure) ---------------------------------------------------------------------------------


def test_message_diff_by_id():
    from core.history.message_diff import message_diff

    old = [human("h1", "Hola"), ai("a1", "¿En qué puedo ayudar?"), human("h2", "Prefiero Sierpes")]
    new = [
        human("h1", "Hola"),
        ai("a1", "¿En qué le puedo ayudar?"),
        ai("a2", "", [{"name": "recordar_preferencia", "args": {"tipo": "recogida"}, "id": "c1"}]),
    ]
    found = message_diff(old, new)
    rows = found.changes.set_index("message_id")
    assert (found.old_count, found.new_count) == (3, 3)
    assert rows.loc["a1", "change"] == "changed" and rows.loc["a1", "fields"] == "content"
    assert (
        rows.loc["a1", "old_content"] == "¿En qué puedo ayudar?"
        and rows.loc["a1", "new_content"] == "¿En qué le puedo ayudar?"
    )
    assert rows.loc["a2", "change"] == "added" and rows.loc["a2", "kind"] == "ai"
    assert rows.loc["a2", "new_content"] == 'recordar_preferencia({"tipo": "recogida"})'
    assert rows.loc["h2", "change"] == "removed" and rows.loc["h2", "old_content"] == "Prefiero Sierpes"
    assert "h1" not in rows.index  # unchanged messages are not listed
    assert [found.count(c) for c in ("added", "removed", "changed")] == [1, 1, 1]


def test_message_diff_is_only_for_message_lists():
    from core.history.message_diff import message_diff

    assert message_diff(None, [human("h1", "Hola")]).count("added") == 1  # the channel appears
    assert message_diff({"a": 1}, {"a": 2}) is None
    assert message_diff([1, 2], [1, 2, 3]) is None
    assert message_diff([human("h1", "x")], [human("h1", "x"), "not a message"]) is None
    assert message_diff(None, None) is None and message_diff([], []) is None
    long = message_diff([], [human("h1", "x" * 500)]).changes["new_content"].iloc[0]
    assert len(long) == 160 and long.endswith("…")


# --- pages on a thread written by the real agents ------------------------------------------------------------


@pytest.fixture(scope="module")
def agents_db(create_database) -> Database:
    db = Database(create_database(prefix="sre"))
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for text in ["Prefiero recoger mis pedidos en la tienda Sierpes.", "¿Qué preferencias tengo guardadas?"]:
        run_turn(agent, ContextoCliente("C301"), THREAD, text)
    ckpt_storage.refresh_thread_storage(db)
    yield db
    db.close()


def open_page(dsn: str, app_env, page: str, query: dict | None = None) -> AppTest:
    app_env(dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def checkpoint_ids(db) -> list[str]:
    return [
        r["checkpoint_id"]
        for r in db.fetch(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = '' ORDER BY checkpoint_id",
            (THREAD,),
        )
    ]


def test_no_changed_row_without_a_changed_value(agents_db):
    """A trigger channel (`branch:to:...`) holds no value: its new version is not shown as "changed — → —"."""
    ids = checkpoint_ids(agents_db)
    seen = 0
    for old, new in zip(ids, ids[1:], strict=False):
        diff = views.checkpoint_diff(agents_db, THREAD, old, new)
        changed = diff[diff["change"] == "changed"]
        assert (changed["old_value"].fillna("") != changed["new_value"].fillna("")).all(), changed
        seen += int(diff["channel"].str.startswith("branch:").sum())
    assert seen  # the thread has trigger channels, so the check above met them


def test_diff_lists_messages_added_in_words(agents_db, app_env):
    ids = checkpoint_ids(agents_db)
    at = open_page(agents_db.dsn, app_env, "app_pages/checkpoints.py", {"thread": THREAD})
    at.selectbox(key="checkpoints.diff_old").set_value(ids[0]).run()
    assert not at.exception
    channels = frame(at, "channel", "change", "old_value", "new_value")
    messages_row = channels.set_index("channel").loc["messages"]
    assert messages_row["change"] == "añadido"
    n_messages = agents_db.fetch_one(
        "SELECT jsonb_array_length(channel_values->'messages') AS n FROM core_checkpoints_view "
        "WHERE thread_id = %s AND checkpoint_id = %s",
        (THREAD, ids[-1]),
    )["n"]
    assert messages_row["new_value"] == f"{n_messages} mensajes"  # not the JSON list
    assert set(channels["change"]) <= {"añadido", "eliminado", "cambiado"}
    listed = frame(at, "change", "position", "kind", "new_content")
    assert len(listed) == n_messages and set(listed["change"]) == {"añadido"}
    assert "Prefiero recoger mis pedidos en la tienda Sierpes." in set(listed["new_content"])
    assert {"persona", "IA", "herramienta"} <= set(listed["kind"])
    assert any(
        m.value.startswith("Mensajes de `messages`: ")
        and f"{n_messages} añadidos, 0 eliminados, 0 cambiados" in m.value
        for m in at.markdown
    )
    summary = next(c.value for c in at.caption if re.match(r"^\d+ canal", c.value))
    n = len(channels)
    assert summary.startswith("1 canal cambiado de " if n == 1 else f"{n} canales cambiados de ")
    # every channel, the unchanged too: their change in words as well
    at.toggle(key="checkpoints.diff_changes").set_value(False).run()
    assert set(frame(at, "channel", "change", "old_value")["change"]) <= {
        "añadido",
        "eliminado",
        "cambiado",
        "solo versión nueva (mismo valor)",
        "sin cambios",
    }


def test_diff_of_consecutive_checkpoints_in_english(agents_db, app_env):
    at = open_page(agents_db.dsn, app_env, "app_pages/checkpoints.py", {"thread": THREAD, "lang": "en"})
    listed = frame(at, "change", "position", "kind", "new_content")  # the last step added a message
    assert set(listed["change"]) <= {"added", "removed", "changed"} and len(listed)
    summary = next(c.value for c in at.caption if re.match(r"^\d+ channel", c.value))
    assert re.match(r"^(1 channel changed|\d+ channels changed) of \d+\.$", summary)


def test_timeline_legend_and_largest_chart_in_words(agents_db, app_env):
    at = open_page(agents_db.dsn, app_env, "app_pages/checkpoints.py", {"thread": THREAD})
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    names = {tr.get("name") for tr in fig["data"] if tr.get("mode") == "markers"}
    assert names and names <= {"entrada (mensaje recibido)", "paso del grafo", "actualización manual", "bifurcación"}
    assert fig["layout"]["legend"]["title"]["text"] == "Origen del paso"
    assert "source" not in json.dumps(fig["data"][1].get("hovertemplate", ""))
    at.radio(key="checkpoints.view").set_value("storage").run()
    assert not at.exception
    largest = json.loads(next(c for c in at.get("plotly_chart") if c.key == "checkpoints.largest_chart").proto.spec)
    assert {tr["name"] for tr in largest["data"]} == {"Bytes de checkpoint", "Bytes de blobs", "Bytes de escrituras"}
    headings = [h.value for h in at.subheader]
    assert "Los 20 hilos más grandes" in headings and not any("computed_at" in h for h in headings)
    assert any(c.value.startswith("Calculados por una actualización hecha fuera de los barridos (") for c in at.caption)


def test_storage_figures_plain_with_their_own_time_and_a_total(agents_db, app_env):
    at = open_page(agents_db.dsn, app_env, "app_pages/checkpoints.py", {"thread": THREAD})
    at.radio(key="checkpoints.view").set_value("storage").run()
    rows = {
        t: agents_db.fetch_one(f"SELECT count(*) AS n FROM {t}")["n"]
        for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
    }
    for table, n in rows.items():
        assert as_int(metric(at, f"{table}: filas")) == n
        assert re.match(r"^\d+(,\d)? (B|kB|MB|GB)$", metric(at, f"{table}: en disco"))
    assert as_int(metric(at, "Total: filas")) == sum(rows.values())
    assert re.match(r"^\d+(,\d)? (B|kB|MB|GB)$", metric(at, "Total: en disco"))
    # no figure is a delta: a size is not growth
    assert not [m.label for m in at.metric if m.proto.delta]
    captions = [c.value for c in at.caption]
    assert any(
        c.startswith("Filas exactas según una actualización hecha fuera de los barridos (") and c.count(" UTC") == 1
        for c in captions
    )
    assert any(c.startswith("Tamaño en disco con índices y TOAST, leído ahora: ") for c in captions)


def test_thread_figures_and_tables_in_the_ui_language(agents_db, app_env):
    at = open_page(agents_db.dsn, app_env, "app_pages/checkpoints.py", {"thread": THREAD})
    written = agents_db.fetch_one(
        "SELECT sum(octet_length(blob)) AS n FROM checkpoint_writes WHERE thread_id = %s", (THREAD,)
    )["n"]
    shown = next(m for m in at.metric if m.label == "Bytes de escrituras")
    assert re.match(r"^\d+,\d kB$", shown.value)  # a Spanish decimal comma, whatever the browser says
    assert shown.proto.help == f"{written:,} bytes".replace(",", ".")
    writes = next(df for df in at.dataframe if "size_bytes" in df.value.columns)
    config = json.loads(writes.proto.columns)
    assert config["size_bytes"]["type_config"]["format"] == "%'.,d"  # 40.894, not the browser's 40,894
    at = open_page(agents_db.dsn, app_env, "app_pages/checkpoints.py", {"thread": THREAD, "lang": "en"})
    writes = next(df for df in at.dataframe if "size_bytes" in df.value.columns)
    assert json.loads(writes.proto.columns)["size_bytes"]["type_config"]["format"] == "%,d"


# --- Degradation -----------------------------------------------------------------------------------------


@pytest.fixture
def episodes_db(db):
    """Three episodes of a month with a gap in their ids (a sequence value used by nothing), a denial of the last,
    and a heartbeat whose PID is read through a float."""
    start = datetime(2026, 11, 3, 10, tzinfo=UTC)
    with db.connection() as conn:
        for i, day in enumerate((0, 12, 27)):
            if i == 2:
                conn.execute("SELECT nextval(pg_get_serial_sequence('core_degradation_episodes', 'id'))")
            replica_health.write_episode(
                conn,
                replica_health.Episode(
                    replica_id="replica-a",
                    host="h",
                    pid=3249,
                    degraded_from=start + timedelta(days=day),
                    degraded_to=start + timedelta(days=day, minutes=38),
                    reason="liveness check: DeadlineExceeded: PostgreSQL call exceeded its 1.0 s deadline " * 2,
                    checkpoints_buffered=3,
                    writes_buffered=5,
                    ops_resynced=8,
                    resync_ms=4.25,
                ),
            )
    last = db.fetch_one("SELECT max(id) AS id FROM core_degradation_episodes")["id"]
    db.execute(
        "INSERT INTO core_guard_denials (denial_key, episode_id, replica_id, tool, risk, thread_id, denied_at) "
        "VALUES (gen_random_uuid(), %s, 'replica-a', 'publicar_aviso', 'HIGH', 'compras-P1-retraso', %s)",
        (last, start + timedelta(days=27, minutes=5)),
    )
    return db


def test_degradation_episodes_numbered_risk_in_words_integers(episodes_db, app_env):
    ids = [r["id"] for r in episodes_db.fetch("SELECT id FROM core_degradation_episodes ORDER BY degraded_from")]
    assert ids[2] - ids[1] == 2  # the gap a reader would ask about
    at = open_page(episodes_db.dsn, app_env, "app_pages/degradation.py")
    episodes = next(df for df in at.dataframe if "degraded_from" in df.value.columns)
    assert episodes.value["n"].tolist() == [3, 2, 1] and "id" not in episodes.value.columns
    config = json.loads(episodes.proto.columns)
    assert config["reason_raw"]["width"] == "large"  # the saver's text verbatim; `reason` says its kind in words
    assert all(r.startswith(("PostgreSQL", "Otro fallo", "No se consiguió")) for r in episodes.value["reason"])
    assert str(episodes.value["pid"].dtype) == "int64" and config["pid"]["type_config"]["format"] == "%d"
    assert any(c.value.startswith("Episodios numerados por orden de inicio") for c in at.caption)
    denials = frame(at, "tool", "risk", "episode_n")
    assert denials["risk"].tolist() == ["ALTO"] and denials["episode_n"].tolist() == [3]
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    axis = fig["layout"]["xaxis"]
    assert axis["title"]["text"] == "Fecha y hora (UTC)"
    assert axis["ticktext"][0].startswith("3 nov") and any(" dic " in x or " nov " in x for x in axis["ticktext"])


def test_degradation_in_english(episodes_db, app_env):
    at = open_page(episodes_db.dsn, app_env, "app_pages/degradation.py", {"lang": "en"})
    assert frame(at, "tool", "risk", "episode_n")["risk"].tolist() == ["HIGH"]
    axis = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["xaxis"]
    assert axis["title"]["text"] == "Date and time (UTC)" and axis["ticktext"][0].startswith("Nov 3")


def test_sweeps_settings_in_words(db, app_env):
    at = open_page(db.dsn, app_env, "app_pages/sweeps.py")
    config = frame(at, "root", "ttl_days", "in_process_sweeper")
    assert set(config["in_process_sweeper"]) == {"no (lo hace el barrido programado)"}


def test_checkpoint_timeline_axis_says_date_and_time_in_the_ui_language(agents_db, app_env):
    first, last = (
        agents_db.fetch_one(
            f"SELECT {f}((checkpoint->>'ts')::timestamptz) AS ts FROM checkpoints WHERE thread_id = %s", (THREAD,)
        )["ts"]
        for f in ("min", "max")
    )
    for lang, title in (("es", "Fecha y hora (UTC)"), ("en", "Date and time (UTC)")):
        at = open_page(agents_db.dsn, app_env, "app_pages/checkpoints.py", {"thread": THREAD, "lang": lang})
        fig = json.loads(next(c for c in at.get("plotly_chart") if c.key == "checkpoints.timeline_chart").proto.spec)
        axis = fig["layout"]["xaxis"]
        assert axis["title"]["text"] == title  # not "Hora": the axis may span days
        # the day in the language, and the time as precise as the ticks are close (these checkpoints are within
        # seconds): no two ticks read the same
        day = format_skeleton("MMMd", first, tzinfo=UTC, locale=lang)
        ticks = axis["ticktext"]
        assert ticks[0].startswith(f"{day} {first.astimezone(UTC):%H:%M:%S}"), ticks
        assert f"{last.astimezone(UTC):%H:%M:%S}" in ticks[-1] and len(set(ticks)) == len(ticks) > 1, ticks
    # the table under it names each checkpoint's origin in words, as the chart's legend does
    timeline = next(df for df in at.dataframe if "updated_channels" in df.value.columns)
    assert set(timeline.value["source"]) == {"input (message received)", "graph step"}, set(timeline.value["source"])


def test_time_degraded_reads_as_a_duration_and_sorts_as_one(episodes_db, app_env):
    for lang, label in (("es", "Tiempo degradada (h:mm:ss)"), ("en", "Time degraded (h:mm:ss)")):
        at = open_page(episodes_db.dsn, app_env, "app_pages/degradation.py", {"lang": lang})
        episodes = next(df for df in at.dataframe if "degraded_from" in df.value.columns)
        config = json.loads(episodes.proto.columns)["seconds_degraded"]
        # a duration the grid draws as a clock ("00:38:00") and sorts as durations, not a number of seconds
        assert config["label"] == label and config["type_config"] == {"type": "number", "format": "compact"}
        assert episodes.value["seconds_degraded"].dt.total_seconds().tolist() == [38 * 60.0] * 3
        assert not episodes.proto.arrow_data.styler.display_values  # no per-cell text rendered on every refresh


def test_times_of_day_name_the_viewers_zone(episodes_db, app_env):
    """The page's reading time and the sidebar's database check: the viewer's zone (UTC without a browser), named,
    not the server's clock unnamed."""
    at = open_page(episodes_db.dsn, app_env, "app_pages/degradation.py")
    captions = [c.value for c in at.caption] + [c.value for c in at.sidebar.caption]
    assert any(re.fullmatch(r"Leído a las \d{1,2}:\d\d:\d\d UTC", c) for c in captions), captions
    assert any(re.fullmatch(r"comprobado a las \d{1,2}:\d\d:\d\d UTC", c) for c in captions), captions
