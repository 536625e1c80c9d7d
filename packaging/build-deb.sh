#!/usr/bin/env bash
# Build the pg-status Debian package (`make deb`) into DIST (default dist/):
#   pg-status_<version>_<arch>.deb
#
# The repository's files the package needs are copied into a fresh
# directory under build/deb with packaging/debian as its debian/ (the
# service files are symlinks there into service/, copied as files), a
# debian/changelog is written for the version packaging/version gives, and
# dpkg-buildpackage builds the binary package there.  Then lintian checks
# it: an error fails the build, warnings are printed.
#
# Environment (all optional):
#   DIST            where the .deb goes (default dist/)
#   DEB_MAINTAINER  "Name <address>" for Maintainer and the changelog
#   LINTIAN         0 skips lintian
# Build dependencies (debhelper, python3.11-venv, libpq-dev, ...) come from
# .ci/deb-deps, which `make deb` runs first.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
log() { echo "packaging/build-deb.sh: $*" >&2; }

version=$(packaging/version --debian)
dist=${DIST:-dist}
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
work=$root/build/deb
src=$work/pg-status-$version
rm -rf "$work"
mkdir -p "$src"

cp -p setup.py pyproject.toml README.md NEWS.md LICENSE "$src/"
# the package's sources, without bytecode or a plugin cache
tar -C "$root" --exclude=__pycache__ --exclude='*.pyc' --exclude=dropin.cache \
    -cf - pgstatus twisted | tar -C "$src" -xf -
cp -rL packaging/debian "$src/debian"

maintainer=${DEB_MAINTAINER:-$(sed -n 's/^Maintainer: //p' packaging/debian/control)}
sed -i "s|^Maintainer: .*|Maintainer: $maintainer|" "$src/debian/control"
# the date of the commit built (reproducible), else now
when=$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)
cat > "$src/debian/changelog" <<CHANGELOG
pg-status ($version) unstable; urgency=medium

  * pg-status $version: see /usr/share/doc/pg-status/NEWS.md.gz.

 -- $maintainer  $(date -R -u -d "@$when")
CHANGELOG

log "building pg-status $version in $src"
# nothing of a make that runs this one (its command-line variables) reaches
# debian/rules
unset MAKEFLAGS MFLAGS MAKEOVERRIDES MAKELEVEL
(cd "$src" && dpkg-buildpackage --build=binary --no-sign) > "$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log" >&2
    log "dpkg-buildpackage failed; the whole log: $work/build.log"
    exit 1
}
deb=$(ls "$work"/pg-status_"$version"_*.deb)
cp "$deb" "$dist/"
deb=$dist/$(basename "$deb")
# the staged tree (the venv twice over): the log says what was built
rm -rf "$src"

if [ "${LINTIAN:-1}" != 0 ]; then
    # errors fail the build; its warnings are printed either way (the ones
    # left, and why: docs/deploy/debian.md)
    log "lintian $deb"
    lintian --fail-on error "$deb" || { log "lintian found errors in $deb"; exit 1; }
fi
log "built $deb"
