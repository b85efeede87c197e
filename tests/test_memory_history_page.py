"""The Memory page's history and flags (issue 56), AppTest: a customer's writes with the superseded value struck
through, the expired-but-not-swept document said hidden from the agent, the flags' rules and counts per store as
SQL counts them; a manager of another store sees no flag and no history; English on request."""

from __future__ import annotations

import time

import pytest
from streamlit.testing.v1 import AppTest
from test_memory_flags import RECOGIDA, Shop
from test_scope_pages import AUTH

from core.db import Database
from core.memory.store import put_memory


@pytest.fixture(scope="module")
def shop_db(create_database):
    """H1 overwrote its pickup store (Sierpes -> Goya) and has an expired preference not swept; F1 flapped; both of
    store T001. X1 of store T002 flapped too."""
    db = Database(create_database())
    shop = Shop(db)
    shop.say("H1", "cliente-H1-1", RECOGIDA.format("Sierpes"))
    shop.say("H1", "cliente-H1-2", RECOGIDA.format("Goya"))
    put_memory(
        shop.store,
        ("clientes", "H1"),
        "pref-horario",
        {"tipo": "horario", "valor": "mañanas", "texto": "horario: mañanas"},
        thread_id="cliente-H1-2",
        agent="atencion-cliente",
        valid_for_minutes=0.001,
    )
    for n, tienda in enumerate(["Sol", "Goya", "Sol", "Goya", "Sol"]):
        shop.say("F1", f"cliente-F1-{n}", RECOGIDA.format(tienda))
    for n, tienda in enumerate(["Sol", "Goya", "Sol", "Goya"]):
        shop.say("X1", f"cliente-X1-{n}", RECOGIDA.format(tienda), tienda="T002")
    time.sleep(0.2)
    shop.settle()
    yield db
    db.close()


def page(db: Database, app_env, *, stores: list[str] | None = None, ns: str | None = None, lang: str = "es"):
    app_env(db.dsn, FLAG_FLAPPING_WRITES="3")
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    if stores is not None:
        at.secrets["auth"], at.secrets["roles"] = AUTH, {"g@example.com": ["manager"]}
        at.user = {"is_logged_in": True, "email": "g@example.com", "email_verified": True, "stores": stores}
    if ns:
        at.query_params["ns"] = ns
    if lang != "es":
        at.query_params["lang"] = lang
    at.run()
    assert not at.exception, at.exception
    return at


def markdown(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown).replace("\\", "")


def flag_counts(at: AppTest):
    return next(d.value for d in at.dataframe if "rule" in d.value.columns).set_index("flag")


def test_a_customers_history_strikes_the_superseded_value_and_says_what_the_agent_sees(shop_db, app_env):
    at = page(shop_db, app_env, ns="clientes.H1")
    shown = markdown(at)
    assert "~~Sierpes~~" in shown and "**Goya**" in shown and "~~Goya~~" not in shown
    assert "cliente-H1-1" in shown and "agente atencion-cliente" in shown and "recordar_preferencia" in shown
    assert "caducado: el agente ya no lo ve (pendiente del barrido)" in shown  # pref-horario, expired, not swept
    assert "el agente lo ve" in shown
    history = next(d.value for d in at.dataframe if "superseded" in d.value.columns)
    recogida = history[history["key"] == "pref-recogida"]
    assert list(zip(recogida["value"], recogida["superseded"], strict=True)) == [("Sierpes", True), ("Goya", False)]
    expected = shop_db.fetch_one("SELECT count(*) AS n FROM core_memory_writes WHERE prefix = 'clientes.H1'")["n"]
    assert len(history) == expected == 3


def test_the_flags_rules_and_counts_per_store(shop_db, app_env):
    at = page(shop_db, app_env)
    counts = flag_counts(at)
    assert counts.loc["Cambia sin parar", "rule"] == "Escrito más de 3 veces en los últimos 7 días."
    sql = shop_db.fetch(
        "SELECT split_part(prefix, '.', 2) AS c FROM core_memory_writes WHERE written_at > now() - interval '7 days' "
        "GROUP BY prefix, key HAVING count(*) > 3 ORDER BY 1"
    )
    assert [r["c"] for r in sql] == ["F1", "X1"]
    assert counts.loc["Cambia sin parar", "total"] == 2
    assert counts.loc["Cambia sin parar", "T001"] == 1 and counts.loc["Cambia sin parar", "T002"] == 1
    assert counts.loc["Contradicción", "total"] == 0


def test_a_manager_sees_their_stores_flags_and_not_another_stores_customer(shop_db, app_env):
    mine = page(shop_db, app_env, stores=["T001"])
    counts = flag_counts(mine)
    assert counts.loc["Cambia sin parar", "total"] == 1 and "T002" not in counts.columns
    other = page(shop_db, app_env, stores=["T002"], ns="clientes.H1")
    counts = flag_counts(other)
    assert "T001" not in counts.columns and counts.loc["Cambia sin parar", "total"] == 1
    assert not any(
        d.value.get("cliente_id") is not None and "F1" in set(d.value["cliente_id"]) for d in other.dataframe
    )
    assert "Sierpes" not in markdown(other) and not any("superseded" in d.value.columns for d in other.dataframe)


def test_in_english(shop_db, app_env):
    at = page(shop_db, app_env, ns="clientes.H1", lang="en")
    shown = markdown(at)
    assert "~~Sierpes~~" in shown and "expired: hidden from the agent (waiting for the sweep)" in shown
    counts = flag_counts(at)
    assert counts.loc["Flapping", "rule"] == "Written more than 3 times in the last 7 days."
