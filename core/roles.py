"""Roles and who has them. The dashboard enforces them on every page, server-side."""

from __future__ import annotations

from collections.abc import Mapping

MANAGER, SRE, DPO = "manager", "sre", "dpo"
ROLES: tuple[str, ...] = (MANAGER, SRE, DPO)


class UnknownRole(ValueError):
    pass


def parse_roles(value: str | list | tuple) -> tuple[str, ...]:
    """`"manager, sre"` or `["manager"]` -> validated tuple; raises UnknownRole."""
    items = value.split(",") if isinstance(value, str) else list(value)
    roles = tuple(dict.fromkeys(r.strip().lower() for r in items if r.strip()))
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise UnknownRole(f"unknown role(s) {unknown}; known: {', '.join(ROLES)}")
    return roles


def roles_for(identity: str | None, role_map: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Roles of an identity (an e-mail, case-insensitive) from the configured map; none if absent."""
    if not identity:
        return ()
    return parse_roles(role_map.get(identity.lower(), ()))
