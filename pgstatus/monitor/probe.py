"""
The PostgreSQL side of a check: one reused txpostgres connection per host
and the status query that measures role, positions and clocks in a single
round trip.

Nothing here blocks the reactor: host names are resolved through the
reactor's threaded resolver and libpq receives the address (``hostaddr``)
next to the name (``host``, kept for TLS verification and ``.pgpass``).
Deadlines are not left to libpq, whose ``connect_timeout`` does not apply to
asynchronous connections, nor to txpostgres cancellation, which is
blocking: the monitor's :class:`~pgstatus.monitor.turns.Deadline` calls
:meth:`PostgresProbe.abort`, which closes the connection.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHostResolution, IResolutionReceiver
from twisted.logger import Logger
from zope.interface import implementer

from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config, HostConfig
from pgstatus.monitor import libpq
from pgstatus.monitor.failures import CheckFailed, describe_error, errno_of, shows_auth_exchange
from pgstatus.monitor.lag import Observation
from pgstatus.monitor.query import (
    GEOMETRY_QUERY,
    geometry_from_rows,
    observation_from_row,
    status_query,
)
from pgstatus.monitor.tcpconnect import connect_tcp
from pgstatus.monitor.turns import TURN_LIMIT, ConnectTurns, Deadline

log = Logger(namespace="pgstatus.monitor")

#: how long a reduced query is used after a permission error
FULL_QUERY_RETRY = 300.0
#: after an abort whose wait could not be cancelled, how long before the
#: probe fails the wait itself if nothing else has
ABORT_GRACE = 0.001


@implementer(IResolutionReceiver)
class _Addresses:
    def __init__(self) -> None:
        self.addresses: list[Any] = []
        self.done: Deferred[list[Any]] = Deferred()

    def resolutionBegan(self, resolution: IHostResolution) -> None:
        pass

    def addressResolved(self, address: Any) -> None:
        self.addresses.append(address)

    def resolutionComplete(self) -> None:
        self.done.callback(self.addresses)


class PostgresProbe:
    """
    One host's connection and status query.

    :param reactor: provides TCP, time and name resolution.
    :param host: the host to check.
    :param settings: the running configuration (credentials,
        ``conn_max_age_ms``), read at every check.
    :param turns: shared connection turns.
    :param urgent: whether this host's connection setups go ahead of those
        of dead hosts (see :meth:`ConnectTurns.acquire`).
    """

    def __init__(self, reactor: Any, host: HostConfig, settings: ConfigProvider,
                 turns: ConnectTurns, urgent: Callable[[], bool] = lambda: True) -> None:
        self._reactor = reactor
        self._host = host
        self._settings = settings
        #: the credentials the open connection was made with
        self._credentials: tuple[str, str, str] | None = None
        self._turns = turns
        self._urgent = urgent
        self._conn: Any = None  # a libpq.Connection
        self._opened_at = 0.0
        self._level = 0
        self._level_since = 0.0
        self._geometry: tuple[int, int] | None = None
        self._geometry_known = False
        self._pending: Deferred[Any] | None = None
        self._aborted = False
        #: connections opened so far (for /metrics)
        self.opened = 0

    @property
    def connected(self) -> bool:
        """
        A connection is open.
        """
        return self._conn is not None and not self._conn.closed

    @property
    def backend_pid(self) -> int | None:
        """
        The server process of the open connection, if any.
        """
        return self._conn.get_backend_pid() if self.connected else None

    def check(self, started: float, deadline: Deadline) -> Deferred[Observation]:
        """
        Run one check.  The deadline is paused while resolving the host name
        and while waiting for a connection turn.

        :param started: local time the check started.
        :raise CheckFailed: through the Deferred.
        """
        self._aborted = False
        return ensureDeferred(self._check(started, deadline))

    def abort(self) -> None:
        """
        Stop whatever the check is doing now; its Deferred fails.  Closes
        the connection, releasing its socket.
        """
        self._aborted = True
        # what this check waits for, taken before closing: closing fails it,
        # and its callbacks might already start the next check
        pending, self._pending = self._pending, None
        self._close_conn()
        if pending is not None and not pending.called:
            try:
                pending.cancel()
            except Exception:
                # txpostgres's canceller: it asks libpq to cancel on the
                # connection closed above, which raises.  That happens when a
                # poll failed just before: txpostgres then fails the wait at
                # its next reactor turn (closing did not, having nothing left
                # to fail).  Whatever happens, the wait ends just after.
                self._reactor.callLater(ABORT_GRACE, _fail_if_waiting, pending)

    def close(self) -> None:
        """
        Close the connection (service shutdown).
        """
        self.abort()

    @property
    def _config(self) -> Config:
        return self._settings.current

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.pollable() is not None:
            try:
                conn.close()
            except Exception:  # pragma: no cover - close of a broken libpq handle
                log.debug("closing connection host={host} failed", host=self._host.name)

    async def _wait(self, d: Deferred[Any]) -> Any:
        self._pending = d
        try:
            return await d
        finally:
            if self._pending is d:
                self._pending = None

    async def _check(self, started: float, deadline: Deadline) -> Observation:
        age = self._reactor.seconds() - self._opened_at
        if self.connected and self._credentials != _credentials(self._config):
            # reloaded credentials or database: verified at once, by a new
            # connection (when no other connection setup is waiting)
            age = float("inf")
        if self.connected and age > self._config.conn_max_age_ms / 1000:
            if not self._turns.busy:
                log.debug("recycling aged connection host={host}", host=self._host.name)
                self._close_conn()
        if not self.connected:
            self._close_conn()
            await self._connect(deadline)
            try:
                return await self._query(started)
            except CheckFailed as e:
                # The connection got through TLS and authentication, so the
                # failure is late: a pooler whose PostgreSQL is down (e.g.
                # PgBouncer with a cached server welcome) authenticates the
                # client, then closes it at the first query.
                e.late = True
                raise
        deadline.start()
        return await self._query(started)

    async def _connect(self, deadline: Deadline) -> None:
        host = self._host
        addresses = await self._resolve()
        deadline.start()
        # The first address (in resolver order) that accepts TCP is the one
        # libpq gets; the others are tried only if it refuses.
        failure: CheckFailed | None = None
        for address in addresses:
            try:
                proto = await self._wait(connect_tcp(self._reactor, address, host.port))
            except Exception as e:
                # The Deferred's Failure still holds this exception; on
                # Python 3.13 its traceback's frames reach that Failure back
                # (through Twisted's throwExceptionIntoGenerator), a cycle of
                # ~20 frames per refused attempt.
                e.__traceback__ = None
                if self._aborted:
                    raise CheckFailed("connect", "aborted") from None
                failure = CheckFailed("connect", f"{address}: {describe_error(e, self._config)}"
                                      if len(addresses) > 1 else describe_error(e, self._config),
                                      errno=errno_of(e))
                continue
            proto.transport.abortConnection()
            break
        else:
            assert failure is not None
            try:
                raise failure
            finally:
                # The exception's traceback holds this frame: were the frame
                # still to hold the exception, each refused connection would
                # leave a cycle of ~40 objects (the frames down from the
                # reactor's poll) for the garbage collector, whose pauses
                # grew with the number of hosts.
                del failure
        if self._aborted:
            raise CheckFailed("connect", "aborted")
        deadline.pause()
        try:
            turn = await self._wait(self._turns.acquire(self._urgent()))
        except Exception:
            raise CheckFailed("connect", "aborted while waiting for a turn") from None
        deadline.resume()
        limit = self._reactor.callLater(TURN_LIMIT, self._turn_expired)
        conn = libpq.Connection(reactor=self._reactor)
        self._conn = conn
        # whether the next setup waits AUTH_PAUSE: after TLS or a password
        # (a setup that ran out of its turn or was aborted is assumed to)
        reached_auth = True
        self._credentials = _credentials(self._config)
        try:
            await self._wait(conn.connect(
                host=host.name,
                hostaddr=address,
                port=host.port,
                user=self._config.pg_user,
                password=self._config.pg_password,
                dbname=self._config.pg_database,
                application_name="pg-status",
            ))
            reached_auth = _used_tls_or_password(conn)
        except Exception as e:
            self._close_conn()
            if not limit.active():
                raise CheckFailed("connect", "connection setup took longer than its turn") from None
            why = describe_error(e, self._config)
            # Only a setup that got as far as the server's TLS or
            # authentication exchange (which then failed, e.g. at a pooler
            # whose PostgreSQL is down) counts as a late failure, and makes
            # the next setup wait; a server that just closes does neither.
            reached_auth = self._aborted or shows_auth_exchange(why)
            raise CheckFailed("connect", why, late=not self._aborted and shows_auth_exchange(why)
                              ) from None
        finally:
            if limit.active():
                limit.cancel()
            turn.release(reached_auth=reached_auth)
        if self._aborted:
            raise CheckFailed("connect", "aborted")
        self._opened_at = self._reactor.seconds()
        self.opened += 1
        self._level = 0
        self._geometry_known = False
        log.debug("connected host={host} address={address} pid={pid}",
                  host=host.name, address=address, pid=self.backend_pid)

    def _turn_expired(self) -> None:
        log.debug("connection setup exceeded its turn host={host}", host=self._host.name)
        self._close_conn()

    async def _resolve(self) -> list[str]:
        name = self._host.name
        try:
            ipaddress.ip_address(name.split("%", 1)[0])
            return [name]
        except ValueError:
            pass
        receiver = _Addresses()
        self._reactor.nameResolver.resolveHostName(
            receiver, name, portNumber=self._host.port,
            addressTypes=None, transportSemantics="TCP",
        )
        addresses = await self._wait(receiver.done)
        if not addresses:
            raise CheckFailed("connect_start", f"host name {name!r} did not resolve")
        found: list[str] = []
        for a in addresses:
            if a.type == "TCP" and getattr(a, "host", None) and a.host not in found:
                found.append(a.host)
        if not found:
            raise CheckFailed("connect_start", f"host name {name!r} has no TCP address")
        return found

    async def _query(self, started: float) -> Observation:
        clock = self._reactor
        if self._level and clock.seconds() - self._level_since >= FULL_QUERY_RETRY:
            self._level = 0
        if not self._geometry_known:
            self._geometry = geometry_from_rows(await self._run(GEOMETRY_QUERY))
            self._geometry_known = True
        while True:
            sent = clock.seconds()
            try:
                rows = await self._wait(self._conn.runQuery(status_query(self._level)))
            except Exception as e:
                if not isinstance(e, libpq.InsufficientPrivilege):
                    raise self._query_failed(e) from None
                if self._level >= 2:
                    self._close_conn()
                    raise CheckFailed("validate_result", describe_error(e, self._config)) from None
                self._level += 1
                self._level_since = clock.seconds()
                log.warn(
                    "PostgreSQL permission denied host={host} sqlstate={sqlstate}; retrying "
                    "poll without WAL receiver statistics until reconnect;{also} the full "
                    "query is tried again after {minutes} minutes; {advice}",
                    host=self._host.name, sqlstate=e.pgcode or "42501",
                    also="" if self._level == 1 else " also without the control file "
                    "functions (replica timelines unknown);",
                    minutes=round(FULL_QUERY_RETRY / 60),
                    advice="grant the monitoring role pg_monitor or pg_read_all_stats for "
                    "complete byte lag and replica timelines "
                    f"error={describe_error(e, self._config)}",
                )
                continue
            received = clock.seconds()
            if len(rows) != 1:
                self._close_conn()
                raise CheckFailed("validate_result", f"{len(rows)} rows instead of one",
                                  rows=len(rows))
            try:
                return observation_from_row(rows[0], started, sent, received, self._geometry)
            except Exception as e:
                # an invalid value (ValueError names the field) or a row
                # that is not one at all: a failed check, as a failed query
                self._close_conn()
                raise CheckFailed("validate_result", str(e) if isinstance(e, ValueError)
                                  else f"{type(e).__name__}: {e}") from None

    async def _run(self, query: str) -> Any:
        try:
            return await self._wait(self._conn.runQuery(query))
        except Exception as e:
            raise self._query_failed(e) from None

    def _query_failed(self, e: BaseException) -> CheckFailed:
        """
        Close the connection after a failed query and describe the failure:
        an error the server sent is ``validate_result``, a lost or broken
        connection ``consume_input``.
        """
        self._close_conn()
        answered = isinstance(e, libpq.Error) and e.pgcode is not None
        return CheckFailed("validate_result" if answered else "consume_input",
                           describe_error(e, self._config))


def _fail_if_waiting(d: Deferred[Any]) -> None:
    """
    Fail ``d`` as aborted unless it has fired.
    """
    if not d.called:
        d.errback(ConnectionDone("aborted"))


def _used_tls_or_password(conn: Any) -> bool:
    """
    Whether an established connection's setup negotiated TLS or
    authenticated with a password (then the next setup waits
    :data:`~pgstatus.monitor.turns.AUTH_PAUSE`).
    """
    try:
        info = conn.info
        return bool(info.ssl_in_use or info.used_password)
    except Exception:  # pragma: no cover - a handle closed meanwhile: assume it did
        return True


def _credentials(config: Config) -> tuple[str, str, str]:
    return config.pg_user, config.pg_password, config.pg_database
