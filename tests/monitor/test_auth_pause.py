"""
The pause between connection setups follows what a setup really did: the
specification makes the next setup wait 100 ms after one that reached a TLS
handshake or password authentication, and a setup that used neither (a
``trust`` line in ``pg_hba.conf``, no TLS) makes nobody wait.  What the
setup did is read from libpq after it succeeds, against a real server.
"""

from __future__ import annotations

import os

import pytest
import pytest_twisted

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.monitor.failures import CheckFailed
from pgstatus.monitor.probe import PostgresProbe
from pgstatus.monitor.turns import ConnectTurns, Deadline
from service import blocking

pytestmark = pytest.mark.pg

TRUSTED = "pgstatus_trusted"


class RecordingTurns(ConnectTurns):
    """Connection turns that remember what each release reported."""

    def __init__(self, clock) -> None:
        super().__init__(clock, 0.0)
        self.released: list[bool] = []

    def _release(self, reached_auth: bool) -> None:
        self.released.append(reached_auth)
        super()._release(reached_auth)


def trust_role(node) -> None:
    """A login role that ``pg_hba.conf`` lets in over TCP without a password."""
    node.sql(f"DO $$ BEGIN CREATE ROLE {TRUSTED} LOGIN; "
             "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    hba = os.path.join(node.datadir, "pg_hba.conf")
    with open(hba) as f:
        lines = f.read()
    line = f"host all {TRUSTED} 127.0.0.0/8 trust\n"
    if line not in lines:
        with open(hba, "w") as f:
            f.write(line + lines)
    node.sql("SELECT pg_reload_conf()")


@pytest.mark.parametrize("auth", ["password", "trust"])
@pytest_twisted.inlineCallbacks
def test_pause_after_setup_follows_its_authentication(pg_topology, reactor, auth):
    node = pg_topology.primary
    env = {**pg_topology.hosts_env(), "pg_status__hosts": node.host,
           "pg_status__pg_port": str(node.port)}
    if auth == "trust":
        yield blocking(trust_role, node)
        env.update({"pg_status__pg_user": TRUSTED, "pg_status__pg_password": ""})
    config = load_config(env)
    turns = RecordingTurns(reactor)
    probe = PostgresProbe(reactor, config.hosts[0], ConfigProvider(config), turns)
    deadline = Deadline(reactor, 10.0, probe.abort)
    try:
        obs = yield probe.check(reactor.seconds(), deadline)
    finally:
        deadline.stop()
        probe.close()
    assert obs is not None and probe.opened == 1
    assert turns.released == [auth == "password"]
    # the next setup's turn: at once after a trust setup, 100 ms later after
    # a password one
    start = reactor.seconds()
    turn = yield turns.acquire()
    waited = reactor.seconds() - start
    turn.release(reached_auth=False)
    if auth == "password":
        assert waited >= 0.09
    else:
        assert waited < 0.09


@pytest.mark.parametrize("fault", ["wrong_password", "closed_after_startup"])
@pytest_twisted.inlineCallbacks
def test_pause_after_failed_setup_follows_how_far_it_got(pg_topology, tcp_proxy, reactor,
                                                         fault):
    """
    A setup refused at password authentication makes the next one wait; one
    the server (here a proxy) closes right after the startup packet, before
    any TLS or authentication, does not.
    """
    node = pg_topology.primary
    env = {**pg_topology.hosts_env(), "pg_status__hosts": node.host,
           "pg_status__pg_port": str(node.port)}
    if fault == "wrong_password":
        env["pg_status__pg_password"] = "not-the-password"
    else:
        proxy = tcp_proxy(node)
        yield proxy.close_after_startup(drop_existing=True)
        env.update({"pg_status__hosts": proxy.host, "pg_status__pg_port": str(proxy.port)})
    config = load_config(env)
    turns = RecordingTurns(reactor)
    probe = PostgresProbe(reactor, config.hosts[0], ConfigProvider(config), turns)
    deadline = Deadline(reactor, 10.0, probe.abort)
    try:
        with pytest.raises(CheckFailed) as failed:
            yield probe.check(reactor.seconds(), deadline)
    finally:
        deadline.stop()
        probe.close()
    assert failed.value.operation == "connect" and not deadline.fired
    assert turns.released == [fault == "wrong_password"]
