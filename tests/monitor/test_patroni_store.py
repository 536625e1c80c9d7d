"""
The etcd watcher (:mod:`pgstatus.monitor.patroni_store`) against a fake v3
JSON gateway: a treq-like client whose ``post`` answers ``/v3/kv/range``,
``/v3/auth/authenticate`` and a streaming ``/v3/watch`` from an in-memory
key space with revisions, on a :class:`~twisted.internet.task.Clock`.
"""

from __future__ import annotations

import json
from base64 import b64decode, b64encode
from typing import Any

import pytest
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.model.leader import Leader
from pgstatus.monitor.patroni_store import BACKOFF, PatroniStore
from pgstatus.monitor.registry import Registry

PREFIX = "/service/demo/"
HOSTS = "10.0.0.1,10.0.0.2,10.0.0.3"


def b64(text: str) -> str:
    return b64encode(text.encode()).decode()


def member(host: str, port: int = 5432) -> str:
    return json.dumps({"conn_url": f"postgres://{host}:{port}/postgres", "role": "replica"})


class Transport:
    def __init__(self, response: StreamResponse) -> None:
        self.response = response
        self.stopped = False

    def stopProducing(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.response.end()


class StreamResponse:
    code = 200

    def __init__(self, etcd: FakeEtcd, start: int) -> None:
        self.etcd = etcd
        self.start = start
        self.proto: Any = None
        self.ended = False

    def deliverBody(self, proto: Any) -> None:
        self.proto = proto
        proto.makeConnection(Transport(self))
        if self.start and self.start <= self.etcd.compacted:
            self.send({"header": self.etcd.header(), "created": True, "canceled": True,
                       "compact_revision": str(self.etcd.compacted + 1)})
            return
        self.send({"header": self.etcd.header(), "created": True})
        events = [e for rev, e in self.etcd.log if rev >= self.start]
        if events:
            self.send({"header": self.etcd.header(), "events": events})

    def send(self, result: dict[str, Any]) -> None:
        if not self.ended:
            self.proto.dataReceived(json.dumps({"result": result}).encode() + b"\n")

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.etcd.streams.remove(self)
            self.proto.connectionLost(Failure(ResponseDone()))


class JsonResponse:
    def __init__(self, code: int, doc: Any) -> None:
        self.code = code
        self.doc = doc

    def json(self) -> Deferred[Any]:
        return succeed(self.doc)


class FakeEtcd:
    """A one-node etcd behind the JSON gateway."""

    def __init__(self) -> None:
        self.kvs: dict[str, tuple[str, int]] = {}
        self.revision = 1
        self.compacted = 0
        self.log: list[tuple[int, dict[str, Any]]] = []
        self.streams: list[StreamResponse] = []
        self.requests: list[tuple[str, Any, Any]] = []
        self.down = False
        #: answer ranges (the heartbeat) with this status instead
        self.range_code = 200
        self.users = {"u": "p"}
        self.tokens: set[str] = set()

    def header(self) -> dict[str, str]:
        return {"revision": str(self.revision)}

    def put(self, key: str, value: str) -> None:
        self.revision += 1
        self.kvs[key] = (value, self.revision)
        self._event({"kv": {"key": b64(key), "value": b64(value),
                            "mod_revision": str(self.revision)}})

    def delete(self, key: str) -> None:
        self.revision += 1
        del self.kvs[key]
        self._event({"type": "DELETE", "kv": {"key": b64(key),
                                               "mod_revision": str(self.revision)}})

    def _event(self, event: dict[str, Any]) -> None:
        self.log.append((self.revision, event))
        for s in list(self.streams):
            s.send({"header": self.header(), "events": [event]})

    def cut(self) -> None:
        """The store goes away: open streams end, new requests are refused."""
        self.down = True
        for s in list(self.streams):
            s.end()

    def post(self, url: str, json: Any = None, headers: Any = None, timeout: Any = None,
             unbuffered: bool = False) -> Deferred[Any]:
        path = "/" + url.split("/", 3)[3]
        self.requests.append((url, json, headers))
        if self.down:
            return fail(ConnectionRefusedError("down"))
        if path == "/v3/auth/authenticate":
            if self.users.get(json["name"]) != json["password"]:
                return succeed(JsonResponse(401, {}))
            token = f"tok{len(self.tokens)}"
            self.tokens.add(token)
            return succeed(JsonResponse(200, {"token": token}))
        if self.tokens and (headers or {}).get("Authorization", [None])[0] not in self.tokens:
            return succeed(JsonResponse(401, {}))
        if path == "/v3/kv/range":
            if self.range_code != 200:
                return succeed(JsonResponse(self.range_code, {}))
            key = b64decode(json["key"]).decode()
            end = b64decode(json["range_end"]).decode() if "range_end" in json else None
            kvs = [{"key": b64(k), "value": b64(v), "mod_revision": str(r)}
                   for k, (v, r) in sorted(self.kvs.items())
                   if (k == key if end is None else key <= k < end)]
            return succeed(JsonResponse(200, {"header": self.header(), "kvs": kvs}))
        if path == "/v3/watch":
            assert unbuffered
            stream = StreamResponse(self, int(json["create_request"]["start_revision"]))
            self.streams.append(stream)
            return succeed(stream)
        return succeed(JsonResponse(404, {}))

    def watch_starts(self) -> list[int]:
        return [int(j["create_request"]["start_revision"]) for u, j, _h in self.requests
                if u.endswith("/v3/watch")]

    def ranges(self) -> int:
        return sum(1 for u, j, _h in self.requests if u.endswith("/v3/kv/range")
                   and "range_end" in j)


def config(**extra: str) -> Any:
    env = {"pg_status__hosts": HOSTS, "pg_status__patroni_etcd": "http://e1:2379,http://e2:2379",
           "pg_status__patroni_scope": "demo", "pg_status__patroni_ttl": "20"}
    return load_config(env | {f"pg_status__{k}": v for k, v in extra.items()})


@pytest.fixture
def etcd() -> FakeEtcd:
    e = FakeEtcd()
    for i, host in enumerate(HOSTS.split(","), start=1):
        e.put(f"{PREFIX}members/node{i}", member(host))
    e.put(PREFIX + "leader", "node1")
    return e


def start(etcd: FakeEtcd, **extra: str) -> tuple[PatroniStore, Clock, list[Leader]]:
    clock = Clock()
    published: list[Leader] = []
    store = PatroniStore(config(**extra), clock, published.append, http=etcd,
                         wall=lambda: 1000.0 + clock.seconds())
    store.startService()
    return store, clock, published


def test_reads_then_watches_and_publishes_at_once(etcd: FakeEtcd) -> None:
    store, clock, published = start(etcd)
    assert published[-1] == Leader(fresh=True, up=True, member="node1",
                                   address=("10.0.0.1", 5432), revision=etcd.revision,
                                   changed_at=1000.0)
    assert etcd.watch_starts() == [etcd.revision + 1]
    # a change of the leader key is published on the spot: no time passes
    etcd.put(PREFIX + "leader", "node2")
    assert published[-1].member == "node2" and published[-1].address == ("10.0.0.2", 5432)
    # a member's own refresh (Patroni's every loop_wait) publishes nothing new
    n = len(published)
    etcd.put(PREFIX + "members/node3", member("10.0.0.3"))
    assert len(published) == n
    etcd.delete(PREFIX + "leader")
    assert published[-1].member is None and published[-1].address is None
    store.stopService()


def test_resumes_from_the_next_revision_after_a_broken_stream(
        etcd: FakeEtcd, log_events: Any) -> None:
    store, clock, published = start(etcd)
    seen = etcd.revision
    etcd.streams[0].end()
    assert not store.up and published[-1].fresh and not published[-1].up
    etcd.put(PREFIX + "leader", "node3")  # while nobody watches
    clock.advance(BACKOFF[0])
    assert etcd.watch_starts() == [seen + 1, seen + 1]
    assert etcd.ranges() == 1  # resumed, not read afresh
    assert published[-1].member == "node3" and published[-1].up
    assert store.url == "http://e2:2379"  # the next endpoint
    lines = log_events.text()
    assert sum("Patroni store unreachable" in line for line in lines) == 1
    assert sum("Patroni store readable again" in line for line in lines) == 1
    store.stopService()


def test_compacted_revision_reads_afresh(etcd: FakeEtcd) -> None:
    store, clock, published = start(etcd)
    etcd.streams[0].end()
    etcd.put(PREFIX + "leader", "node2")
    etcd.compacted = etcd.revision
    clock.advance(BACKOFF[0])
    clock.advance(0)
    assert etcd.ranges() == 2
    assert etcd.watch_starts()[-1] == etcd.revision + 1
    assert published[-1].member == "node2" and published[-1].up
    store.stopService()


def test_unreachable_store_warns_once_backs_off_and_goes_stale(
        etcd: FakeEtcd, log_events: Any) -> None:
    store, clock, published = start(etcd)
    etcd.cut()
    delays = []
    for _ in range(8):
        before = len(etcd.requests)
        waited = 0.0
        while len(etcd.requests) == before:
            clock.advance(0.05)
            waited += 0.05
        delays.append(round(waited, 2))
    assert delays[0] == pytest.approx(BACKOFF[0], abs=0.06)
    assert delays == sorted(delays) and max(delays) <= BACKOFF[2] + 0.05
    assert published[-1].fresh  # the last leader stays trusted for ttl
    clock.advance(20)
    assert not published[-1].fresh and published[-1].member == "node1"
    lines = log_events.text()
    assert sum("Patroni store unreachable" in line for line in lines) == 1
    assert sum("not read for 20s" in line for line in lines) == 1
    etcd.down = False
    clock.advance(BACKOFF[2])
    assert published[-1].fresh and published[-1].up
    assert sum("readable again" in line for line in log_events.text()) == 1
    store.stopService()


def test_heartbeat_failure_reconnects(etcd: FakeEtcd) -> None:
    store, clock, published = start(etcd)
    assert store.heartbeat == 5.0
    clock.advance(store.heartbeat)
    assert store.up and len(etcd.streams) == 1
    etcd.range_code = 503  # a member cut off from its quorum: the watch stays open
    clock.advance(store.heartbeat)
    assert not store.up and not etcd.streams
    etcd.range_code = 200
    clock.advance(BACKOFF[0])
    assert store.up and len(etcd.streams) == 1
    store.stopService()
    assert not etcd.streams


def test_authenticates_and_again_after_a_refusal(etcd: FakeEtcd) -> None:
    store, clock, published = start(etcd, patroni_username="u", patroni_password="p")
    auth = [r for r in etcd.requests if r[0].endswith("/auth/authenticate")]
    assert len(auth) == 1 and published[-1].member == "node1"
    assert etcd.requests[-1][2]["Authorization"] == ["tok0"]
    etcd.tokens.clear()
    etcd.tokens.add("other")  # the token expired
    clock.advance(store.heartbeat)
    clock.advance(BACKOFF[0])
    auth = [r for r in etcd.requests if r[0].endswith("/auth/authenticate")]
    assert len(auth) == 2 and store.up
    store.stopService()


def test_leader_of_no_host_is_warned(etcd: FakeEtcd, log_events: Any) -> None:
    etcd.put(PREFIX + "members/node9", member("10.9.9.9"))
    etcd.put(PREFIX + "leader", "node9")
    store, clock, published = start(etcd)
    assert published[-1].address == ("10.9.9.9", 5432)
    assert any("maps to no host" in line for line in log_events.text())
    store.stopService()


def test_registry_selects_the_key_holder_within_no_time(etcd: FakeEtcd) -> None:
    """
    Two hosts report master (a hung Patroni): the registry names the key's
    holder, none when the key expires, the new holder once it moves, all
    as each event arrives.
    """
    cfg = config()
    registry = Registry(ConfigProvider(cfg))
    for i, state in enumerate(registry.states):
        registry.record_success(state, master=i < 2, lsn=1, timeline=1 + i, lag_ms=0,
                                lag_bytes=0, position=None)
    assert registry.view.master is not None and registry.view.master.index == 0
    clock = Clock()
    store = PatroniStore(cfg, clock, registry.set_leader, http=etcd)
    store.startService()
    assert registry.view.master.index == 0
    etcd.delete(PREFIX + "leader")  # expired
    assert registry.view.master is None
    etcd.put(PREFIX + "leader", "node2")
    assert registry.view.master is not None and registry.view.master.index == 1
    assert registry.view.leader is not None and registry.view.leader.member == "node2"
    etcd.put(PREFIX + "leader", "node3")  # a replica holds it: not yet promoted
    assert registry.view.master is None
    store.stopService()


def test_stopped_while_reading_leaves_no_timer(etcd: FakeEtcd) -> None:
    """A range answered after the stop schedules nothing and publishes nothing."""
    pending: list[tuple[Deferred[Any], str, dict[str, Any]]] = []
    post = etcd.post

    def slow(url: str, **kw: Any) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        pending.append((d, url, kw))
        return d

    etcd.post = slow  # type: ignore[method-assign]
    clock = Clock()
    published: list[Leader] = []
    store = PatroniStore(config(), clock, published.append, http=etcd)
    store.startService()
    store.stopService()
    (d, url, kw), = pending
    post(url, **kw).addCallback(d.callback)  # the range's answer, late
    assert len(pending) == 1 and not published
    assert not clock.getDelayedCalls()
