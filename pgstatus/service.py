"""
The whole pg-status service: the monitor, the HTTP listener and, when
configured, the HAProxy agent listener and follower mode, built from
collaborators handed to the constructor (the reactor, a probe factory, a
listening function, a reloader), so that a test can build all of it with a
memory reactor and fake probes.  :mod:`pgstatus.tap` builds the real one
and adds what belongs to the process rather than to the service: the log
observer, the signals (:mod:`pgstatus.signals`), the collector's freeze once
started.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from pgstatus import __version__
from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config, ConfigError
from pgstatus.fdlimit import ConnectionCaps
from pgstatus.http.answer import Response
from pgstatus.http.app import StatusApp
from pgstatus.http.cache import AnswerCache
from pgstatus.http.freshness import FreshReads
from pgstatus.http.hub import Hub
from pgstatus.http.responses import Renderer
from pgstatus.http.server import FrontFactory, QuietSite
from pgstatus.listening import (
    Candidate,
    ListenerService,
    deferred_accept_candidates,
    description_candidates,
)
from pgstatus.logging.observers import LevelFilter
from pgstatus.memory import HeapTrimmer
from pgstatus.model.stats import FollowStats, HostCounters
from pgstatus.model.status import View
from pgstatus.monitor.scheduler import Probe
from pgstatus.monitor.service import MonitorService

# Imported where used, so a service that does not use them does not load
# them: pgstatus.agent (pg_status__agent_port), pgstatus.config.reload
# (pg_status__env_file), pgstatus.monitor.follower (pg_status__follow),
# pgstatus.monitor.patroni_store (pg_status__patroni_etcd),
# pgstatus.http.metrics (the first /metrics).

log = Logger(namespace="pgstatus.main")
http_log = Logger(namespace="pgstatus.http")
config_log = Logger(namespace="pgstatus.config")



class Reloader(Protocol):
    """
    Where a reload reads its configuration (see
    :class:`pgstatus.config.reload.EnvFileReloader`).
    """

    #: what is read, for the reload's log line
    source: str

    def load(self) -> Config:
        """
        The configuration to put in force; raises ConfigError.
        """


class _Stats:
    """
    The :class:`~pgstatus.model.stats.StatsSource` ``/metrics`` reads: the
    monitor's counters and, on a follower, the follower's state.
    """

    def __init__(self, monitor: MonitorService, follower: Any) -> None:
        self._monitor = monitor
        self._follower = follower

    def host_counters(self) -> Sequence[HostCounters]:
        return self._monitor.host_counters()

    def follow_stats(self) -> FollowStats:
        if self._follower is None:
            return FollowStats("hub")
        stats: FollowStats = self._follower.follow_stats()
        return stats


class PgStatusService(MultiService):
    """
    The whole service.

    :param settings: the running configuration; a reload swaps it.
    :param reactor: time, TCP, threads.
    :param probe_factory: ``(host_index) -> Probe``; real PostgreSQL probes
        by default.
    :param http_listen: where the HTTP API listens (by default, as the
        configuration says: ``pg_status__http_listen``, else
        ``http_listen_address`` and ``http_port``).
    :param reloader: gives the configuration a reload applies (what SIGHUP
        asks for, with ``pg_status__env_file``); ``None``: no reloads.
    :ivar log_observer: the log observer whose level and format a reload
        changes, or ``None`` (set by whoever installed it).
    :ivar monitor: the :class:`MonitorService`.
    :ivar http: the HTTP :class:`ListenerService`.
    :ivar agent: the HAProxy agent listener, or ``None``.
    :ivar api: the :class:`StatusAPI`.
    """

    def __init__(self, settings: ConfigProvider, reactor: Any, *,
                 probe_factory: Callable[[int], Probe] | None = None,
                 http_listen: Sequence[Candidate] | None = None,
                 reloader: Reloader | None = None) -> None:
        super().__init__()
        config = settings.current
        self.settings = settings
        self._reactor = reactor
        self._reloader = reloader
        self.log_observer: LevelFilter | None = None
        self.monitor = MonitorService(settings, reactor, probe_factory, poll=not config.follow)
        self.monitor.setServiceParent(self)
        #: follower mode: the hubs' follower (``pg_status__follow``), else ``None``
        self.follower: Any = None
        if config.follow:
            from pgstatus.monitor.follower import FollowerService

            self.follower = FollowerService(settings, reactor, self.monitor)
            self.follower.setServiceParent(self)
            check_soon = self.follower.check_soon
        else:
            def check_soon(i: int) -> None:
                self.monitor.check_soon(i)
        registry = self.monitor.registry
        #: Patroni's leader key watched in etcd (``pg_status__patroni_etcd``), else ``None``
        self.patroni: Any = None
        if config.patroni_etcd:
            from pgstatus.model.status import Leader
            from pgstatus.monitor.patroni_store import PatroniStore

            registry.set_leader(Leader(unreadable=config.patroni_unreadable))
            self.patroni = PatroniStore(config, reactor, registry.set_leader)
            self.patroni.setServiceParent(self)
        self.fresh = FreshReads(reactor, check_soon)
        registry.observe(self.fresh.published)
        #: the streams of our followers (``GET /follow``): made at the first
        #: follower's request; always ``None`` on a follower
        self.hub: Hub | None = None
        renderer = Renderer(self.current_view, settings, __version__, self.fresh)
        self._metrics: Callable[[], Response] | None = None
        self.api = StatusApp(
            renderer, metrics=self._render_metrics,
            hub=None if config.follow else self._the_hub, check_soon=check_soon,
            followers=lambda: 0 if self.hub is None else self.hub.followers, clock=reactor)
        idle = config.http_idle_timeout_ms / 1000
        header = config.http_header_timeout_ms / 1000
        #: the HTTP and agent connection caps under the open-files limit
        self.caps = ConnectionCaps.for_config(config)
        self.site = FrontFactory(
            QuietSite(self.api.resource(), reactor, idle),
            AnswerCache(renderer.answer, renderer.count, reactor), reactor,
            max_connections=self.caps.http,
            idle_timeout=idle, header_timeout=header,
        )
        # answer bytes are memoised per view: drop them with it
        registry.observe(lambda old, new: self.site.view_changed())
        if http_listen is None:
            if config.http_listen:
                http_listen = description_candidates(reactor, config.http_listen)
            else:
                http_listen = deferred_accept_candidates(
                    reactor, config.http_listen_address, config.http_port,
                    max(1, int(header)))
        shown = (config.http_listen or config.http_listen_address,
                 "-" if config.http_listen else config.http_port)
        self.http = ListenerService(http_listen, self.site, http_log, "server", shown)
        self.http.setName("http")
        self.http.setServiceParent(self)
        #: gives memory freed into glibc's heap back to the system once a minute
        self.trimmer = HeapTrimmer(reactor)
        self.trimmer.setServiceParent(self)
        #: the HAProxy agent-check listener, only with pg_status__agent_port
        self.agent: Any = None
        if config.agent_port:
            from pgstatus.agent import AgentService

            self.agent = AgentService(reactor, config.http_listen_address, config.agent_port,
                                      self.current_view, max_connections=self.caps.agent)
            self.agent.setServiceParent(self)

    @property
    def reload_source(self) -> str | None:
        """
        What a reload reads (the environment file), or ``None``.
        """
        return None if self._reloader is None else self._reloader.source

    def current_view(self) -> View:
        """
        The published view.
        """
        return self.monitor.registry.view

    def _the_hub(self) -> Hub:
        """
        The followers' streams, made at the first ``/follow`` request.
        """
        if self.hub is None:
            self.hub = Hub(self._reactor, self.current_view,
                           lambda: self.settings.current.hosts)
            self.monitor.registry.observe(self.hub.published)
        return self.hub

    def _render_metrics(self) -> Response:
        """
        ``/metrics``, its renderer loaded at the first request.
        """
        if self._metrics is None:
            from pgstatus.http.metrics import MetricsRenderer

            self._metrics = MetricsRenderer(self.current_view,
                                            _Stats(self.monitor, self.follower),
                                            self.api.renderer, lambda: self.hub,
                                            self.settings)
        return self._metrics()

    def startService(self) -> None:
        """
        Log the effective configuration and start.
        """
        config = self.settings.current
        settings = " ".join(f"{k}={v}" for k, v in config.public_items())
        log.info("starting pg-status version={version} {settings}",
                 version=__version__, settings=settings)
        self.caps.log_start()
        for w in config.warnings:
            config_log.warn("{warning}", warning=w)
        super().startService()

    def drain(self) -> None:
        """
        A delayed stop has begun (``pg_status__shutdown_delay_ms``): from now
        on ``/ready`` answers 503, so that load balancers and readiness
        probes send new clients elsewhere, while every other endpoint
        answers as before until the stop.
        """
        self.api.renderer.draining = True

    def stopService(self) -> Deferred[None] | None:
        """
        Stop everything.
        """
        log.info("shutting down")
        if self.hub is not None:
            self.hub.close()
        return super().stopService()

    def reload(self) -> bool:
        """
        Apply the configuration the reloader gives (what SIGHUP schedules
        on the reactor thread).

        An invalid configuration is logged and changes nothing.  Settings
        that need a restart keep their running values, with a warning.
        Everything else takes effect at once: the provider is swapped once,
        then the parts that hold timers or connections react (the monitors'
        periods, deadlines, credentials and host list, see
        :meth:`MonitorService.settings_changed`; follower mode), a new view
        is published, and the log level and format change last.

        :return: whether a new configuration was applied.
        """
        if self._reloader is None:
            return False
        from pgstatus.config.reload import plan_reload

        try:
            new = self._reloader.load()
        except ConfigError as e:
            log.error("configuration reload failed, keeping the running configuration: "
                      "{error}", error=str(e))
            return False
        old = self.settings.current
        plan = plan_reload(old, new)
        for item in plan.needs_restart:
            log.warn("configuration reload: {setting} needs a restart; keeping the running "
                     "value", setting=item)
        config = plan.config
        for w in config.warnings:
            if w not in old.warnings:
                config_log.warn("{warning}", warning=w)
        mirrored = self.follower.mirrored_for(config) if self.follower is not None else None
        self.settings.swap(config)
        added, removed = self.monitor.settings_changed(old, mirrored)
        if self.follower is not None:
            self.follower.settings_changed(mirrored is not None)
        log.info("configuration reloaded file={file} changed={changed} added_hosts={added} "
                 "removed_hosts={removed}",
                 file=self._reloader.source, changed=" ".join(plan.changed) or "none",
                 added=",".join(added) or "none", removed=",".join(removed) or "none")
        # last, so the line above is written whatever the new level
        if self.log_observer is not None:
            self.log_observer.reconfigure(config.log_level, config.log_format)
        return True
