"""
The rule (:func:`pgstatus.model.leader.select_leader_master`): with
Patroni's store read, a host is master only if it reports master and the
leader key's member maps to it; otherwise as ``patroni_unreadable`` says.
"""

from __future__ import annotations

import pytest

from pgstatus.config.settings import HostConfig
from pgstatus.model.leader import Leader, conn_address, host_index, select_leader_master
from pgstatus.model.status import HostStatus

HOSTS = (HostConfig("db1", 5432, None, None), HostConfig("DB2", 5433, None, None),
         HostConfig("[::1]", 5432, None, None))


def claims(*indices: int) -> list[HostStatus]:
    return [HostStatus(i, HOSTS[i].name, None, None, checked=True, reached=True, alive=True,
                       master=True, timeline=10 - i) for i in indices]


def test_conn_address() -> None:
    assert conn_address('{"conn_url": "postgres://db1:5433/postgres"}') == ("db1", 5433)
    assert conn_address(b'{"conn_url": "postgres://DB1/postgres"}') == ("db1", 5432)
    assert conn_address('{"conn_url": "postgres://[::1]:5432/x"}') == ("::1", 5432)
    for bad in ("", "{}", "[]", '{"conn_url": 5}', '{"conn_url": "postgres:///x"}', "nul"):
        assert conn_address(bad) is None, bad


def test_host_index_matches_name_and_port() -> None:
    assert host_index(("db1", 5432), HOSTS) == 0
    assert host_index(("db2", 5433), HOSTS) == 1  # case aside
    assert host_index(("db2", 5432), HOSTS) is None  # another port
    assert host_index(("::1", 5432), HOSTS) == 2
    assert host_index(None, HOSTS) is None


def test_without_a_store_the_hosts_decide() -> None:
    assert select_leader_master(claims(0, 1), None, HOSTS, "first").index == 0
    assert select_leader_master(claims(0, 1), None, HOSTS, "timeline").index == 0


def test_only_the_key_holder_is_master() -> None:
    fresh = Leader(fresh=True, up=True, member="n2", address=("db2", 5433))
    assert select_leader_master(claims(0, 1), fresh, HOSTS, "first").index == 1
    # the holder does not report master (not promoted yet): none
    assert select_leader_master(claims(0), fresh, HOSTS, "first") is None
    # no key, or a member that maps to no host: none, whatever the hosts say
    assert select_leader_master(claims(0, 1), Leader(fresh=True, up=True), HOSTS,
                                "first") is None
    other = Leader(fresh=True, up=True, member="n9", address=("db9", 5432))
    assert select_leader_master(claims(0, 1), other, HOSTS, "first") is None


@pytest.mark.parametrize("rule, expected", [("hosts", 0), ("last_leader", 1),
                                            ("no_master", None)])
def test_store_unreadable_for_ttl(rule: str, expected: int | None) -> None:
    stale = Leader(fresh=False, up=False, member="n2", address=("db2", 5433), unreadable=rule)
    chosen = select_leader_master(claims(0, 1), stale, HOSTS, "first")
    assert (None if chosen is None else chosen.index) == expected
