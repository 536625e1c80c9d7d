"""
A real PostgreSQL primary + streaming replicas, run from the local binaries.

Split by concern: :mod:`pgtopology.servers` (one server), :mod:`pgtopology.replication`
(streaming as one server sees it), :mod:`pgtopology.faults` (what the tests
inject), :mod:`pgtopology.topology` (primary and replicas together),
:mod:`pgtopology.processes` (OS processes, ports, polling, scratch directories)
and :mod:`pgtopology.conf` (users, addresses, configuration).  This package
hands on the names the tests import.

Plain synchronous code (psycopg2 and subprocess), no pytest and no Twisted:
the fixtures in ``conftest.py`` wrap it.  Every method blocks the calling
thread; from a test whose reactor must keep running (a service under test in
the same process), call the ones that wait (``start``, ``stop``, ``restart``,
``promote``, ``wait_*``, ``failover``...) through
``twisted.internet.threads.deferToThread``.  Signal-only methods
(``sigstop``, ``sigcont``, ``kill``) return at once or within a few
milliseconds.

Layout of one topology (``PgTopology.start``)::

    primary   127.0.0.1:<free port>  data dir <base>/primary
    replica1  127.0.0.2:<free port>  data dir <base>/replica1  (pg_basebackup)
    replica2  127.0.0.3:<free port>  data dir <base>/replica2

Each node listens only on its own loopback address (Linux routes all of
127.0.0.0/8 to ``lo``), so host names in the service under test are distinct.
The superuser is ``postgres``/``postgres``; ``pgstatus_monitor``/``monitor``
has ``pg_monitor``; ``pgstatus_plain``/``plain`` has no grants.  Table
``rw_check`` exists on every node.

PostgreSQL refuses to run as root: when we are root, every server and tool
runs as the ``postgres`` OS user, and data directories are owned by it.

Every wait is a poll with a deadline that raises ``TimeoutError`` naming what
it waited for, with the tail of the node's server log.
"""

from pgtopology.conf import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    PLAIN_PASSWORD,
    PLAIN_USER,
    SUPERUSER,
    SUPERUSER_PASSWORD,
)
from pgtopology.processes import (
    _alive,
    _become_subreaper,
    _env,
    _make_pg_dir,
    _mark_owner,
    _owner_alive,
    _pg_ids,
    _run_as,
    descendants,
    free_port,
    lsn_to_int,
    poll,
    scratch_dir,
)
from pgtopology.servers import PgNode
from pgtopology.topology import PgTopology

__all__ = [
    "MONITOR_PASSWORD",
    "MONITOR_USER",
    "PLAIN_PASSWORD",
    "PLAIN_USER",
    "SUPERUSER",
    "SUPERUSER_PASSWORD",
    "PgNode",
    "PgTopology",
    "_alive",
    "_become_subreaper",
    "_env",
    "_make_pg_dir",
    "_mark_owner",
    "_owner_alive",
    "_pg_ids",
    "_run_as",
    "descendants",
    "free_port",
    "lsn_to_int",
    "poll",
    "scratch_dir",
]
