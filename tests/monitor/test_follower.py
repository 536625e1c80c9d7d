"""
Follower mode against real processes: the hub is ``twistd pgstatus`` in a
process of its own, watching real PostgreSQL servers; the follower runs in
this process (so the tests can see its mode), configured with
``pg_status__follow``.  Faults are real: the hub is killed (SIGKILL),
frozen (SIGSTOP) and restarted; the master is stopped and a replica
promoted.
"""

from __future__ import annotations

import signal

import pytest
import pytest_twisted
from daemon import Daemon
from twisted.internet.task import deferLater

from service import blocking, ready, wait_until

pytestmark = pytest.mark.pg

HUB = {
    "pg_status__sleep_ms": "200",
    "pg_status__query_timeout_ms": "300",
}
TIMEOUT_MS = 2000


@pytest.fixture
def daemons():
    """Factory of pg-status processes, stopped after the test."""
    made: list[Daemon] = []

    def make(env, port=None) -> Daemon:
        d = Daemon(env, port)
        made.append(d)
        return d.start()

    yield make
    for d in made:
        d.stop()


def pg_status_sessions(topo) -> list[int]:
    """pg-status sessions on each node, in node order."""
    return [n.connections(application_name="pg-status") for n in topo.nodes]


def follower_env(topo, *hubs: Daemon, **extra: str) -> dict[str, str]:
    return {**topo.hosts_env(), **HUB,
            "pg_status__follow": ",".join(h.url for h in hubs),
            "pg_status__follow_timeout_ms": str(TIMEOUT_MS), **extra}


@pytest_twisted.inlineCallbacks
def test_follower_mirrors_the_hub_and_polls_nothing(pg_topology, daemons, service, reactor):
    """
    The follower answers from the hub's view: same roles, positions and
    flags in /hosts, no PostgreSQL session of its own; its selection is its
    own (locality by its own current_dc, which the hub does not have).
    """
    topo = pg_topology
    hub = yield blocking(daemons, {**topo.hosts_env(), **HUB})
    yield blocking(hub.wait_ready)
    before = yield blocking(pg_status_sessions, topo)
    assert before == [1, 1, 1]
    local = topo.replicas[1].host
    fol = service(follower_env(topo, hub, pg_status__hosts_dc="a,b,c",
                               pg_status__current_dc="c"))
    yield wait_until(reactor, ready(fol), 5, "follower readiness")
    assert fol.svc.follower.mode == "following"
    assert not fol.svc.monitor.polling
    assert not any(m.probe.connected for m in fol.svc.monitor.monitors)
    # still only the hub's sessions
    yield deferLater(reactor, 0.5, lambda: None)
    assert (yield blocking(pg_status_sessions, topo)) == [1, 1, 1]
    assert all(m.checks == 0 for m in fol.svc.monitor.monitors)
    r = yield fol.get("/master")
    assert (r.code, r.text) == (200, topo.primary.host)
    for _ in range(4):
        r = yield fol.get("/replica")
        assert r.text == local  # the follower's locality, not the hub's
    code, text = yield blocking(hub.get, "/replica")
    assert code == 200
    # /hosts: the hub's measurements with our locality
    yield wait_until(reactor, lambda: fol.svc.follower.snapshots >= 3, 5, "snapshots")
    r = yield fol.get("/hosts")
    rows = r.json()
    assert [(x["host"], x["master"], x["alive"]) for x in rows] == [
        (n.host, n is topo.primary, True) for n in topo.nodes]
    assert [x["dc"] for x in rows] == ["a", "b", "c"]
    assert all(x["lsn"] is not None and x["lag_bytes"] is not None for x in rows)


@pytest_twisted.inlineCallbacks
def test_hub_killed_then_back(pg_topology, daemons, service, reactor):
    """
    The hub is killed: within follow_timeout_ms plus one check the follower
    polls PostgreSQL itself, answering /master and /ready right all along;
    a hub back on the same address is followed again and the follower's
    own connections are closed.
    """
    topo = pg_topology
    hub = yield blocking(daemons, {**topo.hosts_env(), **HUB})
    yield blocking(hub.wait_ready)
    fol = service(follower_env(topo, hub))
    yield wait_until(reactor, ready(fol), 5, "follower readiness")
    answers: list[tuple[int, str]] = []
    sampling = True

    @pytest_twisted.inlineCallbacks
    def sample():
        while sampling:
            r = yield fol.get("/master")
            answers.append((r.code, r.text))
            r = yield fol.get("/ready")
            answers.append((r.code, r.text))
            yield deferLater(reactor, 0.02, lambda: None)

    sampler = sample()
    try:
        yield blocking(hub.kill)
        killed = reactor.seconds()
        yield wait_until(reactor, lambda: fol.svc.monitor.polling, 5, "own polling")
        switched = reactor.seconds() - killed
        assert switched <= TIMEOUT_MS / 1000 + 0.5
        # every host checked by us, one session each (the hub's are gone)
        yield wait_until(reactor, lambda: all(m.probe.connected and m.state.checked
                                              for m in fol.svc.monitor.monitors),
                         5, "own checks")
        yield wait_until(reactor, lambda: blocking(lambda: pg_status_sessions(topo) == [1, 1, 1]),
                         5, "only our sessions")
        assert fol.svc.follower.mode == "polling"
        hub2 = yield blocking(daemons, {**topo.hosts_env(), **HUB}, hub.port)
        yield blocking(hub2.wait_ready)
        yield wait_until(reactor, lambda: fol.svc.follower.mode == "following", 5,
                         "following again")
        assert not fol.svc.monitor.polling
        assert not any(m.probe.connected for m in fol.svc.monitor.monitors)
        # only the new hub's sessions remain
        yield wait_until(reactor, lambda: blocking(lambda: pg_status_sessions(topo) == [1, 1, 1]),
                         5, "the follower's sessions closed")
        yield deferLater(reactor, 0.3, lambda: None)
    finally:
        sampling = False
        yield sampler
    assert fol.svc.follower.switches == 2
    r = yield fol.get("/metrics")
    metrics = {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1]
               for line in r.text.splitlines() if not line.startswith("#")}
    assert metrics['pgstatus_follow_mode{mode="following"}'] == "1"
    assert metrics['pgstatus_follow_mode{mode="polling"}'] == "0"
    assert metrics[f'pgstatus_follow_hub{{url="{hub.url}"}}'] == "1"
    assert metrics["pgstatus_follow_switches_total"] == "2"
    assert 0 <= float(metrics["pgstatus_follow_view_age_seconds"]) < TIMEOUT_MS / 1000
    code, text = yield blocking(hub2.get, "/metrics")
    assert "pgstatus_follow_followers 1" in text.splitlines()
    wrong = [a for a in answers if a not in ((200, topo.primary.host), (200, "OK"))]
    assert not wrong, wrong[:5]
    assert len(answers) > 20


@pytest_twisted.inlineCallbacks
def test_second_hub_and_frozen_hub(pg_topology, daemons, service, reactor):
    """
    Two hubs: the first is frozen (SIGSTOP); the follower moves to the
    second within half of follow_timeout_ms and never polls on its own.
    """
    topo = pg_topology
    hub_a = yield blocking(daemons, {**topo.hosts_env(), **HUB})
    hub_b = yield blocking(daemons, {**topo.hosts_env(), **HUB})
    yield blocking(hub_a.wait_ready)
    yield blocking(hub_b.wait_ready)
    fol = service(follower_env(topo, hub_a, hub_b))
    yield wait_until(reactor, ready(fol), 5, "follower readiness")
    assert fol.svc.follower.hub == hub_a.url
    hub_a.signal(signal.SIGSTOP)
    try:
        yield wait_until(reactor, lambda: fol.svc.follower.hub == hub_b.url
                         and fol.svc.follower.last_event is not None
                         and reactor.seconds() - fol.svc.follower.last_event < 0.5,
                         5, "the second hub")
        # it stays with the second hub (the given-up attempt on the frozen
        # one does not come back to move it), and asks it for extra checks
        yield deferLater(reactor, TIMEOUT_MS / 1000, lambda: None)
        assert fol.svc.follower.hub == hub_b.url
        # no attempt left open on the frozen hub (an aborted attempt's
        # failure once counted as a second failed hub: a new round began)
        assert fol.svc.follower._request is None
        assert fol.svc.follower._stream is not None
        assert fol.svc.follower._stream.hub == hub_b.url
        r = yield fol.get("/replica?min_lsn=FFFFFFFF/0&wait_ms=300")  # no replica has it
        assert r.text == topo.primary.host
        code, text = yield blocking(hub_b.get, "/metrics")
        extra = [int(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith("pgstatus_host_extra_checks_total{")]
        assert sum(extra) >= 1, "no extra check reached the live hub"
    finally:
        hub_a.signal(signal.SIGCONT)
    assert fol.svc.follower.mode == "following"
    assert all(m.checks == 0 for m in fol.svc.monitor.monitors)


@pytest_twisted.inlineCallbacks
def test_first_hub_frozen_from_the_start(pg_topology, daemons, service, reactor):
    """
    The first hub accepts connections but never answers (SIGSTOP before the
    follower starts): the attempt is given up after half of
    follow_timeout_ms, the second hub is followed, and nothing is left
    pointing at the frozen one (the given-up attempt's failure once counted
    as a failure of the next hub, and a new round went back to the first).
    """
    topo = pg_topology
    hub_a = yield blocking(daemons, {**topo.hosts_env(), **HUB})
    hub_b = yield blocking(daemons, {**topo.hosts_env(), **HUB})
    yield blocking(hub_b.wait_ready)
    hub_a.signal(signal.SIGSTOP)
    try:
        fol = service(follower_env(topo, hub_a, hub_b))
        yield wait_until(reactor, ready(fol), 5, "follower readiness")
        assert fol.svc.follower.hub == hub_b.url
        yield deferLater(reactor, TIMEOUT_MS / 1000, lambda: None)  # past a round's pause
        assert fol.svc.follower.hub == hub_b.url
        assert fol.svc.follower._request is None
        assert fol.svc.follower._stream.hub == hub_b.url
        assert fol.svc.follower.mode == "following"
        assert all(m.checks == 0 for m in fol.svc.monitor.monitors)
    finally:
        hub_a.signal(signal.SIGCONT)


@pytest_twisted.inlineCallbacks
def test_no_chains(pg_topology, daemons, service, reactor, log_events):
    """
    An instance that follows refuses to be followed (409): a follower of a
    follower polls on its own.
    """
    topo = pg_topology
    hub = yield blocking(daemons, {**topo.hosts_env(), **HUB})
    middle = yield blocking(daemons, follower_env(topo, hub))
    yield blocking(middle.wait_ready)
    code, body = yield blocking(middle.get, "/follow")
    assert code == 409 and "error_text" in body
    fol = service(follower_env(topo, middle))
    yield wait_until(reactor, ready(fol), 5, "follower readiness")
    assert fol.svc.follower.mode == "polling"
    assert any(f"not following hub={middle.url}: status 409" in line
               for line in log_events.text())


@pytest_twisted.inlineCallbacks
def test_failover_reaches_the_follower(fresh_topology, daemons, service, reactor):
    """
    The master stops and a replica is promoted: the follower's /master
    follows the hub's, and a replica left on the old timeline never meets
    min_lsn there either.
    """
    topo = yield blocking(fresh_topology, 2)
    old, (new, left) = topo.primary, topo.replicas
    hub = yield blocking(daemons, {**topo.hosts_env(), **HUB})
    yield blocking(hub.wait_ready)
    fol = service(follower_env(topo, hub))
    yield wait_until(reactor, ready(fol), 5, "follower readiness")
    yield blocking(old.stop, "fast")
    yield blocking(new.promote)

    def hub_master():
        return blocking(lambda: hub.get("/master") == (200, new.host))

    yield wait_until(reactor, hub_master, 10, "the hub's new master")
    seen = reactor.seconds()
    yield wait_until(reactor, lambda: fol.view.master is not None
                     and fol.view.master.name == new.host, 2, "the follower's new master")
    assert reactor.seconds() - seen < 1.0
    # the replica left on the abandoned history is mirrored with its timeline
    yield wait_until(reactor, lambda: fol.host(left.host).alive
                     and fol.host(left.host).timeline == 1
                     and fol.host(new.host).timeline == 2, 5, "timelines mirrored")
    lsn, tl, _ = yield blocking(topo.write, None, new)
    for _ in range(4):  # round-robin would reach it if it qualified
        r = yield fol.get(f"/replica?min_lsn={lsn}")
        assert r.text == new.host
    assert fol.svc.follower.mode == "following"
    assert left.host in {h.name for h in fol.view.hosts}


@pytest_twisted.inlineCallbacks
def test_fresh_reads_through_the_hub(pg_topology, daemons, service, reactor):
    """
    wait_ms on a follower: the hub checks the replicas at once (asked by
    the follower), so a read right after a write gets a replica although
    the hub's period is 5 s; the hub counts those checks as extra ones.
    """
    topo = pg_topology
    slow = {"pg_status__sleep_ms": "5000", "pg_status__query_timeout_ms": "1000"}
    hub = yield blocking(daemons, {**topo.hosts_env(), **slow})
    yield blocking(hub.wait_ready)
    fol = service({**follower_env(topo, hub), **slow})
    yield wait_until(reactor, ready(fol), 5, "follower readiness")
    yield wait_until(reactor, lambda: all(h.alive for h in fol.view.hosts), 10, "all alive")
    replicas = {n.host for n in topo.replicas}
    got = []
    for _ in range(3):
        lsn, tl, _ = yield blocking(topo.write)
        r = yield fol.get(f"/replica?min_lsn={lsn}&timeline={tl}&wait_ms=1000")
        got.append(r.text)
    assert set(got) <= replicas, got
    # the replicas were checked by the hub, out of its schedule, at our asking
    code, text = yield blocking(hub.get, "/metrics")
    extra = [int(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if line.startswith("pgstatus_host_extra_checks_total{")]
    assert extra[0] == 0 and extra[1] + extra[2] >= 3, extra


@pytest_twisted.inlineCallbacks
def test_reload_keeps_following(pg_topology, daemons, service, reactor, tmp_path):
    """
    A reload (SIGHUP) of a follower republishes the hub's last snapshot,
    so answers do not fall back to the follower's own (never checked) host
    states; a reload to another host list makes it poll on its own.
    """
    topo = pg_topology
    hub = yield blocking(daemons, {**topo.hosts_env(), **HUB})
    yield blocking(hub.wait_ready)
    env_file = tmp_path / "pg-status.env"
    env_file.write_text("pg_status__sync_max_lag_ms=1000\n")
    fol = service({**follower_env(topo, hub), "pg_status__env_file": str(env_file)})
    yield wait_until(reactor, ready(fol), 5, "follower readiness")
    env_file.write_text("pg_status__sync_max_lag_ms=2000\n")
    assert fol.svc.reload()
    assert fol.view.master is not None and fol.view.master.name == topo.primary.host
    assert all(h.alive for h in fol.view.hosts)
    r = yield fol.get("/master")
    assert r.text == topo.primary.host
    assert fol.svc.follower.mode == "following"
    # another host list: the hub's snapshots no longer fit
    env_file.write_text("pg_status__hosts=" + ",".join(n.host for n in topo.nodes[:2]) + "\n"
                        "pg_status__pg_port=" + ",".join(str(n.port) for n in topo.nodes[:2])
                        + "\n")
    assert fol.svc.reload()
    assert fol.svc.follower.mode == "polling"
    yield wait_until(reactor, lambda: fol.view.master is not None
                     and fol.view.master.name == topo.primary.host
                     and all(h.alive for h in fol.view.hosts), 5, "own checks")
    assert len(fol.view.hosts) == 2
