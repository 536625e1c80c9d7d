"""
Wiring for ``twistd pgstatus``: configuration, logging, the monitor and the
HTTP listener.  The only module that picks the global reactor, and only
when it is called without one.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Mapping
from functools import partial
from types import FrameType
from typing import Any

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.internet.error import ReactorNotRunning
from twisted.logger import Logger
from twisted.python import usage

from pgstatus import __version__
from pgstatus.collector import settle
from pgstatus.config.environ import load_config
from pgstatus.config.files import (
    ENV_FILE,
    env_file_path,
    process_environ,
    read_env_file,
    with_env_file,
)
from pgstatus.config.settings import Config, ConfigError
from pgstatus.http.api import StatusAPI
from pgstatus.http.fastpath import FastSite
from pgstatus.http.freshness import FreshReads
from pgstatus.http.listener import ListenerService
from pgstatus.http.transport import Connection as HttpConnection
from pgstatus.http.transport import Port as HttpPort
from pgstatus.http.transport import listen_tcp
from pgstatus.logging.observers import LevelFilter
from pgstatus.logging.twistd import factory_observer, install_observer
from pgstatus.memory import HeapTrimmer
from pgstatus.monitor.scheduler import MIN_EXTRA_INTERVAL, MonitorService

# Imported where used, so a daemon that does not use them does not load
# them: pgstatus.agent (pg_status__agent_port), pgstatus.config.reload
# (pg_status__env_file), and, through FastSite, twisted.web.server and Klein.

log = Logger(namespace="pgstatus.main")
http_log = Logger(namespace="pgstatus.http")
config_log = Logger(namespace="pgstatus.config")


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


#: The signals that stop pg-status; the exit status is 0 after either.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def install_stop_signals(reactor: Any) -> Callable[[], None] | None:
    """
    Make SIGTERM and SIGINT log ``received signal=SIGTERM`` (or ``SIGINT``)
    and stop the reactor, on the reactor thread.

    These replace Twisted's own handlers, which also stop the reactor but
    make twistd kill itself with the signal afterwards (exit status 143 or
    130); the original service exits with status 0 after a clean shutdown,
    and so does pg-status.  A signal that is ignored (``SIG_IGN``, e.g.
    SIGINT in a background job) stays ignored.  Only the main thread may set
    signal handlers; elsewhere nothing is installed.

    :return: a function that puts the previous handlers back (where ours
        are still installed), or ``None`` if nothing was installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int) -> None:
        log.info("received signal={signal}", signal=signal.Signals(signum).name)
        try:
            reactor.stop()
        except ReactorNotRunning:  # a second signal while shutting down
            pass

    def handler(signum: int, frame: FrameType | None) -> None:
        reactor.callFromThread(stop, signum)

    previous: dict[int, Any] = {}
    for sig in STOP_SIGNALS:
        before = signal.getsignal(sig)
        if before == signal.SIG_IGN:
            continue
        previous[sig] = before
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, before in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, before if before is not None else signal.SIG_DFL)

    return restore


class HttpService(ListenerService):
    """
    The HTTP listener (see :class:`ListenerService` for ``address``).
    """

    name = "http"

    def __init__(self, reactor: Any, address: str, port: int, site: Any) -> None:
        super().__init__(reactor, address, port, site, http_log, "server",
                         listen=partial(listen_tcp, reactor))


class PgStatusService(MultiService):
    """
    The whole service: monitor plus HTTP listener (and the HAProxy agent
    listener when configured).

    :ivar monitor: the :class:`MonitorService`.
    :ivar http: the :class:`HttpService`.
    :ivar agent: the :class:`~pgstatus.agent.AgentService`, or ``None``.
    :ivar api: the :class:`StatusAPI`.
    :ivar env_file: the file re-read on SIGHUP (``pg_status__env_file``),
        or ``None``.

    :param environ: the process environment the configuration came from
        (:func:`process_environ` by default); a reload applies the
        environment file over it again.
    """

    def __init__(self, config: Config, reactor: Any,
                 server_options: Any = None,
                 environ: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.config = config
        self._reactor = reactor
        self._server_options = server_options
        self._environ = environ if environ is not None else process_environ()
        self.env_file = env_file_path(self._environ)
        #: our log observer, when we installed it under twistd
        self.log_observer: Any = None
        self._restore_sighup: Callable[[], None] | None = None
        self.monitor = MonitorService(config, reactor, poll=not config.follow)
        self.monitor.setServiceParent(self)
        #: follower mode: the hubs' follower (``pg_status__follow``), else ``None``
        self.follower: Any = None
        #: the streams of our followers (``GET /follow``): made at the first
        #: follower's request; always ``None`` on a follower
        self.hub: Any = None
        if config.follow:
            from pgstatus.monitor.follower import FollowerService

            self.follower = FollowerService(config, reactor, self.monitor)
            self.follower.setServiceParent(self)
            check_soon = self.follower.check_soon
        else:
            def check_soon(i: int) -> None:
                self.monitor.check_soon(i, MIN_EXTRA_INTERVAL)
        self.fresh = FreshReads(reactor, check_soon)
        self.monitor.registry.observe(self.fresh.published)
        self.api = StatusAPI(lambda: self.monitor.registry.view, config, __version__,
                             self.fresh)
        if not config.follow:
            self.api.hub_factory = self._make_hub
        self.api.check_soon = check_soon
        self.site = FastSite(
            self.api.resource, self.api.renderer, reactor,
            max_connections=config.http_max_connections,
            idle_timeout=config.http_idle_timeout_ms / 1000,
            header_timeout=config.http_header_timeout_ms / 1000,
        )
        self.api.metrics_source = self._render_metrics
        self._metrics: Any = None
        # response bytes are memoised per view: drop them with it
        self.monitor.registry.observe(lambda old, new: self.site.wire.reset())
        self.http = HttpService(reactor, config.http_listen_address, config.http_port, self.site)
        self.http.setServiceParent(self)
        #: gives memory freed into glibc's heap back to the system once a minute
        self.trimmer = HeapTrimmer(reactor)
        self.trimmer.setServiceParent(self)
        #: the HAProxy agent-check listener, only with pg_status__agent_port
        self.agent: Any = None
        if config.agent_port:
            from pgstatus.agent import AgentService

            self.agent = AgentService(reactor, config.http_listen_address, config.agent_port,
                                      lambda: self.monitor.registry.view)
            self.agent.setServiceParent(self)

    def _make_hub(self) -> Any:
        """
        The followers' streams, at the first ``/follow`` request (follower
        mode is opt-in: an instance nobody follows never loads it).
        """
        from pgstatus.http.hub import Hub

        self.hub = Hub(self._reactor, lambda: self.monitor.registry.view,
                       lambda: self.monitor.config.hosts)
        self.monitor.registry.observe(self.hub.published)
        return self.hub

    def _render_metrics(self) -> Any:
        """
        ``/metrics``, its renderer loaded at the first request.
        """
        if self._metrics is None:
            from pgstatus.http.metrics import MetricsRenderer

            self._metrics = MetricsRenderer(self)
        return self._metrics()

    def setServiceParent(self, parent: Any) -> None:
        """
        Under twistd, make the application log through our observer (twistd
        starts logging after the service joins the application).
        """
        self.log_observer = install_observer(parent, self._server_options,
                                             self.config.log_level, self.config.log_format)
        super().setServiceParent(parent)

    def startService(self) -> None:
        """
        Log the effective configuration and start.
        """
        settings = " ".join(f"{k}={v}" for k, v in self.config.public_items())
        log.info("starting pg-status version={version} {settings}",
                 version=__version__, settings=settings)
        for w in self.config.warnings:
            config_log.warn("{warning}", warning=w)
        super().startService()
        if self.env_file is not None:
            from pgstatus.config.reload import install_sighup

            self._restore_sighup = install_sighup(self._reactor, self.reload)
        if self._server_options is not None:
            # under twistd: after the reactor has installed its own handlers
            self._reactor.callWhenRunning(self._install_stop_signals)
            # the process's start-up is over: its objects stay for good
            settle()

    def _install_stop_signals(self) -> None:
        if self.running:
            install_stop_signals(self._reactor)

    def stopService(self) -> Deferred[None] | None:
        """
        Stop everything.
        """
        log.info("shutting down")
        if self.hub is not None:
            self.hub.close()
        restore, self._restore_sighup = self._restore_sighup, None
        if restore is not None:
            restore()
        # The stop handlers stay: a second SIGTERM while shutting down must
        # not bring back Twisted's (which would end with the signal).
        return super().stopService()

    def reload(self) -> bool:
        """
        Re-read ``pg_status__env_file`` over the process environment and
        apply the result (what SIGHUP schedules on the reactor thread).

        An invalid configuration is logged and changes nothing.  Settings
        that need a restart keep their running values, with a warning.
        Everything else takes effect at once: the renderer's thresholds,
        locality and wait, the log level and format, the monitors' periods,
        deadlines, credentials and host list (see
        :meth:`MonitorService.reconfigure`), and a new view is published.

        :return: whether a new configuration was applied.
        """
        if self.env_file is None:
            return False
        from pgstatus.config.reload import plan_reload

        try:
            values = read_env_file(self.env_file)
            values.pop(ENV_FILE, None)
            new = load_config({**self._environ, **values})
        except ConfigError as e:
            log.error("configuration reload failed, keeping the running configuration: "
                      "{error}", error=str(e))
            return False
        plan = plan_reload(self.config, new)
        for item in plan.needs_restart:
            log.warn("configuration reload: {setting} needs a restart; keeping the running "
                     "value", setting=item)
        config = plan.config
        for w in config.warnings:
            if w not in self.config.warnings:
                config_log.warn("{warning}", warning=w)
        self.api.renderer.reconfigure(config)
        mirrored = self.follower.mirrored_for(config) if self.follower is not None else None
        added, removed = self.monitor.reconfigure(config, mirrored)
        if self.follower is not None:
            self.follower.reconfigured(config, mirrored is not None)
        self.config = config
        log.info("configuration reloaded file={file} changed={changed} added_hosts={added} "
                 "removed_hosts={removed}",
                 file=self.env_file, changed=" ".join(plan.changed) or "none",
                 added=",".join(added) or "none", removed=",".join(removed) or "none")
        # last, so the line above is written whatever the new level
        observer = self.log_observer or factory_observer()
        if isinstance(observer, LevelFilter):
            observer.reconfigure(config.log_level, config.log_format)
        return True


def make_service(config: Config, reactor: Any = None,
                 server_options: Any = None,
                 environ: Mapping[str, str] | None = None) -> PgStatusService:
    """
    Build the service for ``config``.

    :param server_options: twistd's options, when run by twistd.
    :param environ: the process environment ``config`` came from.
    """
    if reactor is None:
        from pgstatus.reactor import install_default

        # the HTTP listener's events without Twisted's per-event log context
        install_default(bare=(HttpConnection, HttpPort))
        from twisted.internet import reactor as global_reactor

        reactor = global_reactor
    return PgStatusService(config, reactor, server_options, environ)


def makeService(options: Options, reactor: Any = None) -> PgStatusService:
    """
    The ``twistd`` entry point: read the environment, install the log
    observer, build the service.  A configuration error prints one line
    naming the variable and exits with status 2 before anything listens.
    """
    environ = process_environ()
    try:
        config = load_config(with_env_file(environ))
    except ConfigError as e:
        sys.stderr.write(f"pg-status: configuration error: {e}\n")
        sys.stderr.flush()
        raise SystemExit(2) from None
    return make_service(config, reactor, server_options=options.parent, environ=environ)
