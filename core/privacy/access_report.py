"""What the right of access found about one customer: filled by `core.privacy.access.gather`, read by
`core.privacy.access_render` (which never imports its producer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

# Messages kept as a marker in their place: a payload the serializer would refuse, or one the decoder cannot read.
MARKER_KINDS = ("refused", "undecodable")


@dataclass
class AccessReport:
    """Everything found about one customer. `counts` per source; `empty` when nothing at all was found."""

    customer_id: str
    namespace_prefix: str
    generated_at: datetime
    documents: list[dict]
    threads: list[dict]  # {thread_id, sources, checkpoints, first_ts, last_ts, messages: [...]}
    logs: dict[str, list[dict]]
    erasures: list[dict]
    erasure_rechecks: list[dict]
    access_exports: list[dict]
    sources: dict[str, list[str]]
    unattributed_threads: int
    residue: list[dict]
    formats: dict[str, Any] | None = None  # the storage formats of the customer's threads (core.history.formats)
    # some of the customer's conversations ran on the demo's replayed clock (checkpoint metadata `core_replayed_at`):
    # they and our logs are dated on the replayed day, the store's created/updated on the database's real clock
    replayed_clock: bool = False
    # every write of each document, superseded ones too (core.memory.history.export_rows): what we hold and how it
    # changed
    memory_history: list[dict] = field(default_factory=list)
    # every key of `counts`, in its order (the logs' names are core.privacy.access.gather's)
    COUNT_KEYS: ClassVar[tuple[str, ...]] = (
        "documents",
        "expired_documents",
        "threads",
        "messages",
        "marked_payloads",
        "memory_writes",
        "conversations",
        "guard_denials",
        "episode_denials",
        "serde_refusals",
        "dead_letters",
        "agent_server_runs",
        "data_views",
        "erasure_requests",
        "erasure_rechecks",
        "access_exports",
    )

    @property
    def counts(self) -> dict[str, int]:
        messages = [m for t in self.threads for m in t["messages"]]
        return {
            "documents": len(self.documents),
            "expired_documents": sum(1 for d in self.documents if d["expired"]),
            "threads": len(self.threads),
            "messages": sum(1 for m in messages if m["kind"] not in MARKER_KINDS),
            "marked_payloads": sum(1 for m in messages if m["kind"] in MARKER_KINDS),
            **{name: len(rows) for name, rows in self.logs.items()},
            "erasure_requests": len(self.erasures),
            "erasure_rechecks": len(self.erasure_rechecks),
            "access_exports": len(self.access_exports),
        }

    @property
    def empty(self) -> bool:
        return not (self.documents or self.threads or any(self.logs.values()) or self.erasures)
