"""
Listening, for the HTTP API and the HAProxy agent: a service that listens
through a Twisted endpoint (:mod:`twisted.internet.endpoints`), logs the
original service's lines, and ends the process when it cannot listen.  A
module of its own so that neither side imports the other for it.

The default listener is a TCP address and port (``*`` means ``::``, falling
back to ``0.0.0.0`` where IPv6 is unavailable).  For the HTTP API it is a
socket made here with ``TCP_DEFER_ACCEPT`` (a connection is accepted once
its first bytes arrived, so the first read finds the request) and handed to
the reactor through :class:`~twisted.internet.endpoints.AdoptedStreamServerEndpoint`;
``pg_status__http_listen`` takes any endpoint description instead
(``tcp6:...``, ``unix:...``, ``ssl:...``, ``haproxy:...``), made as
:func:`description_endpoint` says: a larger listen backlog than Twisted's,
and our own PROXY header reader for ``haproxy:``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import Any

from twisted.application.service import Service
from twisted.internet.address import UNIXAddress
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.endpoints import (
    AdoptedStreamServerEndpoint,
    TCP4ServerEndpoint,
    TCP6ServerEndpoint,
    serverFromString,
)
from twisted.internet.interfaces import IListeningPort, IStreamServerEndpoint
from twisted.logger import Logger
from twisted.python.failure import Failure


#: ``(label, make)``: a way to listen, tried in order; ``make()`` may raise
Candidate = tuple[str, Callable[[], IStreamServerEndpoint]]


class CannotListen(SystemExit, Exception):
    """
    Ends the process with status 1 when a listener cannot bind.  A
    ``SystemExit``, so that the foreground process exits quietly after its
    critical log line; an ``Exception`` too, so that a daemonizing twistd
    (``twistd pgstatus``, ``pg-status --daemon``), which binds after it has
    forked, passes it to the waiting parent through its status pipe: the
    parent then exits 1 with the message instead of waiting for ever.
    """

    def __init__(self, message: str) -> None:
        super().__init__(1)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _hosts(address: str) -> list[str]:
    return ["::", "0.0.0.0"] if address == "*" else [address.strip("[]")]


def tcp_candidates(reactor: Any, address: str, port: int) -> list[Candidate]:
    """
    Plain TCP endpoints for ``address`` and ``port``.
    """
    out: list[Candidate] = []
    for host in _hosts(address):
        kind = TCP6ServerEndpoint if ":" in host else TCP4ServerEndpoint

        def make(kind: Any = kind, host: str = host) -> IStreamServerEndpoint:
            endpoint: IStreamServerEndpoint = kind(reactor, port, interface=host)
            return endpoint

        out.append((host, make))
    return out


def deferred_accept_candidates(reactor: Any, address: str, port: int,
                               defer_seconds: int) -> list[Candidate]:
    """
    TCP listening sockets made here with ``TCP_DEFER_ACCEPT`` (where the
    system has it) and adopted by the reactor.
    """
    out: list[Candidate] = []
    for host in _hosts(address):
        def make(host: str = host) -> IStreamServerEndpoint:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and host == "::":
                    # '*' also accepts IPv4 where the system allows it
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                defer_accept = getattr(socket, "TCP_DEFER_ACCEPT", None)
                if defer_accept is not None and defer_seconds > 0:
                    sock.setsockopt(socket.IPPROTO_TCP, defer_accept, defer_seconds)
                sock.bind((host, port))
                sock.listen(socket.SOMAXCONN)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
            # the endpoint adopts the descriptor and closes it once listening
            endpoint: IStreamServerEndpoint = AdoptedStreamServerEndpoint(
                reactor, sock.detach(), family)
            return endpoint

        out.append((host, make))
    return out


def description_candidates(reactor: Any, description: str) -> list[Candidate]:
    """
    An endpoint description (``tcp6:8000:interface=\\:\\:``,
    ``unix:/run/pg-status/http.sock:mode=660``, ``ssl:8443:...``,
    ``haproxy:tcp:8000``), made by :func:`description_endpoint`.
    """
    return [(description, lambda: description_endpoint(reactor, description))]


def description_endpoint(reactor: Any, description: str) -> IStreamServerEndpoint:
    """
    The endpoint an endpoint description names, as Twisted's
    ``serverFromString`` makes it, with two differences:

    - ``haproxy:<description>`` reads the PROXY header with our own strict
      wrapper (:class:`~pgstatus.proxyheader.ProxyHeaderEndpoint`) around
      the endpoint ``<description>`` names, not with Twisted's;
    - a ``tcp:``, ``tcp6:``, ``unix:`` or ``ssl:`` endpoint (also inside
      ``haproxy:``) listens with a backlog of ``socket.SOMAXCONN`` (as the
      default listener does) unless the description sets one: Twisted's
      default of 50 refused connections as soon as 50 waited for a busy
      server.

    :raise Exception: as ``serverFromString`` does, for a description it
        cannot parse.
    """
    kind, rest = _endpoint_type(description)
    if kind.lower() == "haproxy":
        inner: IStreamServerEndpoint = serverFromString(reactor, with_backlog(rest))
        # loaded only for a haproxy: listener (a feature that is off never
        # loads its module)
        from pgstatus.proxyheader import ProxyHeaderEndpoint

        return ProxyHeaderEndpoint(inner)
    endpoint: IStreamServerEndpoint = serverFromString(reactor, with_backlog(description))
    return endpoint


#: the endpoint types given the larger backlog, and the position of their
#: ``backlog`` argument among the description's positional arguments
_BACKLOG_POSITION = {"tcp": 3, "tcp6": 2, "unix": 3, "ssl": 6}


def with_backlog(description: str, backlog: int = socket.SOMAXCONN) -> str:
    """
    ``description`` with ``:backlog=<backlog>`` added if it names a
    ``tcp:``, ``tcp6:``, ``unix:`` or ``ssl:`` endpoint and does not set
    the backlog itself (as ``backlog=`` or as the positional argument in
    its place); any other description is returned unchanged.
    """
    parts = _split(description)
    position = _BACKLOG_POSITION.get(_unescape(parts[0]).lower())
    trailing = len(description) - len(description.rstrip("\\"))
    if position is None or trailing % 2:
        # a final lone backslash would escape the colon added: left for
        # serverFromString to refuse
        return description
    keys = [_key(part) for part in parts[1:]]
    if "backlog" in keys or keys.count(None) >= position:
        return description
    return f"{description}:backlog={backlog}"


def _split(description: str) -> list[str]:
    """
    The description's parts between colons, as written (a backslash
    escapes the next character, a colon too, as Twisted reads them).
    """
    parts, current, escaped = [], "", False
    for c in description:
        if escaped:
            current, escaped = current + c, False
        elif c == "\\":
            current, escaped = current + c, True
        elif c == ":":
            parts.append(current)
            current = ""
        else:
            current += c
    parts.append(current)
    return parts


def _key(part: str) -> str | None:
    """
    The keyword of a ``key=value`` part (before its first unescaped
    ``=``, unescaped), or ``None`` for a positional one.
    """
    key, escaped = "", False
    for c in part:
        if escaped:
            key, escaped = key + c, False
        elif c == "\\":
            escaped = True
        elif c == "=":
            return key
        else:
            key += c
    return None


def _endpoint_type(description: str) -> tuple[str, str]:
    """
    The endpoint type (the first part, unescaped) and the rest of the
    description after its colon, as written.
    """
    first = _split(description)[0]
    return _unescape(first), description[len(first) + 1:]


def _unescape(part: str) -> str:
    """
    ``part`` without its escaping backslashes.
    """
    out, escaped = "", False
    for c in part:
        if escaped or c != "\\":
            out, escaped = out + c, False
        else:
            escaped = True
    return out


def shown_address(host: object, label: str) -> tuple[str, object]:
    """
    The ``address`` and ``port`` a start line names for a listening port's
    address: host and port number for TCP (as the original service logs
    them); for a UNIX socket its path as text (``@name`` for the abstract
    namespace) and ``port=unix``; else the
    candidate's label and ``-``.
    """
    if isinstance(host, UNIXAddress):
        name: object = host.name
        if isinstance(name, bytes):
            name = name.decode("utf-8", "backslashreplace")
        text = str(name)
        # an abstract-namespace socket's name starts with NUL: shown as "@"
        return ("@" + text[1:] if text.startswith("\0") else text), "unix"
    address = getattr(host, "host", None)
    port = getattr(host, "port", None)
    if address is None or port is None:
        return label, "-"
    return str(address), port


class ListenerService(Service):
    """
    Listens on the first candidate that works, in ``privilegedStartService``
    (before privileges are dropped); a failure to listen logs a critical
    line and exits.

    :param candidates: the ways to listen, in order.
    :param factory: the protocol factory.
    :param log: the component's logger.
    :param what: the log lines' subject, e.g. ``server`` or ``agent``.
    :param shown_as: the ``address`` and ``port`` the failure line names.
    :ivar port: the listening port once started.
    :ivar started: fires with the port once listening.
    """

    def __init__(self, candidates: Sequence[Candidate], factory: Any, log: Logger, what: str,
                 shown_as: tuple[str, object]) -> None:
        self._candidates = list(candidates)
        self._factory = factory
        self._log = log
        self._what = what
        self._shown_as = shown_as
        self.port: IListeningPort | None = None
        self.started: Deferred[IListeningPort] = Deferred()

    def privilegedStartService(self) -> None:
        """
        Bind before privileges are dropped.
        """
        super().privilegedStartService()
        self._listen()

    def startService(self) -> None:
        """
        Bind (if not yet bound).
        """
        super().startService()
        if self.port is None:
            self._listen()

    def _listen(self) -> None:
        last: object = None
        for label, make in self._candidates:
            outcome: list[IListeningPort | Failure] = []
            try:
                maybeDeferred(make().listen, self._factory).addBoth(outcome.append)
            except Exception as e:
                last = e
                continue
            if not outcome:
                last = "the endpoint did not listen at once"
                continue
            got = outcome[0]
            if isinstance(got, Failure):
                last = got.value
                continue
            self.port = got
            address, port = shown_address(got.getHost(), label)
            self._log.info(f"{self._what} started address={{address}} port={{port}}",
                           address=address, port=port)
            self.started.callback(got)
            return
        address, port = self._shown_as
        self._log.critical(
            f"{self._what} cannot listen address={{address}} port={{port}} error={{error}}",
            address=address, port=port, error=str(last))
        raise CannotListen(f"{self._what} cannot listen on {address} port {port}")

    def stopService(self) -> Deferred[None] | None:
        """
        Stop listening.
        """
        super().stopService()
        port, self.port = self.port, None
        if port is None:
            return None
        self._log.info(f"{self._what} stopped")
        stopped = port.stopListening()
        return stopped if isinstance(stopped, Deferred) else None
