"""
Patroni's leader key, watched in etcd (``pg_status__patroni_etcd``, opt-in).

The watcher reads the keys of one Patroni cluster (``<namespace><scope>/``:
``leader``, the member names it holds, and ``members/<name>``, whose
``conn_url`` says which host that is) through etcd's v3 JSON gateway, with
treq on the reactor: one ``POST /v3/kv/range`` of the prefix, then a
streaming ``POST /v3/watch`` from the revision after it (newline-delimited
JSON objects on one long response).  Every change that matters is handed
at once to ``publish`` as a :class:`~pgstatus.model.leader.Leader`; the
registry selects the master again with it (:mod:`pgstatus.model.leader`).

- After a broken stream the watch resumes from the last revision seen plus
  one, on the next endpoint, with back-off; a compacted revision means a
  new range first.
- A watch can stay open and silent on an etcd member cut off from its
  quorum: every ``heartbeat`` seconds the leader key is read (a
  linearizable read, which such a member refuses).  A failure closes the
  stream and reconnects.
- The store unreachable is said once (WARNING), its return once (INFO).
  The leader read last stays trusted for ``patroni_ttl`` after the last
  successful read (no other member can take the key before it expires);
  after that ``patroni_unreadable`` decides.
"""

from __future__ import annotations

import json
import time
from base64 import b64decode, b64encode
from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from pgstatus.config.patroni import key_prefix
from pgstatus.config.settings import Config
from pgstatus.model.leader import conn_address, host_index
from pgstatus.model.status import Leader
from pgstatus.monitor.httpbody import body_producer

log = Logger(namespace="pgstatus.patroni")

#: back-off between reconnections: first, factor, largest (seconds)
BACKOFF = (0.1, 2.0, 5.0)
#: the longest line accepted on the watch stream
MAX_LINE = 4 << 20
#: how long a range or an authentication may take (seconds)
REQUEST_TIMEOUT = 2.0


def _b64(text: str) -> str:
    return b64encode(text.encode()).decode()


def _prefix_end(prefix: str) -> str:
    """The range end of every key under ``prefix`` (its last byte plus one)."""
    raw = prefix.encode()
    return b64encode(raw[:-1] + bytes([raw[-1] + 1])).decode()


class _WatchStream(Protocol):
    """
    The body of one watch response: splits it into lines for the store.
    """

    def __init__(self, store: PatroniStore) -> None:
        self.store = store
        self.buf = b""
        self.open = True

    def dataReceived(self, data: bytes) -> None:
        self.buf += data
        while self.open:
            end = self.buf.find(b"\n")
            if end < 0:
                break
            line, self.buf = self.buf[:end], self.buf[end + 1:]
            if line.strip() and not self.store._line(self, line):
                self.stop()
        if len(self.buf) > MAX_LINE:
            self.store._failed(self, f"a watch line over {MAX_LINE} bytes")
            self.stop()

    def stop(self) -> None:
        """Close the stream (and its connection)."""
        if self.open:
            self.open = False
            if self.transport is not None:
                body_producer(self).stopProducing()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.open = False
        self.store._failed(self, "the watch stream ended")


class PatroniStore(Service):
    """
    Watches one Patroni cluster's keys and publishes its leader.

    :param config: the configuration (``patroni_*``, the hosts).
    :param reactor: timers (and the real HTTP client).
    :param publish: called with every new :class:`Leader`.
    :param http: a treq-like client (``post(url, json=, headers=, timeout=,
        unbuffered=)`` giving a response with ``code``, ``deliverBody`` and
        ``json()``); treq on ``reactor`` by default.
    :param wall: the wall clock, for :attr:`Leader.changed_at`.
    """

    name = "patroni"

    def __init__(self, config: Config, reactor: Any, publish: Callable[[Leader], object],
                 http: Any = None, wall: Callable[[], float] = time.time) -> None:
        self._config = config
        self._reactor = reactor
        self._publish = publish
        self._http = http if http is not None else _treq_client(config, reactor)
        self._wall = wall
        prefix = key_prefix(config.patroni_namespace, config.patroni_scope)
        self._prefix = prefix
        self._leader_key = prefix + "leader"
        self._members_prefix = prefix + "members/"
        self.heartbeat = max(0.5, min(5.0, config.patroni_ttl / 4))
        self._endpoint = 0
        self._token: str | None = None
        #: the leader key: member name and mod_revision; members' conn_url
        self._member: str | None = None
        self._revision = 0
        self._changed_at: float | None = None
        self._members: dict[str, tuple[str, int] | None] = {}
        #: the store's revision we have seen everything up to (0: none yet)
        self.revision = 0
        self._stream: _WatchStream | None = None
        self._fresh = False
        self.up = False
        self._down_since: float | None = None
        self._delay = BACKOFF[0]
        self._timers: dict[str, Any] = {}
        self.published: Leader | None = None
        self._unmapped_warned: str | None = None

    # -- the service ---------------------------------------------------------
    def startService(self) -> None:
        super().startService()
        log.info("watching Patroni's leader key key={key} endpoints={endpoints}",
                 key=self._leader_key, endpoints=",".join(self._config.patroni_etcd))
        self._connect()

    def stopService(self) -> None:
        super().stopService()
        for timer in self._timers.values():
            if timer.active():
                timer.cancel()
        self._timers.clear()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.stop()

    def _later(self, name: str, delay: float, f: Callable[[], object]) -> None:
        old = self._timers.get(name)
        if old is not None and old.active():
            old.cancel()
        self._timers[name] = self._reactor.callLater(delay, f)

    # -- requests --------------------------------------------------------------
    @property
    def url(self) -> str:
        """The endpoint in use."""
        return self._config.patroni_etcd[self._endpoint]

    async def _post(self, path: str, body: dict[str, Any], stream: bool = False) -> Any:
        headers = {"Content-Type": ["application/json"]}
        if self._config.patroni_username and path != "/v3/auth/authenticate":
            if self._token is None:
                doc = await self._post("/v3/auth/authenticate",
                                       {"name": self._config.patroni_username,
                                        "password": self._config.patroni_password})
                self._token = str(doc["token"])
            headers["Authorization"] = [self._token]
        response = await self._http.post(self.url + path, json=body, headers=headers,
                                         timeout=REQUEST_TIMEOUT, unbuffered=stream)
        if response.code != 200:
            self._token = None  # an expired token is the usual reason
            raise OSError(f"{path} answered HTTP {response.code}")
        if stream:
            return response
        return await response.json()

    def _connect(self) -> None:
        self._timers.pop("connect", None)
        if self.running:
            from twisted.internet.defer import Deferred

            Deferred.fromCoroutine(self._open()).addErrback(self._open_failed)

    async def _open(self) -> None:
        if not self.revision:
            doc = await self._post("/v3/kv/range", {"key": _b64(self._prefix),
                                                    "range_end": _prefix_end(self._prefix)})
            if not self.running:
                return
            self._load(doc)
        response = await self._post("/v3/watch", {"create_request": {
            "key": _b64(self._prefix), "range_end": _prefix_end(self._prefix),
            "start_revision": str(self.revision + 1)}}, stream=True)
        if not self.running:
            return
        stream = self._stream = _WatchStream(self)
        response.deliverBody(stream)
        self._later("heartbeat", self.heartbeat, self._beat)

    def _open_failed(self, failure: Failure) -> None:
        self._down(failure.getErrorMessage() or repr(failure.value))

    # -- what arrives ------------------------------------------------------------
    def _load(self, doc: dict[str, Any]) -> None:
        """A range of the whole prefix: the state afresh."""
        before = self._member
        self._member, self._revision, self._members = None, 0, {}
        for kv in doc.get("kvs", ()):
            self._put(kv)
        if self._member != before:
            self._changed_at = self._wall()
        self.revision = int(doc["header"]["revision"])
        self._ok()

    def _put(self, kv: dict[str, Any], deleted: bool = False) -> None:
        key = b64decode(kv["key"]).decode("utf-8", "replace")
        value = b64decode(kv.get("value", "")) if not deleted else b""
        if key == self._leader_key:
            member = value.decode("utf-8", "replace").strip() or None if not deleted else None
            if member != self._member:
                self._changed_at = self._wall()
            self._member = member
            self._revision = 0 if deleted else int(kv.get("mod_revision", 0))
        elif key.startswith(self._members_prefix):
            name = key[len(self._members_prefix):]
            if deleted:
                self._members.pop(name, None)
            else:
                self._members[name] = conn_address(value)

    def _line(self, stream: _WatchStream, line: bytes) -> bool:
        """One object of the watch stream; ``False``: close it."""
        if stream is not self._stream:
            return False
        try:
            result = json.loads(line)["result"]
        except (ValueError, KeyError, TypeError):
            self._failed(stream, f"not a watch result: {line[:200]!r}")
            return False
        if int(result.get("compact_revision", 0) or 0) or result.get("canceled"):
            log.info("Patroni store: revision {revision} compacted, reading the keys afresh",
                     revision=self.revision + 1)
            self.revision = 0
            self._stream = None
            self._later("connect", 0, self._connect)
            return False
        for event in result.get("events", ()):
            self._put(event["kv"], deleted=event.get("type") == "DELETE")
        header = result.get("header", {})
        self.revision = max(self.revision, int(header.get("revision", 0) or 0))
        self._ok()
        return True

    # -- state -----------------------------------------------------------------
    def _ok(self) -> None:
        """A successful read: fresh for ttl more, up, published."""
        if not self.running:
            return
        if not self.up and self._down_since is not None:
            log.info("Patroni store readable again endpoint={endpoint} after={seconds:.1f}s",
                     endpoint=self.url, seconds=self._reactor.seconds() - self._down_since)
        self.up, self._fresh, self._down_since = True, True, None
        self._delay = BACKOFF[0]
        self._later("stale", self._config.patroni_ttl, self._stale)
        if self._stream is not None:
            self._later("heartbeat", self.heartbeat, self._beat)
        self._emit()

    def _failed(self, stream: _WatchStream, why: str) -> None:
        if stream is self._stream:
            self._stream = None
            self._down(why)

    def _down(self, why: str) -> None:
        if not self.running or "connect" in self._timers:
            return
        hb = self._timers.pop("heartbeat", None)
        if hb is not None and hb.active():
            hb.cancel()
        if self.up or self._down_since is None:
            log.warn("Patroni store unreachable endpoint={endpoint} error={error}; the "
                     "leader read last stays trusted for {ttl}s, then master={rule}",
                     endpoint=self.url, error=why, ttl=self._config.patroni_ttl,
                     rule=self._config.patroni_unreadable)
            self._down_since = self._reactor.seconds()
        self.up = False
        self._emit()
        endpoints = self._config.patroni_etcd
        self._endpoint = (self._endpoint + 1) % len(endpoints)
        delay = self._delay
        self._delay = min(BACKOFF[2], self._delay * BACKOFF[1])
        self._later("connect", delay, self._connect)

    def _stale(self) -> None:
        self._fresh = False
        log.warn("Patroni store not read for {ttl}s (patroni_ttl): master={rule}",
                 ttl=self._config.patroni_ttl, rule=self._config.patroni_unreadable)
        self._emit()

    def _beat(self) -> None:
        from twisted.internet.defer import Deferred

        stream = self._stream
        if stream is None:
            return

        async def beat() -> None:
            await self._post("/v3/kv/range", {"key": _b64(self._leader_key)})
            if stream is self._stream:
                self._ok()

        def failed(failure: Failure) -> None:
            if stream is self._stream:
                self._stream = None
                stream.stop()
                self._down(f"heartbeat: {failure.getErrorMessage()}")

        Deferred.fromCoroutine(beat()).addErrback(failed)

    def _emit(self) -> None:
        address = self._members.get(self._member) if self._member is not None else None
        leader = Leader(fresh=self._fresh, up=self.up, member=self._member, address=address,
                        revision=self._revision, changed_at=self._changed_at,
                        unreadable=self._config.patroni_unreadable)
        if leader == self.published:
            return
        before, self.published = self.published, leader
        if before is None or (before.member, before.address) != (leader.member,
                                                                 leader.address):
            index = host_index(address, self._config.hosts)
            host = "none" if index is None else self._config.hosts[index].name
            log.info("Patroni leader key member={member} host={host} revision={revision}",
                     member=leader.member or "none", host=host, revision=leader.revision)
            if leader.member is not None and index is None and \
                    self._unmapped_warned != leader.member:
                self._unmapped_warned = leader.member
                log.warn("Patroni leader {member}'s conn_url maps to no host of "
                         "pg_status__hosts (address={address}): no master",
                         member=leader.member, address=address)
        self._publish(leader)


def _treq_client(config: Config, reactor: Any) -> Any:
    """treq on ``reactor``, with the TLS settings when the endpoints are https."""
    from treq.client import HTTPClient
    from twisted.web.client import Agent, HTTPConnectionPool

    pool = HTTPConnectionPool(reactor, persistent=True)
    if config.patroni_etcd[0].startswith("https:"):
        from pgstatus.monitor.patroni_tls import policy

        return HTTPClient(Agent(reactor, contextFactory=policy(config), pool=pool))
    return HTTPClient(Agent(reactor, pool=pool))
