#!/bin/bash
# Entrypoint of a streaming replica: on first start, clone the primary with
# pg_basebackup (-R writes standby.signal and primary_conninfo), then hand
# over to the official image's entrypoint, which starts postgres as a hot
# standby.
set -euo pipefail

: "${PRIMARY_HOST:?}" "${REPLICATION_PASSWORD:?}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    until pg_isready --quiet --host="$PRIMARY_HOST" --port="${PRIMARY_PORT:-5432}"; do
        echo "waiting for $PRIMARY_HOST"
        sleep 1
    done
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 0700 "$PGDATA"
    gosu postgres env PGPASSWORD="$REPLICATION_PASSWORD" \
        pg_basebackup --host="$PRIMARY_HOST" --port="${PRIMARY_PORT:-5432}" --username=replicator \
        --pgdata="$PGDATA" --wal-method=stream --write-recovery-conf \
        --checkpoint=fast --no-password
fi

exec docker-entrypoint.sh "$@"
