"""AppTest of the Erasure pages with subject attribution (issue 10) and an interrupted erasure (issue 16 #9):
sources per thread, residue threads decided one by one, the coverage notice, and a click during an erasure."""

from __future__ import annotations

import threading
import time

from apptools import frame
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
from streamlit.runtime.scriptrunner_utils.script_run_context import SCRIPT_RUN_CONTEXT_ATTR_NAME

from core.db import Database, reset_pool
from core.privacy import decisions, erasure_register, evidence
from tests.test_erasure_pages import dashboard, db, shop, texts  # noqa: F401  (fixtures)


def test_preview_shows_sources_residue_and_coverage_and_waits_for_each_decision(article_agents, app_env):
    foreign = article_agents()
    app_env(foreign.dsn, LOCAL_ROLES="dpo")
    dbx = Database(foreign.dsn)
    try:
        at = dashboard("app_pages/erasure.py")
        warnings = "\n".join(w.value for w in at.warning)
        assert "Cobertura de atribución: 12 / 30 de los hilos (40\xa0%)" in warnings
        assert 'config={"metadata": {"cliente_id": cliente_id}}' in texts(at)  # the fix: tag runs
        at.text_input(key="erasure.customer").input("C9").run()
        at.button(key="erasure.preview").click().run()
        assert not at.exception, at.exception
        sources = frame(at, "Hilo", "Fuentes")
        assert sorted(sources["Hilo"]) == foreign.threads_of("C9", "write")
        assert set(sources["Fuentes"]) == {"store:hilo"}
        (read,) = foreign.threads_of("C9", "read")
        (chat,) = foreign.threads_of("C9", "chat")
        shown = texts(at)
        assert read in shown and chat in shown
        terms = frame(at, "Término", "Clientes con ese valor", "Común (no propone hilos)")
        t002 = terms.set_index("Término").loc["T002"]
        assert t002["Clientes con ese valor"] == "6" and bool(t002["Común (no propone hilos)"])
        start = next(b for b in at.button if b.key == "erasure.start")
        assert start.disabled and "Falta decidir 2" in "\n".join(w.value for w in at.warning)

        order = evidence.preview(dbx, "C9").residue_threads
        n_read, n_chat = order.index(read), order.index(chat)
        at.radio(key=f"erasure.residue.{n_chat}.decision").set_value(decisions.ERASE).run()
        at.radio(key=f"erasure.residue.{n_read}.decision").set_value(decisions.LEAVE).run()
        assert next(b for b in at.button if b.key == "erasure.start").disabled  # leave needs a reason
        needed = "Escriba el motivo para dejarlo"
        assert sum(needed in c.value for c in at.caption) == 1  # said next to that thread's reason field only
        at.text_input(key=f"erasure.residue.{n_read}.reason").input("retención legal 42").run()
        assert not next(b for b in at.button if b.key == "erasure.start").disabled
        assert not any(needed in c.value for c in at.caption)
        at.button(key="erasure.start").click().run()
        at.text_input(key="erasure.confirm_id").input("C9").run()
        at.button(key="erasure.confirm").click().run()
        assert not at.exception, at.exception
        assert "Completo con exclusiones nombradas" in "\n".join(w.value for w in at.warning)
        row = dbx.fetch_one("SELECT * FROM core_erasure_register")
        assert row["status"] == "complete" and row["exclusions"][0]["thread_id"] == read
        assert row["exclusions"][0]["reason"] == "retención legal 42"
        assert dbx.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (chat,))["n"] == 0
        assert dbx.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (read,))["n"] > 0
    finally:
        reset_pool(foreign.dsn)
        dbx.close()


def _rerun_when_running(database: Database, done: threading.Event, deadline_s: float = 60) -> None:
    """What a click in the browser does during a run: the session asks the script runner for a rerun; the next
    element call of the running script (the erasure's progress line) raises Streamlit's RerunException."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and not done.is_set():
        row = database.fetch_one("SELECT status FROM core_erasure_register ORDER BY id DESC LIMIT 1", read_only=False)
        if row and row["status"] == "running":
            for th in threading.enumerate():
                ctx = getattr(th, SCRIPT_RUN_CONTEXT_ATTR_NAME, None)
                if ctx is not None and th.is_alive():
                    ctx.script_requests.request_rerun(RerunData())
            done.set()
            return
        time.sleep(0.02)


def test_a_click_during_an_erasure_ends_recorded_and_resumable(shop, app_env):  # noqa: F811 (the imported fixture)
    app_env(shop.dsn, LOCAL_ROLES="dpo")
    # slow enough for a click to land mid-erasure: each checkpoint delete statement waits a second
    shop.execute(
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1); RETURN NULL; END $$"
    )
    shop.execute("CREATE TRIGGER slow AFTER DELETE ON checkpoints FOR EACH STATEMENT EXECUTE FUNCTION slow()")
    at = dashboard("app_pages/erasure.py")
    at.text_input(key="erasure.customer").input("C9").run()
    at.button(key="erasure.preview").click().run()
    at.button(key="erasure.start").click().run()
    at.text_input(key="erasure.confirm_id").input("C9").run()
    done = threading.Event()
    clicker = threading.Thread(target=_rerun_when_running, args=(shop, done), daemon=True)
    clicker.start()
    at.button(key="erasure.confirm").click().run()
    clicker.join(70)
    assert done.is_set()
    assert not at.exception, at.exception
    (row,) = shop.fetch("SELECT * FROM core_erasure_register", read_only=False)
    assert row["status"] == "interrupted", row  # never left at `running`
    assert row["finished_at"] is not None and row["counts_after"] is not None and "store" in row["deleted"]
    assert "interrumpió" in "\n".join(w.value for w in at.warning)

    shop.execute("DROP TRIGGER slow ON checkpoints")
    assert [r.request_id for r in erasure_register.recheck_all(shop)] == [row["id"]]  # not skipped
    at.switch_page("app_pages/erasure_register.py").run()
    assert not at.exception, at.exception
    table = frame(at, "customer_id", "resumable")
    assert list(table["status"]) == ["interrumpida"] and bool(table["resumable"].iloc[0])  # in the UI language
    at.button(key="erasure_register.resume").click().run()
    assert not at.exception, at.exception
    assert "Reanudada como solicitud" in texts(at)
    rows = shop.fetch("SELECT id, status, resumed_by FROM core_erasure_register ORDER BY id", read_only=False)
    assert [r["status"] for r in rows] == ["interrupted", "complete"] and rows[0]["resumed_by"] == rows[1]["id"]
    assert shop.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE metadata->>'cliente_id' = 'C9'")["n"] == 0


def test_checkpoints_by_customer_uses_the_resolver_and_shows_coverage(article_agents_db, app_env):
    app_env(article_agents_db.dsn, LOCAL_ROLES="sre")
    at = dashboard("app_pages/checkpoints.py")
    at.radio(key="checkpoints.find_by").set_value("customer").run()
    at.text_input(key="checkpoints.customer").input("C9").run()
    assert not at.exception, at.exception
    found = frame(at, "thread_id", "sources")
    assert sorted(found["thread_id"]) == article_agents_db.threads_of("C9", "write")
    assert set(found["sources"]) == {"store:hilo"}
    warnings = "\n".join(w.value for w in at.warning)
    assert "12 / 30 de los hilos (40\xa0%)" in warnings
    assert 'config={"metadata": {"cliente_id"' in texts(at)
    reset_pool(article_agents_db.dsn)


def test_common_terms_are_counted_when_asked_and_the_decisions_stay(article_agents, app_env):
    """Once the token index is built, the preview reads only where a distinctive term may be, and says a common
    term's threads are not counted (at 10M counting them was most of a 6.3 s preview). A button counts them;
    the decisions taken meanwhile stay."""
    from core.privacy import token_index

    foreign = article_agents(shared_customers=50)
    app_env(foreign.dsn, LOCAL_ROLES="dpo")
    dbx = Database(foreign.dsn)
    try:
        token_index.index_pending(dbx)
        at = dashboard("app_pages/erasure.py")
        at.text_input(key="erasure.customer").input("C9").run()
        at.button(key="erasure.preview").click().run()
        assert not at.exception, at.exception
        column = "Hilos donde aparece (un término común: hilos con todas sus palabras)"
        terms = frame(at, "Término", column).set_index("Término")
        assert terms.loc["T002", column] == "sin contar" and terms.loc["C9", column] != "sin contar"
        at.radio(key="erasure.residue.0.decision").set_value(decisions.ERASE).run()
        at.button(key="erasure.count_common").click().run()
        assert not at.exception, at.exception
        terms = frame(at, "Término", column).set_index("Término")
        assert int(terms.loc["T002", column]) >= 50  # the 50 customers sharing T002 each have a thread with it
        assert at.radio(key="erasure.residue.0.decision").value == decisions.ERASE
        assert not any(b.key == "erasure.count_common" for b in at.button)
    finally:
        dbx.close()
        reset_pool(foreign.dsn)
