# The one image of the dashboard, the exporter, the sweep CronJob and the migrations Job (deploy/*.yaml run it
# with their own command). Build: docker build -t registry.example.com/agent-memory-dashboard:1.0.0 .
# (podman/buildah: add --format docker, else the OCI format drops the HEALTHCHECK; Kubernetes uses its own probes.)
# tests/test_image.py builds a clean virtualenv with this file's own install command and runs every entrypoint.

# Pinned: the exact Python the requirements are tested with, on Debian 12. Mirror it in your registry and
# pin its digest there (FROM ...@sha256:...) when your policy asks for it.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# One stage: the virtualenv is built where it runs. A second stage copying it over (COPY --from) made every rebuild
# hash its 790 MB to find the cached layer (18 of a cached build's 20 s here) and stored it twice.
FROM ${PYTHON_IMAGE}
RUN groupadd --gid 10001 app && useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home app
# Build-time only (ARG, not ENV: the image's environment does not keep them).
ARG PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements.txt /tmp/requirements.txt
# The agents' library, which requirements.txt installs from ./agent_memory_runtime (pure Python: built here, no
# compiler); only the virtualenv stays in the image's files: the sources and the list go in the same step.
WORKDIR /opt/src
COPY agent_memory_runtime agent_memory_runtime
# Runtime requirements only (never requirements-dev.txt), wheels only: the image needs no compiler.
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --only-binary=:all: -r /tmp/requirements.txt \
    && rm -rf /opt/src /tmp/requirements.txt
WORKDIR /app
# The app's files, owned by root (the app cannot change its own code); no tests, bench, secrets or .data.
COPY dashboard.py ./
COPY .streamlit/config.toml .streamlit/config.toml
COPY app_pages app_pages
COPY core core
COPY ui ui
# Bytecode at build time: the Jobs run with readOnlyRootFilesystem.
RUN /opt/venv/bin/python -m compileall -q /app
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
USER 10001:10001
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request, sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).read() != b'ok')"]
CMD ["python", "-m", "streamlit", "run", "dashboard.py", "--server.address", "0.0.0.0", "--server.port", "8501", \
     "--server.headless", "true", "--browser.gatherUsageStats", "false"]
