#!/usr/bin/env bash
# Build the pg-status image from docker/Dockerfile, the repository root as
# the build context (.dockerignore keeps it to what the image needs).
#
#   docker/build.sh [docker build options]     e.g. docker/build.sh --network host
#
# Environment (all optional):
#   TAG           the image name; by default pg-status:<version> and
#                 pg-status:latest, <version> being pg-status's own
#                 (packaging/version). The image is labelled with that
#                 version (org.opencontainers.image.version) either way.
#   PYTHON_IMAGE  the base image (default: the Dockerfile's, python:3.11-slim)
#   CA_CERTS      CA certificates the build must trust, e.g. those of a
#                 TLS-intercepting proxy in front of the package index:
#                 PEM files, or directories of *.crt and *.pem files,
#                 separated by ':'. Their text becomes the build argument
#                 CA_CERTS, which only the build stage sees.
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST
#                 passed on as build arguments when set
#   DOCKER        the docker client (default /usr/bin/docker, else docker)
#
# A failed build leaves nothing behind: the builder removes its containers,
# failed or not (--rm --force-rm), and this script then removes the untagged
# images (layers) that appeared during the build.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${DOCKER:-}" ]; then
    if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi
log() { echo "docker/build.sh: $*" >&2; }

version=$(packaging/version)
args=(build --rm --force-rm -f docker/Dockerfile
      --label "org.opencontainers.image.version=$version")
if [ -n "${TAG:-}" ]; then
    args+=(-t "$TAG")
else
    args+=(-t "pg-status:$version" -t pg-status:latest)
fi
if [ -n "${PYTHON_IMAGE:-}" ]; then args+=(--build-arg "PYTHON_IMAGE=$PYTHON_IMAGE"); fi
for name in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST; do
    if [ -n "${!name:-}" ]; then args+=(--build-arg "$name=${!name}"); fi
done

if [ -n "${CA_CERTS:-}" ]; then
    files=()
    IFS=: read -r -a entries <<< "$CA_CERTS"
    for entry in "${entries[@]}"; do
        if [ -d "$entry" ]; then
            for f in "$entry"/*.crt "$entry"/*.pem; do if [ -f "$f" ]; then files+=("$f"); fi; done
        elif [ -f "$entry" ]; then
            files+=("$entry")
        else
            log "CA_CERTS: no such file or directory: $entry"
            exit 2
        fi
    done
    if [ ${#files[@]} -eq 0 ]; then
        log "CA_CERTS names no certificate files: $CA_CERTS"
        exit 2
    fi
    args+=(--build-arg "CA_CERTS=$(cat "${files[@]}")")
fi

images() { "$DOCKER" image ls --all --quiet --no-trunc | sort -u; }
before=$(images)
if "$DOCKER" "${args[@]}" "$@" .; then
    exit 0
else
    status=$?
fi
# the layers the failed build committed: untagged and new since the start.
# An image with a child cannot go before the child, and removing a child
# also removes its untagged parents: so a second pass for what is left.
new=$(comm -13 <(echo "$before") <(images))
for pass in 1 2; do
    for id in $new; do
        tags=$("$DOCKER" image inspect --format '{{len .RepoTags}}' "$id" 2>/dev/null) || continue
        [ "$tags" = 0 ] && "$DOCKER" image rm "$id" >/dev/null 2>&1 || true
    done
done
left=$(for id in $new; do
    tags=$("$DOCKER" image inspect --format '{{len .RepoTags}}' "$id" 2>/dev/null) || continue
    if [ "$tags" = 0 ]; then echo "$id"; fi
done)
if [ -n "$left" ]; then
    log "build failed (status $status); could not remove the images it left: $left"
else
    log "build failed (status $status); removed the images it left"
fi
exit "$status"
