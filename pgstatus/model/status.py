"""
The published picture of the hosts: one :class:`HostStatus` per host, what
Patroni's store said (:class:`Leader`, opt-in), and
the immutable :class:`View` that holds them.

The monitor side publishes views; the HTTP side only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True, slots=True)
class Leader:
    """
    The store as the watcher last read it.

    :ivar fresh: the store was read successfully within Patroni's ``ttl``:
        the leader below is Patroni's (no other member can have taken the
        key meanwhile); when not, ``unreadable`` decides.
    :ivar up: the last attempt to read the store succeeded (the watch is
        open, or the last read worked).
    :ivar member: the member holding the leader key, ``None``: no key.
    :ivar address: ``(host, port)`` of that member's ``conn_url``, ``None``
        when the key is absent, the member unknown or its ``conn_url``
        unreadable.
    :ivar revision: the leader key's ``mod_revision`` (0: no key).
    :ivar changed_at: the wall-clock time (seconds) the watcher saw the
        leader key change last, ``None`` before the first read.
    :ivar unreadable: what to follow when not ``fresh``: ``hosts``,
        ``last_leader`` or ``no_master``.
    """

    fresh: bool = False
    up: bool = False
    member: str | None = None
    address: tuple[str, int] | None = None
    revision: int = 0
    changed_at: float | None = None
    unreadable: str = "hosts"

    @property
    def enforced(self) -> bool:
        """
        The leader key decides (else the hosts' own view does).
        """
        return self.fresh or self.unreadable != "hosts"


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
