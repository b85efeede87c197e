"""AppTest of the Sweeps page: no exception, figures equal to SQL counts, a manual sweep by an SRE
from the dialog, and a manager refused. Real embedded PostgreSQL, real demo data."""

from __future__ import annotations

import json
import time
from datetime import UTC

import pandas as pd
import pytest
from apptools import as_int, decode, frame, metric
from babel.dates import format_date, format_datetime, format_skeleton
from streamlit.testing.v1 import AppTest

from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store, put_memory
from ui.i18n import CATALOGUES

APP = "../dashboard.py"
PAGE = "app_pages/sweeps.py"
DIMS = 64


def figure(at, key: str) -> dict:
    import json

    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        if chart.proto.id and key in chart.proto.id:
            return spec
    raise KeyError(key)


def totals_by_trace(spec: dict) -> dict[str, int]:
    return {trace["name"]: int(sum(decode(trace["y"]))) for trace in spec["data"]}


def open_page(dsn: str, app_env, **env: str) -> AppTest:
    app_env(dsn, **env)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    at.switch_page(PAGE).run()
    return at


def test_sweeps_page_on_the_demo_equals_sql(demo_db, app_env):
    at = open_page(demo_db.dsn, app_env)
    assert not at.exception
    q = demo_db.fetch
    expired = {
        r["root"]: r["n"]
        for r in q(
            "SELECT split_part(prefix,'.',1) AS root, count(*) AS n FROM store WHERE expires_at < now() GROUP BY 1"
        )
    }
    # The demo ran a real sweep and left fresh flash notices expired, not yet swept.
    assert expired.get("proveedores", 0) >= 2
    for root in ("clientes", "proveedores", "empleados"):
        assert as_int(metric(at, f"{root.capitalize()}: caducados")) == expired.get(root, 0)
    # the roots named in words (the namespaces stay as agents write them in the data)
    assert totals_by_trace(figure(at, "sweeps.expired_chart")) == {
        r.capitalize(): expired.get(r, 0) for r in ("clientes", "proveedores", "empleados")
    }

    log = frame(at, "id", "trigger", "status", "host")
    sql_log = q("SELECT id, trigger, status, documents_deleted FROM core_sweep_log ORDER BY id DESC")
    assert list(log["id"]) == [r["id"] for r in sql_log]
    demo_runs = [r for r in sql_log if r["trigger"] == "demo"]
    assert demo_runs and demo_runs[-1]["status"] == "ok" and demo_runs[-1]["documents_deleted"] > 0

    deleted = totals_by_trace(figure(at, "sweeps.runs_chart"))
    sql_deleted = {
        r["root"]: r["n"]
        for r in q(
            "SELECT r.key AS root, sum(r.value::bigint) AS n FROM core_sweep_log l, "
            "jsonb_each_text(l.deleted_by_root) r "
            "WHERE l.status IN ('ok', 'error') AND NOT l.dry_run GROUP BY 1"
        )
    }
    assert {k: v for k, v in deleted.items() if v} == {k.capitalize(): v for k, v in sql_deleted.items()}
    assert sql_deleted.get("proveedores", 0) > 0
    # every real run is on the chart, those that deleted nothing included (issue 40)
    runs_shown = {x for tr in figure(at, "sweeps.runs_chart")["data"] for x in tr["x"]}
    real_runs = q("SELECT count(*) AS n FROM core_sweep_log WHERE status IN ('ok', 'error') AND NOT dry_run")[0]["n"]
    assert len(runs_shown) == real_runs > 1

    forecast = totals_by_trace(figure(at, "sweeps.forecast_chart"))
    sql_forecast = {
        r["root"]: r["n"]
        for r in q(
            "SELECT split_part(prefix,'.',1) AS root, count(*) AS n FROM store WHERE expires_at >= now() "
            "AND expires_at < date_trunc('week', now() + interval '12 months') + interval '1 week' GROUP BY 1"
        )
    }
    assert forecast == {k.capitalize(): v for k, v in sql_forecast.items()}
    # Everything the demo wrote expires within the year: clientes at month 12, not before.
    assert sum(forecast.values()) == q("SELECT count(*) AS n FROM store WHERE expires_at >= now()")[0]["n"]
    spec = figure(at, "sweeps.forecast_chart")
    clientes = next(t for t in spec["data"] if t["name"] == "Clientes")
    weeks_with_clientes = [x for x, y in zip(clientes["x"], decode(clientes["y"]), strict=True) if y > 0]
    assert weeks_with_clientes and min(weeks_with_clientes) >= clientes["x"][48]
    # its axis in Spanish ("4 ene"), not plotly's English month names ("Jan 2027")
    weeks = sorted({pd.Timestamp(x).date() for trace in spec["data"] for x in trace["x"]})
    assert spec["layout"]["xaxis"]["ticktext"] == [format_date(w, "d MMM", locale="es") for w in weeks[::8]]

    config = frame(at, "root", "ttl_days", "in_process_sweeper").set_index("root")
    assert (
        config.loc["Clientes", "ttl_days"] == 365
        and (config["in_process_sweeper"] == CATALOGUES["es"]["sweeps_in_process_off"]).all()
    )


def test_sre_runs_a_manual_sweep_from_the_dialog_after_its_dry_run(create_database, app_env):
    from core.db import Database

    db = Database(create_database())
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=0.005)
    put_memory(store, ("clientes", "C1"), "pref-idioma", {"texto": "idioma: catalán"}, valid_for_minutes=0.005)
    put_memory(store, ("clientes", "C2"), "pref-idioma", {"texto": "idioma: euskera"})
    time.sleep(0.4)

    at = open_page(db.dsn, app_env, LOCAL_ROLES="sre")
    assert not at.exception
    assert as_int(metric(at, "Clientes: caducados")) == 1 and as_int(metric(at, "Proveedores: caducados")) == 1

    at.button(key="sweeps.now").click().run()
    assert not at.exception
    assert at.button(key="sweeps.run").disabled and at.checkbox(key="sweeps.confirm").disabled  # dry run first
    at.button(key="sweeps.preview").click().run()
    assert not at.exception
    (dry,) = db.fetch("SELECT * FROM core_sweep_log")
    assert (dry["status"], dry["dry_run"], dry["documents_deleted"]) == ("dry_run", True, 2)
    assert db.fetch_one("SELECT count(*) AS n FROM store")["n"] == 3
    # The dialog lists what would go: the two documents' keys.
    listed = frame(at, "prefix", "key")
    assert sorted(map(tuple, listed.values.tolist())) == [
        ("clientes.C1", "pref-idioma"),
        ("proveedores.P1", "aviso-retraso"),
    ]
    assert any(f"Simulación {dry['id']}: se borrarían 2 documentos" in m.value for m in at.markdown)
    at.checkbox(key="sweeps.confirm").check().run()
    at.button(key="sweeps.run").click().run()
    assert not at.exception

    logged = db.fetch_one("SELECT * FROM core_sweep_log WHERE NOT dry_run")
    assert (logged["trigger"], logged["status"], logged["operator"]) == ("manual", "ok", "local")
    assert logged["documents_deleted"] == 2 and logged["deleted_by_root"] == {"clientes": 1, "proveedores": 1}
    assert db.fetch_one("SELECT count(*) AS n FROM store")["n"] == 1
    # After the rerun: caches cleared, figures show the sweep, the toast reports it.
    assert as_int(metric(at, "Clientes: caducados")) == 0 and as_int(metric(at, "Proveedores: caducados")) == 0
    log = frame(at, "id", "trigger", "status", "host")
    assert list(log["id"]) == [logged["id"], dry["id"]]
    assert list(log["status"]) == ["Hecho", "Simulación (nada borrado)"]
    assert any("2 documentos" in t.value for t in at.toast)
    with pytest.raises(KeyError):
        at.button(key="sweeps.run")  # the dialog closed
    # Nothing expired is left: the page says so in words instead of an empty chart.
    assert any(i.value == "No hay documentos caducados sin barrer." for i in at.info)
    with pytest.raises(KeyError):
        figure(at, "sweeps.expired_chart")


def test_a_dry_run_is_never_the_last_sweep_and_the_log_lists_what_each_run_deleted(create_database, app_env):
    from core.db import Database
    from core.operations.sweep import run_sweep

    db = Database(create_database())
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=0.005)
    time.sleep(0.4)
    real = run_sweep(db, trigger="scheduled")
    put_memory(store, ("proveedores", "P2"), "aviso-promo", {"texto": "promo"}, valid_for_minutes=0.005)
    time.sleep(0.4)
    dry = run_sweep(db, trigger="manual", dry_run=True)
    assert dry.status == "dry_run" and dry.documents_deleted == 1

    at = open_page(db.dsn, app_env, LOCAL_ROLES="sre")
    assert not at.exception
    # in the viewer's zone (UTC without a browser), named in the help (the label read whole: issue 54 #8), the date
    # as Spanish writes it
    shown = metric(at, f"Último barrido, n.º {real.run_id}")
    tile = next(m for m in at.metric if m.label == f"Último barrido, n.º {real.run_id}")
    assert tile.help == "Cuándo empezó, en la zona horaria UTC."
    assert shown == (
        format_skeleton("MMMd", real.started_at, tzinfo=UTC, locale="es")
        + format_datetime(real.started_at, " H:mm", tzinfo=UTC, locale="es")
    )
    assert next(m for m in at.metric if m.label.startswith("Último barrido")).proto.delta == "Hecho · programado"
    log = frame(at, "id", "trigger", "deleted_by_root")
    assert log["trigger"].tolist() == ["a mano", "programado"]  # words, not the job's keys
    assert log["deleted_by_root"].tolist() == ["Proveedores: 1", "Proveedores: 1"]  # not JSON, the root in words
    ttl = next(df for df in at.dataframe if "ttl_minutes" in df.value.columns)
    assert json.loads(ttl.proto.columns)["ttl_minutes"]["type_config"]["format"] == "%'.,d"  # 525.600, not 525600
    # The newest run is the dry run: its detail lists the document it would delete.
    assert at.selectbox(key="sweeps.detail_run").value == dry.run_id
    assert frame(at, "prefix", "key").values.tolist() == [["proveedores.P2", "aviso-promo"]]
    at.selectbox(key="sweeps.detail_run").set_value(real.run_id).run()
    assert frame(at, "prefix", "key").values.tolist() == [["proveedores.P1", "aviso-retraso"]]
    # The erasure re-check is in numbers under translated labels, never the job's English sentence.
    log = frame(at, "id", "rechecked", "recheck_clean")
    assert not log.astype(str).apply(lambda col: col.str.contains("re-checked")).any().any()
    assert [int(v) for v in log["rechecked"]] == [0, 0]


def test_the_page_renders_while_a_sweep_is_running(db, app_env):
    """A run in progress has no re-check yet (nor finished_at, nor error) beside finished runs that have one: the page
    renders, listing it as running (a NULL among texts once came back as NaN and crashed the page)."""
    import threading

    from core.operations.sweep import run_sweep

    assert run_sweep(db, trigger="scheduled").erasure_recheck
    at_ttl, release = threading.Event(), threading.Event()

    def hold_at_ttl(stage: str, fraction: float, detail: str) -> None:
        if stage == "ttl":
            at_ttl.set()
            assert release.wait(60)

    running = threading.Thread(target=run_sweep, args=(db,), kwargs={"trigger": "manual", "on_step": hold_at_ttl})
    running.start()
    try:
        assert at_ttl.wait(60)
        at = open_page(db.dsn, app_env, LOCAL_ROLES="sre")
        assert not at.exception, at.exception
        log = frame(at, "id", "status", "erasure_recheck", "rechecked")
        assert log["status"].tolist() == ["En curso", "Hecho"]
        assert log["erasure_recheck"].tolist() == ["—", "—"]  # no re-check yet; the finished run's is in numbers
        assert log["rechecked"].tolist() == ["—", "0"]
    finally:
        release.set()
        running.join(60)


def test_sre_prunes_history_from_the_dialog_and_downloads_the_threads(create_database, app_env):
    from test_sweep import converse

    from core.db import Database

    db = Database(create_database())
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    converse(db, store)
    before = db.fetch_one("SELECT count(*) AS n FROM checkpoints")["n"]

    at = open_page(db.dsn, app_env, LOCAL_ROLES="sre")
    at.button(key="sweeps.now").click().run()
    at.checkbox(key="sweeps.prune").check().run()
    at.number_input(key="sweeps.keep_latest").set_value(1).run()
    at.number_input(key="sweeps.idle_minutes").set_value(0).run()
    at.button(key="sweeps.preview").click().run()
    assert not at.exception
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints")["n"] == before
    listed = frame(at, "thread_id", "checkpoints", "bytes")
    sql = db.fetch("SELECT thread_id, checkpoints, bytes FROM core_prune_threads ORDER BY bytes DESC, thread_id")
    assert listed[["thread_id", "checkpoints", "bytes"]].values.tolist() == [list(r.values()) for r in sql]
    assert len(sql) == 5
    # Changing the policy after the dry run asks for a new one.
    at.number_input(key="sweeps.keep_latest").set_value(2).run()
    assert at.checkbox(key="sweeps.confirm").disabled
    at.number_input(key="sweeps.keep_latest").set_value(1).run()
    at.checkbox(key="sweeps.confirm").check().run()
    at.button(key="sweeps.run").click().run()
    assert not at.exception
    run = db.fetch_one("SELECT * FROM core_sweep_log WHERE NOT dry_run")
    assert (
        run["status"] == "ok"
        and run["prune_checkpoints"] == before - db.fetch_one("SELECT count(*) AS n FROM checkpoints")["n"] > 0
    )
    at.selectbox(key="sweeps.detail_run").set_value(run["id"]).run()
    assert at.get("download_button"), "the pruned threads are downloadable"


def test_manager_is_refused(demo_db, app_env):
    app_env(demo_db.dsn, LOCAL_ROLES="manager")
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    # registered but hidden from a manager's menu: its URL opens it, and it refuses naming the role
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == ["Esta página requiere el rol «sre»."]
    assert not at.text_input and not at.metric and not at.dataframe
    # ...and the page refuses by itself when run directly (its own server-side check).
    page = AppTest.from_file("../" + PAGE, default_timeout=60)
    page.run()
    assert not page.exception
    assert any("requiere el rol «sre»" in e.value for e in page.error)
    assert not page.get("plotly_chart") and not page.metric
    with pytest.raises(KeyError):
        page.button(key="sweeps.now")


def test_sweeps_page_on_article_agents_equals_sql(article_agents, app_env):
    """Agents built from the articles alone (stock savers, none of our code): the scheduled sweep runs on
    their database, and the page's log and per-run chart equal SQL (a run that deleted nothing has no bar)."""
    from core.db import Database
    from core.operations.sweep import run_sweep

    written = article_agents()
    db = Database(written.dsn)
    try:
        first, second = run_sweep(db, trigger="scheduled"), run_sweep(db, trigger="scheduled")
        assert first.status == second.status == "ok"
        at = open_page(written.dsn, app_env)
        log = frame(at, "id", "trigger", "status")
        sql_log = db.fetch("SELECT id, trigger, status FROM core_sweep_log ORDER BY id DESC")
        assert list(log["id"]) == [r["id"] for r in sql_log] == [second.run_id, first.run_id]
        sql_deleted = {
            r["root"]: int(r["n"])
            for r in db.fetch(
                "SELECT r.key AS root, sum(r.value::bigint) AS n FROM core_sweep_log l, "
                "jsonb_each_text(l.deleted_by_root) r "
                "WHERE NOT l.dry_run GROUP BY 1 HAVING sum(r.value::bigint) > 0"
            )
        }
        try:
            shown = totals_by_trace(figure(at, "sweeps.runs_chart"))
        except KeyError:  # nothing deleted: no chart, the page says so
            shown = {}
        assert shown == sql_deleted and "unknown" not in shown
    finally:
        db.close()


def category_order(spec: dict, axis: str = "xaxis") -> list[str]:
    """The categories of a category axis in the order plotly.js draws them: the layout's array when it gives one
    (categoryorder 'array'), else in order of first appearance, trace after trace (plotly's default 'trace')."""
    layout = spec["layout"].get(axis, {})
    if layout.get("categoryorder") == "array":
        return list(layout["categoryarray"])
    seen: list[str] = []
    for trace in spec["data"]:
        seen += [x for x in decode(trace["x"]) if x not in seen]
    return seen


@pytest.mark.parametrize("language", ["es", "en"])
def test_the_runs_chart_draws_runs_in_the_order_they_ran(create_database, app_env, language):
    """Issue 54 #3: with ten runs and more, the chart's runs are in run order (#9 before #10, today's manual sweep
    last), whatever roots each run deleted from; before, runs whose only root was not the first came after all the
    others. Twelve real sweeps of documents that really expired."""
    from core.db import Database
    from core.operations.sweep import run_sweep

    db = Database(create_database())
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    # runs 1-9 delete nothing (one row of 0 in the first root), 10 and 12 only from proveedores, 11 from clientes
    expiring = {10: ("proveedores", "P1"), 11: ("clientes", "C1"), 12: ("proveedores", "P2")}
    for n in range(1, 13):
        if n in expiring:
            put_memory(store, expiring[n], f"aviso-{n}", {"texto": f"aviso {n}"}, valid_for_minutes=0.005)
            time.sleep(0.4)
        assert run_sweep(db, trigger="manual" if n == 12 else "scheduled").status == "ok"
    ran = [r["id"] for r in db.fetch("SELECT id FROM core_sweep_log WHERE NOT dry_run ORDER BY started_at, id")]
    assert len(ran) == 12

    at = open_page(db.dsn, app_env, LOCAL_ROLES="sre")
    if language == "en":
        at.query_params["lang"] = "en"
        at.session_state["lang"] = "en"
        at.run()
    assert not at.exception
    spec = figure(at, "sweeps.runs_chart")
    assert spec["layout"]["xaxis"]["title"]["text"].startswith("Barrido (n.º" if language == "es" else "Sweep (no.")
    drawn = category_order(spec)
    assert [label.split(" ")[0] for label in drawn] == [f"#{i}" for i in ran], drawn
    assert {x for trace in spec["data"] for x in decode(trace["x"])} <= set(drawn)


@pytest.mark.parametrize(
    ("language", "said", "english"),
    [
        (
            "es",
            ["Cerrojo obtenido (barrido n.º {run})", "Registro de supresiones re-comprobado: 1 solicitud, 1 limpia"],
            ("re-checked", "erasure request", "physical erasure", "run "),
        ),
        (
            "en",
            ["Lock taken (sweep no. {run})", "Erasure register re-checked: 1 request, 1 clean"],
            ("re-checked 1 erasure", "re-check re-checked", "physical erasure:", "(run "),
        ),
    ],
)
def test_a_sweeps_steps_are_said_in_the_pages_language(create_database, app_env, language, said, english):
    """Issue 54 #5: the steps a sweep shows as it runs were the job's English texts inside the Spanish page ("Revisión
    del registro de supresiones re-checked 1 erasure request(s): 1 clean", "Cerrojo obtenido (run 10)"), and the
    English page said "re-check re-checked". A real erasure, then a dry run from the dialog, read in each language."""
    from core.db import Database
    from core.privacy import erasure
    from tests.test_erasure import write_docs

    db = Database(create_database())
    write_docs(build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS), "C9", 3)
    erasure.erase(db, "C9", operator="dpo@example.com")
    at = open_page(db.dsn, app_env, LOCAL_ROLES="sre")
    if language == "en":
        at.query_params["lang"] = "en"
        at.session_state["lang"] = "en"
        at.run()
    at.button(key="sweeps.now").click().run()
    at.button(key="sweeps.preview").click().run()
    assert not at.exception
    (run,) = [r["id"] for r in db.fetch("SELECT id FROM core_sweep_log WHERE dry_run")]
    steps = [m.value for m in at.markdown]
    for text in said:
        assert text.format(run=run) in steps, steps
    leaked = [s for s in steps if any(e in s for e in english)]
    assert not leaked, leaked
