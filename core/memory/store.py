"""Cross-thread memory: PostgresStore with a TTL policy per namespace root.

Namespaces are `("clientes", id)`, `("proveedores", id)`, `("empleados", id)`. The TTL of
the namespace is passed on **every** put (the store's `default_ttl` is only the safety
net), reads refresh it only where the policy says so, expired rows are hidden
(`omit_expired`) and swept by the scheduled job, never by an in-process thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import psycopg
from langgraph.store.base import BaseStore, Item, SearchItem, TTLConfig
from langgraph.store.postgres import PostgresStore
from psycopg.rows import DictRow
from psycopg_pool import ConnectionPool

from agent_memory_runtime import clock

# The label rule lives in core.ids; its names stay importable from here, where pages and tests have always found them.
from core.ids import MAX_LABEL_LENGTH as MAX_LABEL_LENGTH
from core.ids import InvalidIdentifier as InvalidIdentifier
from core.ids import validate_label

MINUTES_PER_DAY = 24 * 60

# The closed schema of customer preferences: one document per tipo, key `pref-{tipo}`.
# Exactly the memory article's Literal (`recogida`, `contacto`, `idioma`, `horario`): what production agents write.
TipoPreferencia = Literal["recogida", "contacto", "idioma", "horario"]
TIPOS: tuple[str, ...] = get_args(TipoPreferencia)
MAX_DOCS_PER_CUSTOMER = len(TIPOS)  # more than this means the closed schema was opened


@dataclass(frozen=True)
class NamespacePolicy:
    root: str
    ttl_days: int
    refresh_on_read: bool

    @property
    def ttl_minutes(self) -> int:
        return self.ttl_days * MINUTES_PER_DAY


POLICIES: dict[str, NamespacePolicy] = {
    "clientes": NamespacePolicy("clientes", 365, True),
    "proveedores": NamespacePolicy("proveedores", 90, False),
    "empleados": NamespacePolicy("empleados", 180, True),
}
ROOTS: tuple[str, ...] = tuple(POLICIES)

TTL_CONFIG = TTLConfig(
    default_ttl=POLICIES["clientes"].ttl_minutes,
    refresh_on_read=True,
    omit_expired=True,
    sweep_interval_minutes=None,  # swept by `python -m core.sweep` (a CronJob), not by each replica
)


class UnknownNamespace(ValueError):
    """A namespace whose root has no TTL policy."""


def namespace(root: str, ident: str) -> tuple[str, str]:
    """The namespace `(root, ident)`, validated."""
    if root not in POLICIES:
        raise UnknownNamespace(f"unknown namespace root {root!r}; known: {', '.join(ROOTS)}")
    return (root, validate_label(ident, f"{root} id"))


def policy_for(ns: tuple[str, ...]) -> NamespacePolicy:
    if not ns or ns[0] not in POLICIES:
        raise UnknownNamespace(f"no TTL policy for namespace {ns!r}; known roots: {', '.join(ROOTS)}")
    return POLICIES[ns[0]]


def build_store(
    conn: psycopg.Connection[DictRow] | ConnectionPool[psycopg.Connection[DictRow]], embeddings: Any, dims: int
) -> PostgresStore:
    """The store exactly as the agents configure it (vectors on `texto`, TTL policy, no sweeper)."""
    return PostgresStore(
        conn,
        index={"dims": dims, "embed": embeddings, "fields": ["texto"]},
        ttl=TTL_CONFIG,
    )


INSERT_WRITE = "INSERT INTO core_memory_writes (prefix, key, thread_id, agent, written_at) VALUES (%s, %s, %s, %s, %s)"


def _sql_target(store: BaseStore) -> psycopg.Connection[DictRow] | ConnectionPool[psycopg.Connection[DictRow]] | None:
    return store.conn if isinstance(store, PostgresStore) else None


def log_write(store: BaseStore, ns: tuple[str, ...], key: str, *, thread_id: str | None, agent: str | None) -> None:
    """Append one row to `core_memory_writes` (no value). No-op on a non-PostgreSQL store."""
    target = _sql_target(store)
    if target is None:
        return
    params = (".".join(ns), key, thread_id, agent, clock.now())
    if isinstance(target, ConnectionPool):
        with target.connection() as conn:
            conn.execute(INSERT_WRITE, params)
    else:
        target.execute(INSERT_WRITE, params)


def ttl_for(ns: tuple[str, ...], valid_for_minutes: float | None = None) -> float:
    """The namespace TTL in minutes, shortened (never lengthened) by a document's own validity."""
    ttl = float(policy_for(ns).ttl_minutes)
    if valid_for_minutes is not None:
        if valid_for_minutes <= 0:
            raise ValueError(f"validity must be positive, got {valid_for_minutes} minutes")
        ttl = min(ttl, float(valid_for_minutes))
    return ttl


def put_memory(
    store: BaseStore,
    ns: tuple[str, ...],
    key: str,
    value: dict[str, Any],
    *,
    thread_id: str | None = None,
    agent: str | None = None,
    valid_for_minutes: float | None = None,
) -> None:
    """Write one document with its namespace TTL and log the write (who, where; not what)."""
    for label in ns[1:]:
        validate_label(label, f"{ns[0]} id")
    validate_label(key, "key")
    store.put(ns, key, value, ttl=ttl_for(ns, valid_for_minutes))
    log_write(store, ns, key, thread_id=thread_id, agent=agent)


def get_memory(store: BaseStore, ns: tuple[str, ...], key: str) -> Item | None:
    return store.get(ns, key, refresh_ttl=policy_for(ns).refresh_on_read)


def search_memory(
    store: BaseStore,
    ns_prefix: tuple[str, ...],
    *,
    query: str | None = None,
    limit: int = 10,
    offset: int = 0,
) -> list[SearchItem]:
    return store.search(
        ns_prefix, query=query, limit=limit, offset=offset, refresh_ttl=policy_for(ns_prefix).refresh_on_read
    )
