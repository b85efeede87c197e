"""What a migrated database's schema is made of, read from pg_catalog: every schema, function (arguments,
definition, SECURITY DEFINER, config, owner, ACL), relation (kind, owner, ACL), column (type, null,
default, ACL; not its position), constraint, index, trigger, view, policy, type, extension and default
privilege that our migrations and the store's and checkpointer's setup() create, in every schema but
PostgreSQL's own (pgvector's members left out). `differences(expected, actual)` lists what differs."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

OURS = "{} IN (SELECT oid FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema')"
NOT_EXTENSION = (
    "NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = '{}'::regclass AND d.objid = {} AND d.deptype = 'e')"
)


def _acl(column: str) -> str:
    return f"ARRAY(SELECT x::text FROM unnest({column}) x ORDER BY 1)"


QUERIES = {
    "schema": f"""
SELECT n.nspname AS key, pg_get_userbyid(n.nspowner) AS owner, {_acl("n.nspacl")} AS acl
FROM pg_namespace n WHERE {OURS.format("n.oid")}""",
    "function": f"""
SELECT p.oid::regprocedure::text AS key, pg_get_functiondef(p.oid) AS definition, p.prosecdef AS security_definer,
       p.proconfig AS config, pg_get_userbyid(p.proowner) AS owner, {_acl("p.proacl")} AS acl
FROM pg_proc p WHERE {OURS.format("p.pronamespace")} AND p.prokind <> 'a'
  AND {NOT_EXTENSION.format("pg_proc", "p.oid")}""",
    "relation": f"""
SELECT c.oid::regclass::text AS key, c.relkind AS kind, c.relpersistence AS persistence,
       pg_get_userbyid(c.relowner) AS owner, {_acl("c.relacl")} AS acl, c.relrowsecurity AS row_security,
       c.reloptions AS options
FROM pg_class c WHERE {OURS.format("c.relnamespace")} AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
  AND {NOT_EXTENSION.format("pg_class", "c.oid")}""",
    "column": f"""
SELECT c.oid::regclass::text || '.' || a.attname AS key, format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull AS not_null, pg_get_expr(d.adbin, d.adrelid) AS default, a.attidentity AS identity,
       a.attgenerated AS generated, co.collname AS collation, {_acl("a.attacl")} AS acl
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 100
WHERE {OURS.format("c.relnamespace")} AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0
  AND NOT a.attisdropped""",
    "constraint": f"""
SELECT coalesce(k.conrelid::regclass::text, k.contypid::regtype::text) || '.' || k.conname AS key,
       pg_get_constraintdef(k.oid) AS definition, k.condeferrable AS deferrable, k.convalidated AS validated
FROM pg_constraint k WHERE {OURS.format("k.connamespace")}""",
    "index": f"""
SELECT i.indexrelid::regclass::text AS key, pg_get_indexdef(i.indexrelid) AS definition, i.indisvalid AS valid
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE {OURS.format("c.relnamespace")}""",
    "trigger": f"""
SELECT t.tgrelid::regclass::text || '.' || t.tgname AS key, pg_get_triggerdef(t.oid) AS definition,
       t.tgenabled AS enabled
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE {OURS.format("c.relnamespace")} AND NOT t.tgisinternal""",
    "view": f"""
SELECT c.oid::regclass::text AS key, pg_get_viewdef(c.oid) AS definition
FROM pg_class c WHERE {OURS.format("c.relnamespace")} AND c.relkind IN ('v', 'm')""",
    "policy": f"""
SELECT p.polrelid::regclass::text || '.' || p.polname AS key, p.polcmd AS command, p.polpermissive AS permissive,
       p.polroles::regrole[]::text[] AS roles, pg_get_expr(p.polqual, p.polrelid) AS using,
       pg_get_expr(p.polwithcheck, p.polrelid) AS check
FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE {OURS.format("c.relnamespace")}""",
    "type": f"""
SELECT t.oid::regtype::text AS key, t.typtype AS kind, pg_get_userbyid(t.typowner) AS owner, {_acl("t.typacl")} AS acl
FROM pg_type t WHERE {OURS.format("t.typnamespace")} AND t.typrelid = 0 AND t.typelem = 0
  AND {NOT_EXTENSION.format("pg_type", "t.oid")}""",
    "extension": "SELECT e.extname AS key, e.extversion AS version, e.extnamespace::regnamespace::text AS schema "
    "FROM pg_extension e",
    "default_privilege": f"""
SELECT pg_get_userbyid(a.defaclrole) || '.' || coalesce(nullif(a.defaclnamespace, 0)::regnamespace::text, '*')
       || '.' || a.defaclobjtype::text AS key, {_acl("a.defaclacl")} AS acl
FROM pg_default_acl a""",
}


def schema_catalog(dsn: str) -> dict[str, dict[str, dict]]:
    """{kind: {name: attributes}} for every kind in QUERIES."""
    catalog = {}
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        for kind, sql in QUERIES.items():
            catalog[kind] = {row.pop("key"): row for row in conn.execute(sql).fetchall()}
    return catalog


def differences(expected: dict, actual: dict) -> list[str]:
    """One line per object missing from `actual`, extra in it, or with other attributes (the field, both values)."""
    lines = []
    for kind in expected:
        want, got = expected[kind], actual[kind]
        lines += [f"{kind} {key}: missing" for key in sorted(want.keys() - got.keys())]
        lines += [f"{kind} {key}: extra {got[key]}" for key in sorted(got.keys() - want.keys())]
        for key in sorted(want.keys() & got.keys()):
            changed = {
                f: {"fresh": want[key][f], "upgraded": got[key][f]} for f in want[key] if want[key][f] != got[key][f]
            }
            if changed:
                lines.append(f"{kind} {key}: differs {changed}")
    return lines
