"""
The published picture of the hosts: one :class:`HostStatus` per host and
the immutable :class:`View` that holds them.

The monitor side publishes views; the HTTP side only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pgstatus.model.leader import Leader


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
    #: the last position a ``min_lsn`` may name and be met by this replica:
    #: ``lsn``, or past the page header when ``lsn`` is at a WAL page
    #: boundary (see :func:`pgstatus.monitor.lag.past_header`); ``None``: ``lsn``
    replayed_through: int | None = None
    #: why a replica is out of the sync set (only with hysteresis or a
    #: serving floor configured)
    sync_note: str | None = None

    @property
    def healthy(self) -> bool:
        """
        Alive and not possibly dead: the preferred selection tier.
        """
        return self.alive and not self.possible_dead


class View:
    """
    An immutable picture of all hosts, published after every check.

    :ivar hosts: one :class:`HostStatus` per configured host, in order.
    :ivar master: the selected master, or ``None``.
    :ivar ready: every host has completed its first check.
    :ivar generation: increases with every publication.
    :ivar changed: the positions whose status is another object than in the
        view of the previous generation, when the publisher says so: every
        other position holds the very same :class:`HostStatus` object.
        ``None``: any position may differ.  A check changes one host, so an
        observer comparing consecutive views can do work per changed host,
        not per host (with a thousand hosts, a thousand checks a second).
    :ivar leader: Patroni's leader key as the master was selected with it
        (``pg_status__patroni_etcd``), else ``None``.
    """

    __slots__ = ("hosts", "master", "ready", "generation", "changed", "leader")

    def __init__(self, hosts: tuple[HostStatus, ...], master: HostStatus | None, ready: bool,
                 generation: int, changed: tuple[int, ...] | None = None,
                 leader: Leader | None = None) -> None:
        self.hosts = hosts
        self.master = master
        self.ready = ready
        self.generation = generation
        self.changed = changed
        self.leader = leader

    def __repr__(self) -> str:
        return (f"View(hosts={self.hosts!r}, master={self.master!r}, ready={self.ready!r}, "
                f"generation={self.generation!r}, changed={self.changed!r})")
