"""What we install in the agents' database gives an agent's role nothing (issue 24, part 1).

Our statement triggers on langgraph's tables run as their definer, so that agents we did not write, with a
role granted on their own tables only, can still write. A definer function is a door into its owner's rights:
these tests try it the way an attacker with an agent's grants would, on a real server with a real login role.
- The temp-schema shadowing trick: a TEMP table named like every table a definer function touches, with a
  trigger that makes its session's role superuser, then ordinary writes through a stock PostgresStore and a
  stock PostgresSaver. The role stays unprivileged and the shadow tables receive nothing.
- A direct call of every function we created: permission denied.
- Every SECURITY DEFINER function in the database: pinned `search_path = pg_catalog, pg_temp`, not executable
  by PUBLIC, owned by a NOLOGIN role that is not a superuser.
"""

from __future__ import annotations

import re
import uuid

import psycopg
import pytest
from conftest import login_role
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.base import TTLConfig
from langgraph.store.postgres import PostgresStore
from psycopg.rows import dict_row

AGENT_TABLES = (
    "store, store_vectors, store_migrations, vector_migrations, "
    "checkpoints, checkpoint_blobs, checkpoint_writes, checkpoint_migrations"
)

DEFINER_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature, p.prosrc, p.proconfig, r.rolname AS owner, r.rolsuper, r.rolcanlogin,
       coalesce(p.proacl, acldefault('f', p.proowner)) AS acl,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
WHERE p.prosecdef AND p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)"""

# every function of ours (core_*) in the schema, with NULL arguments of its types, each a sub-select: a
# constant NULL would let the planner fold a STRICT call away before any privilege check
OUR_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature,
       format('%I.%I', n.nspname, p.proname) AS name,
       coalesce((SELECT string_agg(format('(SELECT NULL::%s)', format_type(t, NULL)), ', ' ORDER BY i)
                 FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)), '') AS null_args,
       p.prokind
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = current_schema() AND p.proname LIKE 'core\\_%'"""

SUPERUSER = "SELECT rolsuper FROM pg_roles WHERE rolname = %s"


def _role_of(dsn: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(dsn)["user"]


def _definer_functions(dsn: str) -> list[dict]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(DEFINER_FUNCTIONS).fetchall()


def _touched_tables(dsn: str) -> list[str]:
    """Every table (ours) named in the body of a definer function: what a shadow could stand in for."""
    names = {m for f in _definer_functions(dsn) for m in re.findall(r"\b(core_\w+)\b", f["prosrc"])}
    with psycopg.connect(dsn) as conn:
        return sorted(n for n in names if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (n,)).fetchone()[0])


def _shadow_ddl(dsn: str, table: str) -> str:
    """CREATE TEMP TABLE like `table` (its columns and primary key, so an upsert's arbiter resolves)."""
    with psycopg.connect(dsn) as conn:
        columns = conn.execute(
            "SELECT string_agg(format('%%I %%s', attname, format_type(atttypid, atttypmod)), ', ' ORDER BY attnum) "
            "FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            (table,),
        ).fetchone()[0]
        key = conn.execute(
            "SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.n) FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = %s::regclass AND i.indisprimary",
            (table,),
        ).fetchone()[0]
    return f"CREATE TEMP TABLE {table} ({columns}{f', PRIMARY KEY ({key})' if key else ''})"


ESCALATE = """
CREATE FUNCTION pg_temp.escalate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
    RETURN NULL;
END $$"""


def _agent_writes(conn: psycopg.Connection, thread: str) -> None:
    """What an agent does on its own connection: memory writes, a read with TTL refresh, a delete, and a
    checkpoint with its pending writes, through the stock classes."""
    store = PostgresStore(conn, ttl=TTLConfig(refresh_on_read=True, default_ttl=60))
    store.put(("clientes", "ATK1"), "pref-contacto", {"texto": "contacto: WhatsApp", "hilo": thread})
    store.put(("clientes", "ATK1"), "pref-idioma", {"texto": "idioma: euskera"})
    store.get(("clientes", "ATK1"), "pref-contacto")
    store.delete(("clientes", "ATK1"), "pref-idioma")
    saver = PostgresSaver(conn)
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": ["hola"]}
    checkpoint["channel_versions"] = {"messages": 1}
    saved = saver.put(config, checkpoint, {"source": "loop", "step": 1}, {"messages": 1})
    saver.put_writes(saved, [("messages", "recibido")], task_id=str(uuid.uuid4()))


def test_an_agent_role_cannot_borrow_a_definer_through_shadow_temp_tables(db):
    agent_dsn = login_role(db.dsn, "atacante", AGENT_TABLES)
    role = _role_of(agent_dsn)
    tables = _touched_tables(db.dsn)
    # the tables the definer functions keep (a regression that renamed them would make this test vacuous)
    assert {
        "core_token_dirty",
        "core_value_holders",
        "core_prefix_counts",
        "core_root_counts",
        "core_expiry_days",
    } <= set(tables), tables
    thread = f"atk-{uuid.uuid4()}"
    with psycopg.connect(agent_dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        conn.execute(ESCALATE)
        for table in tables:
            conn.execute(_shadow_ddl(db.dsn, table))
            for event in ("INSERT OR UPDATE OR DELETE", "TRUNCATE"):
                conn.execute(
                    f"CREATE TRIGGER escalate_{abs(hash(event))} AFTER {event} ON pg_temp.{table} "
                    "FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.escalate()"
                )
        _agent_writes(conn, thread)
        shadowed = {t: conn.execute(f"SELECT count(*) AS n FROM pg_temp.{t}").fetchone()["n"] for t in tables}
    assert db.fetch_one(SUPERUSER, (role,))["rolsuper"] is False
    assert shadowed == {t: 0 for t in tables}
    # and the real tables were kept: the writes were counted where they belong
    assert db.fetch_one("SELECT 1 AS ok FROM core_token_dirty WHERE thread_id = %s", (thread,)) is not None
    assert db.fetch_one("SELECT documents FROM core_prefix_counts WHERE prefix = 'clientes.ATK1'")["documents"] == 1
    assert db.fetch_one("SELECT sum(documents) AS n FROM core_root_counts WHERE root = 'clientes'")["n"] == 1
    assert db.fetch_one("SELECT count(*) AS n FROM core_value_holders WHERE cliente_id = 'ATK1'")["n"] == 2


def test_an_agent_role_can_call_none_of_our_functions(db):
    agent_dsn = login_role(db.dsn, "llamador", AGENT_TABLES)
    role = _role_of(agent_dsn)
    functions = db.fetch(OUR_FUNCTIONS, read_only=False)
    assert len(functions) > 20, functions  # the decoder, the counters, the registers' seals...
    callable_ = []
    with psycopg.connect(agent_dsn, autocommit=True) as conn:
        for f in functions:
            if f["prokind"] != "f":
                continue
            try:
                conn.execute(f"SELECT {f['name']}({f['null_args']})")
            except psycopg.errors.InsufficientPrivilege:
                continue
            except psycopg.Error as exc:  # anything else means the call got past the privilege check
                callable_.append((f["signature"], type(exc).__name__))
                continue
            callable_.append((f["signature"], "ran"))
    assert callable_ == []
    assert db.fetch_one(SUPERUSER, (role,))["rolsuper"] is False


def test_every_security_definer_function_is_pinned_revoked_and_owned_by_a_nologin_role(db):
    functions = _definer_functions(db.dsn)
    # what our triggers on langgraph's tables run: every one a definer (agents write with their own role), so checked
    on_agent_tables = {
        r["fn"]
        for r in db.fetch(
            "SELECT DISTINCT tgfoid::regprocedure::text AS fn FROM pg_trigger WHERE NOT tgisinternal "
            "AND tgrelid = ANY('{store,store_vectors,checkpoints,checkpoint_blobs,checkpoint_writes}'::regclass[])"
        )
    }
    assert len(on_agent_tables) >= 5 and on_agent_tables <= {f["signature"] for f in functions}, on_agent_tables
    unsafe = [
        (f["signature"], f["proconfig"], f["owner"], f["public_execute"])
        for f in functions
        if f["proconfig"] != ["search_path=pg_catalog, pg_temp"]
        or f["public_execute"]
        or f["rolsuper"]
        or f["rolcanlogin"]
    ]
    assert unsafe == []


def test_the_definer_bodies_name_every_table_with_its_schema(db):
    """Every table and function of ours that a definer body names is schema-qualified: with the path pinned to
    `pg_catalog, pg_temp` a bare name could only resolve to nothing or to a temp table."""
    bare = []
    for f in _definer_functions(db.dsn):
        for m in re.finditer(r"(?<![\w.\"])(core_\w+)\b", f["prosrc"]):
            bare.append((f["signature"], m.group(1)))
    assert bare == []


def test_a_role_without_any_grant_cannot_write_the_memory_totals(db):
    """An older 046 left `core_root_counts_add(jsonb)`, a definer function any role could call: gone."""
    with psycopg.connect(login_role(db.dsn, "nadie", "core_schema_migrations"), autocommit=True) as conn:
        assert conn.execute("SELECT to_regprocedure('core_root_counts_add(jsonb)')").fetchone()[0] is None
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT 1 FROM core_root_counts")
