"""
The hub side of follower mode: ``GET /follow`` streams this instance's
published view to followers as Server-Sent Events.

A subscriber gets a ``snapshot`` event at once and after every change of
the view (roles, availability, lags, positions, sync flags, the selected
master, readiness), each a complete snapshot (:mod:`pgstatus.model.snapshot`)
with an increasing ``version``, and a ``heartbeat`` event every half second.
One snapshot is encoded per change, whatever the number of followers.

A follower that does not keep up (Twisted's write buffer for it fills) gets
only the latest snapshot once its buffer drains; one that stays stuck for
ten seconds is disconnected, and reconnects from a full snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from zope.interface import implementer

from pgstatus.config.settings import HostConfig
from pgstatus.model.snapshot import encode
from pgstatus.model.status import View

if TYPE_CHECKING:
    # the requests Klein hands over are twisted.web's (IRequest does not
    # declare the producer and finish methods a stream needs)
    from twisted.web.server import Request as IRequest

log = Logger(namespace="pgstatus.follow")

#: seconds between heartbeats (a follower leaves a hub silent for half
#: its follow_timeout_ms, at least 1 s)
HEARTBEAT = 0.5
#: the stream's content type
EVENT_STREAM = b"text/event-stream"


#: a follower whose connection stays full this long is disconnected
STALLED = 10.0


@implementer(IPushProducer)
class _Subscriber:
    """
    One follower's stream, and the producer registered on its connection.

    While the connection's buffer is full (Twisted pauses the producer, at
    64 KiB), snapshots are not queued: only the latest is sent when it
    drains, as each is complete.  A follower that stays paused for
    :data:`STALLED` seconds is disconnected.
    """

    def __init__(self, hub: Hub, request: IRequest) -> None:
        self.hub = hub
        self.request = request
        self.peer = str(request.getClientAddress())
        #: local time the connection's buffer filled, while it is full
        self.paused_at: float | None = None
        #: a snapshot was skipped while paused
        self.behind = False
        #: fires (with the empty rest of the body) when the hub ends the
        #: stream; cancelled when the follower goes away first
        self.done: Deferred[bytes] = Deferred(lambda d: self.hub._drop(self))

    def snapshot(self, frame: bytes) -> None:
        if self.paused_at is not None:
            self.behind = True
        else:
            self.request.write(frame)

    def heartbeat(self, frame: bytes, now: float) -> None:
        if self.paused_at is None:
            self.request.write(frame)
        elif now - self.paused_at >= STALLED:
            log.info("follower not reading, disconnecting peer={peer}", peer=self.peer)
            self.hub._drop(self)
            transport = getattr(self.request.channel, "transport", None)
            if transport is not None:
                transport.abortConnection()

    def pauseProducing(self) -> None:
        if self.paused_at is None:
            self.paused_at = self.hub._clock.seconds()

    def resumeProducing(self) -> None:
        self.paused_at = None
        if self.behind:
            self.behind = False
            self.request.write(self.hub._snapshot(self.hub._current()))

    def stopProducing(self) -> None:
        self.hub._drop(self)


class Hub:
    """
    The followers' streams of one instance.

    :param clock: time, for heartbeats.
    :param current: returns the published view.
    :param hosts: returns the configured hosts (names and ports identify
        them in snapshots).
    """

    def __init__(self, clock: IReactorTime, current: Callable[[], View],
                 hosts: Callable[[], Sequence[HostConfig]]) -> None:
        self._clock = clock
        self._current = current
        self._hosts = hosts
        self._subscribers: list[_Subscriber] = []
        self._version = 0
        self._key: Any = None
        self._frame = b""
        self._heartbeat = LoopingCall(self._beat)
        self._heartbeat.clock = clock
        #: snapshots encoded (for /metrics)
        self.snapshots = 0

    @property
    def followers(self) -> int:
        """
        Streams open now.
        """
        return len(self._subscribers)

    def subscribe(self, request: IRequest) -> Deferred[bytes]:
        """
        Start streaming to ``request`` (the view is ready: the caller
        answers 503 before that).

        :return: fires with ``b""`` when the hub ends the stream (shutdown),
            for the web framework to finish the response.
        """
        request.setResponseCode(200)
        request.setHeader(b"content-type", EVENT_STREAM)
        request.setHeader(b"cache-control", b"no-store")
        channel = getattr(request, "channel", None)
        if channel is not None and hasattr(channel, "setTimeout"):
            channel.setTimeout(None)  # heartbeats and the follower's deadline instead
        sub = _Subscriber(self, request)
        request.registerProducer(sub, True)
        self._subscribers.append(sub)
        request.notifyFinish().addBoth(lambda _: self._drop(sub))
        log.info("follower connected peer={peer} followers={n}", peer=sub.peer,
                 n=len(self._subscribers))
        sub.snapshot(self._snapshot(self._current()))
        if not self._heartbeat.running:
            self._heartbeat.start(HEARTBEAT, now=False)
        return sub.done

    def published(self, old: View, new: View) -> None:
        """
        Registry observer: send a snapshot when the view changed.
        """
        if not self._subscribers:
            return
        key = self._key
        frame = self._snapshot(new)
        if self._key == key:
            return
        for sub in list(self._subscribers):
            sub.snapshot(frame)

    def close(self) -> None:
        """
        End every stream (service shutdown).
        """
        for sub in list(self._subscribers):
            self._drop(sub)
            sub.request.unregisterProducer()
            if not sub.done.called:
                sub.done.callback(b"")

    def _snapshot(self, view: View) -> bytes:
        key = (view.hosts, None if view.master is None else view.master.index, view.ready)
        if key != self._key:
            self._key = key
            self._version += 1
            self.snapshots += 1
            self._frame = (b"event: snapshot\ndata: "
                           + encode(view, self._hosts(), self._version) + b"\n\n")
        return self._frame

    def _beat(self) -> None:
        frame = b'event: heartbeat\ndata: {"version":%d}\n\n' % self._version
        now = self._clock.seconds()
        for sub in list(self._subscribers):
            sub.heartbeat(frame, now)

    def _drop(self, sub: _Subscriber) -> None:
        if sub in self._subscribers:
            self._subscribers.remove(sub)
            log.info("follower disconnected peer={peer} followers={n}", peer=sub.peer,
                     n=len(self._subscribers))
        if not self._subscribers and self._heartbeat.running:
            self._heartbeat.stop()
