"""
Correctness under faults, end to end against the real topology.

Each test runs the real service in this process against real PostgreSQL
servers (see conftest.py), injects a fault, and keeps a
:class:`~invariants.Sampler` running while the fault is active and during
recovery.  Every ~50 ms it checks that

- ``/ready`` stays 200;
- ``/master`` names the master the published views allow (never a host whose
  last successful check found it in recovery, never a dead one) and one the
  scenario knows is (or was, within the detection bound) a master;
- ``/replica`` never names a dead host, nor one that has been down for
  longer than the detection bound;
- ``/replica?min_lsn=…&timeline=…`` for the latest write never names a
  replica that lacks the written row (read on the server behind the name);

and the time from the fault to the correct answer is within the spec's
detection bound ``sleep_ms + query_timeout_ms + (max_fails − 1) ×
max(sleep_ms, query_timeout_ms)`` plus one period and 0.5 s (see
:func:`invariants.detection_allowance` for connection turns).

Host names must be distinct: proxies listen on the loopback address of the
node they stand for (another port), or on addresses no node uses.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from invariants import (
    Sampler,
    Truth,
    ViewLog,
    Writer,
    detection_allowance,
    spec_master_name,
    status,
)
from pgtopology import PgNode, PgTopology
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater
from twisted.logger import LogLevel, globalLogPublisher

from pgstatus.logging.formats import format_text
from service import RunningService, blocking, wait_until

pytestmark = pytest.mark.pg

SLEEP_MS, TIMEOUT_MS, MAX_FAILS = 200, 300, 3
FAST = {
    "pg_status__sleep_ms": str(SLEEP_MS),
    "pg_status__query_timeout_ms": str(TIMEOUT_MS),
    "pg_status__max_fails": str(MAX_FAILS),
}
#: an unanswered or refused host: the spec's bound plus one period and 0.5 s
ALLOW = detection_allowance(SLEEP_MS, TIMEOUT_MS, MAX_FAILS)
#: a host whose connection setups hang: its 2nd and 3rd failing checks open
#: connections, each waiting AUTH_PAUSE after the previous hanging setup
ALLOW_HANG = detection_allowance(SLEEP_MS, TIMEOUT_MS, MAX_FAILS,
                                 own_hanging_setups=MAX_FAILS - 1)
#: one check: the next one starts within a period and answers within the
#: deadline; plus the same margin
ONE_CHECK = (SLEEP_MS + TIMEOUT_MS) / 1000 + SLEEP_MS / 1000 + 0.5


def timing(label: str, **values: float | None) -> None:
    """Print measured times (shown with ``pytest -rP``)."""
    parts = " ".join(f"{k}={'-' if v is None else f'{v:.2f}s'}" for k, v in values.items())
    print(f"[faults] {label}: {parts}")


class Rig:
    """Services, writers and samplers of one test, stopped after it."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.services: list[RunningService] = []
        self.loops: list[Any] = []

    def service(self, env: dict[str, str]) -> tuple[RunningService, ViewLog]:
        svc = RunningService(self.reactor, {**env, **FAST})
        self.services.append(svc)
        return svc, ViewLog(svc, self.reactor)

    def writer(self, topo: PgTopology) -> Writer:
        w = Writer(self.reactor, topo)
        self.loops.append(w)
        w.start()
        return w

    def sampler(self, svc: RunningService, log: ViewLog, truth: Truth, topo: PgTopology,
                writer: Writer | None, label: str = "") -> Sampler:
        s = Sampler(self.reactor, svc, log, truth, topo, writer, label=label)
        self.loops.append(s)
        s.start()
        return s

    @inlineCallbacks
    def close(self) -> Any:
        for loop in self.loops:
            yield loop.stop()
        for svc in self.services:
            yield svc.stop()


@pytest.fixture
def rig(reactor):
    r = Rig(reactor)
    yield r
    pytest_twisted.blockon(r.close())


def env_for(topo: PgTopology, entries: list[tuple[str, int]]) -> dict[str, str]:
    """Service environment for explicit ``(host, port)`` entries."""
    env = topo.hosts_env()
    env["pg_status__hosts"] = ",".join(h for h, _ in entries)
    env["pg_status__pg_port"] = ",".join(str(p) for _, p in entries)
    return env


def healthy(svc: RunningService, *names: str):
    return lambda: svc.view.ready and all(svc.host(n).healthy for n in names)


def sleep(reactor: Any, seconds: float) -> Any:
    """Let the fault last (part of the scenario, not a wait for a state)."""
    return deferLater(reactor, seconds, lambda: None)


@inlineCallbacks
def verified_answers(reactor: Any, sampler: Sampler, n: int, what: str) -> Any:
    """Wait until the sampler has read the row on ``n`` more replica answers,
    so the read-your-writes check is not vacuous."""
    start = sampler.verified
    try:
        yield wait_until(reactor, lambda: sampler.verified >= start + n, 10,
                         f"{n} verified min_lsn replica answers {what}")
    except AssertionError as e:
        seen = "\n".join(str(v) for v in sampler.violations[:20])
        raise AssertionError(f"{e}\ninvariant violations so far:\n{seen}") from None


@inlineCallbacks
def quiesce(writer: Writer, topo: PgTopology, nodes: list[PgNode] | None = None) -> Any:
    """Pause the writes and wait until the replicas have every row."""
    yield writer.pause()
    if writer.last is not None:
        yield blocking(topo.wait_replicated, writer.last.lsn, 10, nodes)


@inlineCallbacks
def finish(*samplers: Sampler) -> Any:
    for s in samplers:
        yield s.stop()
    problems = [str(v) for s in samplers for v in s.violations]
    assert not problems, "invariants violated:\n" + "\n".join(problems[:40])
    for s in samplers:
        assert s.samples >= 20, (s.label, s.samples)


# --------------------------------------------------------------------------
# 1. a replica that hangs, refuses, is down behind a live port


REPLICA_FAULTS = ["sigstop", "proxy_hang", "proxy_refuse", "proxy_close_after_startup"]


@pytest.mark.parametrize("kind", REPLICA_FAULTS)
@pytest_twisted.inlineCallbacks
def test_replica_fault(guarded_topology, tcp_proxy, rig, reactor, kind):
    """
    One replica becomes unavailable while the others stay: it is first
    possibly dead, then dead within the detection bound, never returned once
    dead (nor after the bound), and back in rotation after it recovers.
    """
    topo = guarded_topology
    primary, victim, other = topo.nodes
    name = victim.host
    proxy = None
    if kind == "sigstop":
        entries = [(n.host, n.port) for n in topo.nodes]
    else:
        proxy = tcp_proxy(victim, listen_host=victim.host)
        entries = [(primary.host, primary.port), (proxy.host, proxy.port),
                   (other.host, other.port)]
    hangs = kind in ("sigstop", "proxy_hang")
    allow = ALLOW_HANG if hangs else ALLOW
    svc, log = rig.service(env_for(topo, entries))
    truth = Truth(reactor, allow, {n.host: n for n in topo.nodes}, [primary.host])
    yield wait_until(reactor, healthy(svc, *(n.host for n in topo.nodes)), 10, "all healthy")
    writer = rig.writer(topo)
    sampler = rig.sampler(svc, log, truth, topo, writer)
    yield verified_answers(reactor, sampler, 3, "before the fault")

    if kind == "sigstop":
        # A frozen server cannot be read: pin down what it holds first.
        yield quiesce(writer, topo)
        yield sampler.pause()
        t0 = reactor.seconds()
        yield blocking(victim.sigstop)
        truth.frozen_rows[name] = writer.last.row
        sampler.resume()
        writer.resume()
    else:
        t0 = reactor.seconds()
        if kind == "proxy_hang":
            yield proxy.hang()
        elif kind == "proxy_refuse":
            yield proxy.refuse(drop_existing=True)
        else:
            yield proxy.close_after_startup(drop_existing=True)
    truth.down(name)

    yield wait_until(reactor, lambda: not svc.host(name).alive, allow + 2, f"{name} dead")
    t_pd = log.first(lambda v: status(v, name).possible_dead, t0)
    t_dead = log.first(lambda v: not status(v, name).alive, t0)
    assert svc.view.master.name == primary.host
    # Stay dead a while: the sampler checks it is never returned.
    yield sleep(reactor, 0.6)

    truth.up(name)
    t1 = reactor.seconds()
    if kind == "sigstop":
        yield blocking(victim.sigcont)
    else:
        yield proxy.pass_()
    yield wait_until(reactor, healthy(svc, name), 12, f"{name} to recover")
    t_up = log.first(lambda v: status(v, name).healthy, t1)
    # Back in rotation, with fresh data.
    yield wait_until(reactor, lambda: svc.host(name).lsn is not None
                     and writer.last is not None and svc.host(name).lsn >= writer.last.lsn_int,
                     5, f"{name} to catch up")
    yield verified_answers(reactor, sampler, 2, "after recovery")
    yield finish(sampler)
    yield writer.stop()
    timing(f"replica {kind}", possibly_dead=t_pd - t0, dead=t_dead - t0, allowed=allow,
           recovered=t_up - t1)
    assert t_dead - t0 <= allow, (t_dead - t0, allow)
    if kind == "proxy_refuse":
        # refused connections fail early: still checked every sleep_ms
        assert t_up - t1 <= ONE_CHECK, t_up - t1


@pytest_twisted.inlineCallbacks
def test_replica_flapping(guarded_topology, tcp_proxy, rig, reactor):
    """
    A replica whose port refuses for a second, then works for a second, for
    about 5 s: each outage is detected within the bound, each recovery within
    one check, and it is never returned while dead.
    """
    topo = guarded_topology
    primary, victim, other = topo.nodes
    name = victim.host
    proxy = tcp_proxy(victim, listen_host=victim.host)
    entries = [(primary.host, primary.port), (proxy.host, proxy.port), (other.host, other.port)]
    svc, log = rig.service(env_for(topo, entries))
    truth = Truth(reactor, ALLOW, {n.host: n for n in topo.nodes}, [primary.host])
    yield wait_until(reactor, healthy(svc, *(n.host for n in topo.nodes)), 10, "all healthy")
    writer = rig.writer(topo)
    sampler = rig.sampler(svc, log, truth, topo, writer)
    yield verified_answers(reactor, sampler, 2, "before flapping")
    downs, ups = [], []
    for _ in range(3):
        t = reactor.seconds()
        yield proxy.refuse(drop_existing=True)
        truth.down(name)
        downs.append(t)
        yield sleep(reactor, 1.0)
        truth.up(name)
        ups.append(reactor.seconds())
        yield proxy.pass_()
        yield sleep(reactor, 1.0)
    yield wait_until(reactor, healthy(svc, name), 5, f"{name} to recover")
    yield verified_answers(reactor, sampler, 2, "after flapping")
    yield finish(sampler)
    yield writer.stop()
    dead = [log.first(lambda v: not status(v, name).alive, t) for t in downs]
    back = [log.first(lambda v: status(v, name).healthy, t) for t in ups]
    dead_after = [None if d is None else d - t for d, t in zip(dead, downs, strict=True)]
    back_after = [None if b is None else b - t for b, t in zip(back, ups, strict=True)]
    timing("replica flapping", **{f"dead{i}": d for i, d in enumerate(dead_after)},
           **{f"back{i}": b for i, b in enumerate(back_after)}, allowed=ALLOW)
    for d, t_up in zip(dead, ups, strict=True):
        assert d is not None and d < t_up, "every outage is detected while it lasts"
    assert all(d <= ALLOW for d in dead_after), dead_after
    assert all(b is not None and b <= ONE_CHECK for b in back_after), back_after


# --------------------------------------------------------------------------
# 2. the master: killed and replaced, split brain, moved behind a name


@pytest_twisted.inlineCallbacks
def test_master_killed_replica_promoted(fresh_topology, rig, reactor):
    """
    The master is SIGKILLed and a replica promoted (timeline 2): /master
    moves to it within the bound after the promotion; the other replica,
    left on timeline 1, never serves reads of timeline-2 writes, and reads
    of timeline-1 writes go to the master once it is on timeline 2.
    """
    topo = yield blocking(fresh_topology, 2)
    old, new, left = topo.nodes
    svc, log = rig.service(topo.hosts_env())
    truth = Truth(reactor, ALLOW, {n.host: n for n in topo.nodes}, [old.host])
    yield wait_until(reactor, healthy(svc, *(n.host for n in topo.nodes)), 10, "all healthy")
    writer = rig.writer(topo)
    sampler = rig.sampler(svc, log, truth, topo, writer)
    yield verified_answers(reactor, sampler, 3, "before the failover")

    yield quiesce(writer, topo)
    tl1_write = writer.last
    t_kill = reactor.seconds()
    yield blocking(old.kill)
    truth.down(old.host)
    truth.master(old.host, False)
    truth.master(new.host)
    t_promote = reactor.seconds()
    yield blocking(new.promote)
    promote = reactor.seconds() - t_promote
    topo.primary = new
    writer.resume()

    def master_is_new():
        d = svc.get("/master")
        return d.addCallback(lambda r: r.text == new.host)

    yield wait_until(reactor, master_is_new, ALLOW + 2, "the promoted master", interval=0.02)
    t_new = log.first(lambda v: spec_master_name(v) == new.host, t_promote)
    yield wait_until(reactor, lambda: not svc.host(old.host).alive, ALLOW + 2, "old master dead")
    t_old_dead = log.first(lambda v: not status(v, old.host).alive, t_kill)
    t_old_gone = log.first(lambda v: spec_master_name(v) != old.host, t_kill)
    yield wait_until(reactor, lambda: svc.host(new.host).timeline == 2
                     and svc.host(left.host).alive and svc.host(left.host).timeline == 1,
                     5, "timelines 2 and 1")
    # A write of the abandoned timeline: no replica matches it any more.
    for _ in range(3):
        r = yield svc.get(f"/replica?min_lsn={tl1_write.lsn}&timeline=1")
        assert r.text == new.host
    # Writes of timeline 2 never go to the replica left on timeline 1.
    yield wait_until(reactor, lambda: writer.last.timeline == 2, 5, "a timeline-2 write")
    for _ in range(3):
        w = writer.last
        for q in (f"min_lsn={w.lsn}&timeline={w.timeline}", f"min_lsn={w.lsn}"):
            r = yield svc.get(f"/replica?{q}")
            assert r.text == new.host, q
    yield sleep(reactor, 0.5)
    yield finish(sampler)
    yield writer.stop()
    timing("master killed", old_not_master=t_old_gone - t_kill, old_dead=t_old_dead - t_kill,
           promote=promote, new_master_after_promote_call=t_new - t_promote,
           allowed=ALLOW)
    assert t_old_dead - t_kill <= ALLOW
    assert t_new - t_promote <= promote + ONE_CHECK


@pytest_twisted.inlineCallbacks
def test_split_brain_first_master_in_host_order(fresh_topology, tcp_proxy, rig, reactor):
    """
    The primary stops, a replica is promoted, and the old primary comes back
    as a master too (no standby.signal): two masters.  Each service answers
    the first master in its pg_status__hosts order among the best health
    tier: with the old primary listed first, it wins while fully responsive,
    and loses to the other master while possibly dead.
    """
    topo = yield blocking(fresh_topology, 1)
    old, new = topo.nodes
    proxy = tcp_proxy(old, listen_host=old.host)
    # service 1 lists the old primary (behind a proxy) first, service 2 last
    svc1, log1 = rig.service(env_for(topo, [(proxy.host, proxy.port), (new.host, new.port)]))
    svc2, log2 = rig.service(env_for(topo, [(new.host, new.port), (old.host, old.port)]))
    nodes = {old.host: old, new.host: new}
    truth1 = Truth(reactor, ALLOW_HANG, nodes, [old.host])
    truth2 = Truth(reactor, ALLOW, nodes, [old.host])
    for svc in (svc1, svc2):
        yield wait_until(reactor, healthy(svc, old.host, new.host), 10, "all healthy")
    writer = rig.writer(topo)
    s1 = rig.sampler(svc1, log1, truth1, topo, writer, label="[old first] ")
    s2 = rig.sampler(svc2, log2, truth2, topo, writer, label="[new first] ")
    yield verified_answers(reactor, s1, 2, "before the failover")

    yield quiesce(writer, topo)
    yield blocking(old.stop, "fast")
    for t in (truth1, truth2):
        t.down(old.host)
        t.master(old.host, False)
        t.master(new.host)
    t_promote = reactor.seconds()
    yield blocking(new.promote)
    promote = reactor.seconds() - t_promote
    topo.primary = new
    writer.resume()
    for svc in (svc1, svc2):
        yield wait_until(reactor, lambda svc=svc: svc.view.master is not None
                         and svc.view.master.name == new.host, ONE_CHECK + 2, "new master")
    t_new = max(log.first(lambda v: spec_master_name(v) == new.host, t_promote)
                for log in (log1, log2))

    # The old primary starts again as a primary: split brain.
    for t in (truth1, truth2):
        t.up(old.host)
        t.master(old.host)
    t_start = reactor.seconds()
    yield blocking(old.start)
    assert (yield blocking(old.is_in_recovery)) is False
    yield wait_until(reactor, lambda: svc1.view.master is not None
                     and svc1.view.master.name == old.host, 12, "the first master in order")
    t_first = log1.first(lambda v: spec_master_name(v) == old.host, t_start)
    yield wait_until(reactor, healthy(svc2, old.host, new.host), 12, "both masters seen")
    assert svc2.host(old.host).master and svc2.host(new.host).master
    for _ in range(5):
        r1 = yield svc1.get("/master")
        r2 = yield svc2.get("/master")
        assert (r1.text, r2.text) == (old.host, new.host)

    # The first master becomes possibly dead: the healthy one wins.
    t_hang = reactor.seconds()
    yield proxy.hang()
    truth1.down(old.host)
    truth1.master(old.host, False)
    yield wait_until(reactor, lambda: spec_master_name(svc1.view) == new.host
                     and svc1.view.master.name == new.host, ONE_CHECK + 2, "failover in tier")
    t_tier = log1.first(lambda v: spec_master_name(v) == new.host, t_hang)
    yield wait_until(reactor, lambda: not svc1.host(old.host).alive, ALLOW_HANG + 2, "dead")
    truth1.up(old.host)
    truth1.master(old.host)
    t_pass = reactor.seconds()
    yield proxy.pass_()
    yield wait_until(reactor, lambda: svc1.view.master.name == old.host, 12, "first master back")
    t_back = log1.first(lambda v: spec_master_name(v) == old.host, t_pass)
    yield sleep(reactor, 0.3)
    yield finish(s1, s2)
    yield writer.stop()
    timing("split brain", promote=promote, new_master_after_promote_call=t_new - t_promote,
           old_first_again_after_start=t_first - t_start,
           other_master_after_hang=t_tier - t_hang, first_back_after_unhang=t_back - t_pass)
    assert t_new - t_promote <= promote + ONE_CHECK
    assert t_tier - t_hang <= ONE_CHECK


@pytest_twisted.inlineCallbacks
def test_role_switch_behind_unchanged_name(fresh_topology, tcp_proxy, rig, reactor):
    """
    Two names, as VIPs or DNS aliases: ``vip_m`` (the master's) and
    ``vip_r`` (the replica's).  The primary stops, the replica is promoted
    and ``vip_m`` moves to it; the old primary rejoins as a replica and
    ``vip_r`` moves to it.  Existing connections are dropped with each move
    and pg-status follows, by name, within one check.
    """
    topo = yield blocking(fresh_topology, 1)
    p, r = topo.nodes
    vip_m = tcp_proxy(p, listen_host="127.0.0.11")
    vip_r = tcp_proxy(r, listen_host="127.0.0.12")
    m, rr = vip_m.host, vip_r.host
    svc, log = rig.service(env_for(topo, [(m, vip_m.port), (rr, vip_r.port)]))
    truth = Truth(reactor, ALLOW, {m: p, rr: r}, [m])
    yield wait_until(reactor, healthy(svc, m, rr), 10, "all healthy")
    writer = rig.writer(topo)
    sampler = rig.sampler(svc, log, truth, topo, writer)
    yield verified_answers(reactor, sampler, 3, "before the switch")

    # While names move, a replica answer may come from the server the name
    # pointed at before (no client can tell): pause writes so that every
    # server has every row being asked for.  Reads go on.
    yield quiesce(writer, topo)
    yield blocking(p.stop, "fast")
    truth.down(m)
    truth.master(m, False)
    truth.master(rr)  # vip_r points at the replica being promoted
    yield blocking(r.promote)
    topo.primary = r
    truth.up(m)
    truth.master(m)
    t_m = reactor.seconds()
    yield vip_m.retarget(r.host, r.port, drop_existing=True)
    truth.node[m] = r
    yield wait_until(reactor, lambda: svc.view.master is not None and svc.view.master.name == m
                     and svc.host(m).timeline == 2 and svc.host(m).healthy,
                     ONE_CHECK + 2, "vip_m on the new master")
    t_m_ok = log.first(lambda v: spec_master_name(v) == m and status(v, m).timeline == 2, t_m)

    yield blocking(p.follow, r)
    t_r = reactor.seconds()
    yield vip_r.retarget(p.host, p.port, drop_existing=True)
    truth.node[rr] = p
    truth.master(rr, False)
    yield wait_until(reactor, lambda: svc.host(rr).healthy and not svc.host(rr).master
                     and svc.host(rr).timeline == 2, ONE_CHECK + 2, "vip_r on the old primary")
    t_r_ok = log.first(lambda v: status(v, rr).alive and not status(v, rr).master, t_r)
    writer.resume()
    yield verified_answers(reactor, sampler, 3, "after the switch")
    for _ in range(4):
        res = yield svc.get("/master")
        assert res.text == m
        res = yield svc.get("/replica")
        assert res.text == rr
    yield finish(sampler)
    yield writer.stop()
    timing("role switch", vip_m_master_after_move=t_m_ok - t_m,
           vip_r_replica_after_move=t_r_ok - t_r, allowed=ONE_CHECK)
    assert t_m_ok - t_m <= ONE_CHECK
    assert t_r_ok - t_r <= ONE_CHECK


# --------------------------------------------------------------------------
# bugs found under faults


@pytest_twisted.inlineCallbacks
def test_setup_failures_are_logged_within_the_poll_error_limit(
        pg_topology, tcp_proxy, rig, reactor):
    """
    Spec (Logging): "the first PostgreSQL poll failure is logged at error;
    continuing failures are logged at error at most once per
    pg_status__poll_error_log_interval_ms ... This limit also covers timeouts
    and invalid results, even when the failure reason changes."  A replica
    whose port accepts and closes after the startup packet fails every
    check; with the default interval of one minute, a few failed checks give
    exactly one error record for it and nothing more severe.
    """
    topo = pg_topology
    primary, victim, other = topo.nodes
    proxy = tcp_proxy(victim, listen_host=victim.host)
    yield proxy.close_after_startup()
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        svc, _ = rig.service(env_for(topo, [(primary.host, primary.port),
                                            (proxy.host, proxy.port), (other.host, other.port)]))
        mon = svc.monitor.monitors[1]
        yield wait_until(reactor, lambda: mon.checks >= 4 and not mon.checking, 10,
                         "four failed checks")
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert svc.host(victim.host).alive is False
    severe = [e for e in events if e.get("log_level", LogLevel.info) >= LogLevel.error]
    lines = [format_text(e) for e in severe]
    assert len(severe) == 1, "\n".join(lines)
    assert "PostgreSQL operation failed operation=connect host=127.0.0.2 error=" in lines[0]


@pytest_twisted.inlineCallbacks
def test_hung_dead_host_is_still_checked_every_period(guarded_topology, rig, reactor):
    """
    Spec (Reaction speed): "If the attempt fails after a TLS handshake or
    password authentication ... such hosts are checked less often: the period
    doubles with each such failure ... Hosts that fail earlier, for example
    with a refused TCP connection or a DNS error, are still checked every
    pg_status__sleep_ms."  A frozen server accepts TCP (the kernel does) and
    never answers the first packet: no TLS handshake, no authentication.  Its
    checks each last query_timeout_ms, so over 3 s of being dead it is
    checked about 3 / max(sleep, timeout) = 10 times; with the doubling
    (0.4, 0.8, 1.6 s periods) only about 3.
    """
    topo = guarded_topology
    victim = topo.replicas[0]
    svc, _ = rig.service(topo.hosts_env())
    yield wait_until(reactor, healthy(svc, *(n.host for n in topo.nodes)), 10, "all healthy")
    yield blocking(victim.sigstop)
    yield wait_until(reactor, lambda: not svc.host(victim.host).alive, ALLOW_HANG + 2, "dead")
    mon = svc.monitor.monitors[1]
    before = mon.checks
    yield sleep(reactor, 3.0)
    checks = mon.checks - before
    truth_up = reactor.seconds()
    yield blocking(victim.sigcont)
    yield wait_until(reactor, healthy(svc, victim.host), 12, "recovery")
    print(f"[faults] long hang: checks while dead for 3 s: {checks}; "
          f"recovered {reactor.seconds() - truth_up:.2f}s after SIGCONT")
    period = max(SLEEP_MS, TIMEOUT_MS) / 1000
    assert checks >= 0.6 * 3.0 / period, checks
