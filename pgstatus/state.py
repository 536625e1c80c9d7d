"""
Host state: what the monitor knows about every configured host.

Each :class:`HostState` is owned by the monitor of its host and changed only
on the reactor thread.  The :class:`Registry` turns them into an immutable
:class:`View` whenever a check completes; HTTP handlers read only the current
``View`` and so never wait for, or see half of, a check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from twisted.logger import Logger, LogLevel

from pgstatus.config import Config, HostConfig
from pgstatus.lag import MasterPosition
from pgstatus.selection import select_master

log = Logger(namespace="pgstatus.monitor")


@dataclass(frozen=True, slots=True)
class HostStatus:
    """
    One host as of its last completed check; every field comes from the
    same check.

    ``lag_ms``, ``lag_bytes`` and ``lsn`` are ``None`` when unknown and for
    a dead host.  ``master`` is the role seen at the last successful check
    (``False`` for a dead host or one never reached).
    """

    index: int
    name: str
    dc: str | None
    geo: str | None
    checked: bool = False
    reached: bool = False
    alive: bool = False
    possible_dead: bool = False
    master: bool = False
    lag_ms: int | None = None
    lag_bytes: int | None = None
    lsn: int | None = None
    timeline: int | None = None
    sync_by_time: bool = False
    sync_by_bytes: bool = False

    @property
    def healthy(self) -> bool:
        """
        Alive and not possibly dead: the preferred selection tier.
        """
        return self.alive and not self.possible_dead


@dataclass(eq=False)
class View:
    """
    An immutable picture of all hosts, published after every check.

    :ivar hosts: one :class:`HostStatus` per configured host, in order.
    :ivar master: the selected master, or ``None``.
    :ivar ready: every host has completed its first check.
    :ivar generation: increases with every publication.
    :ivar cache: memo for work derived from this view only (rendered
        bodies, candidate lists); filled lazily by readers on the reactor
        thread and dropped with the view.
    """

    hosts: tuple[HostStatus, ...]
    master: HostStatus | None
    ready: bool
    generation: int
    cache: dict = field(default_factory=dict)


class HostState:
    """
    The mutable record of one host, kept by its monitor.

    :param host: the configured host.
    :param index: its position in ``pg_status__hosts``.
    :param max_fails: consecutive failures that make the host dead.
    """

    def __init__(self, host: HostConfig, index: int, max_fails: int) -> None:
        self.host = host
        self.index = index
        self.max_fails = max_fails
        self.checked = False
        self.failures = 0
        self.reached = False
        self.master = False
        self.lag_ms: int | None = None
        self.lag_bytes: int | None = None
        self.lsn: int | None = None
        self.timeline: int | None = None
        #: the master's position from its last successful check (masters only)
        self.position: MasterPosition | None = None
        #: the last check of this host failed
        self.last_failed = False

    @property
    def dead(self) -> bool:
        """
        ``max_fails`` consecutive checks failed, or the host was never
        reached and its first check failed.
        """
        return self.failures >= self.max_fails or (self.failures > 0 and not self.reached)

    def succeeded(
        self,
        *,
        master: bool,
        lsn: int | None,
        timeline: int | None,
        lag_ms: int | None,
        lag_bytes: int | None,
        position: MasterPosition | None,
    ) -> None:
        """
        Record a successful check; clears the failure counter.
        """
        self.checked = True
        self.reached = True
        self.failures = 0
        self.last_failed = False
        self.master = master
        self.lsn = lsn
        self.timeline = timeline
        self.lag_ms = 0 if master else lag_ms
        self.lag_bytes = 0 if master else lag_bytes
        self.position = position if master else None

    def failed(self) -> None:
        """
        Record a failed check.  The last measured values stay for a
        possibly dead host and are hidden once it is dead.
        """
        self.checked = True
        self.failures += 1
        self.last_failed = True

    def status(self, config: Config) -> HostStatus:
        """
        Render this host as an immutable :class:`HostStatus`.
        """
        host = self.host
        if not self.checked:
            return HostStatus(self.index, host.name, host.dc, host.geo)
        if self.dead:
            return HostStatus(
                self.index, host.name, host.dc, host.geo,
                checked=True, reached=self.reached, alive=False, possible_dead=True,
            )
        lag_ms, lag_bytes = self.lag_ms, self.lag_bytes
        return HostStatus(
            self.index,
            host.name,
            host.dc,
            host.geo,
            checked=True,
            reached=True,
            alive=True,
            possible_dead=self.failures > 0,
            master=self.master,
            lag_ms=lag_ms,
            lag_bytes=lag_bytes,
            lsn=self.lsn,
            timeline=self.timeline,
            sync_by_time=lag_ms is not None and lag_ms <= config.sync_max_lag_ms,
            sync_by_bytes=lag_bytes is not None and lag_bytes <= config.sync_max_lag_bytes,
        )


class Registry:
    """
    Owner of every :class:`HostState` and publisher of :class:`View`.

    :param config: the service configuration.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.states = [
            HostState(host, i, config.max_fails) for i, host in enumerate(config.hosts)
        ]
        self._statuses = [s.status(config) for s in self.states]
        self._generation = 0
        #: the master position used for replica lag: of the selected master,
        #: or, while none is selected, of the master selected last.
        self.last_master_position: MasterPosition | None = None
        self._observers: list[Callable[[View, View], None]] = []
        self.view = View(tuple(self._statuses), None, False, 0)

    def observe(self, observer: Callable[[View, View], None]) -> None:
        """
        Call ``observer(old, new)`` after every publication.
        """
        self._observers.append(observer)

    def master_state(self) -> HostState | None:
        """
        The state of the selected master, if any.
        """
        m = self.view.master
        return None if m is None else self.states[m.index]

    def publish(self, index: int) -> View:
        """
        Rebuild the view after host ``index`` changed.
        """
        self._statuses[index] = self.states[index].status(self.config)
        hosts = tuple(self._statuses)
        master = select_master(hosts)
        if master is not None:
            position = self.states[master.index].position
            if position is not None:
                self.last_master_position = position
        ready = self.view.ready or all(s.checked for s in self.states)
        self._generation += 1
        old, self.view = self.view, View(hosts, master, ready, self._generation)
        for observer in self._observers:
            observer(old, self.view)
        return self.view


def describe_changes(old: View, new: View) -> Sequence[tuple[LogLevel, str, dict]]:
    """
    The transitions worth a log line between two views: readiness, role,
    availability and crossings of the global sync thresholds.  A host that
    becomes possibly dead or dead is a warning; everything else is info.

    :return: ``(level, format, fields)`` triples for :meth:`Logger.emit`.
    """
    info, warn = LogLevel.info, LogLevel.warn
    out: list[tuple[LogLevel, str, dict]] = []
    if new.ready and not old.ready:
        out.append((info, "monitor ready: every host completed its first check", {}))
    for a, b in zip(old.hosts, new.hosts, strict=True):
        if a == b:
            continue
        name = b.name
        state_a, state_b = _health(a), _health(b)
        if state_a != state_b:
            out.append((
                info if state_b == "alive" else warn,
                "host state changed host={host} state={state}",
                {"host": name, "state": state_b},
            ))
        if b.alive and (not a.alive or a.master != b.master):
            out.append((
                info,
                "host role host={host} role={role}",
                {"host": name, "role": "master" if b.master else "replica"},
            ))
        if b.alive and not b.master and a.alive and not a.master:
            if a.sync_by_time != b.sync_by_time:
                out.append((
                    info,
                    "replica sync_by_time changed host={host} sync_by_time={sync} lag_ms={lag}",
                    {"host": name, "sync": str(b.sync_by_time).lower(), "lag": _n(b.lag_ms)},
                ))
            if a.sync_by_bytes != b.sync_by_bytes:
                out.append((
                    info,
                    "replica sync_by_bytes changed host={host} sync_by_bytes={sync} "
                    "lag_bytes={lag}",
                    {"host": name, "sync": str(b.sync_by_bytes).lower(), "lag": _n(b.lag_bytes)},
                ))
    am, bm = old.master, new.master
    if (am and am.index) != (bm and bm.index) or (am is None) != (bm is None):
        out.append((
            info,
            "master changed master={master} previous={previous}",
            {"master": bm.name if bm else "none", "previous": am.name if am else "none"},
        ))
    return out


def _health(s: HostStatus) -> str:
    if not s.checked:
        return "unknown"
    if not s.alive:
        return "dead"
    return "possible_dead" if s.possible_dead else "alive"


def _n(v: int | None) -> str:
    return "null" if v is None else str(v)
