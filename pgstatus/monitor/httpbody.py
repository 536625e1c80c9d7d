"""
Reading the bodies of the hubs' HTTP responses (follower mode): a short
body in full, a body closed unread, and the frames of a Server-Sent Events
stream.
"""

from __future__ import annotations

from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure


class _Body(Protocol):
    """
    Collects a short response body (the first 4 KiB).
    """

    def __init__(self) -> None:
        self.data = b""
        self.done: Deferred[bytes] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        if len(self.data) < 4096:
            self.data += data[:4096 - len(self.data)]

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.done.callback(self.data)


class _Discard(Protocol):
    """
    Closes a response's body unread.
    """

    def connectionMade(self) -> None:
        body_producer(self).stopProducing()


def discard_body(response: Any) -> None:
    """
    Close ``response``'s body unread.
    """
    response.deliverBody(_Discard())


def body_producer(body: Protocol) -> IPushProducer:
    """
    The transport of a response's body protocol: the response's producer
    (twisted.web's ``TransportProxyProducer``), which the ``transport``
    attribute, typed for connections, does not declare.
    """
    return cast(IPushProducer, body.transport)


def read_body(response: Any) -> Deferred[bytes]:
    """
    The (start of the) body of a short ``response``.
    """
    body = _Body()
    response.deliverBody(body)
    return body.done


def parse_event(frame: bytes) -> tuple[str, bytes]:
    """
    ``(event, data)`` of one Server-Sent Events frame.
    """
    event, data = "message", []
    for line in frame.split(b"\n"):
        if line.startswith(b"event:"):
            event = line[6:].strip().decode("ascii", "replace")
        elif line.startswith(b"data:"):
            data.append(line[5:].lstrip(b" "))
    return event, b"\n".join(data)
