"""
The monitor as a service: the :class:`Registry` and one
:class:`~pgstatus.monitor.scheduler.HostMonitor` per configured host, started
and stopped together, adapted to a reload, and counted for ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from twisted.application.service import Service
from twisted.logger import Logger

from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config
from pgstatus.model.stats import HostCounters
from pgstatus.model.status import HostStatus, View
from pgstatus.monitor.changes import describe_changes
from pgstatus.monitor.probe import PostgresProbe
from pgstatus.monitor.registry import HostState, Registry
from pgstatus.monitor.scheduler import HostMonitor, Probe
from pgstatus.monitor.turns import ConnectTurns, StartPacer

log = Logger(namespace="pgstatus.monitor")


class MonitorService(Service):
    """
    Owns the :class:`Registry` and one :class:`HostMonitor` per configured
    host.

    :param settings: the running configuration.
    :param reactor: the reactor (TCP, timers, name resolution).
    :param probe_factory: ``(host_index) -> Probe``; defaults to real
        PostgreSQL probes.
    :param poll: start polling when the service starts; a follower starts
        without, and turns polling on and off (:meth:`start_polling`,
        :meth:`stop_polling`) as its hubs come and go.
    """

    name = "monitor"

    def __init__(self, settings: ConfigProvider, reactor: Any,
                 probe_factory: Callable[[int], Probe] | None = None,
                 poll: bool = True) -> None:
        self._settings = settings
        self._reactor = reactor
        self._poll_on_start = poll
        #: the host monitors are checking
        self.polling = False
        self.registry = Registry(settings)
        config = settings.current
        self.turns = ConnectTurns.for_hosts(reactor, config.sleep_ms, len(config.hosts))
        #: spreads the starts of checks due together over reactor turns
        self.pacer = StartPacer(reactor)
        if probe_factory is None:
            def probe_factory(i: int) -> Probe:
                state = self.registry.states[i]
                return PostgresProbe(reactor, state.host, settings, self.turns,
                                     urgent=lambda: not self.registry.is_dead(state))
        self._probe_factory = probe_factory
        self.monitors = [
            HostMonitor(state, self.registry, probe_factory(i), reactor, settings,
                        self._master_monitor, self.pacer)
            for i, state in enumerate(self.registry.states)
        ]
        self.registry.observe(lambda old, new: _log_changes(old, new, settings.current))

    def settings_changed(self, old: Config,
                         mirrored: tuple[Sequence[HostStatus], int | None] | None = None
                         ) -> tuple[list[str], list[str]]:
        """
        React to a reload (the provider already holds the new
        configuration) and publish a new view (of ``mirrored``, a follower's
        hub view, when given; see :meth:`Registry.reconfigure`).

        A host that stays (same name and port) keeps its monitor, state,
        schedule and connection; an added host gets a new monitor, which
        starts checking at once if the service runs; a removed host's
        monitor stops and closes its connection.

        :return: the names of the added and of the removed hosts.
        """
        config = self._settings.current
        kept: dict[tuple[str, int], list[HostMonitor]] = {}
        for m in self.monitors:
            kept.setdefault((m.state.host.name, m.state.host.port), []).append(m)
        chosen: list[HostMonitor | None] = []
        states: list[HostState] = []
        for host in config.hosts:
            same = kept.get((host.name, host.port))
            if same:
                m = same.pop(0)
                chosen.append(m)
                states.append(m.state)
            else:
                chosen.append(None)
                states.append(self.registry.new_state(host))
        removed = [m for ms in kept.values() for m in ms]
        for m in removed:
            m.stop()
        self.turns.respace(config.sleep_ms, len(config.hosts))
        # The kept monitors reschedule against the view before the reload,
        # then the registry adopts the host list (the default probe factory
        # looks the added hosts' states up there), before anything else runs.
        for staying in chosen:
            if staying is not None:
                staying.settings_changed(old)
        self.registry.reconfigure(states, mirrored)
        added: list[HostMonitor] = []
        monitors: list[HostMonitor] = []
        for i, kept_monitor in enumerate(chosen):
            if kept_monitor is None:
                new = HostMonitor(states[i], self.registry, self._probe_factory(i),
                                  self._reactor, self._settings, self._master_monitor,
                                  self.pacer)
                added.append(new)
                monitors.append(new)
            else:
                monitors.append(kept_monitor)
        self.monitors = monitors
        if self.running and self.polling:
            for m in added:
                m.start()
        return [m.name for m in added], [m.name for m in removed]

    def host_counters(self) -> list[HostCounters]:
        """
        Every host's counters, in host order (for ``/metrics``).
        """
        registry = self.registry
        return [HostCounters(registry.failures(m.state), m.checks, m.extra_checks,
                             getattr(m.probe, "opened", 0), m.durations, m.last_completed)
                for m in self.monitors]

    def check_soon(self, index: int) -> bool:
        """
        An extra check of host ``index``, under the per-host cap (see
        :meth:`HostMonitor.check_soon`).
        """
        return self.monitors[index].check_soon()

    def _master_monitor(self) -> HostMonitor | None:
        m = self.registry.view.master
        return None if m is None else self.monitors[m.index]

    @property
    def view(self) -> View:
        """
        The current published view.
        """
        return self.registry.view

    def startService(self) -> None:
        """
        Start every host's schedule.
        """
        super().startService()
        if self._poll_on_start:
            self.start_polling()

    def start_polling(self, delay: float = 0.0) -> None:
        """
        Start every host's schedule (if not already polling), the first
        checks after ``delay`` seconds.
        """
        if self.polling:
            return
        self.polling = True
        log.info("started hosts={hosts}", hosts=len(self.monitors))
        for m in self.monitors:
            m.start(delay)

    def stop_polling(self) -> None:
        """
        Stop every schedule and close every connection (if polling).
        """
        if not self.polling:
            return
        self.polling = False
        for m in self.monitors:
            m.stop()
        self.pacer.stop()
        log.info("stopped")

    def stopService(self) -> None:
        """
        Stop every schedule and close every connection.
        """
        super().stopService()
        self.stop_polling()


def _log_changes(old: View, new: View, config: Config) -> None:
    for level, fmt, fields in describe_changes(old, new, config):
        log.emit(level, fmt, **fields)
