"""What we install in the agents' database gives an agent's role nothing (issue 24, part 1; issue 37).

Our statement triggers on langgraph's tables ran as their definer (so that agents we did not write, with a role
granted on their own tables only, could still write), and a definer function is a door into its owner's rights.
Since migrations 140-141 nothing of ours runs in the agents' transactions: the change follower (core/capture)
keeps our tables from the WAL. These tests try it the way an attacker with an agent's grants would, on a real
server with a real login role.
- The temp-schema shadowing trick: a TEMP table named like every table the follower keeps, with a trigger that
  makes its session's role superuser, then ordinary writes through a stock PostgresStore and a stock
  PostgresSaver. The role stays unprivileged, the shadow tables receive nothing, the real ones are kept.
- A direct call of every function we created: permission denied.
- No trigger on the agents' tables and no SECURITY DEFINER function of ours is left in the database.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from conftest import login_role
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.base import TTLConfig
from langgraph.store.postgres import PostgresStore
from psycopg.rows import dict_row

from core.capture.follower import catch_up

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


# What the agents' writes change (through the change follower, no longer through definer triggers): what a shadow
# in the agent's session would stand in for if anything of ours ran there.
KEPT_TABLES = [
    "core_expiry_days",
    "core_prefix_counts",
    "core_root_counts",
    "core_store_shadow",
    "core_token_dirty",
    "core_value_holders",
]


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
    tables = KEPT_TABLES
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
    # and the real tables were kept: the writes were counted where they belong, by the follower
    catch_up(db.dsn)
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


def test_no_trigger_on_the_agents_tables_and_no_security_definer_function_is_left(db):
    """What 050 made safe is gone (migrations 140-141): nothing of ours runs with its owner's rights. (The checks
    of every definer function's pinned search_path, owner and schema-qualified bodies had nothing left to check.)"""
    on_agent_tables = db.fetch(
        "SELECT tgrelid::regclass::text AS t, tgname FROM pg_trigger WHERE NOT tgisinternal "
        "AND tgrelid = ANY('{store,store_vectors,checkpoints,checkpoint_blobs,checkpoint_writes}'::regclass[])"
    )
    assert on_agent_tables == []
    assert [f["signature"] for f in _definer_functions(db.dsn)] == []


def test_a_role_without_any_grant_cannot_write_the_memory_totals(db):
    """An older 046 left `core_root_counts_add(jsonb)`, a definer function any role could call: gone."""
    with psycopg.connect(login_role(db.dsn, "nadie", "core_schema_migrations"), autocommit=True) as conn:
        assert conn.execute("SELECT to_regprocedure('core_root_counts_add(jsonb)')").fetchone()[0] is None
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT 1 FROM core_root_counts")
