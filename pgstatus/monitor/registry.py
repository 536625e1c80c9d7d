"""
Host state: what the monitor knows about every configured host.

The :class:`Registry` owns one :class:`HostState` per configured host and is
the only code that changes them, on the reactor thread.  A host's monitor
holds its state only as a handle: it hands each check's result to the
registry, which records it, steps the sync-set hysteresis, publishes a new
immutable :class:`View` and returns the host's new :class:`HostStatus`.
HTTP handlers read only the current ``View`` and so never wait for, or see
half of, a check.

Publishing one check's result costs the same whatever the number of hosts:
the other statuses stay the same objects, the view names the position that
changed (:attr:`View.changed`), and the master is selected among the hosts
that report master, which the registry tracks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from twisted.logger import Logger

from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import HostConfig
from pgstatus.model.leader import select_leader_master
from pgstatus.model.status import HostStatus, Leader, View
from pgstatus.monitor import sync
from pgstatus.monitor.hoststate import HostState
from pgstatus.monitor.lag import MasterPosition

__all__ = ["HostState", "Registry"]

log = Logger(namespace="pgstatus.monitor")


class Registry:
    """
    Owner of every :class:`HostState` and publisher of :class:`View`.

    :param settings: the running configuration (host list, ``max_fails``,
        sync thresholds).
    """

    def __init__(self, settings: ConfigProvider) -> None:
        self._settings = settings
        config = settings.current
        self._states = [HostState(host) for host in config.hosts]
        self._where = {id(s): i for i, s in enumerate(self._states)}
        self._statuses = [s.as_status(i, config) for i, s in enumerate(self._states)]
        self._generation = 0
        #: the master position replica lag is measured against, and the
        #: state it came from: of the selected master, or, while none is
        #: selected, of the master selected last
        self._reference: tuple[HostState, MasterPosition] | None = None
        self._observers: list[Callable[[View, View], None]] = []
        #: the published view is another instance's (follower mode)
        self._mirrored = False
        #: while our checks take over from it (:meth:`seed_from_view`): the
        #: ids of the states without a check of ours yet
        self._unchecked: set[int] | None = None
        #: the positions of the published statuses that report master (alive
        #: and master), the candidates :meth:`_publish` selects from
        self._claims: set[int] = set()
        #: how many states, from the first, are known to be checked (so
        #: that readiness is not a pass over every host per check)
        self._checked_through = 0
        #: Patroni's leader key, as the store's watcher last published it
        self._leader: Leader | None = None
        self.view = View(tuple(self._statuses), None, False, 0)

    # -- reading ---------------------------------------------------------
    @property
    def states(self) -> tuple[HostState, ...]:
        """The host states, in host order (handles for the monitors)."""
        return tuple(self._states)

    def index_of(self, state: HostState) -> int:
        """The position of ``state``'s host in the host list."""
        return self._where[id(state)]

    @property
    def holding(self) -> bool:
        """
        A mirrored view stays published while our first round of checks
        takes over (see :meth:`seed_from_view`).
        """
        return self._unchecked is not None

    def is_dead(self, state: HostState) -> bool:
        """Whether ``state``'s host is dead (see :meth:`HostState.dead`)."""
        return state.dead(self._settings.current.max_fails)

    def failures(self, state: HostState) -> int:
        """Consecutive failed checks of ``state``'s host."""
        return state.failures

    def master_state(self) -> HostState | None:
        """The state of the selected master, if any."""
        m = self.view.master
        return None if m is None else self._states[m.index]

    def lag_references(self, state: HostState
                       ) -> tuple[MasterPosition | None, bool, MasterPosition | None]:
        """
        What a replica's lag is measured against: ``(current, check_ok,
        last)``, where ``current`` is the selected master's position (``None``
        if no other host is selected), ``check_ok`` whether that master's
        last check succeeded, and ``last`` the reference position of the
        master selected last, unless it came from ``state`` itself.
        """
        selected = self.master_state()
        current, check_ok = None, False
        if selected is not None and selected is not state:
            current, check_ok = selected.position, not selected.last_failed
        ref = self._reference
        last = ref[1] if ref is not None and ref[0] is not state else None
        return current, check_ok, last

    @property
    def reference_position(self) -> MasterPosition | None:
        """
        The position replica lag is measured against (see ``_reference``).
        """
        return None if self._reference is None else self._reference[1]

    def observe(self, observer: Callable[[View, View], None]) -> None:
        """
        Call ``observer(old, new)`` after every publication.
        """
        self._observers.append(observer)

    # -- recording check results -----------------------------------------
    def record_success(self, state: HostState, *, master: bool, lsn: int | None,
                       timeline: int | None, lag_ms: int | None, lag_bytes: int | None,
                       position: MasterPosition | None, replayed_through: int | None = None
                       ) -> HostStatus:
        """
        Record a successful check of ``state``'s host, step its sync-set
        membership and publish.  If anything here raises, the host's state
        is put back as it was before the call and the exception propagates
        (the scheduler then records a failed check).

        :param replayed_through: see :attr:`HostStatus.replayed_through`.
        :return: the host's new published status.
        """
        config = self._settings.current
        saved = {name: getattr(state, name) for name in HostState.__slots__}
        try:
            state.checked = True
            state.reached = True
            state.failures = 0
            state.last_failed = False
            state.master = master
            state.lsn = lsn
            state.replayed_through = replayed_through
            state.timeline = timeline
            state.lag_ms = 0 if master else lag_ms
            state.lag_bytes = 0 if master else lag_bytes
            state.position = position if master else None
            n = config.sync_evict_after_checks
            state.sync_time = sync.step(state.sync_time, state.lag_ms, config.sync_max_lag_ms,
                                        config.sync_reenter_lag_ms, n)
            state.sync_bytes = sync.step(state.sync_bytes, state.lag_bytes,
                                         config.sync_max_lag_bytes,
                                         config.sync_reenter_lag_bytes, n)
            return self._publish_host(state)
        except BaseException:
            # All or nothing: the caller records the check as failed
            # instead, on top of the state before it (its failure count
            # going on, not restarting from this success).
            for name, value in saved.items():
                setattr(state, name, value)
            raise

    def record_failure(self, state: HostState) -> HostStatus:
        """
        Record a failed check of ``state``'s host and publish.  The last
        measured values stay for a possibly dead host and are hidden once
        it is dead.

        :return: the host's new published status.
        """
        state.checked = True
        state.failures += 1
        state.last_failed = True
        if state.dead(self._settings.current.max_fails):
            # membership starts afresh once the host is alive again
            state.sync_time = state.sync_bytes = None
        return self._publish_host(state)

    def set_leader(self, leader: Leader) -> View:
        """
        Adopt Patroni's store's word (at every change) and select again;
        a mirrored view stays as its hub selected it.
        """
        self._leader = leader
        if self._mirrored:
            return self.view
        return self._publish(None, self.view.ready, select=True, changed=())

    # -- host list ---------------------------------------------------------
    def new_state(self, host: HostConfig) -> HostState:
        """
        A state for a host about to be added (see :meth:`reconfigure`).
        """
        return HostState(host)

    def reconfigure(self, states: Sequence[HostState],
                    mirrored: tuple[Sequence[HostStatus], int | None] | None = None) -> View:
        """
        Adopt the reloaded configuration's host list (the provider already
        holds the new configuration), and publish.

        ``states`` holds one :class:`HostState` per host of the new host
        list, in that order: the kept hosts' existing states (their checks,
        failures and positions stay) and new ones (:meth:`new_state`) for
        added hosts.  ``mirrored``: a follower's hub view for the new host
        list (statuses, master index), published instead of our own host
        states.  Without one, a held mirrored view stays held, in the new
        order, until the unchecked and added hosts have a check of ours.

        Observers are called with the previous view re-expressed in the new
        order (removed hosts dropped, added hosts as in the new view), so
        comparing the two by position stays meaningful.  Readiness already
        reached is kept: an added host does not make the service unready.
        """
        config = self._settings.current
        old, before_where = self.view, self._where
        for st, host in zip(states, config.hosts, strict=True):
            st.host = host
        self._states = list(states)
        self._where = {id(s): i for i, s in enumerate(self._states)}
        held = self._unchecked if mirrored is None else None
        if held is not None:  # still taking over: an added host needs a check too
            held = {id(s) for s in self._states if id(s) in held or id(s) not in before_where}
        self._unchecked = held or None
        self._mirrored = mirrored is not None or self._unchecked is not None
        if mirrored is not None:
            self._statuses = list(mirrored[0])
        else:
            for st in self._states:
                if st.dead(config.max_fails):
                    # dead under the new max_fails: as at a death
                    st.sync_time = st.sync_bytes = None
            self._statuses = [s.as_status(i, config) for i, s in enumerate(self._states)]
        before: list[HostStatus] = []
        old_master = None
        for i, st in enumerate(self._states):
            j = before_where.get(id(st))
            if j is None:
                before.append(self._statuses[i])
                continue
            moved = old.hosts[j]
            before.append(replace(moved, index=i))
            if old.master is not None and old.master.index == j:
                old_master = before[i]
        remapped = View(tuple(before), old_master, old.ready, old.generation)
        self._checked_through = 0
        ready = old.ready or self._all_checked()
        if self._unchecked is not None:
            self._statuses = before
            return self._publish(None if old_master is None else old_master.index, ready,
                                 select=False, old=remapped)
        return self._publish(mirrored[1] if mirrored is not None else None, ready,
                             select=mirrored is None, old=remapped)

    # -- follower mode -------------------------------------------------------
    def mirror(self, statuses: Sequence[HostStatus], master: int | None, ready: bool) -> View:
        """
        Publish another instance's view (follower mode): its host statuses
        and its choice of master; our own host states are left alone.

        :param statuses: one per configured host, in order, with our
            locality.
        :param master: index of the master the other instance selected.
        """
        self._unchecked = None
        self._mirrored = True
        self._statuses = list(statuses)
        return self._publish(master, self.view.ready or ready, select=False)

    def seed_from_view(self) -> None:
        """
        Before our own checks take over from a mirrored view: give every
        host state the availability the view shows (reached, failures,
        role), so a host the hub reached is not dead after one failure of
        ours.  Master positions from an earlier time of our own polling are
        forgotten: replica lags wait for a fresh check of the master.

        A mirrored view stays published (:attr:`holding`) until every host
        has a check of ours, failed or not (a round, as readiness counts
        them); then our own view replaces it at once.  A mix of the two
        could show, for a moment, a master dead by our checks alone while
        another host's first check still runs.
        """
        max_fails = self._settings.current.max_fails
        self._reference = None
        for st, h in zip(self._states, self._statuses, strict=True):
            st.position = None
            if not h.checked:
                continue
            st.reached = st.reached or h.reached
            st.master = h.master
            if not h.alive:
                st.failures = max(st.failures, max_fails)
            elif h.possible_dead:
                st.failures = max(1, min(st.failures, max_fails - 1))
            else:
                st.failures = 0
        if self._mirrored:
            self._unchecked = {id(st) for st in self._states}

    # -- publishing ------------------------------------------------------------
    def _all_checked(self) -> bool:
        """
        Every host state has had a check.  A state once checked stays so,
        so the states known checked from the first on are not looked at
        again: all the calls until readiness look at each state about once.
        """
        states, n = self._states, self._checked_through
        while n < len(states) and states[n].checked:
            n += 1
        self._checked_through = n
        return n == len(states)

    def _publish_host(self, state: HostState) -> HostStatus:
        """
        Publish ``state``'s host's new status.  A status equal to the
        published one is published as that same object, so that observers
        comparing the two views find nothing changed without comparing.
        """
        i = self._where[id(state)]
        config = self._settings.current
        status = state.as_status(i, config)
        unchecked = self._unchecked
        changed: tuple[int, ...] | None
        if unchecked is None:
            self._mirrored = False
            before = self._statuses[i]
            if status == before:
                status, changed = before, ()
            else:
                self._statuses[i], changed = status, (i,)
        else:
            unchecked.discard(id(state))
            if unchecked:
                return status  # recorded; the mirrored view stays published
            self._unchecked, self._mirrored = None, False
            log.info("every host checked by us; our view replaces the mirrored one hosts={n}",
                     n=len(self._states))
            self._statuses = [s.as_status(j, config) for j, s in enumerate(self._states)]
            changed = None
        self._publish(None, self.view.ready or self._all_checked(), select=True,
                      changed=changed)
        return status

    def _publish(self, master: int | None, ready: bool, *, select: bool,
                 old: View | None = None, changed: tuple[int, ...] | None = None) -> View:
        """
        The one publication routine: a new view of ``self._statuses``, with
        the master selected from them (``select``) or given by index, and
        the observers called with ``old`` (the current view by default).

        :param changed: the positions whose status is another object than
            in the current view (see :attr:`View.changed`); ``None``: any
            may be (after a reload, a mirrored view, a takeover).
        """
        hosts = tuple(self._statuses)
        claims = self._claims
        if changed is None:
            claims.clear()
            claims.update(i for i, h in enumerate(hosts) if h.alive and h.master)
        else:
            for i in changed:
                if hosts[i].alive and hosts[i].master:
                    claims.add(i)
                else:
                    claims.discard(i)
        if select:
            # the same choice as from every host: the others are never chosen
            config = self._settings.current
            chosen = select_leader_master([hosts[i] for i in sorted(claims)], self._leader,
                                          config.hosts, config.split_brain)
            if chosen is not None:
                st = self._states[chosen.index]
                if st.position is not None:
                    self._reference = (st, st.position)
        else:
            chosen = None if master is None else hosts[master]
        if old is None:
            old = self.view
        self._generation += 1
        self.view = View(hosts, chosen, ready, self._generation, changed, self._leader)
        for observer in self._observers:
            observer(old, self.view)
        return self.view

