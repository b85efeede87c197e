"""The container image (Dockerfile, .dockerignore) and what deploy/ runs in it.

Two slow tests run the image's commands with deploy/'s own environment against a real database:
- the real image: python:3.11.7-slim-bookworm cannot be pulled on this network (no Docker Hub; Debian's mirrors and
  PyPI only), so scripts/build_image_offline.sh makes a base from Debian 12's own packages (debootstrap; Python
  3.11.2, not 3.11.7) and builds the Dockerfile, unchanged, on it with podman. The test builds it, checks its
  user, contents and HEALTHCHECK, and runs in containers the migrations Job and the sweep CronJob (read-only root),
  and the image's CMD until its HEALTHCHECK says healthy. It is skipped, saying why, where podman, runc or root
  are missing (CI installs neither); where they are, a failed build fails it.
- everywhere: what the Dockerfile builds, built the way it builds it (its own RUN commands: a virtualenv from
  requirements.txt; its COPY lines filtered by .dockerignore; its ENV, its ARG for the RUN steps) into a folder
  standing for the image's root, then every command deploy/ gives the image (migrations Job, dashboard, exporter,
  sweep CronJob), and the Dockerfile's HEALTHCHECK and CMD."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import fnmatch
import hashlib
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import yaml

from bench.st_client import Run, StreamlitSession
from tests.conftest import ROOT, free_port

DEPLOY = ROOT / "deploy"
IMAGE_MANIFESTS = ("dashboard-deployment.yaml", "exporter-deployment.yaml", "sweep-cronjob.yaml", "migrate-job.yaml")


@dataclass
class Stage:
    base: str
    name: str | None = None
    steps: list[tuple[str, str]] = field(default_factory=list)  # (instruction, arguments)

    def all(self, instruction: str) -> list[str]:
        return [args for ins, args in self.steps if ins == instruction]


def dockerfile_stages(text: str) -> list[Stage]:
    """The Dockerfile's stages, continuation lines joined, comments dropped, global ARG defaults substituted
    into FROM (as `docker build` does without --build-arg)."""
    lines, current = [], ""
    for raw in text.splitlines():
        if raw.lstrip().startswith("#") and not current:
            continue
        current += raw.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip():
            lines.append(current.strip())
        current = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key] = default
        elif instruction == "FROM":
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], rest)
            parts = re.split(r"\s+AS\s+", base, flags=re.I)
            stages.append(Stage(base=parts[0], name=parts[1] if len(parts) > 1 else None))
        else:
            stages[-1].steps.append((instruction, rest))
    return stages


def exec_form(args: str) -> list[str]:
    return yaml.safe_load(args)  # a JSON array is YAML too


def manifest_containers() -> dict[str, dict]:
    """Every container of deploy/'s workloads, by manifest file name."""
    found = {}
    for name in IMAGE_MANIFESTS:
        for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
            if doc["kind"] in ("Deployment", "Job", "CronJob"):
                spec = doc["spec"]
                pod = spec.get("jobTemplate", {}).get("spec", spec)["template"]["spec"]
                (container,) = pod["containers"]
                found[name] = {**container, "_pod": pod}
    return found


STAGES = dockerfile_stages((ROOT / "Dockerfile").read_text())
FINAL = STAGES[-1]


def test_the_base_is_pinned_and_the_image_runs_as_the_manifests_non_root_user():
    for stage in STAGES:
        image = stage.base
        assert "@sha256:" in image or re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+[\w.-]*", image), (
            f"base image not pinned to an exact version or digest: {image}"
        )
    (user,) = FINAL.all("USER")[-1:]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0), user  # numeric: runAsNonRoot can check it
    for name, container in manifest_containers().items():
        assert container["_pod"]["securityContext"]["runAsUser"] == int(uid), name
        assert container["_pod"]["securityContext"]["runAsNonRoot"] is True, name


def test_the_healthcheck_asks_streamlits_health_endpoint():
    (check,) = FINAL.all("HEALTHCHECK")
    assert "/_stcore/health" in check and "CMD" in check
    assert re.search(r"--interval=\d+s", check) and re.search(r"--timeout=\d+s", check)


def test_only_runtime_requirements_and_the_apps_files_go_in():
    runs = " ".join(args for stage in STAGES for args in stage.all("RUN"))
    copies = [args for stage in STAGES for args in stage.all("COPY")]
    assert "-r /tmp/requirements.txt" in runs and "requirements-dev" not in runs
    sources = [
        src for args in copies if "--from=" not in args for src in shlex.split(args)[:-1] if not src.startswith("--")
    ]
    assert "requirements.txt" in sources and "requirements-dev.txt" not in sources
    for forbidden in (".", "tests", "bench", ".streamlit", ".streamlit/secrets.toml", ".data", "deploy", ".git"):
        assert forbidden not in sources, f"COPY {forbidden} puts more than the app in the image"
    ignored = (ROOT / ".dockerignore").read_text().split()
    for must in (".git", ".data", "tests", ".streamlit/secrets.toml", "**/__pycache__"):
        assert must in ignored, f".dockerignore lets {must} into the build context"


def test_every_workload_in_deploy_runs_this_one_image():
    images = {name: c["image"] for name, c in manifest_containers().items()}
    assert set(images) == set(IMAGE_MANIFESTS)
    assert len(set(images.values())) == 1, images


# --- the slow part: the image's contents, built the Dockerfile's way, and its entrypoints run ---------------------

ROOT_PATHS = ("/opt/", "/app", "/tmp/requirements.txt")

# The virtualenv the Dockerfile's RUN makes, kept between runs as a build keeps that RUN's layer: under a key of all
# that goes into it, as a layer's cache key is made (the interpreter standing for the base image, every instruction
# before it and the RUN itself, the content of every file COPY put in before it), so a change to requirements.txt,
# agent_memory_runtime/, the Dockerfile or the Python builds it again, from scratch; the app's files (COPY after it)
# and their compileall are done every run. Installing it was 48 of the module's ~80 s of CPU (19 of them pip
# compiling the packages' bytecode). IMAGE_VENV_CACHE=0 builds it in the test's folder every run, as before;
# IMAGE_VENV_DIR moves the cache (default ~/.cache/agent-memory, beside tests/aegra_server.py's virtualenv).
VENV_RUN = re.compile(r"\bpython -m venv (/opt/[\w./-]+)")
VENV_CACHE_DAYS = 3  # another key's virtualenv unused this long is removed when a new one is built


def venv_cache() -> Path | None:
    if os.environ.get("IMAGE_VENV_CACHE") == "0":
        return None
    return Path(os.environ.get("IMAGE_VENV_DIR", Path.home() / ".cache" / "agent-memory"))


@contextlib.contextmanager
def locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another pytest process building the same folder waits for it
        yield


def root_listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


class ImageRoot:
    """A folder standing for the image's filesystem: container paths in commands are mapped into it (the cached
    virtualenv's path to its folder in `cache`, see VENV_RUN)."""

    def __init__(self, path: Path, cache: Path | None = None):
        self.path = path
        self.cache = cache
        self.env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        self.build_args: dict[str, str] = {}  # a stage's ARG defaults: the RUN steps' environment, not the image's
        self.workdir = "/"
        self.moved: dict[str, Path] = {}  # container path -> folder outside the root (the cached virtualenv)
        python = Path(sys.executable).resolve()
        self.layer = hashlib.sha256(f"{sys.version}\n{python}\n".encode())  # the cache key so far
        # the base image's `python` is the interpreter the tests run on; a cached virtualenv points at it, so its
        # shim is kept with the cache
        shims = path / "usr-local-bin" if cache is None else cache / f"image-base-{self.layer.hexdigest()[:12]}"
        with locked(shims.with_suffix(".lock")) if cache else contextlib.nullcontext():
            shims.mkdir(parents=True, exist_ok=True)
            if not (shims / "python").is_symlink():
                (shims / "python").symlink_to(python)
        self.env["PATH"] = f"{shims}:{self.env['PATH']}"

    def map(self, text: str) -> str:
        moved = "".join(f"{re.escape(k)}\\b|" for k in self.moved)
        return re.sub(
            rf"(?<![\w.])({moved}/opt/|/app\b|/tmp/requirements\.txt)",
            lambda m: str(self.moved[m.group(1)]) if m.group(1) in self.moved else f"{self.path}{m.group(1)}",
            text,
        )

    def apply(self, instruction: str, args: str) -> None:
        self.layer.update(f"{instruction} {args}\n".encode())
        if instruction in ("ENV", "ARG"):
            for key, value in (kv.split("=", 1) for kv in shlex.split(args)):
                if key == "PIP_NO_CACHE_DIR":  # reruns of this test reuse pip's cache; the download is the same
                    continue
                value = self.map(value).replace("$PATH", self.env.get("PATH", ""))
                (self.env if instruction == "ENV" else self.build_args)[key] = value
        elif instruction == "WORKDIR":
            self.workdir = args
            Path(self.map(args)).mkdir(parents=True, exist_ok=True)
        elif instruction == "COPY" and "--from=" not in args:  # --from: the stages share this one root
            *sources, dest = [a for a in shlex.split(args) if not a.startswith("--")]
            target = Path(self.map(dest if dest.startswith("/") else f"{self.workdir.rstrip('/')}/{dest}"))
            for source in sources:
                for copied in copy_context(
                    ROOT / source, target if not dest.endswith("/") else target / Path(source).name, source
                ):
                    self.layer.update(f"{copied.relative_to(ROOT).as_posix()}\n".encode() + copied.read_bytes())
        elif instruction == "RUN":
            if re.match(r"(groupadd|useradd)\b", args):  # users of the image's /etc: the base image's business
                return
            venv = VENV_RUN.search(args)
            if venv and self.cache is not None:
                self.cached_run(args, venv.group(1))
            else:
                self.run(args)

    def run(self, args: str) -> None:
        done = subprocess.run(
            ["bash", "-ec", self.map(args)],
            env={**self.build_args, **self.env},
            cwd=self.map(self.workdir),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, f"RUN {args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    def cached_run(self, args: str, venv: str) -> None:
        """The RUN that makes the virtualenv `venv`, its result kept under the key of all before it (VENV_RUN): built
        once in the cache (its scripts name the path they were installed at), then what the RUN left in the rest of
        the root (its listing, kept with it) replayed: what it removed is removed."""
        assert self.cache is not None
        folder = self.cache / f"image-venv-{self.layer.hexdigest()[:16]}"
        self.moved[venv] = folder
        listing = folder / ".root-listing.json"
        with locked(folder.with_suffix(".lock")):
            if listing.exists() and set(json.loads(listing.read_text())) <= set(root_listing(self.path)):
                for leftover in sorted(set(root_listing(self.path)) - set(json.loads(listing.read_text())))[::-1]:
                    path = self.path / leftover
                    path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
                os.utime(folder)  # in use: not removed as stale
                return
            shutil.rmtree(folder, ignore_errors=True)  # an interrupted build, or a listing this root cannot reach
            self.run(args)
            listing.write_text(json.dumps(root_listing(self.path)))  # written last: the folder is complete
        for old in self.cache.glob("image-venv-*"):
            if old.is_dir() and old != folder and time.time() - old.stat().st_mtime > VENV_CACHE_DAYS * 86400:
                with locked(old.with_suffix(".lock")):
                    shutil.rmtree(old, ignore_errors=True)


def dockerignored(relative: str) -> bool:
    for pattern in (ROOT / ".dockerignore").read_text().split("\n"):
        pattern = pattern.strip()
        if not pattern or pattern.startswith("#"):
            continue
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatch(part, pattern[3:]) for part in relative.split("/")):
                return True
        elif relative == pattern or relative.startswith(pattern + "/") or fnmatch.fnmatch(relative, pattern):
            return True
    return False


def copy_context(source: Path, target: Path, relative: str) -> list[Path]:
    """COPY `relative` (the build context's `source`) to `target`; returns the context's files it copied."""
    assert not dockerignored(relative), f"COPY {relative}: excluded from the build context by .dockerignore"
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        return [source]
    copied = []
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.is_file() and not dockerignored(rel):
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
            copied.append(path)
    return copied


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> ImageRoot:
    root = ImageRoot(tmp_path_factory.mktemp("image-root"), venv_cache())
    for stage in STAGES:
        for instruction, args in stage.steps:
            root.apply(instruction, args)
    return root


def manifest_env(container: dict, secrets: dict[str, str]) -> dict[str, str]:
    """The container's environment as its manifest sets it, each Secret's value (DSN, term-hash key) from `secrets`."""
    env = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif item["valueFrom"]["secretKeyRef"]["name"] in secrets:
            env[item["name"]] = secrets[item["valueFrom"]["secretKeyRef"]["name"]]
        else:
            assert item["valueFrom"]["secretKeyRef"].get("optional"), item
    return env


def container_env(image: ImageRoot, container: dict, secrets: dict[str, str]) -> dict[str, str]:
    return {**image.env, **manifest_env(container, secrets)}


def localised(command: list[str], ports: dict[str, str]) -> list[str]:
    """The manifest's command on this shared machine: loopback, and free ports instead of the fixed ones."""
    return [ports.get(a, "127.0.0.1" if a == "0.0.0.0" else a) for a in command]


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return urllib.request.urlopen(url, timeout=5).read()
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)


async def first_page(url: str) -> Run:
    async with StreamlitSession(url) as session:
        return await session.run()


@pytest.mark.slow
@pytest.mark.timeout(900)  # the virtualenv: ~1 min with pip's cache, a few without
def test_the_images_entrypoints_run_from_a_clean_virtualenv(image, create_database, tmp_path):
    containers = manifest_containers()
    app = image.map("/app")
    venv_python = Path(image.map("/opt/venv/bin/python"))
    assert venv_python.exists() and image.env["PATH"].startswith(str(venv_python.parent))
    # only runtime requirements are installed: the test tools are not
    for dev in ("pytest", "playwright", "oidc_provider_mock"):
        assert subprocess.run([venv_python, "-c", f"import {dev}"], capture_output=True).returncode != 0, dev

    dsn = create_database(migrated=False, prefix="image")
    secrets = {
        name: dsn
        for name in (
            "agent-memory-owner-db",
            "agent-memory-dashboard-db",
            "agent-memory-exporter-db",
            "agent-memory-sweeper-db",
        )
    } | {"agent-memory-term-hash-key": os.environ["TERM_HASH_KEY"]}

    def run(name: str, command: list[str] | None = None, **kw) -> subprocess.CompletedProcess:
        container = containers[name]
        return subprocess.run(
            command or container["command"],
            cwd=app,
            env=container_env(image, container, secrets),
            capture_output=True,
            text=True,
            timeout=600,
            **kw,
        )

    migrated = run("migrate-job.yaml")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    with psycopg.connect(dsn) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        dims = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'store_vectors'::regclass AND attname = 'embedding'"
        ).fetchone()[0]
    assert {"store", "store_vectors", "checkpoints", "core_sweep_log", "core_erasure_register"} <= tables
    assert dims == int(
        next(e["value"] for e in containers["migrate-job.yaml"]["env"] if e["name"] == "EMBEDDINGS_DIMS")
    )

    sweep = containers["sweep-cronjob.yaml"]["command"]
    helped = run("sweep-cronjob.yaml", sweep + ["--help"])
    assert helped.returncode == 0 and "--dry-run" in helped.stdout, helped.stderr
    dry = run("sweep-cronjob.yaml", sweep + ["--dry-run"])
    assert dry.returncode == 0, dry.stdout + dry.stderr
    swept = run("sweep-cronjob.yaml")
    assert swept.returncode == 0, swept.stdout + swept.stderr
    with psycopg.connect(dsn) as conn:
        runs = conn.execute("SELECT dry_run, status FROM core_sweep_log ORDER BY id").fetchall()
    assert runs == [(True, "dry_run"), (False, "ok")], runs

    procs = []
    try:
        exporter_port = str(free_port())
        container = containers["exporter-deployment.yaml"]
        log = tmp_path / "exporter.log"
        procs.append(
            proc := subprocess.Popen(
                localised(container["command"], {"9188": exporter_port}),
                cwd=app,
                env=container_env(image, container, secrets),
                stdout=log.open("w"),
                stderr=subprocess.STDOUT,
            )
        )
        metrics = wait_http(f"http://127.0.0.1:{exporter_port}/metrics", proc, log).decode()
        assert re.search(r"^agent_memory_db_up 1\.0$", metrics, re.M), metrics[:2000]

        # the dashboard: the Deployment's command, then the image's own CMD; the HEALTHCHECK passes on both
        (cmd,) = FINAL.all("CMD")
        (check,) = FINAL.all("HEALTHCHECK")
        check_cmd = exec_form(check.split("CMD", 1)[1])
        for label, command in (
            ("deployment", containers["dashboard-deployment.yaml"]["command"]),
            ("CMD", exec_form(cmd)),
        ):
            port = str(free_port())
            container = containers["dashboard-deployment.yaml"]
            env = container_env(image, container, secrets)
            # the Deployment's host name is not this machine's: answer the loopback name the test connects to
            env["STREAMLIT_SERVER_ALLOWED_HOSTS"] = "127.0.0.1"
            log = tmp_path / f"dashboard-{label}.log"
            procs.append(
                proc := subprocess.Popen(
                    localised(command, {"8501": port}), cwd=app, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
                )
            )
            assert wait_http(f"http://127.0.0.1:{port}/_stcore/health", proc, log) == b"ok"
            healthy = subprocess.run(
                [a.replace(":8501/", f":{port}/") for a in check_cmd],
                cwd=app,
                env=image.env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert healthy.returncode == 0, (label, healthy.stderr)
            # a real session over Streamlit's websocket protocol: the app's pages, catalogues and database work
            first = asyncio.run(first_page(f"http://127.0.0.1:{port}"))
            assert first.status == "FINISHED_SUCCESSFULLY" and not first.exceptions and not first.errors, (label, first)
            assert first.says("Memoria entre conversaciones") and first.says("accesible"), (label, first.texts)
            proc.terminate()
            assert proc.wait(30) == 0 or proc.returncode == -15, log.read_text()[-3000:]
            assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)


# --- the real image: the Dockerfile, unchanged, built with podman on a base made from Debian's packages, then run
# the way deploy/ runs it --------------------------------------------------------------------------------------

# This machine's crun 1.8 refuses to start any container ("cgroups in hybrid mode not supported"), and the sandbox
# lets a container set its open-files and process limits only up to these values: scripts/build_image_offline.sh
# defaults to the same settings.
PODMAN = ["podman", "--runtime", "runc"]
ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096"]
OFFLINE_BASE = "localhost/bookworm-python:3.11"  # the script's default base
IMAGE_TAG = "localhost/agent-memory-dashboard:pytest"


def why_no_real_image() -> str | None:
    """Why the real image cannot be built on this machine, or None when it can (the test then must pass)."""
    missing = [tool for tool in ("podman", "runc") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (apt-get install podman runc debootstrap, as root)"
    if os.geteuid() != 0:
        return "scripts/build_image_offline.sh runs as root (debootstrap, chroot, rootful podman)"
    has_base = subprocess.run(["podman", "image", "exists", OFFLINE_BASE]).returncode == 0
    if not has_base and shutil.which("debootstrap") is None:
        return f"no base image: {OFFLINE_BASE} is not in podman's storage and debootstrap is not installed to make it"
    return None


def copied_into(stage: Stage, folder: str) -> set[str]:
    """The names the stage's COPY lines (from the build context) put directly in `folder`."""
    names, workdir = set(), "/"
    for instruction, args in stage.steps:
        if instruction == "WORKDIR":
            workdir = args
        elif instruction == "COPY" and "--from=" not in args:
            *sources, dest = [a for a in shlex.split(args) if not a.startswith("--")]
            target = posixpath.normpath(dest if dest.startswith("/") else f"{workdir}/{dest}")
            if target == folder:
                names |= {posixpath.basename(source) for source in sources}
            elif target.startswith(folder.rstrip("/") + "/"):
                names.add(target[len(folder.rstrip("/")) + 1 :].split("/")[0])
    return names


def podman(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)


def env_args(env: dict[str, str]) -> list[str]:
    return [a for key, value in env.items() for a in ("-e", f"{key}={value}")]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the base (~1.5 min) and the virtualenv (a few min) when not cached
def test_the_real_image_builds_and_runs_what_deploy_runs(create_database, tmp_path):
    reason = why_no_real_image()
    if reason:
        pytest.skip(
            f"the real image cannot be built here: {reason}; "
            "test_the_images_entrypoints_run_from_a_clean_virtualenv runs its commands without it"
        )
    built = subprocess.run(
        ["scripts/build_image_offline.sh", IMAGE_TAG],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PODMAN_RUNTIME": PODMAN[-1], "ULIMITS": " ".join(ULIMITS)},
        timeout=1500,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]

    # the image's configuration is the Dockerfile's (--format docker keeps the HEALTHCHECK)
    inspected = json.loads(podman("image", "inspect", IMAGE_TAG).stdout)[0]
    config = inspected["Config"]
    (cmd,) = FINAL.all("CMD")
    (check,) = FINAL.all("HEALTHCHECK")
    assert config["User"] == FINAL.all("USER")[-1] and config["Cmd"] == exec_form(cmd), config
    assert inspected["Healthcheck"]["Test"] == ["CMD", *exec_form(check.split("CMD", 1)[1])], inspected["Healthcheck"]

    # its contents: the user, /app holds only what the Dockerfile copies, no test tools, the base's own CA bundle
    # (the build mounted this machine's over it)
    workdir = FINAL.all("WORKDIR")[-1]
    copied = copied_into(FINAL, workdir)
    probe = podman(
        "run",
        "--rm",
        *ULIMITS,
        IMAGE_TAG,
        "sh",
        "-c",
        f"id -u; id -g; ls -A {workdir} | sort | tr '\\n' ' '; echo; ls -A {workdir}/.streamlit; "
        "sha256sum /etc/ssl/certs/ca-certificates.crt; python -c 'import pytest' 2>&1 | tail -1; "
        "echo \"$(ls -A /opt | tr '\\n' ' ')| $(ls -A /tmp | tr '\\n' ' ')\"",
    )
    assert probe.returncode == 0, probe.stderr
    uid, gid, listing, streamlit_dir, bundle, no_pytest, build_left = probe.stdout.splitlines()
    base_bundle = podman("run", "--rm", *ULIMITS, OFFLINE_BASE, "sha256sum", "/etc/ssl/certs/ca-certificates.crt")
    assert (uid, gid) == ("10001", "10001"), probe.stdout
    assert set(listing.split()) == copied | {"__pycache__"}, listing  # + dashboard.py's bytecode (compileall)
    assert not {"tests", "bench", ".data", "deploy", "scripts", ".git"} & copied, copied
    assert streamlit_dir == "config.toml" and bundle == base_bundle.stdout.strip(), (probe.stdout, base_bundle)
    assert "No module named 'pytest'" in no_pytest, no_pytest
    assert build_left == "venv | ", build_left  # the virtualenv only: its sources and requirements list went

    # a real database, its socket handed to the containers (the embedded server listens on no TCP port)
    dsn = create_database(migrated=False, prefix="realimage")
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    socket_file = Path(info["host"]) / f".s.PGSQL.{info.get('port') or 5432}"
    database = ["-v", f"{socket_file}:/run/postgresql/{socket_file.name}"]
    secrets = dict.fromkeys(
        ("agent-memory-owner-db", "agent-memory-dashboard-db", "agent-memory-exporter-db", "agent-memory-sweeper-db"),
        psycopg.conninfo.make_conninfo(dsn, host="/run/postgresql"),
    ) | {"agent-memory-term-hash-key": os.environ["TERM_HASH_KEY"]}
    containers = manifest_containers()

    def job(name: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        """The manifest's container as Kubernetes runs it: its command and env, a read-only root when it asks for
        one (and no writable /tmp: the manifests mount none), no privilege escalation."""
        container = containers[name]
        read_only = (
            ["--read-only", "--read-only-tmpfs=false"]
            if container.get("securityContext", {}).get("readOnlyRootFilesystem")
            else []
        )
        return podman(
            "run",
            "--rm",
            *ULIMITS,
            *read_only,
            "--security-opt",
            "no-new-privileges",
            *database,
            *env_args(manifest_env(container, secrets)),
            IMAGE_TAG,
            *container["command"],
            *extra,
        )

    migrated = job("migrate-job.yaml")
    assert migrated.returncode == 0, migrated.stdout[-3000:] + migrated.stderr[-3000:]
    with psycopg.connect(dsn) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"store", "store_vectors", "checkpoints", "core_sweep_log", "core_erasure_register"} <= tables
    helped = job("sweep-cronjob.yaml", ("--help",))
    assert helped.returncode == 0 and "--dry-run" in helped.stdout, helped.stdout + helped.stderr
    for extra in (("--dry-run",), ()):
        swept = job("sweep-cronjob.yaml", extra)
        assert swept.returncode == 0, swept.stdout + swept.stderr
    with psycopg.connect(dsn) as conn:
        runs = conn.execute("SELECT dry_run, status FROM core_sweep_log ORDER BY id").fetchall()
    assert runs == [(True, "dry_run"), (False, "ok")], runs

    # the dashboard, as the Deployment starts it but without its Secret (no [auth]): the image's own CMD on 0.0.0.0,
    # healthy by the image's HEALTHCHECK; with no identity provider and not on loopback it grants nobody a role.
    # Then the same CMD on loopback, as on a laptop: the pages read the database. Both stop cleanly on SIGTERM.
    env = manifest_env(containers["dashboard-deployment.yaml"], secrets)
    env["STREAMLIT_SERVER_ALLOWED_HOSTS"] = "127.0.0.1"  # the name this test opens, not the Ingress host
    names = [f"agent-memory-pytest-{os.getpid()}-{label}" for label in ("deployment", "loopback")]
    try:
        port = free_port()
        started = time.monotonic()
        run = podman(
            "run",
            "-d",
            "--name",
            names[0],
            *ULIMITS,
            "--security-opt",
            "no-new-privileges",
            *database,
            "-p",
            f"127.0.0.1:{port}:8501",
            *env_args(env),
            IMAGE_TAG,
        )
        assert run.returncode == 0, run.stderr
        while (health := podman("healthcheck", "run", names[0])).returncode != 0:
            assert time.monotonic() - started < 90, (health.stdout, health.stderr, podman("logs", names[0]).stdout)
            time.sleep(0.5)
        healthy_s = time.monotonic() - started
        assert json.loads(podman("inspect", names[0]).stdout)[0]["State"]["Health"]["Status"] == "healthy"
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).read() == b"ok"
        refused = asyncio.run(first_page(f"http://127.0.0.1:{port}"))
        assert refused.status == "FINISHED_SUCCESSFULLY" and not refused.exceptions, refused
        assert (
            len(refused.errors) == 1
            and "0.0.0.0" in refused.errors[0]
            and "no se concede ningún rol" in refused.errors[0]
        ), refused

        port = free_port()
        run = podman(
            "run",
            "-d",
            "--name",
            names[1],
            *ULIMITS,
            "--security-opt",
            "no-new-privileges",
            *database,
            "--network",
            "host",
            *env_args(env),
            IMAGE_TAG,
            *localised(exec_form(cmd), {"8501": str(port)}),
        )
        assert run.returncode == 0, run.stderr
        deadline = time.monotonic() + 90
        while True:
            try:
                assert urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).read() == b"ok"
                break
            except OSError:
                assert time.monotonic() < deadline, podman("logs", names[1]).stderr[-3000:]
                time.sleep(0.3)
        first = asyncio.run(first_page(f"http://127.0.0.1:{port}"))
        assert first.status == "FINISHED_SUCCESSFULLY" and not first.exceptions and not first.errors, first
        assert first.says("Memoria entre conversaciones") and first.says("accesible"), first.texts

        for name in names:
            stop_started = time.monotonic()
            stopped = podman("stop", "--time", "30", name)
            assert stopped.returncode == 0, stopped.stderr
            state = json.loads(podman("inspect", name).stdout)[0]["State"]
            logs = podman("logs", name)
            assert state["ExitCode"] == 0 and time.monotonic() - stop_started < 30, (name, state, logs.stderr[-3000:])
            assert "Traceback" not in logs.stdout + logs.stderr, logs.stderr[-3000:]
        size = json.loads(podman("image", "inspect", IMAGE_TAG).stdout)[0]["Size"]
        print(f"image {IMAGE_TAG}: {size / 1e6:.0f} MB; start to healthy (HEALTHCHECK) {healthy_s:.1f} s")
    finally:
        for name in names:
            podman("rm", "-f", name)
