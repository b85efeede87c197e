"""Roles and who has them, and which stores a store manager sees. The dashboard enforces both on every page,
server-side.

A `[roles]` entry in secrets is either the list of roles (`"ana@example.com" = ["manager"]`) or a table with the
roles and, for a store manager, the stores (`"ana@example.com" = {roles = ["manager"], stores = ["T002"]}`). Without
`stores` there, a manager's stores come from the identity provider's claim named by STORE_CLAIM (default `stores`,
a list of store ids). `["*"]` is every store (chain-wide). A manager with neither sees no customer and is told why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MANAGER, SRE, DPO = "manager", "sre", "dpo"
ROLES: tuple[str, ...] = (MANAGER, SRE, DPO)
# The roles whose pages are not limited to a manager's stores (they say so on every page).
UNSCOPED_ROLES: tuple[str, ...] = (SRE, DPO)

ALL_STORES = "*"  # `stores = ["*"]`: every store of the chain
MAX_STORES = 1000
MAX_STORE_ID_LENGTH = 100
# Characters a store id may not hold: LIKE metacharacters, quotes, the escape character, NUL. Store ids are compared
# with `=` everywhere, so these could do no harm in SQL; they are refused so that what a manager is granted is
# exactly what the configuration says, never a pattern.
FORBIDDEN_IN_STORE_ID = ("%", "_", "'", '"', "\\", "\x00")
GRANT_KEYS = frozenset({"roles", "stores"})

# Where a manager's stores came from (StoreScope.origin).
ORIGIN_LOCAL, ORIGIN_SECRETS, ORIGIN_NONE = "local", "secrets", "none"
CLAIM_ORIGIN = "claim:"  # + the claim's name


class UnknownRole(ValueError):
    pass


class InvalidStores(ValueError):
    """A manager's stores (a claim or a `[roles]` entry) are unusable; the message says which and why."""


def parse_roles(value: str | list | tuple) -> tuple[str, ...]:
    """`"manager, sre"` or `["manager"]` -> validated tuple; raises UnknownRole."""
    items = value.split(",") if isinstance(value, str) else list(value)
    roles = tuple(dict.fromkeys(r.strip().lower() for r in items if r.strip()))
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise UnknownRole(f"unknown role(s) {unknown}; known: {', '.join(ROLES)}")
    return roles


def _entry(identity: str | None, role_map: Mapping[str, Any]) -> Any:
    return role_map.get(identity.lower(), ()) if identity else ()


def roles_for(identity: str | None, role_map: Mapping[str, Any]) -> tuple[str, ...]:
    """Roles of an identity (an e-mail, case-insensitive) from the configured map; none if absent. An entry is the
    list of roles or a table `{roles = [...], stores = [...]}`."""
    entry = _entry(identity, role_map)
    if isinstance(entry, Mapping):
        unknown = sorted(set(entry) - GRANT_KEYS)
        if unknown:
            raise UnknownRole(f"[roles] entry of {identity}: unknown key(s) {unknown}; known: roles, stores")
        entry = entry.get("roles", ())
    return parse_roles(entry)


def parse_stores(value: Any, where: str) -> tuple[str, ...] | None:
    """A manager's stores as configured (`where` names the claim or entry in the message): a list of store ids ->
    the ids in their order without repeats; `["*"]` -> None (every store). Raises InvalidStores for anything else:
    not a list (a string, a number, a table), an id that is not text, empty, padded with spaces, longer than
    MAX_STORE_ID_LENGTH or holding one of FORBIDDEN_IN_STORE_ID, `*` beside other ids, more than MAX_STORES ids."""
    if not isinstance(value, (list, tuple)):
        raise InvalidStores(f"{where} must be a list of store ids, got {type(value).__name__} {str(value)[:60]!r}")
    if len(value) > MAX_STORES:
        raise InvalidStores(f"{where} names {len(value)} stores (at most {MAX_STORES})")
    stores: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise InvalidStores(f"{where}: a store id must be text, got {type(item).__name__} {str(item)[:60]!r}")
        if not item.strip() or item != item.strip():
            raise InvalidStores(f"{where}: a store id is empty or has surrounding spaces: {item[:60]!r}")
        if len(item) > MAX_STORE_ID_LENGTH:
            raise InvalidStores(f"{where}: a store id is {len(item)} characters long (at most {MAX_STORE_ID_LENGTH})")
        bad = [c for c in FORBIDDEN_IN_STORE_ID if c in item]
        if bad:
            shown = ", ".join("NUL" if c == "\x00" else repr(c) for c in bad)
            raise InvalidStores(f"{where}: store id {item[:60]!r} holds {shown}, which a store id may not hold")
        stores.append(item)
    if ALL_STORES in stores:
        if len(stores) > 1:
            raise InvalidStores(f'{where}: "*" (every store) must be alone, not beside {stores}')
        return None
    return tuple(dict.fromkeys(stores))


@dataclass(frozen=True)
class StoreScope:
    """Which stores' customers a manager sees: `stores` None = every store, () = none; `origin`: local, secrets,
    `claim:<name>` or none; `error`: why the configured stores are unusable (nothing is shown then)."""

    stores: tuple[str, ...] | None
    origin: str
    error: str | None = None

    @property
    def every_store(self) -> bool:
        return self.stores is None and self.error is None


LOCAL_SCOPE = StoreScope(None, ORIGIN_LOCAL)


def store_scope_for(
    identity: str | None, role_map: Mapping[str, Any], claims: Mapping[str, Any], claim_name: str
) -> StoreScope:
    """The stores of a signed-in manager: the `stores` of their `[roles]` table when it has one, else the identity
    provider's claim `claim_name`, else none. An unusable value is an error scope (no store, the reason)."""
    entry = _entry(identity, role_map)
    if isinstance(entry, Mapping) and "stores" in entry:
        origin, value, where = ORIGIN_SECRETS, entry["stores"], f"[roles] stores of {identity}"
    elif claim_name in claims:
        origin, value, where = CLAIM_ORIGIN + claim_name, claims[claim_name], f"the identity claim {claim_name!r}"
    else:
        return StoreScope((), ORIGIN_NONE)
    try:
        return StoreScope(parse_stores(value, where), origin)
    except InvalidStores as exc:
        return StoreScope((), origin, str(exc))
