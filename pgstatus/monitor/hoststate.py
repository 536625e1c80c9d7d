"""
The mutable record of one host, as the :class:`~pgstatus.monitor.registry.Registry`
keeps it: what the host's checks found so far (reachability, failures, role,
positions, sync-set membership), and the immutable
:class:`~pgstatus.model.status.HostStatus` it is published as.

Only the registry makes, changes and reads these records (it re-exports
:class:`HostState`); a host's monitor holds its record as a handle.
"""

from __future__ import annotations

from pgstatus.config.settings import Config, HostConfig
from pgstatus.model.status import HostStatus
from pgstatus.monitor import sync
from pgstatus.monitor.lag import MasterPosition


class HostState:
    """
    The mutable record of one host.  Made, changed and read by the
    :class:`~pgstatus.monitor.registry.Registry` only; its position in the
    host list is the registry's to know.

    :param host: the configured host.
    """

    __slots__ = ("host", "checked", "failures", "reached", "master", "lag_ms", "lag_bytes",
                 "lsn", "replayed_through", "timeline", "position", "last_failed", "sync_time",
                 "sync_bytes")

    def __init__(self, host: HostConfig) -> None:
        self.host = host
        self.checked = False
        self.failures = 0
        self.reached = False
        self.master = False
        self.lag_ms: int | None = None
        self.lag_bytes: int | None = None
        self.lsn: int | None = None
        self.replayed_through: int | None = None
        self.timeline: int | None = None
        #: the master's position from its last successful check (masters only)
        self.position: MasterPosition | None = None
        #: the last check of this host failed
        self.last_failed = False
        #: membership in the sync sets, ``None`` until a successful check
        self.sync_time: sync.Membership | None = None
        self.sync_bytes: sync.Membership | None = None

    def dead(self, max_fails: int) -> bool:
        """
        ``max_fails`` consecutive checks failed, or the host was never
        reached and its first check failed.
        """
        return self.failures >= max_fails or (self.failures > 0 and not self.reached)

    def as_status(self, index: int, config: Config) -> HostStatus:
        """
        This host as an immutable :class:`HostStatus` at position ``index``
        (no side effects).
        """
        host = self.host
        if not self.checked:
            return HostStatus(index, host.name, host.dc, host.geo)
        if self.dead(config.max_fails):
            return HostStatus(index, host.name, host.dc, host.geo,
                              checked=True, reached=self.reached, alive=False,
                              possible_dead=True)
        in_time = self.sync_time is not None and self.sync_time.member
        in_bytes = self.sync_bytes is not None and self.sync_bytes.member
        note = None
        if config.sync_policy_extras and not self.master and not (in_time and in_bytes):
            note = sync.note(config, self.lag_ms, self.lag_bytes, in_time, in_bytes)
        return HostStatus(
            index, host.name, host.dc, host.geo,
            checked=True, reached=True, alive=True, possible_dead=self.failures > 0,
            master=self.master, lag_ms=self.lag_ms, lag_bytes=self.lag_bytes, lsn=self.lsn,
            timeline=self.timeline, replayed_through=self.replayed_through, sync_by_time=in_time,
            sync_by_bytes=in_bytes, sync_note=note,
        )
