"""
pg-status reading Patroni's leader key (``pg_status__patroni_etcd``) beside
a real Patroni 4 + etcd 3.4 cluster (``tests/patronicluster.py``): a host
is named master only while its member holds ``/service/pgstatus/leader``.

Throughout each scenario, besides the watcher of ``test_patroni`` (every
server's role and every pg-status's ``/master`` every 20 ms), a sampler
reads the leader key from etcd every 10 ms, and a writer per pg-status
asks ``/master`` before each commit of a numbered row.  Checked:

- no host whose member does not hold the leader key (within a sample of
  the answer) is ever named master by the instance with the settings;
- switchover and failover (Patroni's API), kill -9 of the leader: the new
  leader is named, never a replica;
- the hung Patroni (SIGSTOP of the leader's Patroni, its PostgreSQL still
  writable): the old leader is dropped as soon as its key expires, and no
  acknowledged write of the writer following this instance is lost; the
  instance without the settings, measured beside it, loses some;
- the whole leader frozen (Patroni and PostgreSQL), then thawed: the new
  leader is named, the old one never again;
- etcd cut off from pg-status alone (a proxy): one WARNING, the store shown
  down in ``/metrics``, the leader trusted for ``patroni_ttl``, then
  ``patroni_unreadable``; one INFO when it is back.

Figures (writes lost, time without a master, the leader key change to
``/master`` latency) are printed at the end of the module (``-s``/``-rA``).
"""

from __future__ import annotations

import base64
import http.client
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from daemon import Daemon
from patronicluster import SCOPE, TTL, PatroniCluster
from pgtopology import poll
from test_patroni import (
    ONE_CHECK,
    QUERY_TIMEOUT_MS,
    SLEEP_MS,
    Watch,
    assert_never_named_a_replica,
    wait_promoted,
)

pytestmark = [pytest.mark.pg, pytest.mark.patroni]

FIGURES: dict[str, str] = {}
#: how far (seconds) from an answer a key sample may be and still vouch for it
KEY_SLACK = 0.1


@pytest.fixture(scope="module")
def cluster() -> Iterator[PatroniCluster]:
    c = PatroniCluster.start()
    try:
        yield c
    finally:
        c.teardown()
        print("\nPatroni + etcd figures:")
        for what, value in FIGURES.items():
            print(f"  {what}: {value}")


@pytest.fixture
def patroni(cluster: PatroniCluster) -> Iterator[PatroniCluster]:
    cluster.restore()
    yield cluster
    for n in cluster.nodes:
        if n.frozen:
            n.sigcont()
    cluster.restore()


@pytest.fixture
def pg_status(patroni: PatroniCluster) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def make(store: bool = True, **settings: str) -> Daemon:
        env = {**patroni.hosts_env(), "pg_status__sleep_ms": str(SLEEP_MS),
               "pg_status__query_timeout_ms": str(QUERY_TIMEOUT_MS)}
        if store:
            env |= {"pg_status__patroni_etcd": patroni.etcd.url,
                    "pg_status__patroni_scope": SCOPE, "pg_status__patroni_ttl": str(TTL)}
        env |= {f"pg_status__{k}": v for k, v in settings.items()}
        daemon = Daemon(env)
        started.append(daemon)
        daemon.start()
        daemon.wait_ready()
        return daemon

    yield make
    for daemon in started:
        daemon.stop()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def read_leader_host(cluster: PatroniCluster,
                     conn: http.client.HTTPConnection | None = None) -> str | None:
    """
    The host (address of ``conn_url``) of the member holding the leader key
    (on ``conn``, kept alive, when given).
    """
    prefix = f"/service/{SCOPE}/"
    body = json.dumps({"key": _b64(prefix), "range_end": _b64(prefix[:-1] + "0")}).encode()
    if conn is None:
        req = urllib.request.Request(cluster.etcd.url + "/v3/kv/range", method="POST",
                                     data=body)
        with urllib.request.urlopen(req, timeout=2) as r:
            doc = json.load(r)
    else:
        conn.request("POST", "/v3/kv/range", body)
        doc = json.loads(conn.getresponse().read())
    kvs = {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", ""))
           for kv in doc.get("kvs", ())}
    member = kvs.get(prefix + "leader")
    if member is None:
        return None
    value = kvs.get(prefix + "members/" + member.decode())
    if value is None:
        return None
    return json.loads(value)["conn_url"].split("//")[1].split(":")[0]


@dataclass
class KeySampler:
    """Reads the leader key's host every 10 ms: ``(time, host or None)``."""

    cluster: PatroniCluster
    samples: list[tuple[float, str | None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> KeySampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(10)

    def _run(self) -> None:
        port = int(self.cluster.etcd.url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        while not self._stop.is_set():
            try:
                host = read_leader_host(self.cluster, conn)
            except (OSError, http.client.HTTPException):
                conn.close()
                self._stop.wait(0.01)
                continue
            self.samples.append((time.monotonic(), host))
            self._stop.wait(0.01)
        conn.close()

    def holders(self, t0: float, t1: float) -> set[str | None]:
        """
        The key's holders sampled in ``[t0, t1]``; if none was (the sampler
        fell behind), the one sampled last before, in force until the next.
        """
        samples = list(self.samples)
        found = {h for t, h in samples if t0 <= t <= t1}
        before = [h for t, h in samples if t < t0]
        return found or set(before[-1:])

    def widest_gap(self) -> float:
        times = [t for t, _h in list(self.samples)]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)

    def first_change(self, after: float, host: str | None) -> float | None:
        """When the key was first seen not held by ``host`` after ``after``."""
        return next((t for t, h in list(self.samples) if t >= after and h != host), None)


def named_without_key(watch: Watch, keys: KeySampler, label: str) -> list[str]:
    """Answers of ``label`` naming a host whose member held no key near that moment."""
    bad = []
    for t, lb, status, body in list(watch.masters):
        if lb == label and status == 200 and body not in keys.holders(t - KEY_SLACK,
                                                                      t + KEY_SLACK / 2):
            bad.append(f"{t:.3f}: {body}, key holders {keys.holders(t - 1, t + 0.1)}")
    return bad


@dataclass
class Writer:
    """Asks ``/master``, then commits row ``n`` there; ``acked`` holds the committed ones."""

    daemon: Daemon
    label: str
    acked: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Writer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(10)

    def _run(self) -> None:
        import psycopg2

        conns: dict[str, Any] = {}
        api = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=2)
        n = 0
        while not self._stop.is_set():
            try:
                api.request("GET", "/master")
                r = api.getresponse()
                status, host = r.status, r.read().decode().strip()
            except (OSError, http.client.HTTPException):
                api.close()
                status, host = 0, ""
            if status == 200:
                n += 1
                try:
                    conn = conns.get(host)
                    if conn is None:
                        conn = conns[host] = psycopg2.connect(
                            host=host, port=self.daemon.env["pg_status__pg_port"],
                            user="postgres", password="postgres", dbname="postgres",
                            connect_timeout=1)
                        conn.autocommit = True
                    with conn.cursor() as cur:
                        cur.execute("INSERT INTO acks VALUES (%s, %s)", (self.label, n))
                    self.acked.append(n)
                except Exception:  # noqa: BLE001 - down, read-only, demoted
                    bad = conns.pop(host, None)
                    if bad is not None:
                        bad.close()
            self._stop.wait(0.01)
        for conn in conns.values():
            conn.close()

    def lost(self, cluster: PatroniCluster) -> int:
        leader = cluster.leader()
        assert leader is not None
        conn = leader.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT n FROM acks WHERE writer = %s", (self.label,))
                present = {row[0] for row in cur.fetchall()}
        finally:
            conn.close()
        return len(set(self.acked) - present)


def never_a_replica(watch: Watch) -> None:
    """``test_patroni``'s check (and its watcher's gaps), with the roles seen around a failure."""
    bad = watch.replicas_named_master()
    if bad:
        t, host = float(bad[0].split(" at ")[1].split(":")[0]), bad[0].split(": ")[1].split()[0]
        seen = [(round(rt - t, 3), r) for rt, h, r in list(watch.roles)
                if h == host and t - 2 <= rt <= t + 1]
        gaps = watch.widest_gap()
        raise AssertionError(f"{bad[:5]}\nroles of {host} around it: {seen}\n"
                             f"widest watcher gap: {gaps}")
    assert_never_named_a_replica(watch, "patroni-etcd")


def make_table(cluster: PatroniCluster) -> None:
    leader = cluster.leader()
    assert leader is not None
    conn = leader.connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS acks (writer text, n int)")
        cur.execute("TRUNCATE acks")
    conn.close()


def no_master_time(watch: Watch, label: str, since: float, until: float) -> float:
    """Seconds in ``[since, until]`` that ``label``'s answers were not 200."""
    rows = [(t, s) for t, lb, s, _b in list(watch.masters) if lb == label and since <= t <= until]
    return sum(b[0] - a[0] for a, b in zip(rows, rows[1:], strict=False) if a[1] != 200)


# --------------------------------------------------------------------------


def test_switchover_and_failover(patroni: PatroniCluster,
                                 pg_status: Callable[..., Daemon]) -> None:
    """
    A switchover, then a failover through Patroni's API: the new leader is
    named, and never a host whose member does not hold the key.
    """
    daemon = pg_status()
    old = patroni.leader()
    assert old is not None and daemon.get("/master") == (200, old.host)
    with Watch(patroni, {"etcd": daemon}) as watch, KeySampler(patroni) as keys:
        start = time.monotonic()
        new = next(n for n in patroni.nodes if n is not old)
        patroni.switchover(new)
        named = watch.wait_named("etcd", new.host, start, 10)
        patroni.wait_healthy(60)
        third = next(n for n in patroni.nodes if n not in (old, new))
        status, body = new.rest("/failover", "POST", {"candidate": third.name})
        assert status == 200, body
        named_third = watch.wait_named("etcd", third.host, named, 30)
        time.sleep(1)
    FIGURES["switchover: key holder named by /master"] = "yes"
    assert set(watch.answers("etcd", named_third)) == {third.host}
    bad = named_without_key(watch, keys, "etcd")
    assert not bad, "named master without the leader key:\n" + "\n".join(bad[:20])
    never_a_replica(watch)


def test_kill9_leader(patroni: PatroniCluster, pg_status: Callable[..., Daemon]) -> None:
    """
    The leader's Patroni and PostgreSQL SIGKILLed: no master until the key
    moves and its new holder is promoted; never a host without the key.
    """
    daemon = pg_status()
    old = patroni.leader()
    assert old is not None
    with Watch(patroni, {"etcd": daemon}) as watch, KeySampler(patroni) as keys:
        start = time.monotonic()
        old.kill()
        new, promoted = wait_promoted(patroni, old, watch, start)
        named = watch.wait_named("etcd", new.host, start, TTL + 30)
        time.sleep(1)
    FIGURES["kill -9: promoted to named (s)"] = f"{named - promoted:.3f}"
    assert named - promoted <= ONE_CHECK
    bad = named_without_key(watch, keys, "etcd")
    assert not bad, "named master without the leader key:\n" + "\n".join(bad[:20])
    never_a_replica(watch)


def test_hung_patroni(patroni: PatroniCluster, pg_status: Callable[..., Daemon]) -> None:
    """
    The leader's Patroni frozen, its PostgreSQL writable, the old leader the
    first host: with the settings it is dropped when its key expires (within
    100 ms) and the writer loses nothing; without them (the default ``first``)
    it stays named and the writer following it loses writes.
    """
    first = patroni.nodes[0]
    if patroni.leader() is not first:
        patroni.switchover(first)
        patroni.wait_healthy(60)
    old = first
    make_table(patroni)
    with_store, without = pg_status(), pg_status(store=False)
    for d in (with_store, without):
        poll(lambda d=d: d.get("/master") == (200, old.host), 10, "old leader named")
    with (Watch(patroni, {"etcd": with_store, "plain": without}) as watch,
          KeySampler(patroni) as keys, Writer(with_store, "etcd") as w_etcd,
          Writer(without, "plain") as w_plain):
        time.sleep(0.5)
        start = time.monotonic()
        old.sigstop()
        try:
            new, promoted = wait_promoted(patroni, old, watch, start)
            watch.wait_named("etcd", new.host, promoted - 1, ONE_CHECK + 2)
            time.sleep(2)
            end = time.monotonic()
            still_writable = watch.first_role(old.host, "master", end - 0.5)
        finally:
            old.sigcont()
        poll(lambda: old.in_recovery(), 60, "old leader demoted", 0.1, patroni.logs)
        watch.wait_named("plain", new.host, time.monotonic(), ONE_CHECK + 2)
        time.sleep(0.5)
    expired = keys.first_change(start, old.host)
    assert expired is not None
    dropped = next(t for t, lb, s, b in watch.masters
                   if lb == "etcd" and t >= start and (s != 200 or b != old.host))
    patroni.restore()
    lost_etcd, lost_plain = w_etcd.lost(patroni), w_plain.lost(patroni)
    FIGURES["hung Patroni: key expired to /master dropping the old leader (s, "
            "10 ms sampling)"] = f"{dropped - expired:.3f}"
    FIGURES["hung Patroni, with the settings: writes acknowledged / lost"] = (
        f"{len(w_etcd.acked)} / {lost_etcd}")
    FIGURES["hung Patroni, without: writes acknowledged / lost"] = (
        f"{len(w_plain.acked)} / {lost_plain}")
    FIGURES["hung Patroni, with the settings: time with no master (s)"] = (
        f"{no_master_time(watch, 'etcd', start, end):.2f}")
    FIGURES["hung Patroni, without: time with no master (s)"] = (
        f"{no_master_time(watch, 'plain', start, end):.2f}")
    assert still_writable is not None, "no split brain: the old leader stopped writing"
    assert dropped - expired <= 0.1 + 0.02, (dropped, expired)
    bad = named_without_key(watch, keys, "etcd")
    assert not bad, "named master without the leader key:\n" + "\n".join(bad[:20])
    assert lost_etcd == 0, f"{lost_etcd} acknowledged writes lost"
    assert set(watch.answers("plain", start, end)) == {old.host}


def test_hung_node(patroni: PatroniCluster, pg_status: Callable[..., Daemon]) -> None:
    """
    The whole leader frozen (Patroni, the postmaster and its processes), then
    thawed after another member is promoted: its PostgreSQL comes back
    writable until its Patroni demotes it, and is never named meanwhile.

    The watcher's role thread blocks on the frozen server (a query to a
    stopped backend never returns), so roles are asked here, of the other
    members, on new connections; only the watcher's ``/master`` answers and
    the key sampler are used.
    """
    import os
    import signal

    from pgtopology import descendants

    daemon = pg_status()
    old = patroni.leader()
    assert old is not None
    others = [n for n in patroni.nodes if n is not old]
    pm = old.postmaster_pid
    assert pm is not None and old.patroni_pid is not None
    frozen = [old.patroni_pid, pm, *descendants(pm)]

    def writable(node: Any) -> bool:
        try:
            return not node.in_recovery()
        except Exception:  # noqa: BLE001 - starting, stopping
            return False

    with Watch(patroni, {"etcd": daemon}) as watch, KeySampler(patroni) as keys:
        start = time.monotonic()
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        try:
            new = poll(lambda: next((n for n in others if writable(n)), None), TTL + 30,
                       "another member promoted", 0.02)
            promoted = time.monotonic()
            named = watch.wait_named("etcd", new.host, start, ONE_CHECK + 2)
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
        thawed = time.monotonic()
        old_writable = writable(old)
        poll(lambda: not writable(old), 60, "old leader demoted", 0.02, patroni.logs)
        demoted = time.monotonic()
        time.sleep(1)
    FIGURES["hung node: promoted (seen within 20 ms) to named (s)"] = f"{named - promoted:.3f}"
    FIGURES["hung node: old leader writable after the thaw (s)"] = (
        f"{demoted - thawed:.2f} (writable when first asked: {old_writable})")
    assert named - promoted <= ONE_CHECK
    assert set(watch.answers("etcd", named)) == {new.host}
    assert old.host not in watch.answers("etcd", thawed)
    bad = named_without_key(watch, keys, "etcd")
    assert not bad, "named master without the leader key:\n" + "\n".join(bad[:20])


class CuttableProxy:
    """
    A threaded TCP proxy to etcd that can be cut (every connection closed,
    new ones closed at once) and put back: the store unreachable from
    pg-status alone, while Patroni keeps using it.
    """

    def __init__(self, target_port: int) -> None:
        import socket

        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cut = False
        self.conns: list[Any] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: Any, b: Any) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass

    def set_cut(self, cut: bool) -> None:
        import socket

        self.cut = cut
        if cut:
            with self._lock:
                conns, self.conns = self.conns, []
            for s in conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self.listener.close()
        self.set_cut(True)


def metric(daemon: Daemon, name: str) -> float | None:
    status, body = daemon.get("/metrics")
    assert status == 200
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_store_unreachable_from_pg_status(patroni: PatroniCluster,
                                          pg_status: Callable[..., Daemon]) -> None:
    """
    etcd cut off from pg-status only (Patroni unaffected), with
    ``patroni_ttl=3`` and ``patroni_unreadable=no_master``: one WARNING,
    ``pgstatus_patroni_store_up`` 0, the leader still named for ``ttl``,
    then no master; put back: one INFO, the leader named again.
    """
    proxy = CuttableProxy(int(patroni.etcd.url.rsplit(":", 1)[1]))
    try:
        daemon = pg_status(patroni_etcd=f"http://127.0.0.1:{proxy.port}", patroni_ttl="3",
                           patroni_unreadable="no_master")
        leader = patroni.leader()
        assert leader is not None
        poll(lambda: daemon.get("/master") == (200, leader.host), 10, "leader named")
        assert metric(daemon, "pgstatus_patroni_store_up") == 1
        cut = time.monotonic()
        proxy.set_cut(True)
        poll(lambda: metric(daemon, "pgstatus_patroni_store_up") == 0, 5, "store down")
        noticed = time.monotonic()
        assert daemon.get("/master") == (200, leader.host)  # trusted for ttl
        poll(lambda: daemon.get("/master")[0] == 404, 6, "no master after ttl")
        stale = time.monotonic()
        assert metric(daemon, "pgstatus_patroni_store_fresh") == 0
        proxy.set_cut(False)
        poll(lambda: daemon.get("/master") == (200, leader.host), 10, "leader named again")
        back = time.monotonic()
        log = daemon.log(None)
    finally:
        proxy.close()
    FIGURES["store cut: noticed (s)"] = f"{noticed - cut:.2f}"
    FIGURES["store cut: no master after (s, patroni_ttl=3)"] = f"{stale - cut:.2f}"
    FIGURES["store back: leader named again after (s)"] = f"{back - stale:.2f}"
    assert log.count("Patroni store unreachable") == 1, log[-3000:]
    assert log.count("Patroni store readable again") == 1, log[-3000:]
    assert log.count("not read for 3s") == 1, log[-3000:]
