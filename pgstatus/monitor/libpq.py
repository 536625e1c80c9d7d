"""
The libpq side of a check: txpostgres's connection and cursor, adapted to
how the monitor closes connections, and the psycopg2 errors the probe
tells apart.
"""

from __future__ import annotations

import psycopg2
import psycopg2.errors
from twisted.internet.main import CONNECTION_DONE as _SHARED_CONNECTION_DONE
from twisted.internet.main import CONNECTION_LOST as _SHARED_CONNECTION_LOST
from twisted.logger import Logger
from twisted.python.failure import Failure
from txpostgres import txpostgres

log = Logger(namespace="pgstatus.monitor")

#: any error psycopg2 raises
Error = psycopg2.Error
#: the server refused a function or view to the monitoring role
InsufficientPrivilege = psycopg2.errors.InsufficientPrivilege


def _own_reason(reason: Failure) -> Failure:
    """
    ``reason``, unless it carries one of Twisted's shared exception
    instances (``CONNECTION_DONE``, ``CONNECTION_LOST``): then a Failure of
    a new instance of the same exception.

    txpostgres fails a pending connect or query with the shared
    ``CONNECTION_DONE`` when the connection is closed (our deadlines close
    it).  The exception is raised inside the check's coroutine, and every
    raise of a shared instance extends its ``__traceback__``: the frames of
    every aborted check, with their connections and Deferreds, would stay
    reachable from the module for the life of the process.
    """
    value = reason.value
    if value is _SHARED_CONNECTION_DONE or value is _SHARED_CONNECTION_LOST:
        return Failure(type(value)(*value.args))
    return reason


class Cursor(txpostgres.Cursor):
    def connectionLost(self, reason: Failure) -> None:
        txpostgres.Cursor.connectionLost(self, _own_reason(reason))


class Connection(txpostgres.Connection):
    """
    A txpostgres connection that survives the server closing it: txpostgres
    raises such an error from ``doRead`` with nobody to report it to, or,
    when the socket is already gone, re-registers the dead descriptor (-1)
    with the reactor.  Here the connection is just marked closed; a pending
    operation has already been failed, and the next check reconnects.  We
    use no LISTEN/NOTIFY, so there are no notifications to dispatch.

    Pending operations fail with an exception instance of their own (see
    :func:`_own_reason`).
    """

    cursorFactory = Cursor

    def connectionLost(self, reason: Failure) -> None:
        txpostgres.Connection.connectionLost(self, _own_reason(reason))

    def doRead(self) -> None:
        conn = self._connection
        try:
            txpostgres._PollingMixin.doRead(self)
        except psycopg2.Error as e:
            log.debug("connection lost error={error}", error=" ".join(str(e).split()))
            self._drop()
            return
        if conn is None or conn.closed or self.fileno() < 0:
            self._drop()
            return
        self.reactor.addReader(self)

    def _drop(self) -> None:
        self.reactor.removeReader(self)
        self.reactor.removeWriter(self)
        conn = self._connection
        if conn is not None and not conn.closed:
            conn.close()
