"""
Users, addresses, server configuration and SQL shared by the test topology.
"""

from __future__ import annotations

import signal

PG_OS_USER = "postgres"
SUPERUSER = "postgres"
SUPERUSER_PASSWORD = "postgres"
MONITOR_USER = "pgstatus_monitor"
MONITOR_PASSWORD = "monitor"
PLAIN_USER = "pgstatus_plain"
PLAIN_PASSWORD = "plain"

#: Listen address of the n-th node: primary first, then replica1, replica2...
LOOPBACK_HOSTS = tuple(f"127.0.0.{i}" for i in range(1, 33))

NODE_CONF = "pgstatus_node.conf"
LOG_FILE = "server.log"

#: Settings shared by every node (written into the template's postgresql.conf).
COMMON_CONF = """
# --- pg-status test topology ---
fsync = off
wal_level = replica
max_wal_senders = 10
wal_keep_size = '128MB'
hot_standby = on
wal_receiver_status_interval = '1s'
wal_retrieve_retry_interval = '200ms'
shared_buffers = '16MB'
max_connections = 60
autovacuum = off
jit = off
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%m [%p] %q%a '
log_connections = off
password_encryption = 'scram-sha-256'
include_if_exists 'pgstatus_node.conf'
"""

HBA_CONF = """\
# pg-status test topology
local   all          all                  trust
local   replication  all                  trust
host    replication  all   127.0.0.0/8    trust
host    all          all   127.0.0.0/8    scram-sha-256
"""

SETUP_SQL = [
    f"ALTER ROLE {SUPERUSER} PASSWORD '{SUPERUSER_PASSWORD}'",
    f"CREATE ROLE {MONITOR_USER} LOGIN PASSWORD '{MONITOR_PASSWORD}'",
    f"GRANT pg_monitor TO {MONITOR_USER}",
    f"CREATE ROLE {PLAIN_USER} LOGIN PASSWORD '{PLAIN_PASSWORD}'",
    "CREATE TABLE rw_check ("
    " id bigserial PRIMARY KEY,"
    " payload text,"
    " at timestamptz DEFAULT clock_timestamp())",
]

WRITE_POSITION_SQL = (
    "SELECT pg_current_wal_insert_lsn()::text,"
    " ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))"
    "::bit(32)::bigint"
)

_PM_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
