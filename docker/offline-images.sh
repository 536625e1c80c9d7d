#!/usr/bin/env bash
# Build pg-status's base images from Debian packages, without a registry:
#
#   pg-status-local/debian:bookworm   debootstrap --variant=minbase, imported
#   pg-status-local/python:3.11       + python3, venv (pip through ensurepip), ca-certificates
#   pg-status-local/postgres:15       + postgresql-15, gosu, and a small
#                                       docker-entrypoint.sh (the subset of the
#                                       official postgres image's that the demo
#                                       uses: POSTGRES_PASSWORD, initdb.d scripts)
#   pg-status-local/haproxy:2.6       + haproxy, config in /usr/local/etc/haproxy
#
# Each image is built only when missing (cached in the engine; idempotent).
# FORCE=1 rebuilds them all. Needs root (debootstrap), a Docker engine
# (DOCKER_HOST or the default socket) and a Debian mirror, read from
# /etc/apt/sources.list.d/debian.sources (or MIRROR=...). The rootfs gets the
# host's apt sources, so package installs in later builds use the same mirror.
#
# Usage: docker/offline-images.sh [--print]   (--print: list the image names)
set -euo pipefail

PREFIX=${IMAGE_PREFIX:-pg-status-local}
SUITE=${SUITE:-bookworm}
DEBIAN_IMAGE=$PREFIX/debian:$SUITE
PYTHON_IMAGE=$PREFIX/python:3.11
POSTGRES_IMAGE=$PREFIX/postgres:15
HAPROXY_IMAGE=$PREFIX/haproxy:2.6

if [ "${1:-}" = "--print" ]; then
    printf 'DEBIAN_IMAGE=%s\nPYTHON_IMAGE=%s\nPOSTGRES_IMAGE=%s\nHAPROXY_IMAGE=%s\n' \
        "$DEBIAN_IMAGE" "$PYTHON_IMAGE" "$POSTGRES_IMAGE" "$HAPROXY_IMAGE"
    exit 0
fi

# Debian's client matches Debian's engine; a newer static client may come
# first on PATH and lacks buildx, which the legacy builder does not need.
if [ -z "${DOCKER:-}" ]; then
    if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi
export DOCKER_BUILDKIT=0

log() { echo "offline-images: $*" >&2; }

have() { "$DOCKER" image inspect "$1" >/dev/null 2>&1 && [ -z "${FORCE:-}" ]; }

mirror() {
    if [ -n "${MIRROR:-}" ]; then echo "$MIRROR"; return; fi
    local src=/etc/apt/sources.list.d/debian.sources
    if [ -r "$src" ]; then
        awk '/^URIs:/ {print $2; exit}' "$src"
        return
    fi
    if [ -r /etc/apt/sources.list ]; then
        awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list
        return
    fi
    log "no Debian mirror: set MIRROR=http://<mirror>/debian"
    exit 1
}

# docker build from a Dockerfile on stdin and a context of extra files;
# host networking, so apt reaches the mirror over the host's network.
build() {
    local tag=$1 context=$2
    "$DOCKER" build --network host --force-rm --quiet -t "$tag" -f - "$context" >/dev/null
}

build_debian() {
    have "$DEBIAN_IMAGE" && return
    command -v debootstrap >/dev/null || { log "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
    local url rootfs
    url=$(mirror)
    rootfs=$(mktemp -d /var/tmp/pg-status-rootfs.XXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$rootfs'" RETURN
    log "debootstrap $SUITE (minbase) into $rootfs"
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$url" >/dev/null
    if [ -r /etc/apt/sources.list.d/debian.sources ]; then
        cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
        rm -f "$rootfs/etc/apt/sources.list"
    fi
    # as Debian's official images: apt keeps no package cache or downloaded
    # .debs in image layers (a Dockerfile's `rm -rf /var/lib/apt/lists/*`
    # alone would leave ~75 MB of /var/cache/apt behind)
    cat > "$rootfs/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
    echo 'Acquire::Languages "none";' > "$rootfs/etc/apt/apt.conf.d/docker-no-languages"
    # as Debian's official images (and .ci/apt-install on a host): a package
    # install starts no service (no init runs in a build step anyway), and
    # apt waits for the dpkg lock rather than failing
    printf '#!/bin/sh\n# no service starts in an image build\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
    chmod 755 "$rootfs/usr/sbin/policy-rc.d"
    echo 'DPkg::Lock::Timeout "600";' > "$rootfs/etc/apt/apt.conf.d/pg-status-lock-timeout"
    chroot "$rootfs" apt-get clean
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
    tar --numeric-owner -C "$rootfs" -c . | "$DOCKER" import \
        -c 'ENV LANG=C.UTF-8' -c 'CMD ["bash"]' - "$DEBIAN_IMAGE" >/dev/null
    log "built $DEBIAN_IMAGE"
}

# The python:3.11-slim layout that docker/Dockerfile relies on: `python`,
# venv (with pip inside each venv, from ensurepip) on PATH, ca-certificates.
build_python() {
    have "$PYTHON_IMAGE" && return
    local ctx
    ctx=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$ctx'" RETURN
    build "$PYTHON_IMAGE" "$ctx" <<EOF
FROM $DEBIAN_IMAGE
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      python3 python3-venv python-is-python3 ca-certificates \\
 && apt-get clean && rm -rf /var/lib/apt/lists/*
CMD ["python3"]
EOF
    log "built $PYTHON_IMAGE"
}

build_postgres() {
    have "$POSTGRES_IMAGE" && return
    local ctx
    ctx=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$ctx'" RETURN
    cp "$(dirname "$0")/local-postgres-entrypoint.sh" "$ctx/docker-entrypoint.sh"
    build "$POSTGRES_IMAGE" "$ctx" <<EOF
FROM $DEBIAN_IMAGE
# no main cluster in /var/lib/postgresql/15 (the entrypoint makes \$PGDATA)
RUN mkdir -p /etc/postgresql-common/createcluster.d \\
 && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/no-main.conf \\
 && apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      postgresql-15 gosu \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /docker-entrypoint-initdb.d /var/run/postgresql \\
 && chown postgres:postgres /var/run/postgresql
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:\$PATH PGDATA=/var/lib/postgresql/data
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
EOF
    log "built $POSTGRES_IMAGE"
}

build_haproxy() {
    have "$HAPROXY_IMAGE" && return
    local ctx
    ctx=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$ctx'" RETURN
    build "$HAPROXY_IMAGE" "$ctx" <<EOF
FROM $DEBIAN_IMAGE
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /usr/local/etc/haproxy \\
 && cp /etc/haproxy/haproxy.cfg /usr/local/etc/haproxy/haproxy.cfg
STOPSIGNAL SIGUSR1
CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
EOF
    log "built $HAPROXY_IMAGE"
}

"$DOCKER" version >/dev/null || { log "no Docker engine (DOCKER_HOST=${DOCKER_HOST:-unset})"; exit 1; }
build_debian
build_python
build_postgres
build_haproxy
