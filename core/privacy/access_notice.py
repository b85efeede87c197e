"""What GDPR art. 15 requires an access export to say besides the data: the controller (identity and contact), the
data protection officer's contact, the purposes, the recipients, transfers, automated decisions, the retention period
of each kind of data, the rights to rectification, erasure, restriction and objection, the right to lodge a complaint
with a supervisory authority, and the source of the data.

The texts are configurable: defaults in `access_notice.toml` (next to this module, Spanish and English), any key
overridden per language by the TOML file named by ACCESS_NOTICE_FILE, and the controller's identity and contacts by
CONTROLLER_NAME, CONTROLLER_CONTACT and DPO_CONTACT. The retention periods are computed from the policy in force: the
store's TTL of the customers' namespace root and the checkpoint retention of the last sweep that deleted (else the
sweep job's configured default).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core.db import Database
from core.memory.store import POLICIES
from core.operations.sweep import default_retention_days
from core.privacy.evidence import ROOT

DEFAULTS_FILE = Path(__file__).with_name("access_notice.toml")
NOTICE_ENV = "ACCESS_NOTICE_FILE"
IDENTITY_ENV = {
    "controller_name": "CONTROLLER_NAME",
    "controller_contact": "CONTROLLER_CONTACT",
    "dpo_contact": "DPO_CONTACT",
}
LIST_KEYS = ("purposes", "recipients")
TEXT_KEYS = (
    "controller_name",
    "controller_contact",
    "dpo_contact",
    "transfers",
    "automated_decisions",
    "source",
    "rights",
    "complaint",
    "logs_retention",
    "registers_retention",
    "history_purpose",
)

# The checkpoint retention the last sweep that deleted threads applied (the job runs with its own environment).
SELECT_RETENTION = """
SELECT retention_days FROM core_sweep_log
WHERE status = 'ok' AND NOT dry_run AND retention_days IS NOT NULL ORDER BY started_at DESC LIMIT 1"""

PERIODS = {
    "es": {
        "documents": "Documentos de memoria (sus preferencias)",
        "conversations": "Conversaciones",
        "logs": "Nuestros registros sobre usted",
        "registers": "Registros de borrados y de accesos",
        "ttl_refresh": "{days} días desde la última vez que un asistente los usa (cada uso renueva el plazo); "
        "después se borran en el siguiente barrido.",
        "ttl_fixed": "{days} días desde que se escriben; después se borran en el siguiente barrido.",
        "retention": "{days} días desde el último mensaje de la conversación; después se borra entera.",
    },
    "en": {
        "documents": "Memory documents (your preferences)",
        "conversations": "Conversations",
        "logs": "Our logs about you",
        "registers": "Erasure and access registers",
        "ttl_refresh": "{days} days after an assistant last uses them (each use renews the period); then they are "
        "deleted by the next sweep.",
        "ttl_fixed": "{days} days after they are written; then they are deleted by the next sweep.",
        "retention": "{days} days after the conversation's last message; then all of it is deleted.",
    },
}


class NoticeConfigError(ValueError):
    """The notice file cannot be read or holds a key or value the export does not know."""


@dataclass(frozen=True)
class Notice:
    """The art. 15 information in one language; `retention` is (kind of data, period) pairs; `configured` says
    whether the controller's identity was set (else the defaults, example names, are in force)."""

    lang: str
    timezone: ZoneInfo
    texts: dict[str, Any]
    retention: list[tuple[str, str]]
    configured: bool


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise NoticeConfigError(f"cannot read the access notice file {path}: {exc}") from exc


def _check(data: dict[str, Any], path: Path) -> None:
    for key, value in data.items():
        if key == "timezone":
            if not isinstance(value, str):
                raise NoticeConfigError(f"{path}: timezone must be a text, e.g. 'Europe/Madrid'")
            continue
        if key not in PERIODS or not isinstance(value, dict):
            raise NoticeConfigError(f"{path}: unknown section {key!r}; known: timezone, {', '.join(PERIODS)}")
        for name, text in value.items():
            if name in LIST_KEYS:
                ok = isinstance(text, list) and text and all(isinstance(x, str) and x.strip() for x in text)
            elif name in TEXT_KEYS:
                ok = isinstance(text, str) and bool(text.strip())
            else:
                raise NoticeConfigError(
                    f"{path}: unknown key [{key}].{name}; known: {', '.join(LIST_KEYS + TEXT_KEYS)}"
                )
            if not ok:
                raise NoticeConfigError(
                    f"{path}: [{key}].{name} must be a non-empty {'list of texts' if name in LIST_KEYS else 'text'}"
                )


def texts(lang: str, path: str | os.PathLike | None = None) -> tuple[dict[str, Any], str, bool]:
    """(texts, time zone name, configured) for `lang`: defaults, then the file (`path`, else ACCESS_NOTICE_FILE),
    then the identity variables. Raises NoticeConfigError naming the file and key on bad input."""
    if lang not in PERIODS:
        raise ValueError(f"unknown language {lang!r}; known: {', '.join(PERIODS)}")
    defaults = _read(DEFAULTS_FILE)
    merged = dict(defaults[lang])
    zone = defaults["timezone"]
    configured = False
    chosen = path or os.environ.get(NOTICE_ENV)
    if chosen:
        override = _read(Path(chosen))
        _check(override, Path(chosen))
        merged.update(override.get(lang, {}))
        zone = override.get("timezone", zone)
        configured = "controller_name" in override.get(lang, {})
    for key, env in IDENTITY_ENV.items():
        if os.environ.get(env, "").strip():
            merged[key] = os.environ[env].strip()
            configured = configured or key == "controller_name"
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise NoticeConfigError(f"unknown time zone {zone!r} in the access notice") from exc
    return merged, zone, configured


def checkpoint_retention_days(db: Database) -> int:
    """The checkpoint retention in force: the last deleting sweep's, else the sweep job's default."""
    row = db.ours.fetch_one(SELECT_RETENTION)  # the sweep log is in our database (issue 52)
    return int(row["retention_days"]) if row else default_retention_days()


def notice(db: Database, lang: str) -> Notice:
    """The art. 15 information in `lang`, with the retention periods in force now."""
    merged, zone, configured = texts(lang)
    periods = PERIODS[lang]
    policy = POLICIES[ROOT]
    retention = [
        (
            periods["documents"],
            periods["ttl_refresh" if policy.refresh_on_read else "ttl_fixed"].format(days=policy.ttl_days),
        ),
        (periods["conversations"], periods["retention"].format(days=checkpoint_retention_days(db))),
        (periods["logs"], merged["logs_retention"]),
        (periods["registers"], merged["registers_retention"]),
    ]
    return Notice(lang, ZoneInfo(zone), merged, retention, configured)
