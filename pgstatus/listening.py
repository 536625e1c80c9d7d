"""
A TCP listener service shared by the HTTP API and the HAProxy agent (a
module of its own so that neither side imports the other for it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger


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


class ListenerService(Service):
    """
    Listens on ``address``: an IPv4 or IPv6 literal, or ``*`` for ``::``
    (which also accepts IPv4 where the system allows it), falling back to
    ``0.0.0.0`` where IPv6 is unavailable.  Binds in
    ``privilegedStartService``; a failure to listen logs a critical line and
    exits.

    :param log: the component's logger.
    :param what: the log lines' subject, e.g. ``server`` or ``agent``.
    :param listen: listens as ``reactor.listenTCP(port, factory,
        interface=...)`` does (the default).
    :ivar port: the listening port once started (``port.getHost().port``).
    :ivar started: fires with the port once listening.
    """

    def __init__(self, reactor: Any, address: str, port: int, factory: Any,
                 log: Logger, what: str, listen: Callable[..., Any] | None = None) -> None:
        self._reactor = reactor
        self._listen_tcp = listen if listen is not None else reactor.listenTCP
        self._address = address
        self._port_number = port
        self._factory = factory
        self._log = log
        self._what = what
        self.port: Any = None
        self.started: Deferred[Any] = Deferred()

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
        address = self._address
        candidates = ["::", "0.0.0.0"] if address == "*" else [address.strip("[]")]
        last: BaseException | None = None
        for host in candidates:
            try:
                self.port = self._listen_tcp(self._port_number, self._factory, interface=host)
            except Exception as e:  # CannotListenError
                last = e
                continue
            self._log.info(f"{self._what} started address={{address}} port={{port}}",
                           address=host, port=self.port.getHost().port)
            self.started.callback(self.port)
            return
        self._log.critical(
            f"{self._what} cannot listen address={{address}} port={{port}} error={{error}}",
            address=address, port=self._port_number, error=str(last))
        raise CannotListen(f"{self._what} cannot listen on {address} port {self._port_number}")

    def stopService(self) -> Deferred[None] | None:
        """
        Stop listening.
        """
        super().stopService()
        port, self.port = self.port, None
        if port is None:
            return None
        self._log.info(f"{self._what} stopped")
        return maybeDeferred(port.stopListening)
