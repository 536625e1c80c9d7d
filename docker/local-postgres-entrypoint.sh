#!/bin/bash
# Entrypoint of the local PostgreSQL image (docker/offline-images.sh): the
# subset of the official postgres image's docker-entrypoint.sh that the demo
# uses, so the demo runs on either image.
#  - run as root: make $PGDATA, then re-run as the postgres user (gosu);
#  - empty $PGDATA: initdb with POSTGRES_USER/POSTGRES_PASSWORD, password
#    (scram-sha-256) logins from any address, listen_addresses='*', then run
#    /docker-entrypoint-initdb.d/*.sh against a local-only temporary server;
#  - exec the command (postgres ...). PGPORT, if set, is the port.
set -euo pipefail

if [ "${1:0:1}" = "-" ]; then
    set -- postgres "$@"
fi

if [ "$1" = postgres ] && [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 0700 "$PGDATA"
    exec gosu postgres "$0" "$@"
fi

if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
    export POSTGRES_USER=${POSTGRES_USER:-postgres}
    initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -p ${PGPORT:-5432}" start >/dev/null
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) echo "running $f"; if [ -x "$f" ]; then "$f"; else . "$f"; fi ;;
            *.sql) echo "running $f"; psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" \
                       --dbname postgres -f "$f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
