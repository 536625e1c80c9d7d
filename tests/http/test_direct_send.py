"""
Direct send: the fast path writes an answer straight to the socket when the
transport has nothing queued, and queues only what the socket does not
take.  On real sockets on 127.0.0.1, every guarantee of the transport's
buffered write still holds: order with pipelined requests, partial sends and
a full socket buffer (EAGAIN), the hand-off to twisted.web with answers
still queued, half-closed and reset peers, ``Connection: close`` and
``HEAD``.
"""

from __future__ import annotations

import re
import socket
import struct
import time

import pytest
import pytest_twisted
from http_apis import make_api, make_site
from test_front import CONFIG, view
from twisted.internet import defer, task, threads

DEADLINE = 10.0


@pytest.fixture
def sites(reactor):
    """
    Servers on Twisted's ``listenTCP``, with the shortcut on or off.
    """
    made = []

    def make(fast: bool = True):
        v = view()
        api = make_api(lambda: v, CONFIG, "9.9.9")
        site = make_site(api, reactor, enabled=fast)
        port = reactor.listenTCP(0, site, interface="127.0.0.1")
        made.append(port)
        return site, port.getHost().port

    yield make
    for p in made:
        pytest_twisted.blockon(p.stopListening())


def undated(data: bytes) -> bytes:
    return re.sub(rb"Date: [^\r]*\r\n", b"Date: X\r\n", data)


def connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(DEADLINE)
    s.connect(("127.0.0.1", port))
    return s


def read_to_eof(s: socket.socket) -> bytes:
    chunks = []
    while chunk := s.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def exchange(port: int, payload: bytes) -> bytes:
    with connect(port) as s:
        s.sendall(payload)
        return read_to_eof(s)


def get(path: str, method: str = "GET", close: bool = False) -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
            + ("Connection: close\r\n" if close else "") + "\r\n").encode()


#: a mix of routes and methods, round-robin included (fixed view: both
#: servers answer the same sequence)
MIX = [get("/hosts"), get("/master", "HEAD"), get("/replica"), get("/version"),
       get("/status?host=pg-2"), get("/replica?lag_ms=100", "HEAD")]


@defer.inlineCallbacks
def wait_for(reactor, predicate, what: str):
    """
    Poll ``predicate`` on the reactor thread until true, for at most
    :data:`DEADLINE` seconds.
    """
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        yield task.deferLater(reactor, 0.005, lambda: None)


def the_channel(site):
    channels = site.open_connections()
    return channels[0] if len(channels) == 1 else None


def queued(channel) -> bool:
    """
    Whether the connection's answers now go through the transport's queue
    (the socket did not take one whole).
    """
    return not channel.direct


@pytest_twisted.inlineCallbacks
def test_full_socket_buffer_keeps_order_and_hand_off(reactor, sites):
    """
    A client pipelines hundreds of requests and reads nothing until the
    server's socket buffer is full and answers are queued in the transport
    (partial sends, EAGAIN); then a request only twisted.web answers, then
    more.  Once the client reads, it gets every answer, in order, byte for
    byte what the server without fast path sends.
    """
    fast_site, fast = sites(True)
    _, slow = sites(False)
    payload = b"".join(MIX * 150) + (
        b"POST /master HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        + b"".join(MIX * 5) + get("/version", close=True))

    client = connect(fast, rcvbuf=4096)
    try:
        yield wait_for(reactor, lambda: the_channel(fast_site) is not None, "the connection")
        channel = the_channel(fast_site)
        channel.transport.getHandle().setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sending = threads.deferToThread(client.sendall, payload)
        yield wait_for(reactor, lambda: queued(channel), "answers queued in the transport")
        got = yield threads.deferToThread(read_to_eof, client)
        yield sending
    finally:
        client.close()
    expected = yield threads.deferToThread(exchange, slow, payload)
    assert got.count(b"HTTP/1.1 ") == len(MIX) * 155 + 2
    assert undated(got) == undated(expected)
    yield wait_for(reactor, lambda: fast_site.connections == 0, "the connection to close")


@pytest_twisted.inlineCallbacks
def test_pipelined_in_one_write_with_close_in_the_middle(sites):
    """
    Requests pipelined in one write are answered in one go, in order; a
    request with ``Connection: close`` is the last one answered.
    """
    _, fast = sites(True)
    _, slow = sites(False)
    payload = (b"".join(MIX) + get("/master", "HEAD", close=True) + get("/hosts"))
    got = yield threads.deferToThread(exchange, fast, payload)
    expected = yield threads.deferToThread(exchange, slow, payload)
    assert got.count(b"HTTP/1.1 ") == len(MIX) + 1
    assert b"Connection: close" in got.rsplit(b"HTTP/1.1 ", 1)[1]
    assert undated(got) == undated(expected)


@pytest_twisted.inlineCallbacks
def test_half_closed_peer_gets_its_answers(sites):
    """
    A client that sends its requests and shuts down its side at once (no
    ``Connection: close``) still receives every answer before the server
    closes.
    """
    site, fast = sites(True)

    def half_close() -> bytes:
        with connect(fast) as s:
            s.sendall(get("/master") + get("/master", "HEAD") + get("/version"))
            s.shutdown(socket.SHUT_WR)
            return read_to_eof(s)

    got = yield threads.deferToThread(half_close)
    answers = got.split(b"HTTP/1.1 200 OK")
    assert len(answers) == 4
    assert answers[1].endswith(b"\r\n\r\npg-1")
    assert answers[2].endswith(b"Content-Length: 4\r\n\r\n")
    assert answers[3].endswith(b"\r\n\r\n9.9.9")


@pytest_twisted.inlineCallbacks
def test_reset_peer_with_answers_queued(reactor, sites):
    """
    A client that resets the connection while answers are queued: the
    connection is dropped and counted out, and the server answers the next
    client.
    """
    site, fast = sites(True)
    client = connect(fast, rcvbuf=4096)
    try:
        yield wait_for(reactor, lambda: the_channel(site) is not None, "the connection")
        channel = the_channel(site)
        channel.transport.getHandle().setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sending = threads.deferToThread(client.sendall, get("/hosts") * 400)
        yield wait_for(reactor, lambda: queued(channel), "answers queued in the transport")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        client.close()  # RST
    try:
        yield sending
    except OSError:
        pass  # the sender may see its own reset
    yield wait_for(reactor, lambda: site.connections == 0, "the reset connection to close")
    got = yield threads.deferToThread(exchange, fast, get("/master", close=True))
    assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(b"\r\n\r\npg-1")


@pytest_twisted.inlineCallbacks
def test_reset_peer_before_the_answer(reactor, sites):
    """
    A client that sends a request and resets at once: whether the reset
    arrives before or after the answer is sent, the server drops the
    connection without error and keeps serving.
    """
    site, fast = sites(True)
    for _ in range(20):
        s = connect(fast)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(get("/hosts") * 3)
        s.close()
    yield wait_for(reactor, lambda: site.connections == 0, "the reset connections to close")
    got = yield threads.deferToThread(exchange, fast, get("/hosts", close=True))
    assert got.startswith(b"HTTP/1.1 200 OK")


@pytest_twisted.inlineCallbacks
def test_requests_arriving_while_answers_are_queued(reactor, sites):
    """
    A burst fills the socket buffer and queues answers in the transport;
    then the client alternates sending one request and reading a little, so
    requests keep arriving just as the socket has room again while answers
    are still queued.  The answers still arrive in order, byte for byte those
    of the server without fast path.
    """
    fast_site, fast = sites(True)
    _, slow = sites(False)
    burst = [get("/hosts")] * 100
    trickle = MIX * 100
    last = get("/version", close=True)

    client = connect(fast, rcvbuf=4096)
    try:
        yield wait_for(reactor, lambda: the_channel(fast_site) is not None, "the connection")
        the_channel(fast_site).transport.getHandle().setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

        def lockstep() -> bytes:
            chunks = []
            client.sendall(b"".join(burst))
            for r in trickle:
                client.sendall(r)
                chunks.append(client.recv(1024))
            client.sendall(last)
            return b"".join(chunks) + read_to_eof(client)

        got = yield threads.deferToThread(lockstep)
    finally:
        client.close()
    requests = burst + trickle + [last]
    expected = yield threads.deferToThread(exchange, slow, b"".join(requests))
    assert got.count(b"HTTP/1.1 ") == len(requests)
    assert undated(got) == undated(expected)
