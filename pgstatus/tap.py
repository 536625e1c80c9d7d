"""
Wiring for ``twistd pgstatus``: configuration, logging, the monitor and the
HTTP listener.  The only module that picks the global reactor, and only
when it is called without one.
"""

from __future__ import annotations

import sys
from typing import Any

from twisted.application.service import MultiService, Service
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger
from twisted.python import usage
from twisted.web.server import Site

from pgstatus import __version__
from pgstatus.agent import AgentService
from pgstatus.api import StatusAPI
from pgstatus.config import Config, ConfigError, load_config, process_environ
from pgstatus.fastpath import FastSite
from pgstatus.freshness import MIN_EXTRA_INTERVAL, FreshReads
from pgstatus.logging import install_observer
from pgstatus.metrics import MetricsRenderer
from pgstatus.monitor import MonitorService

log = Logger(namespace="pgstatus.main")
http_log = Logger(namespace="pgstatus.http")


class Options(usage.Options):
    """
    ``twistd pgstatus`` takes no options: pg-status is configured by its
    ``pg_status__*`` environment variables, as the original service is.
    """

    synopsis = "[options]"
    longdesc = (
        "Polls the PostgreSQL hosts named in pg_status__hosts and serves their "
        "roles and replica lag over HTTP. Configured by pg_status__* environment "
        "variables; see the README."
    )


class HttpService(Service):
    """
    Listens for HTTP on the configured address.  ``*`` listens on ``::``,
    which also accepts IPv4 where the system allows it, and falls back to
    ``0.0.0.0`` where IPv6 is unavailable.

    :ivar port: the listening port once started (``port.getHost().port``).
    """

    name = "http"

    def __init__(self, reactor: Any, address: str, port: int, site: Site) -> None:
        self._reactor = reactor
        self._address = address
        self._port_number = port
        self._site = site
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
        if address == "*":
            candidates = ["::", "0.0.0.0"]
        else:
            candidates = [address.strip("[]")]
        last: BaseException | None = None
        for host in candidates:
            try:
                self.port = self._reactor.listenTCP(self._port_number, self._site,
                                                    interface=host)
            except Exception as e:  # CannotListenError
                last = e
                continue
            real = self.port.getHost()
            http_log.info("server started address={address} port={port}",
                          address=host, port=real.port)
            self.started.callback(self.port)
            return
        log.critical("cannot listen address={address} port={port} error={error}",
                     address=address, port=self._port_number, error=str(last))
        raise SystemExit(1)

    def stopService(self) -> Deferred[None] | None:
        """
        Stop listening.
        """
        super().stopService()
        port, self.port = self.port, None
        if port is None:
            return None
        http_log.info("server stopped")
        return maybeDeferred(port.stopListening)


class PgStatusService(MultiService):
    """
    The whole service: monitor plus HTTP listener (and the HAProxy agent
    listener when configured).

    :ivar monitor: the :class:`MonitorService`.
    :ivar http: the :class:`HttpService`.
    :ivar agent: the :class:`~pgstatus.agent.AgentService`, or ``None``.
    :ivar api: the :class:`StatusAPI`.
    """

    def __init__(self, config: Config, reactor: Any,
                 server_options: Any = None) -> None:
        super().__init__()
        self.config = config
        self._server_options = server_options
        self.monitor = MonitorService(config, reactor)
        self.monitor.setServiceParent(self)
        self.fresh = FreshReads(
            reactor, lambda i: self.monitor.check_soon(i, MIN_EXTRA_INTERVAL))
        self.monitor.registry.observe(self.fresh.published)
        self.api = StatusAPI(lambda: self.monitor.registry.view, config, __version__,
                             self.fresh)
        self.site = FastSite(
            self.api.resource(), self.api.renderer, reactor,
            max_connections=config.http_max_connections,
            idle_timeout=config.http_idle_timeout_ms / 1000,
            header_timeout=config.http_header_timeout_ms / 1000,
        )
        self.api.metrics_source = MetricsRenderer(self)
        self.http = HttpService(reactor, config.http_listen_address, config.http_port, self.site)
        self.http.setServiceParent(self)
        #: the HAProxy agent-check listener, only with pg_status__agent_port
        self.agent: AgentService | None = None
        if config.agent_port:
            self.agent = AgentService(reactor, config.http_listen_address, config.agent_port,
                                      lambda: self.monitor.registry.view)
            self.agent.setServiceParent(self)

    def setServiceParent(self, parent: Any) -> None:
        """
        Under twistd, make the application log through our observer (twistd
        starts logging after the service joins the application).
        """
        install_observer(parent, self._server_options, self.config.log_level,
                         self.config.log_format)
        super().setServiceParent(parent)

    def startService(self) -> None:
        """
        Log the effective configuration and start.
        """
        settings = " ".join(f"{k}={v}" for k, v in self.config.public_items())
        log.info("starting pg-status version={version} {settings}",
                 version=__version__, settings=settings)
        for w in self.config.warnings:
            log.warn("{warning}", warning=w)
        super().startService()

    def stopService(self) -> Deferred[None] | None:
        """
        Stop everything.
        """
        log.info("shutting down")
        return super().stopService()


def make_service(config: Config, reactor: Any = None,
                 server_options: Any = None) -> PgStatusService:
    """
    Build the service for ``config``.

    :param server_options: twistd's options, when run by twistd.
    """
    if reactor is None:
        from twisted.internet import reactor as global_reactor

        reactor = global_reactor
    return PgStatusService(config, reactor, server_options)


def makeService(options: Options, reactor: Any = None) -> PgStatusService:
    """
    The ``twistd`` entry point: read the environment, install the log
    observer, build the service.  A configuration error prints one line
    naming the variable and exits with status 2 before anything listens.
    """
    try:
        config = load_config(process_environ())
    except ConfigError as e:
        sys.stderr.write(f"pg-status: configuration error: {e}\n")
        sys.stderr.flush()
        raise SystemExit(2) from None
    return make_service(config, reactor, server_options=options.parent)
