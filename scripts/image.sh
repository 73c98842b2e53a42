#!/usr/bin/env bash
# `make image`: build the surreal image with docker where a Docker engine answers, else with podman.
#
#   IMAGE=surreal:local            the tag to build
#   BASE_IMAGE=python:3.11-slim    the Dockerfile's base; when it is not there and cannot be pulled
#                                  (no registry reachable), a Debian bookworm base with python3 is
#                                  built here with debootstrap (needs root) and used instead
#   IMAGE_BUILD_FLAGS=...          more flags for `build` (e.g. --build-arg, or a machine's mounts)
#   ENGINE=podman|docker           to choose the engine yourself
#
# The Dockerfile is used unchanged: what this builds is what `docker build .` builds on a laptop.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-surreal:local}
BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim}
LOCAL_BASE=${LOCAL_BASE:-localhost/surreal-base:bookworm}
SUITE=${DEBIAN_SUITE:-bookworm}

say() { echo "image: $*" >&2; }
die() { echo "image: $*" >&2; exit 2; }

if [[ -z "${ENGINE:-}" ]]; then
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        ENGINE=docker
    elif command -v podman >/dev/null 2>&1; then
        ENGINE=podman
    else
        die "no container engine: start Docker, or install podman (Debian: apt-get install podman runc)"
    fi
fi
command -v "$ENGINE" >/dev/null 2>&1 || die "ENGINE=$ENGINE is not installed"

have() { "$ENGINE" image inspect "$1" >/dev/null 2>&1; }

if ! have "$BASE_IMAGE" && ! "$ENGINE" pull -q "$BASE_IMAGE" >/dev/null 2>&1; then
    say "base $BASE_IMAGE cannot be pulled (no registry reachable?): using $LOCAL_BASE, Debian $SUITE + python3 made with debootstrap"
    if ! have "$LOCAL_BASE"; then
        command -v debootstrap >/dev/null 2>&1 || die "debootstrap is needed to make $LOCAL_BASE (apt-get install debootstrap)"
        [[ $(id -u) == 0 ]] || die "debootstrap needs root to make $LOCAL_BASE"
        root=$(mktemp -d)
        trap 'rm -rf "$root"' EXIT
        # python3 and ca-certificates, as the official python images have them; no apt in the build.
        debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            "$SUITE" "$root" ${DEBOOTSTRAP_MIRROR:-} >"$root.log" 2>&1 \
            || { tail -n 5 "$root.log" >&2; rm -f "$root.log"; die "debootstrap of $SUITE failed"; }
        rm -f "$root.log"
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
        tar -C "$root" -c . | "$ENGINE" import --change 'CMD ["python3"]' - "$LOCAL_BASE" >/dev/null
        say "made $LOCAL_BASE"
    fi
    BASE_IMAGE=$LOCAL_BASE
fi

say "$ENGINE build -t $IMAGE (base $BASE_IMAGE)"
# shellcheck disable=SC2086  # IMAGE_BUILD_FLAGS is a list of flags
"$ENGINE" build -t "$IMAGE" --build-arg "BASE_IMAGE=$BASE_IMAGE" ${IMAGE_BUILD_FLAGS:-} .
