"""Where a demo seed is: written by the seed (core.demo.seed), read by the dashboard's sidebar from other threads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The demo seeds only a database without memory and without our conversation log.
IS_EMPTY = "SELECT NOT EXISTS (SELECT 1 FROM store) AND NOT EXISTS (SELECT 1 FROM core_conversations) AS empty"


def database_empty(db: Any) -> bool:
    """Whether `db` (a core.db.Database) is one the demo would seed."""
    return bool(db.fetch_one(IS_EMPTY)["empty"])


@dataclass
class SeedProgress:
    """Where this process's demo seed is, for the dashboard's sidebar (read from other threads).

    state: idle (not started) | waiting (another process holds the seed lock) | seeding | done
    (seeded here) | skipped (the database already had data) | failed."""

    state: str = "idle"
    step: str = ""
    done: int = 0
    total: int = 0
    error: str | None = None
    summary: Any = None  # core.demo.seed.DemoSummary once done
    started_at: float | None = None  # wall clock when the dashboard started it (or ensure_demo was called)
    finished_at: float | None = None  # wall clock at its end, set before the state says done

    @property
    def running(self) -> bool:
        return self.state in ("waiting", "seeding")

    @property
    def finished(self) -> bool:
        return self.state in ("done", "skipped", "failed")

    started: bool = False  # the seed's thread was started
    counted: dict = field(default_factory=dict)  # step -> its final count, once the next step began

    def at(self, step: str, done: int = 0, total: int = 0) -> None:
        if self.step:
            self.counted[self.step] = self.done
        self.step, self.done, self.total = step, done, total


# The steps of `seed`, in order (the sidebar names them).
SEED_STEPS = ("suppliers", "employees", "customers", "legacy", "operations", "practice", "outage")
