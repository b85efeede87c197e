"""A real Aegra server (`aegra-api`, an Agent Protocol server on PostgreSQL) for the tests, started as its docs say
(`uvicorn aegra_api.main:app`, which runs its alembic migrations at start), serving the graphs of
tests/aegra_graphs/ on a database of the embedded server.

`aegra-api` lives in a virtualenv of its own (its dependencies are not ours), made once per requirements file under
~/.cache/agent-memory/ (AEGRA_VENV_DIR to move it) and reused: with the checkout's packages visible
(`--system-site-packages`), it adds only what Aegra needs beside them, pinned in tests/aegra_graphs/requirements.txt.

The embedded PostgreSQL wheel ships no `uuid-ossp` extension, which Aegra's first migration creates for
`uuid_generate_v4()`: `install_uuid_ossp` provides that one function as an extension of the same name on PostgreSQL's
built-in `gen_random_uuid()` (PostgreSQL 13+), through PostgreSQL 18's `extension_control_path`, before Aegra starts.
Aegra's own migrations create every table; none is made here.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = ROOT / "tests" / "aegra_graphs"
REQUIREMENTS = GRAPHS / "requirements.txt"
AEGRA_VERSION = "0.6.0"

UUID_OSSP_CONTROL = """comment = 'uuid_generate_v4() on the built-in gen_random_uuid() (tests/aegra_server.py)'
default_version = '1.1'
relocatable = true
"""
UUID_OSSP_SQL = (
    "CREATE FUNCTION uuid_generate_v4() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE "
    "AS 'SELECT pg_catalog.gen_random_uuid()';\n"
)


def venv_dir() -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes() + sys.version.encode()).hexdigest()[:12]
    base = Path(os.environ.get("AEGRA_VENV_DIR", Path.home() / ".cache" / "agent-memory"))
    return base / f"aegra-api-{AEGRA_VERSION}-{digest}"


def aegra_python() -> Path:
    """The Aegra virtualenv's python, the virtualenv made first when missing (a lock keeps two pytest workers from
    making it at once; a marker written last tells a complete one from an interrupted one)."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    done = venv / ".complete"
    if done.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", "--system-site-packages", str(venv)], check=True)
            subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "-r",
                    str(REQUIREMENTS),
                ],
                check=True,
            )
            done.write_text(AEGRA_VERSION)
    return python


def install_uuid_ossp(dsn: str) -> None:
    """`CREATE EXTENSION "uuid-ossp"` in the database of `dsn` (a superuser's) from a control file of ours (above)."""
    folder = Path(tempfile.mkdtemp(prefix="uuid-ossp-"))
    (folder / "extension").mkdir()
    (folder / "extension" / "uuid-ossp.control").write_text(UUID_OSSP_CONTROL)
    (folder / "extension" / "uuid-ossp--1.1.sql").write_text(UUID_OSSP_SQL)
    for path in (folder, folder / "extension", *(folder / "extension").iterdir()):
        path.chmod(0o755)  # the server runs as another user
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"SET extension_control_path = '{folder}:$system'")
            conn.execute('CREATE EXTENSION IF NOT EXISTS "uuid-ossp" SCHEMA public')
    finally:
        for path in sorted(folder.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        folder.rmdir()


def database_url(dsn: str) -> str:
    """Aegra's DATABASE_URL for a libpq DSN of the embedded server (a Unix socket folder as `host`)."""
    parts = psycopg.conninfo.conninfo_to_dict(dsn)
    user = parts.get("user", "postgres")
    return f"postgresql://{user}:{parts.get('password') or ''}@/{parts['dbname']}?host={parts['host']}"


@dataclass
class AegraServer:
    url: str
    process: subprocess.Popen
    workdir: Path
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def kill(self) -> None:
        """SIGKILL, as an OOM killer or a node loss ends it: no shutdown hook runs."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def write_config(workdir: Path) -> Path:
    """aegra.json: the two graphs, the repository's root and tests/ on sys.path (their imports)."""
    config = {
        "dependencies": [str(ROOT), str(ROOT / "tests")],
        "graphs": {
            "retail": f"{GRAPHS / 'retail.py'}:graph",
            "retail_revision": f"{GRAPHS / 'retail.py'}:graph_con_revision",
            "articulo": f"{GRAPHS / 'article.py'}:graph",
        },
    }
    path = workdir / "aegra.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def start_aegra(dsn: str, workdir: Path, port: int, timeout: float = 90.0) -> AegraServer:
    """Aegra on 127.0.0.1:`port` over the database of `dsn`, its output in workdir/aegra.log; returns once /health
    answers (its migrations and graphs loaded). Raises with the log's tail when it does not come up."""
    python = aegra_python()
    workdir.mkdir(parents=True, exist_ok=True)
    config = write_config(workdir)
    env = {
        **os.environ,
        "DATABASE_URL": database_url(dsn),
        "AEGRA_CONFIG": str(config),
        "AUTH_TYPE": "noop",
        "LOG_LEVEL": "INFO",
        "OTEL_TARGETS": "",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    log_path = workdir / "aegra.log"
    with open(log_path, "ab") as out:
        process = subprocess.Popen(
            [str(python), "-m", "uvicorn", "aegra_api.main:app", "--host", "127.0.0.1", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: kill() reaches every process it started
        )
    server = AegraServer(f"http://127.0.0.1:{port}", process, workdir, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Aegra exited with {process.returncode}:\n{server.log()[-4000:]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{server.url}/health", timeout=2) as response:
                if response.status == 200:
                    return server
        time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"Aegra did not answer /health within {timeout} s:\n{server.log()[-4000:]}")
