"""Configuration: environment first, Streamlit secrets second, defaults last.

core/ never imports streamlit, so secrets are read from `.streamlit/secrets.toml`
with tomllib (the same file Streamlit reads), or passed in by the dashboard.
"""

from __future__ import annotations

import functools
import json
import os
import re
import secrets as _random
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECRETS_FILE = ROOT / ".streamlit" / "secrets.toml"

DEFAULT_SUBJECT_METADATA_KEYS = ("cliente_id", "customer_id", "user_id")
DEFAULT_SUBJECT_THREAD_PATTERNS = ("cliente-{id}-*",)
DEFAULT_STORE_CLAIM = "stores"
DEFAULT_CUSTOMER_STORE_KEYS = ("tienda",)
CLAIM_SHAPE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,99}$")

# The least cosine similarity the search by meaning shows: the demo's hash embedding gives 0 to a document that
# shares no word with the question and 0.35 to one sharing one word of a four-word question; hosted models give
# unrelated short texts about 0.1-0.2.
DEFAULT_SEMANTIC_MIN_SIMILARITY = 0.3
# Offline embedding dimension for the embedded demo (see core.embeddings).
DEFAULT_DIMS = 64


def _read_secrets_file(path: Path = SECRETS_FILE) -> dict[str, Any]:
    if not path.is_file():
        return {}
    with path.open("rb") as fh:
        return tomllib.load(fh)


@dataclass(frozen=True)
class ModelPrice:
    """What a model costs, in USD per million tokens (`cached_input`: cache reads; the input price when unset)."""

    model: str
    input: float
    output: float
    cached_input: float | None = None


# The embedded demo's scripted model, priced like a small hosted model so the demo shows costs.
DEMO_PRICES = (ModelPrice("scripted-retail", 0.15, 0.60, 0.075),)


@dataclass(frozen=True)
class Settings:
    """Everything the dashboard, the agents and the jobs need to know.

    `dsn is None` means: run the embedded PostgreSQL in `data_dir`.
    """

    dsn: str | None = None
    replica_dsn: str | None = None
    # The dashboard's own database (PG_DASHBOARD): everything the dashboard writes (issue 52). Unset: with PG_AGENTES,
    # the agents' database itself (the layout before); embedded, a second database on the embedded server.
    dashboard_dsn: str | None = None
    # A physical standby of the agents' primary (PostgreSQL 16+) where the change follower decodes their WAL
    # (PG_AGENTES_STANDBY). Unset: it decodes on the primary.
    standby_dsn: str | None = None
    # Pages say "as of <time>" when the read replica's data is older than this (seconds).
    replica_max_lag_s: float = 30.0
    data_dir: Path = ROOT / ".data"
    embeddings_base_url: str | None = None
    embeddings_model: str = "text-embedding-3-small"
    embeddings_api_key: str | None = None
    embeddings_dims: int = DEFAULT_DIMS
    # The Memory page's search by meaning shows only documents at least this similar to the question (cosine
    # similarity, -1..1; SEMANTIC_MIN_SIMILARITY): below it a document shares nothing with the question worth showing.
    semantic_min_similarity: float = DEFAULT_SEMANTIC_MIN_SIMILARITY
    auto_migrate: bool = True
    seed_demo: bool = True
    # e-mail (lower case) -> its `[roles]` entry as configured: a list of roles, or a table {roles, stores}
    # (core.roles parses it at sign-in, so one bad entry refuses that user only).
    role_map: Mapping[str, Any] = field(default_factory=dict)
    # The identity provider's claim holding a store manager's stores (a list of store ids), STORE_CLAIM.
    store_claim: str = DEFAULT_STORE_CLAIM
    # Which store a customer belongs to (core.memory.customer_stores), sources in this order: an optional read-only
    # SQL query on the application's own tables returning (cliente_id, tienda) for every customer
    # (CUSTOMER_STORE_QUERY), the checkpoint metadata keys naming the store (CUSTOMER_STORE_KEYS, e.g. `tienda`),
    # and the same keys in the customer's documents.
    customer_store_query: str | None = None
    customer_store_keys: tuple[str, ...] = DEFAULT_CUSTOMER_STORE_KEYS
    # Live demo agent replicas the dashboard runs in the background (embedded default: 1).
    demo_replicas: int = 0
    # Run the change follower (core/capture) as a background thread of this process (embedded default: on). In
    # production it runs as its own Deployment (deploy/capture-deployment.yaml); one follows at a time either way.
    capture_follower: bool = False
    # Roles of the local user when no identity provider is configured (default: all).
    local_roles: str = "manager,sre,dpo"
    # Subject attribution (core.privacy.subjects): which checkpoint metadata keys name the customer,
    # thread-id patterns with `{id}` (and `*` for "anything"), and an optional read-only SQL query
    # on the application's own tables returning `thread_id` for `%(id)s`.
    subject_metadata_keys: tuple[str, ...] = DEFAULT_SUBJECT_METADATA_KEYS
    subject_thread_patterns: tuple[str, ...] = DEFAULT_SUBJECT_THREAD_PATTERNS
    subject_thread_query: str | None = None
    # An optional read-only SQL query on the application's own tables returning `thread_id` for every thread the
    # application knows (no parameters): the Storage view's orphans name the checkpoint threads it does not return.
    known_threads_query: str | None = None
    # EncryptedSerializer keys (LANGGRAPH_AES_KEYS, several for rotation, and langgraph's LANGGRAPH_AES_KEY):
    # encrypted checkpoints are decrypted in Python for single-thread reads, never written back in clear.
    aes_keys: tuple[bytes, ...] = field(default=(), repr=False)
    # Token prices per model (MODEL_PRICES): a model not listed is shown "without price", never as free.
    model_prices: tuple[ModelPrice, ...] = ()
    # Who looked at a customer's data (core.privacy.data_views): a purpose is required before a customer's data is
    # shown (DATA_VIEWS_PURPOSE), and the log's rows are kept this many days (DATA_VIEWS_RETENTION_DAYS, the sweep).
    data_views_purpose: bool = False
    data_views_retention_days: int = 365
    # How long base backups and archived WAL are kept (BACKUP_RETENTION_DAYS, days): the latest an erased value can
    # be in a backup once the files no longer hold it (core.privacy.physical). None: not configured, said "unknown".
    backup_retention_days: int | None = None
    # The Memory page's flags (core.memory.flags): a customer's document expiring within FLAG_EXPIRING_DAYS days while
    # the customer had a conversation in the last FLAG_USED_DAYS days; a document written more than
    # FLAG_FLAPPING_WRITES times in the last 7 days.
    flag_expiring_days: int = 30
    flag_used_days: int = 30
    flag_flapping_writes: int = 3

    @property
    def embedded(self) -> bool:
        return self.dsn is None

    @property
    def offline_embeddings(self) -> bool:
        return not self.embeddings_base_url


def setting(name: str, secrets: Mapping[str, Any], default: Any = None) -> Any:
    """The setting `name`: the environment first, then `secrets`; unset or empty in both gives `default`."""
    value = os.environ.get(name)
    if value not in (None, ""):
        return value
    value = secrets.get(name)
    return default if value in (None, "") else value


def dsn_configured(secrets: Mapping[str, Any] | None = None) -> bool:
    """PG_AGENTES is set (environment or secrets): a production database, not the embedded demo."""
    return setting("PG_AGENTES", _read_secrets_file() if secrets is None else secrets) is not None


def _flag(value: Any) -> bool:
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def _int(name: str, raw: Any, minimum: int) -> int:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def _similarity(name: str, raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number from -1 to 1, got {raw!r}") from None
    if not -1.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number from -1 to 1, got {raw!r}")
    return value


def _list(raw: Any) -> tuple[str, ...]:
    """A comma-separated string (env) or a list (secrets) as a tuple of non-empty stripped items."""
    items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
    return tuple(str(i).strip() for i in items if str(i).strip())


def _grant(value: Any) -> Any:
    """A `[roles]` entry as configured: a table stays a (plain) dict, a list a tuple, anything else as it is."""
    if isinstance(value, Mapping):
        return {str(k): (tuple(v) if isinstance(v, list) else v) for k, v in value.items()}
    return tuple(value) if isinstance(value, list) else value


def _aes_keys(secrets: Mapping[str, Any]) -> tuple[bytes, ...]:
    """The AES keys, as langgraph reads LANGGRAPH_AES_KEY (the text's bytes, 16, 24 or 32 of them)."""
    keys = _list(setting("LANGGRAPH_AES_KEYS", secrets, ())) + _list(setting("LANGGRAPH_AES_KEY", secrets, ()))
    for key in keys:
        if len(key.encode()) not in (16, 24, 32):
            raise ValueError(f"LANGGRAPH_AES_KEYS: a key of {len(key.encode())} bytes; AES keys are 16, 24 or 32 bytes")
    return tuple(dict.fromkeys(k.encode() for k in keys))


def _price(model: str, raw: Any, name: str) -> ModelPrice:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{name}: the price of {model!r} must be a table with input and output, got {raw!r}")
    unknown = set(raw) - {"input", "output", "cached_input"}
    if unknown or not {"input", "output"} <= set(raw):
        raise ValueError(
            f"{name}: the price of {model!r} needs input and output (and optionally cached_input), got {sorted(raw)}"
        )
    values = {}
    for key, value in raw.items():
        try:
            values[key] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: {model}.{key} must be a number, got {value!r}") from None
        if not values[key] >= 0:
            raise ValueError(f"{name}: {model}.{key} must be >= 0, got {value!r}")
    return ModelPrice(model, values["input"], values["output"], values.get("cached_input"))


def _model_prices(secrets: Mapping[str, Any], embedded: bool) -> tuple[ModelPrice, ...]:
    """MODEL_PRICES: JSON in the environment (`{"gpt-4o": {"input": 2.5, "output": 10, "cached_input": 1.25}}`) or
    a `[model_prices."gpt-4o"]` table in secrets; USD per million tokens. The embedded demo prices its own model."""
    raw = os.environ.get("MODEL_PRICES")
    if raw:
        try:
            table = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"MODEL_PRICES must be a JSON object: {exc}") from None
    else:
        table = secrets.get("model_prices") or secrets.get("MODEL_PRICES") or {}
        if isinstance(table, str):
            table = json.loads(table)
    if not isinstance(table, Mapping):
        raise ValueError(f"MODEL_PRICES must map model names to prices, got {type(table).__name__}")
    prices = tuple(_price(str(model), value, "MODEL_PRICES") for model, value in sorted(table.items()))
    if embedded:
        prices += tuple(p for p in DEMO_PRICES if p.model not in table)
    return prices


TERM_HASH_KEY_FILE = "term_hash.key"
TERM_HASH_KEY_BYTES = 32


@dataclass(frozen=True)
class Refusal:
    """Why a production process must not start: the setting, and one line saying what is wrong with it."""

    setting: str
    line: str


def production_refusal(secrets: Mapping[str, Any] | None = None) -> Refusal | None:
    """Why this process, configured for production (PG_AGENTES set), must refuse to start; None when it may start.
    The embedded demo (no PG_AGENTES) needs no configuration and is never refused. Read afresh at each call (the
    environment and secrets as they are now), never from term_hash_key()'s cache: the dashboard asks on each run,
    the sweep job and the start-up probe (`python -m core.preflight`) before they touch anything."""
    secrets = _read_secrets_file() if secrets is None else secrets
    if setting("PG_AGENTES", secrets) is None:
        return None
    raw = setting("TERM_HASH_KEY", secrets)
    if raw is None:
        return Refusal(
            "TERM_HASH_KEY",
            "TERM_HASH_KEY is not set: with PG_AGENTES (production) start-up is refused; set it to 64 hex characters "
            "shared by the dashboard and the sweep job (docs/operator.md, TERM_HASH_KEY)",
        )
    try:
        size = len(bytes.fromhex(str(raw).strip()))
    except ValueError:
        size = 0
    if not 16 <= size <= 64:
        return Refusal(
            "TERM_HASH_KEY",
            "TERM_HASH_KEY must be 32 to 128 hexadecimal characters (16 to 64 bytes): start-up is refused",
        )
    return None


@functools.cache
def term_hash_key() -> bytes:
    """The secret every stored hash of a customer's value is keyed with (issue 43): the token index's token hashes,
    the erasure register's `tokens`, `first` and `digest` (core.privacy.tokens, core.privacy.term_hashes). It is
    never in the database, so that whoever reads the database (a read-only role, a backup, a replica) cannot confirm
    a guessed phone number or address by hashing it.

    TERM_HASH_KEY (environment or secrets; 64 hex characters, e.g. `python -c "import secrets;
    print(secrets.token_hex(32))"`) in production: the dashboard, the sweep job and every process that erases or
    re-checks must share it. Without PG_AGENTES (the embedded demo) a key is generated once into the data folder
    (`term_hash.key`, mode 0600). Production without a key is refused: an unkeyed hash would be guessable.

    Rotation: each row of the token index keeps the fingerprint of the key its hashes were made with
    (core.privacy.tokens.term_key_fingerprint); a row made under another key is read on its bytes by
    the residue scan, like a thread not indexed yet, and listed again by the next sweep, which re-indexes it under
    the new key. The register's hashes of earlier requests were made with the old key and cannot be re-keyed (the
    values are gone): a re-check of those requests needs the old key. Do not rotate unless every earlier request
    has been re-erased or its re-check is no longer needed.
    """
    secrets = _read_secrets_file()
    raw = setting("TERM_HASH_KEY", secrets)
    if raw is None:
        if setting("PG_AGENTES", secrets) is not None:
            raise ValueError("TERM_HASH_KEY is not set: every process reading or erasing customer data needs it")
        path = Path(setting("AGENT_MEMORY_DATA", secrets, ROOT / ".data")) / TERM_HASH_KEY_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raw = path.read_text().strip()
        else:
            raw = _random.token_hex(TERM_HASH_KEY_BYTES)
            with os.fdopen(fd, "w") as fh:
                fh.write(raw + "\n")
    try:
        key = bytes.fromhex(str(raw).strip())
    except ValueError:
        key = b""
    if not 16 <= len(key) <= 64:
        raise ValueError("TERM_HASH_KEY must be 32 to 128 hexadecimal characters (16 to 64 bytes)")
    return key


def load_settings(secrets: Mapping[str, Any] | None = None) -> Settings:
    """Read settings. `secrets` defaults to `.streamlit/secrets.toml`.

    Raises ValueError on a malformed value (e.g. a non-integer dims).
    """
    secrets = _read_secrets_file() if secrets is None else secrets
    dsn = setting("PG_AGENTES", secrets)
    dims = _int("EMBEDDINGS_DIMS", setting("EMBEDDINGS_DIMS", secrets, DEFAULT_DIMS), minimum=1)
    roles = secrets.get("roles", {}) or {}
    role_map = {str(k).lower(): _grant(v) for k, v in dict(roles).items()}
    store_claim = str(setting("STORE_CLAIM", secrets, DEFAULT_STORE_CLAIM)).strip()
    if not CLAIM_SHAPE.match(store_claim):
        raise ValueError(f"STORE_CLAIM must be a claim name (letters, digits, _ . : / -), got {store_claim!r}")
    return Settings(
        dsn=dsn,
        replica_dsn=setting("PG_AGENTES_REPLICA", secrets),
        dashboard_dsn=setting("PG_DASHBOARD", secrets),
        standby_dsn=setting("PG_AGENTES_STANDBY", secrets),
        replica_max_lag_s=_int("REPLICA_MAX_LAG_S", setting("REPLICA_MAX_LAG_S", secrets, 30), minimum=0),
        data_dir=Path(setting("AGENT_MEMORY_DATA", secrets, ROOT / ".data")),
        embeddings_base_url=setting("EMBEDDINGS_BASE_URL", secrets),
        embeddings_model=setting("EMBEDDINGS_MODEL", secrets, "text-embedding-3-small"),
        embeddings_api_key=setting("EMBEDDINGS_API_KEY", secrets),
        embeddings_dims=dims,
        semantic_min_similarity=_similarity(
            "SEMANTIC_MIN_SIMILARITY",
            setting("SEMANTIC_MIN_SIMILARITY", secrets, DEFAULT_SEMANTIC_MIN_SIMILARITY),
        ),
        # Production runs migrations in a Job; the embedded default migrates itself.
        auto_migrate=_flag(setting("AUTO_MIGRATE", secrets, "1" if dsn is None else "0")),
        seed_demo=_flag(setting("SEED_DEMO", secrets, "1" if dsn is None else "0")),
        role_map=role_map,
        store_claim=store_claim,
        customer_store_query=setting("CUSTOMER_STORE_QUERY", secrets),
        customer_store_keys=_list(setting("CUSTOMER_STORE_KEYS", secrets, DEFAULT_CUSTOMER_STORE_KEYS)),
        local_roles=str(setting("LOCAL_ROLES", secrets, "manager,sre,dpo")),
        subject_metadata_keys=_list(setting("SUBJECT_METADATA_KEYS", secrets, DEFAULT_SUBJECT_METADATA_KEYS)),
        subject_thread_patterns=_list(setting("SUBJECT_THREAD_PATTERNS", secrets, DEFAULT_SUBJECT_THREAD_PATTERNS)),
        subject_thread_query=setting("SUBJECT_THREAD_QUERY", secrets),
        known_threads_query=setting("KNOWN_THREADS_QUERY", secrets),
        aes_keys=_aes_keys(secrets),
        model_prices=_model_prices(secrets, embedded=dsn is None),
        data_views_purpose=_flag(setting("DATA_VIEWS_PURPOSE", secrets, "0")),
        data_views_retention_days=_int(
            "DATA_VIEWS_RETENTION_DAYS", setting("DATA_VIEWS_RETENTION_DAYS", secrets, 365), minimum=1
        ),
        backup_retention_days=(
            None
            if setting("BACKUP_RETENTION_DAYS", secrets) is None
            else _int("BACKUP_RETENTION_DAYS", setting("BACKUP_RETENTION_DAYS", secrets), minimum=0)
        ),
        flag_expiring_days=_int("FLAG_EXPIRING_DAYS", setting("FLAG_EXPIRING_DAYS", secrets, 30), minimum=1),
        flag_used_days=_int("FLAG_USED_DAYS", setting("FLAG_USED_DAYS", secrets, 30), minimum=1),
        flag_flapping_writes=_int("FLAG_FLAPPING_WRITES", setting("FLAG_FLAPPING_WRITES", secrets, 3), minimum=1),
        demo_replicas=_int("DEMO_REPLICAS", setting("DEMO_REPLICAS", secrets, 1 if dsn is None else 0), minimum=0),
        capture_follower=_flag(setting("CAPTURE_FOLLOWER", secrets, "1" if dsn is None else "0")),
    )
