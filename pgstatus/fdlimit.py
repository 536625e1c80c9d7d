"""
Open-file limits: the connection caps have to fit in the process's
descriptor table, or the PostgreSQL checks are the ones left without one.

Every HTTP connection holds a descriptor (two while twisted.web writes a
request body to a temporary file).  With the default
``pg_status__http_max_connections`` (10,000) over the usual soft limit of
1,024 open files, about a thousand idle HTTP clients used to exhaust the
table; the next PostgreSQL reconnect then failed with ``EMFILE``, the master
was declared dead and ``/master`` answered 404 while the primary was fine.

So, once per process start and before anything listens,
:func:`raise_nofile_limit` raises the soft ``RLIMIT_NOFILE`` to the hard
limit (which an unprivileged process may do), and :class:`ConnectionCaps`
lowers the HTTP and HAProxy agent connection caps to what fits in the soft
limit after a :func:`reserve` for everything else the process opens.  The
caps are computed once, at start: a reload that adds hosts spends the
safety margin; a restart recomputes them.
"""

from __future__ import annotations

import dataclasses
import resource
from typing import TYPE_CHECKING

from twisted.logger import Logger

if TYPE_CHECKING:
    from pgstatus.config.settings import Config

log = Logger(namespace="pgstatus.main")

#: stdin, stdout and stderr
STANDARD_STREAMS = 3
#: the reactor's epoll descriptor and waker pipe, and the descriptor Twisted
#: keeps open to recover from ``EMFILE`` on accept
REACTOR = 4
#: the log file or syslog socket, and its successor while it is reopened
LOG_OUTPUT = 2
#: host name lookups run in the reactor's thread pool (at most 10 threads),
#: each may hold a socket and a resolver file (``/etc/hosts``, ...)
LOOKUPS = 20
#: lazily imported modules, ``/proc`` reads, files libpq opens (``.pgpass``,
#: certificates), and whatever else was not counted
MARGIN = 32
#: per polled host (or followed hub): its connection, the TCP reachability
#: check that precedes a reconnect, the old connection still closing while
#: the new one opens, and one spare (an extra check for a fresh read runs on
#: the same connection)
PER_HOST = 4
#: Twisted accepts connections in batches (100 at first, growing by 20
#: while every batch fills up); a connection over the cap holds its
#: descriptor until its 503 is written, in the next reactor iteration: one
#: first-size batch of those fits in the reserve
ACCEPT_BATCH = 100
#: descriptors an HTTP connection may hold: its socket, and the temporary
#: file twisted.web writes a request body of unknown length (chunked) or of
#: 100,000 bytes or more into, open until the front's request deadline or
#: body limit ends it
PER_HTTP_CONNECTION = 2
#: the HTTP cap never goes below this, whatever the limit (a soft limit that
#: low is a misconfiguration, but the API must still answer)
MIN_HTTP = 16
#: the agent's cap never goes below this
MIN_AGENT = 16
#: the HAProxy agent may use at most 1/AGENT_SHARE of the descriptors the
#: reserve leaves (its checks are short connections, about one per server
#: and backend at a time; more are closed unanswered at once)
AGENT_SHARE = 8
#: :func:`raise_nofile_limit` raises the soft limit at most this far: more
#: than the largest cap configurable (1,000,000) times
#: :data:`PER_HTTP_CONNECTION` plus a reserve is never used, and a huge limit
#: slows down code that walks every possible descriptor
NOFILE_CEILING = 1 << 21


def _unlimited(nofile: int) -> bool:
    return nofile < 0 or nofile == resource.RLIM_INFINITY


def reserve(hosts: int, agent: bool) -> int:
    """
    Descriptors kept out of the HTTP cap for everything but the HTTP
    connections (the agent's own connections are :func:`agent_connection_cap`).

    ``STANDARD_STREAMS + REACTOR + LOG_OUTPUT + listeners + LOOKUPS + MARGIN
    + PER_HOST * hosts + ACCEPT_BATCH``, where the listeners are the HTTP one
    and, with ``agent``, the agent's: 62 + 4 per host + 100 (63 with the
    agent).  See the module's constants for what each term covers.

    :param hosts: PostgreSQL hosts polled, plus followed hubs.
    :param agent: the HAProxy agent listener is on.
    """
    listeners = 2 if agent else 1
    return (STANDARD_STREAMS + REACTOR + LOG_OUTPUT + listeners + LOOKUPS + MARGIN
            + PER_HOST * max(0, hosts) + ACCEPT_BATCH)


def agent_connection_cap(nofile: int, hosts: int) -> int:
    """
    The HAProxy agent's connection cap: its own
    :data:`~pgstatus.agent.MAX_CONNECTIONS`, or less when the soft limit is
    low: an :data:`AGENT_SHARE`-th of what the reserve leaves, but at least
    :data:`MIN_AGENT`.  (An agent connection over the cap is closed at once,
    so it needs no room in the reserve.)

    :param nofile: the soft open-files limit (negative or
        ``RLIM_INFINITY``: unlimited).
    :param hosts: PostgreSQL hosts polled, plus followed hubs.
    """
    # imported here: a service without the agent does not load its module
    from pgstatus.agent import MAX_CONNECTIONS

    if _unlimited(nofile):
        return MAX_CONNECTIONS
    share = (nofile - reserve(hosts, True)) // AGENT_SHARE
    return min(MAX_CONNECTIONS, max(MIN_AGENT, share))


def http_connection_cap(configured: int, nofile: int, hosts: int, agent: bool) -> int:
    """
    The effective HTTP connection cap::

        min(configured, max(MIN_HTTP, (nofile - reserve(hosts, agent) - agent_cap)
                                      // PER_HTTP_CONNECTION))

    where ``agent_cap`` is :func:`agent_connection_cap` with the agent on,
    else 0.  Below :data:`MIN_HTTP` it does not go (unless configured so),
    even if the limit is too low for the reserve.

    :param configured: ``pg_status__http_max_connections``.
    :param nofile: the soft open-files limit after raising it (negative or
        ``RLIM_INFINITY``: unlimited).
    :param hosts: PostgreSQL hosts polled, plus followed hubs.
    :param agent: the HAProxy agent listener is on.
    """
    if _unlimited(nofile):
        return configured
    room = nofile - reserve(hosts, agent)
    if agent:
        room -= agent_connection_cap(nofile, hosts)
    return min(configured, max(MIN_HTTP, room // PER_HTTP_CONNECTION))


def nofile_limits() -> tuple[int, int]:
    """
    The process's ``(soft, hard)`` open-files limits.
    """
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def raise_nofile_limit() -> int:
    """
    Raise the soft open-files limit to the hard one (at most to
    :data:`NOFILE_CEILING`; never lower it).  Called once per process
    start, before anything listens (:func:`pgstatus.tap.makeService`);
    where it is not allowed (e.g. systemd's ``@resources`` system-call
    filter, with ``LimitNOFILE`` already setting both limits) a warning
    says so and the limit stays.

    :return: the soft limit now.
    """
    soft, hard = nofile_limits()
    target = NOFILE_CEILING if _unlimited(hard) else min(hard, NOFILE_CEILING)
    if _unlimited(soft) or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as e:
        log.warn("cannot raise the open files limit nofile={soft} hard={hard} error={error}",
                 soft=soft, hard=_shown(hard), error=str(e))
        return soft
    return target


def _shown(nofile: int) -> str:
    return "unlimited" if _unlimited(nofile) else str(nofile)


@dataclasses.dataclass(frozen=True)
class ConnectionCaps:
    """
    The connection caps in force, computed at start.

    :ivar http: the HTTP cap (:func:`http_connection_cap`).
    :ivar agent: the HAProxy agent's cap (:func:`agent_connection_cap`),
        or ``None`` without the agent.
    :ivar configured: ``pg_status__http_max_connections``.
    :ivar nofile: the soft open-files limit they were computed from.
    :ivar reserve: :func:`reserve`.
    """

    http: int
    agent: int | None
    configured: int
    nofile: int
    reserve: int

    @classmethod
    def compute(cls, configured: int, nofile: int, hosts: int,
                agent: bool) -> ConnectionCaps:
        """
        The caps for these numbers (see :func:`http_connection_cap`).
        """
        return cls(http_connection_cap(configured, nofile, hosts, agent),
                   agent_connection_cap(nofile, hosts) if agent else None,
                   configured, nofile, reserve(hosts, agent))

    @classmethod
    def for_config(cls, config: Config) -> ConnectionCaps:
        """
        The caps for ``config`` under the process's soft limit now (raised
        by then, under twistd); each followed hub counts as a host.
        """
        return cls.compute(config.http_max_connections, nofile_limits()[0],
                           len(config.hosts) + len(config.follow), config.agent_port != 0)

    @property
    def capped(self) -> bool:
        """
        The HTTP cap is lower than configured.
        """
        return self.http < self.configured

    def log_start(self) -> None:
        """
        Log the caps in one INFO line (``main``): ``http connections
        max_connections=… nofile=… reserve=…``, or ``http connections capped
        max_connections=… configured=… nofile=… reserve=…`` when the
        configured cap was lowered; with the agent, ``agent_max_connections=…``
        last.
        """
        agent = "" if self.agent is None else f" agent_max_connections={self.agent}"
        if self.capped:
            log.info("http connections capped max_connections={max_connections} "
                     "configured={configured} nofile={nofile} reserve={reserve}{agent}",
                     max_connections=self.http, configured=self.configured,
                     nofile=_shown(self.nofile), reserve=self.reserve, agent=agent)
        else:
            log.info("http connections max_connections={max_connections} nofile={nofile} "
                     "reserve={reserve}{agent}",
                     max_connections=self.http, nofile=_shown(self.nofile),
                     reserve=self.reserve, agent=agent)
