"""
Host state: what the monitor knows about every configured host.

Each :class:`HostState` is owned by the monitor of its host and changed only
on the reactor thread.  The :class:`Registry` turns them into an immutable
:class:`View` whenever a check completes; HTTP handlers read only the current
``View`` and so never wait for, or see half of, a check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from twisted.logger import Logger, LogLevel

from pgstatus.config.settings import Config, HostConfig
from pgstatus.model.selection import select_master
from pgstatus.model.status import HostStatus, View
from pgstatus.monitor.lag import MasterPosition

log = Logger(namespace="pgstatus.monitor")


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
        self.reach: int | None = None
        self.timeline: int | None = None
        #: the master's position from its last successful check (masters only)
        self.position: MasterPosition | None = None
        #: the last check of this host failed
        self.last_failed = False
        # eviction hysteresis: successes seen, in-sync flags and the number
        # of consecutive checks over the threshold, per dimension
        self._successes = 0
        self._sync_seen = 0
        self._sync: dict[str, tuple[bool, int] | None] = {"time": None, "bytes": None}

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
        reach: int | None = None,
    ) -> None:
        """
        Record a successful check; clears the failure counter.

        :param reach: see :attr:`HostStatus.reach`.
        """
        self.checked = True
        self.reached = True
        self.failures = 0
        self.last_failed = False
        self._successes += 1
        self.master = master
        self.lsn = lsn
        self.reach = reach
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
            self._sync = {"time": None, "bytes": None}
            return HostStatus(
                self.index, host.name, host.dc, host.geo,
                checked=True, reached=self.reached, alive=False, possible_dead=True,
            )
        lag_ms, lag_bytes = self.lag_ms, self.lag_bytes
        if self._successes != self._sync_seen:
            # one step of the sync-set state machine per successful check
            self._sync_seen = self._successes
            n = config.sync_evict_after_checks
            self._sync["time"] = _sync_step(
                self._sync["time"], lag_ms, config.sync_max_lag_ms,
                config.sync_reenter_lag_ms, n)
            self._sync["bytes"] = _sync_step(
                self._sync["bytes"], lag_bytes, config.sync_max_lag_bytes,
                config.sync_reenter_lag_bytes, n)
        in_time = bool(self._sync["time"] and self._sync["time"][0])
        in_bytes = bool(self._sync["bytes"] and self._sync["bytes"][0])
        note = None
        if config.sync_policy_extras and not self.master and not (in_time and in_bytes):
            note = _sync_note(config, lag_ms, lag_bytes, in_time, in_bytes)
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
            reach=self.reach,
            sync_by_time=in_time,
            sync_by_bytes=in_bytes,
            sync_note=note,
        )


def _sync_step(state: tuple[bool, int] | None, lag: int | None, limit: int,
               reenter: int | None, evict_after: int) -> tuple[bool, int]:
    """
    One check's step of a replica's membership in a sync set.

    Without hysteresis (``evict_after`` 0 or 1, no ``reenter``) this is
    exactly ``lag <= limit``.  With it, a member leaves only after
    ``evict_after`` consecutive checks over ``limit`` (or of unknown lag),
    and a non-member re-enters only at or below ``reenter``.

    :return: ``(in_set, consecutive_checks_over)``.
    """
    reenter = limit if reenter is None else min(reenter, limit)
    in_set = state[0] if state is not None else None
    over = state[1] if state is not None else 0
    if lag is not None and lag <= limit and (in_set is not False or lag <= reenter):
        return True, 0
    if in_set:
        over += 1
        if over >= max(evict_after, 1):
            return False, 0
        return True, over
    return False, 0


def _sync_note(config: Config, lag_ms: int | None, lag_bytes: int | None,
               in_time: bool, in_bytes: bool) -> str:
    parts = []
    for name, lag, limit, reenter, ok in (
            ("lag_ms", lag_ms, config.sync_max_lag_ms, config.sync_reenter_lag_ms, in_time),
            ("lag_bytes", lag_bytes, config.sync_max_lag_bytes, config.sync_reenter_lag_bytes,
             in_bytes)):
        if ok:
            continue
        if lag is None:
            parts.append(f"{name} unknown")
        elif lag > limit:
            parts.append(f"{name} {lag} over {limit}")
        else:
            parts.append(f"{name} {lag} not yet back under {reenter} after eviction")
    return "; ".join(parts)


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

    def reconfigure(self, config: Config, states: Sequence[HostState],
                    mirrored: tuple[Sequence[HostStatus], int | None] | None = None) -> View:
        """
        Adopt a reloaded configuration and host list, and publish.

        ``mirrored``: a follower's hub view for the new host list
        (statuses, master index), published instead of our own host states.

        ``states`` holds one :class:`HostState` per host of
        ``config.hosts``, in that order: the kept hosts' existing states
        (their checks, failures and positions stay) and new ones for added
        hosts.  Every state gets its new index, host entry and ``max_fails``,
        so every :class:`HostStatus` index of the published view is its
        position in the new host list.  Observers are called with the
        previous view re-expressed in the new order (removed hosts dropped,
        added hosts as in the new view), so comparing the two by position
        stays meaningful.  Readiness already reached is kept: an added host
        does not make the service unready.
        """
        old = self.view
        previous = {id(s): s.index for s in self.states}
        moved: dict[int, int] = {}
        for i, (st, host) in enumerate(zip(states, config.hosts, strict=True)):
            j = previous.get(id(st))
            if j is not None:
                moved[j] = i
            st.index = i
            st.host = host
            st.max_fails = config.max_fails
            if st.position is not None:
                st.position = replace(st.position, host_index=i)
        last = self.last_master_position
        if last is not None:
            self.last_master_position = replace(
                last, host_index=moved.get(last.host_index, -1))
        self.config = config
        self.states = list(states)
        if mirrored is not None:
            self._statuses = list(mirrored[0])
        else:
            self._statuses = [s.status(config) for s in self.states]
        hosts = tuple(self._statuses)
        before = []
        for i, st in enumerate(self.states):
            j = previous.get(id(st))
            before.append(self._statuses[i] if j is None
                          else replace(old.hosts[j], index=i))
        old_master = None
        if old.master is not None and old.master.index in moved:
            old_master = before[moved[old.master.index]]
        if mirrored is not None:
            master = None if mirrored[1] is None else hosts[mirrored[1]]
        else:
            master = select_master(hosts)
            if master is not None:
                position = self.states[master.index].position
                if position is not None:
                    self.last_master_position = position
        ready = old.ready or all(s.checked for s in self.states)
        self._generation += 1
        self.view = View(hosts, master, ready, self._generation)
        remapped = View(tuple(before), old_master, old.ready, old.generation)
        for observer in self._observers:
            observer(remapped, self.view)
        return self.view

    def mirror(self, statuses: Sequence[HostStatus], master: int | None, ready: bool) -> View:
        """
        Publish another instance's view (follower mode): its host statuses
        and its choice of master.  Our own host states are left alone.

        :param statuses: one per configured host, in order, with our
            locality.
        :param master: index of the master the other instance selected.
        """
        self._statuses = list(statuses)
        hosts = tuple(self._statuses)
        self._generation += 1
        old, self.view = self.view, View(
            hosts, None if master is None else hosts[master], self.view.ready or ready,
            self._generation)
        for observer in self._observers:
            observer(old, self.view)
        return self.view

    def seed_from_view(self) -> None:
        """
        Before our own checks take over from a mirrored view: give every
        host state the availability the view shows (reached, failures,
        role), so a host the hub reached is not dead after one failure of
        ours.  The view itself changes host by host, as our checks publish.
        Master positions from an earlier time of our own polling are
        forgotten: replica lags wait for a fresh check of the master.
        """
        self.last_master_position = None
        for st, h in zip(self.states, self._statuses, strict=True):
            st.position = None
            if not h.checked:
                continue
            st.reached = st.reached or h.reached
            st.master = h.master
            if not h.alive:
                st.failures = max(st.failures, st.max_fails)
            elif h.possible_dead:
                st.failures = max(1, min(st.failures, st.max_fails - 1))
            else:
                st.failures = 0

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


def describe_changes(old: View, new: View, config: Config
                     ) -> Sequence[tuple[LogLevel, str, dict]]:
    """
    The transitions worth a log line between two views: readiness, role,
    availability and crossings of the global sync thresholds.  A host that
    becomes possibly dead or dead is a warning; everything else is info.

    The lines the original service also logs use its words and fields
    (``host state changed``, ``host role changed``, ``replica
    synchronization changed``); readiness and the master change are ours.

    :param config: gives the thresholds the sync lines name.
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
        role = "master" if b.master else "replica"
        if state_a != state_b and state_b == "alive":
            out.append((
                info,
                "host state changed host={host} state={state} role={role}",
                {"host": name, "state": state_b, "role": role},
            ))
        elif state_a != state_b:
            out.append((
                warn,
                "host state changed host={host} state={state}",
                {"host": name, "state": state_b},
            ))
        elif b.alive and a.alive and a.master != b.master:
            out.append((
                info,
                "host role changed host={host} role={role}",
                {"host": name, "role": role},
            ))
        if b.alive and not b.master and a.alive and not a.master:
            if a.sync_by_time != b.sync_by_time:
                out.append((
                    info,
                    "replica synchronization changed host={host} dimension=time "
                    "synchronous={sync} lag_ms={lag} threshold_ms={threshold}",
                    {"host": name, "sync": str(b.sync_by_time).lower(), "lag": _n(b.lag_ms),
                     "threshold": config.sync_max_lag_ms},
                ))
            if a.sync_by_bytes != b.sync_by_bytes:
                out.append((
                    info,
                    "replica synchronization changed host={host} dimension=bytes "
                    "synchronous={sync} lag_bytes={lag} threshold_bytes={threshold}",
                    {"host": name, "sync": str(b.sync_by_bytes).lower(),
                     "lag": _n(b.lag_bytes), "threshold": config.sync_max_lag_bytes},
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
