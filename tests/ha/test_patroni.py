"""
pg-status beside a real HA manager: Patroni 4 (PyPI) with etcd (Debian's
``etcd-server``) managing three PostgreSQL servers on 127.0.0.21-23
(``tests/patronicluster.py``), and pg-status (``twistd``, as
``tests/daemon.py`` runs it) watching them every 200 ms.

What is checked, against Patroni's own word (``GET /cluster``) and each
server's own ``pg_is_in_recovery()``:

- ``/master`` names Patroni's leader;
- through a switchover and a failover (the leader's Patroni and PostgreSQL
  SIGKILLed together, as a crashed machine), ``/master`` names the new
  leader within one check (``sleep_ms`` plus the check's own time) of the
  moment the new leader accepts writes, and never names a live replica: a
  watcher asks ``/master`` and every server's role every 20 ms throughout,
  and a host named master must not have been in recovery for longer than one
  check at that moment;
- a hung Patroni (SIGSTOP, its PostgreSQL still writable): once another
  member is promoted after Patroni's ``ttl``, two servers accept writes.
  With ``pg_status__split_brain=timeline`` pg-status names the one on the
  higher timeline, the new leader, within one check of its promotion; with
  the default (``first``) it keeps the first in host order, the old one.

One cluster serves the module (its bootstrap takes seconds); each test
starts from one leader and two streaming replicas (``restore`` starts
killed members again, which rejoin with ``pg_rewind``, and thaws frozen
ones) and leaves the cluster so.  Missing etcd or Patroni fails the tests,
never skips them.
"""

from __future__ import annotations

import http.client
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from daemon import Daemon
from patronicluster import TTL, PatroniCluster, PatroniNode
from pgtopology import poll

pytestmark = [pytest.mark.pg, pytest.mark.patroni]

SLEEP_MS = 200
QUERY_TIMEOUT_MS = 500
#: how often the watcher asks /master and every server's role
WATCH_INTERVAL = 0.02
#: one check: the period between checks, plus the check's own time at most
#: (its deadline), plus a watcher interval on either side
ONE_CHECK = (SLEEP_MS + QUERY_TIMEOUT_MS) / 1000 + 2 * WATCH_INTERVAL
#: the spec's bound for a host that stops answering to become dead (the
#: default max_fails, 3): sleep_ms + query_timeout_ms + 2 x max(both)
DETECTION = (SLEEP_MS + QUERY_TIMEOUT_MS + 2 * max(SLEEP_MS, QUERY_TIMEOUT_MS)) / 1000
#: Patroni promotes another member within ttl of its leader's last beat,
#: plus a loop or two; the rest is headroom on a busy machine
PROMOTION_TIMEOUT = TTL + 30

#: seconds each phase took, printed at the end of the module (pytest -s or -rA)
TIMINGS: dict[str, float] = {}


# --------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def cluster() -> Iterator[PatroniCluster]:
    """etcd and three Patroni members for the module; everything stopped after it."""
    start = time.monotonic()
    c = PatroniCluster.start()
    TIMINGS["bootstrap (etcd, 3 members, 1 leader + 2 streaming)"] = time.monotonic() - start
    try:
        yield c
    finally:
        start = time.monotonic()
        c.teardown()
        TIMINGS["teardown"] = time.monotonic() - start
        print("\nPatroni module timings (s):")
        for what, seconds in TIMINGS.items():
            print(f"  {what}: {seconds:.2f}")


@pytest.fixture
def patroni(cluster: PatroniCluster) -> Iterator[PatroniCluster]:
    """The module's cluster: one leader and two streaming replicas before and after."""
    cluster.restore()
    yield cluster
    for n in cluster.nodes:
        if n.frozen:
            n.sigcont()
    start = time.monotonic()
    cluster.restore()
    TIMINGS[f"restore after {_current_test()}"] = time.monotonic() - start


def _current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split(" ")[0]


@pytest.fixture
def pg_status(patroni: PatroniCluster) -> Iterator[Callable[..., Daemon]]:
    """
    Factory: ``pg_status(**settings)`` starts a pg-status watching the
    members (every ``SLEEP_MS``) and waits until it is ready; all are
    stopped after the test.
    """
    started: list[Daemon] = []

    def make(**settings: str) -> Daemon:
        env = {**patroni.hosts_env(), "pg_status__sleep_ms": str(SLEEP_MS),
               "pg_status__query_timeout_ms": str(QUERY_TIMEOUT_MS),
               **{f"pg_status__{k}": v for k, v in settings.items()}}
        daemon = Daemon(env)
        started.append(daemon)
        daemon.start()
        daemon.wait_ready()
        return daemon

    yield make
    for daemon in started:
        daemon.stop()


# --------------------------------------------------------------------------
# the watcher


@dataclass
class Watch:
    """
    Two threads, every ``WATCH_INTERVAL``: one asks each pg-status for
    ``/master``, one asks every server ``pg_is_in_recovery()`` (``"master"``,
    ``"replica"`` or ``"down"``).  Times are ``time.monotonic()``, taken
    when the answer arrived; the spans also keep when each question was
    asked.
    """

    cluster: PatroniCluster
    daemons: dict[str, Daemon]
    #: (time, daemon label, status, body)
    masters: list[tuple[float, str, int, str]] = field(default_factory=list)
    #: (time, host, role)
    roles: list[tuple[float, str, str]] = field(default_factory=list)
    #: (asked, answered, daemon label, status, body)
    master_spans: list[tuple[float, float, str, int, str]] = field(default_factory=list)
    #: (asked, answered, host, role)
    role_spans: list[tuple[float, float, str, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Watch:
        self._threads = [threading.Thread(target=self._ask_masters, daemon=True),
                         threading.Thread(target=self._ask_roles, daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def _ask_masters(self) -> None:
        conns: dict[str, http.client.HTTPConnection] = {}
        while not self._stop.is_set():
            for label, daemon in self.daemons.items():
                conn = conns.get(label)
                if conn is None:
                    conn = conns[label] = http.client.HTTPConnection(
                        "127.0.0.1", daemon.port, timeout=2)
                asked = time.monotonic()
                try:
                    conn.request("GET", "/master")
                    r = conn.getresponse()
                    status, body = r.status, r.read().decode().strip()
                except (OSError, http.client.HTTPException) as e:
                    status, body = 0, str(e)
                    conn.close()
                    conns.pop(label)
                answered = time.monotonic()
                self.masters.append((answered, label, status, body))
                self.master_spans.append((asked, answered, label, status, body))
            self._stop.wait(WATCH_INTERVAL)
        for conn in conns.values():
            conn.close()

    def _ask_roles(self) -> None:
        conns: dict[str, Any] = {}
        while not self._stop.is_set():
            for node in self.cluster.nodes:
                role = "down"
                asked = time.monotonic()
                try:
                    conn = conns.get(node.host)
                    if conn is None:
                        conn = conns[node.host] = node.connect()
                    with conn.cursor() as cur:
                        cur.execute("SELECT pg_is_in_recovery()")
                        role = "replica" if cur.fetchone()[0] else "master"
                except Exception:  # noqa: BLE001 - down, starting, shutting down
                    bad = conns.pop(node.host, None)
                    if bad is not None:
                        bad.close()
                answered = time.monotonic()
                self.roles.append((answered, node.host, role))
                self.role_spans.append((asked, answered, node.host, role))
            self._stop.wait(WATCH_INTERVAL)
        for conn in conns.values():
            conn.close()

    # -- reading what was seen ---------------------------------------------------

    def first_role(self, host: str, role: str, after: float) -> float | None:
        """When ``host`` was first seen in ``role`` at or after ``after``."""
        return next((t for t, h, r in list(self.roles) if h == host and r == role and t >= after),
                    None)

    def first_named(self, label: str, host: str, after: float) -> float | None:
        """When pg-status ``label`` first answered ``host`` at or after ``after``."""
        return next((t for t, lb, s, b in list(self.masters)
                     if lb == label and s == 200 and b == host and t >= after), None)

    def answers(self, label: str, since: float, until: float = float("inf")) -> list[str]:
        """pg-status ``label``'s answers in ``[since, until]``, as ``status body``."""
        return [f"{s} {b}" if s != 200 else b for t, lb, s, b in list(self.masters)
                if lb == label and since <= t <= until]

    def replicas_named_master(self) -> list[str]:
        """
        Every answer naming a host that had been in recovery for all of the
        ``ONE_CHECK`` before the question (a server's role is only known to
        pg-status after its next check) and still was when next asked after
        the answer arrived.  (The second condition keeps a fast pg-status
        from looking wrong: a role answer saying ``replica`` can arrive
        after the promotion that pg-status then saw and reported.)
        """
        by_host: dict[str, list[tuple[float, float, str]]] = {}
        for asked, answered, h, r in list(self.role_spans):
            by_host.setdefault(h, []).append((asked, answered, r))
        bad = []
        for asked, answered, label, status, body in list(self.master_spans):
            if status != 200:
                continue
            spans = by_host.get(body, [])
            window = [r for _a, e, r in spans if asked - ONE_CHECK <= e <= asked]
            after = next((r for a, _e, r in spans if a >= answered), None)
            if window and all(r == "replica" for r in window) and after == "replica":
                bad.append(f"{label} at {answered:.3f}: {body} (in recovery since before "
                           f"{asked - ONE_CHECK:.3f} and still after the answer)")
        return bad

    def widest_gap(self) -> tuple[float, str]:
        """
        The longest time between two consecutive answers of one pg-status,
        or two consecutive role samples of one server, and whose it was: a
        watcher that stalls for longer than a check could miss a replica
        named master.
        """
        series: dict[str, list[float]] = {}
        for t, label, _s, _b in list(self.masters):
            series.setdefault(f"/master of {label}", []).append(t)
        for t, host, _r in list(self.roles):
            series.setdefault(f"role of {host}", []).append(t)
        widest, whose = 0.0, ""
        for name, times in series.items():
            for a, b in zip(times, times[1:], strict=False):
                if b - a > widest:
                    widest, whose = b - a, name
        return widest, whose

    def wait_named(self, label: str, host: str, after: float, timeout: float) -> float:
        """Wait until pg-status ``label`` answers ``host``; when it first did."""
        return poll(lambda: self.first_named(label, host, after), timeout,
                    f"pg-status {label} to name {host} master",
                    context=lambda: f"answers: {self.answers(label, after)[-20:]}\n"
                    + self.daemons[label].log())


def assert_never_named_a_replica(watch: Watch, scenario: str) -> None:
    """No live replica named master, by a watcher that never looked away for a check."""
    bad = watch.replicas_named_master()
    assert not bad, "a live replica was named master:\n" + "\n".join(bad[:20])
    gap, whose = watch.widest_gap()
    TIMINGS[f"{scenario}: widest gap between the watcher's samples"] = gap
    assert gap <= ONE_CHECK, f"the watcher stalled {gap:.3f} s ({whose})"


def wait_promoted(cluster: PatroniCluster, old: PatroniNode, watch: Watch,
                  since: float) -> tuple[PatroniNode, float]:
    """
    Wait until Patroni names a leader other than ``old`` and that server
    accepts writes (not in recovery, as the watcher saw it).

    :return: the new leader and when it was first seen accepting writes.
    """
    def promoted() -> tuple[PatroniNode, float] | None:
        leader = cluster.leader(exclude=[old])
        if leader is None or leader is old:
            return None
        at = watch.first_role(leader.host, "master", since)
        return (leader, at) if at is not None else None

    return poll(promoted, PROMOTION_TIMEOUT, f"a leader other than {old.name}", 0.1,
                cluster.logs)


def timeline(node: PatroniNode) -> int | None:
    """
    A master's current timeline, from its WAL insert position's file name
    (``None`` for a replica or a server that does not answer).
    """
    try:
        conn = node.connect()
    except Exception:  # noqa: BLE001
        return None
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()),"
                        " 1, 8))::bit(32)::bigint WHERE NOT pg_is_in_recovery()")
            row = cur.fetchone()
            return None if row is None else int(row[0])
    except Exception:  # noqa: BLE001
        return None
    finally:
        conn.close()


# --------------------------------------------------------------------------
# the tests


def test_watch_flags_a_replica_named_master() -> None:
    """
    The watcher's judgement, on made-up samples: an answer naming a host
    that was in recovery for the whole check before it, and after it, is
    flagged; one within a check of the host's change, naming a host that
    was down meanwhile, or naming a host promoted while a role answer
    saying ``replica`` was on its way, is not.
    """
    watch = Watch(cluster=None, daemons={})  # type: ignore[arg-type]
    step = WATCH_INTERVAL
    # both masters until 10.0; then .21 a replica, .22 down until 10.5 and a
    # replica after; .23 a replica, promoted at 12.0 while a role answer
    # saying replica was on its way (asked 11.99, arrived 12.004)
    for i in range(250):
        t = 9.0 + i * step
        watch.role_spans.append((t - 0.001, t, "127.0.0.21", "master" if t < 10.0 else "replica"))
        watch.role_spans.append((t - 0.001, t, "127.0.0.22", "master" if t < 10.0 else
                                 "down" if t < 10.5 else "replica"))
        if t < 11.99:
            watch.role_spans.append((t - 0.001, t, "127.0.0.23", "replica"))
    watch.role_spans += [(11.99, 12.004, "127.0.0.23", "replica"),
                         (12.01, 12.02, "127.0.0.23", "master")]
    watch.master_spans += [
        (10.0 + ONE_CHECK / 2 - 0.001, 10.0 + ONE_CHECK / 2, "d", 200,
         "127.0.0.21"),  # within a check of the start
        (10.0 + ONE_CHECK + 0.099, 10.0 + ONE_CHECK + 0.1, "d", 200,
         "127.0.0.21"),  # a replica for a whole check
        (10.5 + ONE_CHECK / 2 - 0.001, 10.5 + ONE_CHECK / 2, "d", 200,
         "127.0.0.22"),  # within a check of coming up
        (10.5 + ONE_CHECK + 0.099, 10.5 + ONE_CHECK + 0.1, "d", 200,
         "127.0.0.22"),  # a replica for a whole check
        (12.0045, 12.005, "d", 200, "127.0.0.23"),  # promoted, seen before the watcher saw it
        (13.0, 13.001, "d", 404, ""),
    ]
    flagged = watch.replicas_named_master()
    assert len(flagged) == 2 and flagged[0].startswith(f"d at {10.0 + ONE_CHECK + 0.1:.3f}: "
                                                       "127.0.0.21"), flagged
    assert flagged[1].startswith(f"d at {10.5 + ONE_CHECK + 0.1:.3f}: 127.0.0.22"), flagged


def test_master_is_patroni_leader(patroni: PatroniCluster,
                                  pg_status: Callable[..., Daemon]) -> None:
    """``/master`` answers the host of the member that holds Patroni's leader key."""
    daemon = pg_status()
    leader = patroni.leader()
    assert leader is not None
    assert not leader.in_recovery()
    assert daemon.get("/master") == (200, leader.host)
    status, body = patroni.by_host(leader.host).rest("/leader")
    assert status == 200, body


def test_switchover(patroni: PatroniCluster, pg_status: Callable[..., Daemon]) -> None:
    """
    ``POST /switchover`` to a replica: ``/master`` names it within one check
    of its promotion, and never a replica on the way.
    """
    daemon = pg_status()
    old = patroni.leader()
    assert old is not None and daemon.get("/master") == (200, old.host)
    new = next(n for n in patroni.nodes if n is not old)
    with Watch(patroni, {"default": daemon}) as watch:
        start = time.monotonic()
        took = patroni.switchover(new)
        promoted = poll(lambda: watch.first_role(new.host, "master", start),
                        10, f"{new.name} to accept writes")
        named = watch.wait_named("default", new.host, start, 10)
        time.sleep(1)  # and it stays so
    TIMINGS["switchover: POST /switchover answered"] = took
    TIMINGS["switchover: request to new leader writable"] = promoted - start
    TIMINGS["switchover: writable to named by /master"] = named - promoted
    assert patroni.leader() is new
    assert named - promoted <= ONE_CHECK, (
        f"/master named {new.host} {named - promoted:.3f} s after it accepted writes "
        f"(one check: {ONE_CHECK:.3f} s)")
    assert set(watch.answers("default", named)) == {new.host}
    assert_never_named_a_replica(watch, "switchover")


def test_failover_after_leader_killed(patroni: PatroniCluster,
                                      pg_status: Callable[..., Daemon]) -> None:
    """
    The leader's Patroni and PostgreSQL SIGKILLed together: once Patroni
    promotes another member (after ``ttl``), ``/master`` names it within
    one check, and never a replica meanwhile.
    """
    daemon = pg_status()
    old = patroni.leader()
    assert old is not None and daemon.get("/master") == (200, old.host)
    with Watch(patroni, {"default": daemon}) as watch:
        start = time.monotonic()
        old.kill()
        new, promoted = wait_promoted(patroni, old, watch, start)
        named = watch.wait_named("default", new.host, start, PROMOTION_TIMEOUT)
        time.sleep(1)
    # the killed leader is declared dead (/master: 404) long before Patroni
    # promotes another member
    gone = next((t for t, lb, s, _b in list(watch.masters)
                 if lb == "default" and s == 404 and t >= start), None)
    assert gone is not None and gone - start <= DETECTION + ONE_CHECK, (
        f"/master did not answer 404 within {DETECTION + ONE_CHECK:.2f} s of the kill: "
        f"{watch.answers('default', start, start + DETECTION + ONE_CHECK)[-20:]}")
    TIMINGS["failover: kill to /master 404 (old leader dead)"] = gone - start
    TIMINGS["failover: kill to new leader writable"] = promoted - start
    TIMINGS["failover: writable to named by /master"] = named - promoted
    assert named - promoted <= ONE_CHECK, (
        f"/master named {new.host} {named - promoted:.3f} s after it accepted writes "
        f"(one check: {ONE_CHECK:.3f} s)")
    assert set(watch.answers("default", named)) == {new.host}
    # until then: the old leader (dead, not a replica) or nothing
    before = set(watch.answers("default", start, named)) - {old.host, new.host}
    assert all(a.startswith("404 ") for a in before), before
    assert_never_named_a_replica(watch, "failover")


def test_hung_patroni_split_brain_timeline(patroni: PatroniCluster,
                                           pg_status: Callable[..., Daemon]) -> None:
    """
    The leader's Patroni frozen (SIGSTOP), its PostgreSQL still writable:
    Patroni promotes another member after ``ttl``, and two servers accept
    writes.  With ``split_brain=timeline`` pg-status names the new leader
    (the higher timeline) within one check of its promotion and keeps it;
    with the default ``first`` it keeps the old leader, the first host.

    The old leader is made the first host (a switchover to it if needed),
    so the two settings must disagree.
    """
    first_host = patroni.nodes[0]
    if patroni.leader() is not first_host:
        prepared = time.monotonic()
        patroni.switchover(first_host)
        patroni.wait_healthy(60)
        TIMINGS["hung Patroni: switchover to the first host first"] = (
            time.monotonic() - prepared)
    old = first_host
    by_timeline = pg_status(split_brain="timeline")
    by_order = pg_status()
    for d in (by_timeline, by_order):
        poll(lambda d=d: d.get("/master") == (200, old.host), 10,
             f"{old.host} named master")
    with Watch(patroni, {"timeline": by_timeline, "first": by_order}) as watch:
        start = time.monotonic()
        old.sigstop()
        try:
            new, promoted = wait_promoted(patroni, old, watch, start)
            try:
                named: float | None = watch.wait_named("timeline", new.host, promoted - 1,
                                                       ONE_CHECK + 2)
            except TimeoutError:
                named = None
            time.sleep(1)  # both servers still writable; answers must hold
            end = time.monotonic()
            old_still_writable = watch.first_role(old.host, "master", end - 0.5)
            old_timeline, new_timeline = timeline(old), timeline(new)
        finally:
            old.sigcont()
        thawed = time.monotonic()
        poll(lambda: old.in_recovery(), 60, f"{old.name} demoted by its Patroni", 0.1,
             patroni.logs)
        demoted = time.monotonic()
        # the default instance follows once the old leader is demoted (or
        # already when a check of it fails on the way: a fully responsive
        # master comes before a possibly dead one)
        watch.wait_named("first", new.host, demoted, ONE_CHECK + 2)
        followed = watch.first_named("first", new.host, thawed)
    TIMINGS["hung Patroni: SIGSTOP to new leader writable (ttl)"] = promoted - start
    if named is not None:
        TIMINGS["hung Patroni: writable to named by /master (timeline)"] = named - promoted
    TIMINGS["hung Patroni: SIGCONT to old leader demoted"] = demoted - thawed
    assert followed is not None
    TIMINGS["hung Patroni: SIGCONT to new leader named by /master (first)"] = followed - thawed
    # the premise: a split brain, the old leader writable beside the new one
    assert old_still_writable is not None, (
        f"{old.host} stopped accepting writes while its Patroni was frozen: no split brain")
    assert named is not None, (
        f"split_brain=timeline: /master did not name the new leader {new.host} "
        f"(timeline {new_timeline}) within {ONE_CHECK + 2:.1f} s of its promotion, "
        f"while {old.host} (timeline {old_timeline}) was writable too; answers then: "
        f"{sorted(set(watch.answers('timeline', promoted, end)))}\n{by_timeline.log()}")
    assert named - promoted <= ONE_CHECK, (
        f"split_brain=timeline: /master named {new.host} {named - promoted:.3f} s after "
        f"its promotion (one check: {ONE_CHECK:.3f} s)")
    assert set(watch.answers("timeline", named)) == {new.host}
    # the default keeps the first host in order while it still reports master
    assert set(watch.answers("first", start, end)) == {old.host}
    assert_never_named_a_replica(watch, "hung Patroni")
    assert by_timeline.get("/master") == (200, new.host)
    assert by_order.get("/master") == (200, new.host)
