#!/usr/bin/env bash
# Builds the Dockerfile, unchanged, where python:3.11.7-slim-bookworm cannot be pulled (no Docker Hub on the
# network, only Debian's mirrors and PyPI). Run as root; needs podman, runc and debootstrap
# (apt-get install podman runc debootstrap).
#
# 1. The base, made from Debian's own packages if it is not in podman's storage yet (REBUILD_BASE=1 remakes it):
#    debootstrap --variant=minbase bookworm + python3-venv and python-is-python3 (the Dockerfile calls `python`),
#    upgraded from bookworm-updates and bookworm-security. Its Python is Debian 12's 3.11.2 (with Debian's security
#    fixes), not the official image's 3.11.7, and it lives in /usr/bin, not /usr/local/bin.
# 2. The image: podman build --format docker (keeps the HEALTHCHECK) --build-arg PYTHON_IMAGE=<the base>.
#    pip in the build trusts this machine's CA bundle (a TLS-intercepting egress proxy here): mounted over the
#    base's own /etc/ssl/certs/ca-certificates.crt, which Debian's pip reads, for the RUN steps only; the image
#    keeps Debian's bundle (a mount on a new path would leave an empty file behind in every stage).
#
# Usage: scripts/build_image_offline.sh [IMAGE]      (default localhost/agent-memory-dashboard:offline)
# Env:   BASE_IMAGE (localhost/bookworm-python:3.11), DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR, REBUILD_BASE=1,
#        PODMAN_RUNTIME (runc: this machine's crun 1.8 refuses hybrid cgroups), ULIMITS (limits the sandbox allows).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${1:-localhost/agent-memory-dashboard:offline}
BASE_IMAGE=${BASE_IMAGE:-localhost/bookworm-python:3.11}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
PODMAN_RUNTIME=${PODMAN_RUNTIME:-runc}
ULIMITS=${ULIMITS:---ulimit nofile=20000:20000 --ulimit nproc=4096:4096}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

WORK=$(mktemp -d /var/tmp/build-image-offline.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

if [ "${REBUILD_BASE:-0}" = 1 ] || ! podman image exists "$BASE_IMAGE"; then
  echo "== base $BASE_IMAGE from $DEBIAN_MIRROR (debootstrap, Debian 12 minbase + python3-venv)"
  ROOTFS="$WORK/rootfs"
  debootstrap --variant=minbase --include=python3-venv,python-is-python3 bookworm "$ROOTFS" "$DEBIAN_MIRROR"
  rm -f "$ROOTFS/etc/apt/sources.list"
  cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $DEBIAN_MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $DEBIAN_SECURITY_MIRROR
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  chroot "$ROOTFS" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive chroot "$ROOTFS" apt-get -y -qq upgrade
  chroot "$ROOTFS" apt-get clean
  rm -rf "$ROOTFS"/var/lib/apt/lists/*
  tar -C "$ROOTFS" -c . | podman import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
    --message "debootstrap --variant=minbase bookworm + python3-venv python-is-python3 ($DEBIAN_MIRROR)" \
    - "$BASE_IMAGE"
  rm -rf "$ROOTFS"
fi
podman run --rm --runtime "$PODMAN_RUNTIME" $ULIMITS "$BASE_IMAGE" python -VV

echo "== image $IMAGE on $BASE_IMAGE"
# shellcheck disable=SC2086
podman --runtime "$PODMAN_RUNTIME" build --format docker --network host $ULIMITS \
  --build-arg PYTHON_IMAGE="$BASE_IMAGE" \
  -v "$CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro" \
  -t "$IMAGE" .
podman image inspect "$IMAGE" --format '{{.Id}} {{.Size}} bytes, user {{.Config.User}}'
