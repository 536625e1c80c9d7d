"""
Patroni's word on the master (``pg_status__patroni_etcd``, opt-in): what
the store's watcher last read, and the rule that gates the master on it.

Pure: no I/O, no clock.  The watcher (:mod:`pgstatus.monitor.patroni_store`)
builds a :class:`~pgstatus.model.status.Leader` from the keys it reads and says whether the store
is *fresh* (read within Patroni's ``ttl``); :func:`select_leader_master`
decides.  The published :class:`~pgstatus.model.status.View` carries the
:class:`Leader` it was selected with, for ``/metrics``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pgstatus.model.selection import select_master
from pgstatus.model.status import HostStatus, Leader

if TYPE_CHECKING:
    from pgstatus.config.settings import HostConfig

__all__ = ["Leader", "conn_address", "host_index", "select_leader_master"]


def conn_address(member_value: str | bytes) -> tuple[str, int] | None:
    """
    ``(host, port)`` of the ``conn_url`` in a Patroni member key's JSON
    value (``postgres://127.0.0.21:5432/postgres``; port 5432 when not
    given); ``None`` when there is none to read.
    """
    try:
        doc = json.loads(member_value)
        url = urlsplit(doc["conn_url"])
        host, port = url.hostname, url.port or 5432
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not host:
        return None
    return host.lower(), port


def host_index(address: tuple[str, int] | None, hosts: Sequence[HostConfig]) -> int | None:
    """
    The position of the configured host that is ``address``: the same
    name or address as written in ``pg_status__hosts`` (case aside, IPv6
    brackets aside) and the same port.  ``None``: no such host.
    """
    if address is None:
        return None
    name, port = address
    for i, h in enumerate(hosts):
        if h.port == port and h.name.strip("[]").lower() == name:
            return i
    return None


def select_leader_master(claims: Sequence[HostStatus], leader: Leader | None,
                         hosts: Sequence[HostConfig], rule: str) -> HostStatus | None:
    """
    The master to report among ``claims`` (the live hosts that report
    master, in host order).

    Without a store (``leader`` is ``None``), or once it has been
    unreadable for ``ttl`` with ``unreadable=hosts``: the hosts' own view
    (:func:`select_master` by ``rule``).  Else only the host the leader
    key's member maps to, if it reports master: the key absent, held by a
    member that maps to no host, or a leader host that does not report
    master give no master; so does a store unreadable for ``ttl`` with
    ``unreadable=no_master``.
    """
    if leader is None or not leader.enforced:
        return select_master(claims, rule)
    if not leader.fresh and leader.unreadable == "no_master":
        return None
    i = host_index(leader.address, hosts)
    if i is None:
        return None
    return next((h for h in claims if h.index == i), None)
