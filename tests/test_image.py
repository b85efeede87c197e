"""The container image (Dockerfile, .dockerignore) and what deploy/ runs in it.

No base image can be pulled on this network, so the slow test builds what the Dockerfile builds the way it
builds it: its own RUN commands (a virtualenv from requirements.txt), its COPY lines filtered by .dockerignore,
its ENV, into a folder standing for the image's root; then runs there every command deploy/ gives the image
(migrations Job, dashboard, exporter, sweep CronJob) with the manifests' own environment, and the Dockerfile's
HEALTHCHECK and CMD."""
from __future__ import annotations

import asyncio
import fnmatch
import os
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
        assert "@sha256:" in image or re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+[\w.-]*", image), \
            f"base image not pinned to an exact version or digest: {image}"
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
    sources = [src for args in copies if "--from=" not in args for src in shlex.split(args)[:-1]
               if not src.startswith("--")]
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


class ImageRoot:
    """A folder standing for the image's filesystem: container paths in commands are mapped into it."""

    def __init__(self, path: Path):
        self.path = path
        self.env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        self.workdir = "/"
        shims = path / "usr-local-bin"  # the base image's `python` is the interpreter the tests run on
        shims.mkdir(parents=True)
        (shims / "python").symlink_to(Path(sys.executable).resolve())
        self.env["PATH"] = f"{shims}:{self.env['PATH']}"

    def map(self, text: str) -> str:
        return re.sub(r"(?<![\w.])(/opt/|/app\b|/tmp/requirements\.txt)", lambda m: f"{self.path}{m.group(1)}", text)

    def apply(self, instruction: str, args: str) -> None:
        if instruction == "ENV":
            for key, value in (kv.split("=", 1) for kv in shlex.split(args)):
                if key == "PIP_NO_CACHE_DIR":  # reruns of this test reuse pip's cache; the download is the same
                    continue
                self.env[key] = self.map(value).replace("$PATH", self.env.get("PATH", ""))
        elif instruction == "WORKDIR":
            self.workdir = args
            Path(self.map(args)).mkdir(parents=True, exist_ok=True)
        elif instruction == "COPY" and "--from=" not in args:  # --from: the stages share this one root
            *sources, dest = [a for a in shlex.split(args) if not a.startswith("--")]
            target = Path(self.map(dest if dest.startswith("/") else f"{self.workdir.rstrip('/')}/{dest}"))
            for source in sources:
                copy_context(ROOT / source, target if not dest.endswith("/") else target / Path(source).name,
                             source)
        elif instruction == "RUN":
            if re.match(r"(groupadd|useradd)\b", args):  # users of the image's /etc: the base image's business
                return
            done = subprocess.run(["bash", "-ec", self.map(args)], env=self.env, cwd=self.map(self.workdir),
                                  capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, f"RUN {args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


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


def copy_context(source: Path, target: Path, relative: str) -> None:
    assert not dockerignored(relative), f"COPY {relative}: excluded from the build context by .dockerignore"
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        return
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.is_file() and not dockerignored(rel):
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> ImageRoot:
    root = ImageRoot(tmp_path_factory.mktemp("image-root"))
    for stage in STAGES:
        for instruction, args in stage.steps:
            root.apply(instruction, args)
    return root


def container_env(image: ImageRoot, container: dict, secrets: dict[str, str]) -> dict[str, str]:
    env = dict(image.env)
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif item["valueFrom"]["secretKeyRef"]["name"] in secrets:
            env[item["name"]] = secrets[item["valueFrom"]["secretKeyRef"]["name"]]
        else:
            assert item["valueFrom"]["secretKeyRef"].get("optional"), item
    return env


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
    secrets = {name: dsn for name in ("agent-memory-owner-db", "agent-memory-dashboard-db",
                                      "agent-memory-exporter-db", "agent-memory-sweeper-db")}

    def run(name: str, command: list[str] | None = None, **kw) -> subprocess.CompletedProcess:
        container = containers[name]
        return subprocess.run(command or container["command"], cwd=app, env=container_env(image, container, secrets),
                              capture_output=True, text=True, timeout=600, **kw)

    migrated = run("migrate-job.yaml")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    with psycopg.connect(dsn) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        dims = conn.execute("SELECT atttypmod FROM pg_attribute WHERE attrelid = 'store_vectors'::regclass "
                            "AND attname = 'embedding'").fetchone()[0]
    assert {"store", "store_vectors", "checkpoints", "core_sweep_log", "core_erasure_register"} <= tables
    assert dims == int(next(e["value"] for e in containers["migrate-job.yaml"]["env"] if e["name"] == "EMBEDDINGS_DIMS"))

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
        procs.append(proc := subprocess.Popen(localised(container["command"], {"9188": exporter_port}), cwd=app,
                                              env=container_env(image, container, secrets),
                                              stdout=log.open("w"), stderr=subprocess.STDOUT))
        metrics = wait_http(f"http://127.0.0.1:{exporter_port}/metrics", proc, log).decode()
        assert re.search(r"^agent_memory_db_up 1\.0$", metrics, re.M), metrics[:2000]

        # the dashboard: the Deployment's command, then the image's own CMD; the HEALTHCHECK passes on both
        (cmd,) = FINAL.all("CMD")
        (check,) = FINAL.all("HEALTHCHECK")
        check_cmd = exec_form(check.split("CMD", 1)[1])
        for label, command in (("deployment", containers["dashboard-deployment.yaml"]["command"]),
                               ("CMD", exec_form(cmd))):
            port = str(free_port())
            container = containers["dashboard-deployment.yaml"]
            env = container_env(image, container, secrets)
            # the Deployment's host name is not this machine's: answer the loopback name the test connects to
            env["STREAMLIT_SERVER_ALLOWED_HOSTS"] = "127.0.0.1"
            log = tmp_path / f"dashboard-{label}.log"
            procs.append(proc := subprocess.Popen(localised(command, {"8501": port}), cwd=app, env=env,
                                                  stdout=log.open("w"), stderr=subprocess.STDOUT))
            assert wait_http(f"http://127.0.0.1:{port}/_stcore/health", proc, log) == b"ok"
            healthy = subprocess.run([a.replace(":8501/", f":{port}/") for a in check_cmd], cwd=app,
                                     env=image.env, capture_output=True, text=True, timeout=30)
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
