"""
Follower mode (``pg_status__follow``): mirror a hub's host states instead
of polling PostgreSQL, and poll on our own while no hub delivers.

The follower holds one streaming request to one hub at a time
(``GET <hub>/follow``, see :mod:`pgstatus.http.hub`) and publishes every
snapshot it receives into its own :class:`~pgstatus.monitor.registry.Registry`, so its
HTTP side answers from memory exactly as when it polls: selection
(round-robin, sticky keys, locality by our own ``current_dc``/``current_geo``)
stays local.

- Hubs are tried in the configured order; after a full round without a
  stream, the next round starts after a short pause.  A hub that follows
  another itself refuses (409): no chains.
- When nothing arrived from any hub for ``follow_timeout_ms`` (snapshots
  and heartbeats both count), the monitor starts polling PostgreSQL, seeded
  with the availability the last mirrored view showed; that view stays
  published until every host has a check of ours, then ours replaces it.
- When a hub delivers a ready snapshot again, polling stops (connections
  closed) and the snapshot is published.
- ``wait_ms`` fresh reads ask the hub for the extra checks (``GET
  <hub>/follow/check?index=<host index>``), seen in its next snapshots.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config
from pgstatus.model.snapshot import SnapshotError, decode
from pgstatus.model.stats import FollowStats
from pgstatus.model.status import HostStatus
from pgstatus.monitor.httpbody import body_producer, discard_body, parse_event, read_body
from pgstatus.monitor.service import MonitorService

log = Logger(namespace="pgstatus.follow")

#: the longest event accepted from a hub
MAX_EVENT = 4 << 20
#: pause between two rounds over the hubs, at most
ROUND_PAUSE = 1.0

STARTING, FOLLOWING, POLLING = "starting", "following", "polling"


class _EventStream(Protocol):
    """
    Parses the hub's Server-Sent Events and hands them to the follower.
    """

    def __init__(self, follower: FollowerService, hub: str) -> None:
        self.follower = follower
        self.hub = hub
        self._buf = b""
        self.closed: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        buf = self._buf + data
        while True:
            end = buf.find(b"\n\n")
            if end < 0:
                break
            frame, buf = buf[:end], buf[end + 2:]
            if not self.follower._event(self, frame):
                self._buf = b""
                self.stop()
                return
        self._buf = buf
        if len(buf) > MAX_EVENT:
            self.follower._refuse(self.hub, f"an event over {MAX_EVENT} bytes")
            self._buf = b""
            self.stop()

    def stop(self) -> None:
        if self.transport is not None:
            body_producer(self).stopProducing()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.closed.callback(None)
        self.follower._stream_ended(self)


class FollowerService(Service):
    """
    Follows the hubs of ``config.follow`` and switches the monitor's
    polling on and off.

    :param settings: the running configuration (``follow``,
        ``follow_timeout_ms``, the host list snapshots must match).
    :param reactor: TCP, time and name resolution.
    :param monitor: the monitor, created without polling.
    :param random: a number in [0, 1) per takeover: where in one period the
        first round of our own checks starts.
    """

    name = "follower"

    def __init__(self, settings: ConfigProvider, reactor: Any, monitor: MonitorService,
                 random: Callable[[], float] = random.random) -> None:
        self._settings = settings
        self._random = random
        config = settings.current
        self._reactor = reactor
        self._monitor = monitor
        self._pool = HTTPConnectionPool(reactor, persistent=True)
        self._pool.maxPersistentPerHost = 2
        self._agent = Agent(reactor, connectTimeout=config.follow_timeout_ms / 1000,
                            pool=self._pool)
        self._stream_pool = HTTPConnectionPool(reactor, persistent=False)
        self._stream_agent = Agent(reactor, connectTimeout=config.follow_timeout_ms / 1000,
                                   pool=self._stream_pool)
        self._timeout = config.follow_timeout_ms / 1000
        #: ``starting``, ``following`` (a hub's snapshots are published) or
        #: ``polling`` (our own checks)
        self.mode = STARTING
        #: the hub whose stream is open (or being opened), if any
        self.hub: str | None = None
        self._hub_index = -1
        self._request: Deferred[Any] | None = None
        self._stream: _EventStream | None = None
        self._silence: Any = None
        self._stall: Any = None
        self._retry: Any = None
        self._forwarding: set[tuple[str, int]] = set()
        #: local time of the last event from a hub (snapshot or heartbeat)
        self.last_event: float | None = None
        #: local time of the last snapshot published
        self.last_snapshot: float | None = None
        #: hub version of the last snapshot published
        self.version: int | None = None
        self.switches = 0  # between following and polling
        self.snapshots = 0  # published
        self._last_data: bytes | None = None
        #: the hub whose snapshot was published last
        self._followed: str | None = None

    @property
    def config(self) -> Config:
        """The configuration in force."""
        return self._settings.current

    def follow_stats(self) -> FollowStats:
        """This follower's state, for ``/metrics``."""
        age = None if self.last_event is None else self._reactor.seconds() - self.last_event
        return FollowStats(self.mode, self.hub, age, self.switches, self.snapshots)

    # -- service ---------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._arm()
        self._connect(0)

    def stopService(self) -> Deferred[None] | None:
        super().stopService()
        for t in (self._silence, self._stall, self._retry):
            if t is not None and t.active():
                t.cancel()
        self._silence = self._stall = self._retry = None
        self._abort()
        return self._pool.closeCachedConnections()

    def mirrored_for(self, config: Config) -> tuple[tuple[HostStatus, ...], int | None] | None:
        """
        For a reload: while following, the last snapshot as statuses and
        master index for ``config``'s host list, for the monitor to publish
        instead of its own (never checked, or stale) host states; ``None``
        when not following or when the snapshot no longer fits.
        """
        if self.mode != FOLLOWING or self._last_data is None:
            return None
        try:
            _, _, master, statuses = decode(self._last_data, config.hosts)
        except SnapshotError:
            return None
        return statuses, master

    def settings_changed(self, mirrored: bool) -> None:
        """
        After a reload (the provider holds the new configuration): the hubs
        and the timeout need a restart; if we were following but the last
        snapshot no longer fits the host list (``mirrored`` false), poll on
        our own at once.
        """
        if self.mode != FOLLOWING or mirrored:
            return
        self._refuse(self.hub or "?", "its snapshot does not fit the reloaded host list")
        self._abort()
        self._next()
        if self._silence is not None and self._silence.active():
            self._silence.cancel()
        self._silent()

    # -- fresh reads ---------------------------------------------------------

    def check_soon(self, index: int) -> None:
        """
        An extra check of host ``index``: by the hub while following (one
        request per host at a time), else by our monitor.
        """
        hub = self._stream.hub if self._stream is not None else None
        if self.mode != FOLLOWING or hub is None:
            self._monitor.check_soon(index)
            return
        key = (hub, index)
        if key in self._forwarding:
            return
        self._forwarding.add(key)
        url = f"{hub}/follow/check?index={index}".encode()
        d = self._agent.request(b"GET", url)
        d.addCallback(read_body)
        # a hub that does not answer must not keep this host's checks waiting
        d.addTimeout(self._timeout / 2, self._reactor)
        d.addErrback(lambda f: log.debug("extra check request failed hub={hub} error={error}",
                                         hub=hub, error=f.getErrorMessage()))
        d.addBoth(lambda _: self._forwarding.discard(key))

    # -- connecting ------------------------------------------------------------

    def _connect(self, index: int) -> None:
        self._retry = None
        if not self.running:
            return
        hubs = self.config.follow
        self._hub_index = index
        self.hub = hub = hubs[index]
        self._watch()
        d = self._request = self._stream_agent.request(
            b"GET", f"{hub}/follow".encode(),
            Headers({b"accept": [b"text/event-stream"]}))
        d.addCallbacks(self._response, self._connect_failed, callbackArgs=(hub, d),
                       errbackArgs=(hub, d))

    def _response(self, response: Any, hub: str, d: Deferred[Any]) -> None:
        if d is not self._request:
            # an attempt given up (_abort) that answered after all
            discard_body(response)
            return
        self._request = None
        if response.code != 200:
            self._unwatch()
            body = read_body(response)
            body.addBoth(lambda b: self._refuse(
                hub, f"status {response.code}"
                + (f" {b[:200].decode('utf-8', 'replace')}" if isinstance(b, bytes) else "")))
            body.addBoth(lambda _: self._next())
            return
        stream = self._stream = _EventStream(self, hub)
        response.deliverBody(stream)

    def _connect_failed(self, f: Failure, hub: str, d: Deferred[Any]) -> None:
        if d is not self._request:
            return  # given up on purpose (_abort): whoever did it goes on
        self._request = None
        if self.running:
            log.debug("hub not reachable hub={hub} error={error}", hub=hub,
                      error=f.getErrorMessage())
            self._next()

    def _refuse(self, hub: str, why: str) -> None:
        log.warn("not following hub={hub}: {why}", hub=hub, why=why)

    def _next(self) -> None:
        """Try the next hub, or start a new round after a pause."""
        if not self.running or self._retry is not None:
            return
        self._unwatch()
        index = self._hub_index + 1
        if index < len(self.config.follow):
            self._connect(index)
        else:
            self.hub = None
            pause = min(ROUND_PAUSE, self._timeout / 2)
            self._retry = self._reactor.callLater(pause, self._connect, 0)

    def _abort(self) -> None:
        request, self._request = self._request, None
        if request is not None:
            request.cancel()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.stop()

    def _stream_ended(self, stream: _EventStream) -> None:
        if stream is not self._stream:
            return
        self._stream = None
        self._unwatch()
        if self.running:
            log.info("hub stream ended hub={hub}", hub=stream.hub)
            self._next()

    # -- events ----------------------------------------------------------------

    def _event(self, stream: _EventStream, frame: bytes) -> bool:
        """
        One event of ``stream``; ``False`` ends the stream.
        """
        if stream is not self._stream:
            return False
        event, data = parse_event(frame)
        now = self._reactor.seconds()
        self._watch()
        if event == "heartbeat":
            if self.mode == FOLLOWING:
                self.last_event = now
                self._arm()
            return True
        if event != "snapshot":
            return True
        try:
            version, ready, master, statuses = decode(data, self.config.hosts)
        except SnapshotError as e:
            self._refuse(stream.hub, str(e))
            return False
        if not ready:
            return True
        if self.mode != FOLLOWING:
            self._follow(stream.hub)
        elif self._followed != stream.hub:
            log.info("following hub={hub}", hub=stream.hub)  # moved to another hub
        self.hub = self._followed = stream.hub
        self._last_data = data
        self.last_event = self.last_snapshot = now
        self.version = version
        self.snapshots += 1
        self._arm()
        self._monitor.registry.mirror(statuses, master, ready)
        return True

    def _follow(self, hub: str) -> None:
        if self.mode == POLLING:
            self.switches += 1
            self._monitor.stop_polling()
        self.mode = FOLLOWING
        log.info("following hub={hub}", hub=hub)

    def _arm(self) -> None:
        """
        (Re)start the deadline for news from a hub.
        """
        if self._silence is not None and self._silence.active():
            self._silence.reset(self._timeout)
        else:
            self._silence = self._reactor.callLater(self._timeout, self._silent)

    def _silent(self) -> None:
        """
        Nothing from any hub for ``follow_timeout_ms``: poll ourselves.
        """
        self._silence = None
        if not self.running or self.mode == POLLING:
            return
        if self.mode == FOLLOWING:
            self.switches += 1
        self.mode = POLLING
        log.warn("no hub delivered within follow_timeout_ms={ms}; polling PostgreSQL "
                 "(the last snapshot answers until every host is checked)",
                 ms=self.config.follow_timeout_ms)
        self._monitor.registry.seed_from_view()
        # a hub's followers all fall silent at once: each starts its first
        # round at a random point of one period, as in steady polling, not in
        # one herd of connection setups (which timed out checks of 50)
        self._monitor.start_polling(self._random() * self.config.sleep_ms / 1000)

    def _watch(self) -> None:
        """
        (Re)start the deadline of the stream or connection attempt in
        progress: half of ``follow_timeout_ms`` without an event (a hub
        sends a heartbeat every half second), then the next hub is tried,
        so a frozen hub is left before the follower starts polling.
        """
        if self._stall is not None and self._stall.active():
            self._stall.reset(self._timeout / 2)
        else:
            self._stall = self._reactor.callLater(self._timeout / 2, self._stalled)

    def _unwatch(self) -> None:
        if self._stall is not None and self._stall.active():
            self._stall.cancel()
        self._stall = None

    def _stalled(self) -> None:
        self._stall = None
        if not self.running:
            return
        log.info("hub silent, trying the next hub={hub}", hub=self.hub)
        self._abort()
        self._next()
