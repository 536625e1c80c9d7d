"""
The HTTP listener's port and connections (``pgstatus.http.transport``) on
real sockets: accepted connections have ``TCP_NODELAY`` without a system
call of their own, an answered ``Connection: close`` ends with an orderly
close (FIN) and a cut connection with a reset, and the connection names
itself in logs and ``repr`` without per-connection strings.
"""

from __future__ import annotations

import os
import socket
import struct

import pytest
import pytest_twisted
from http_apis import make_api
from test_direct_send import DEADLINE, get, read_to_eof, the_channel, wait_for
from test_fastpath import CONFIG, view
from twisted.internet import threads

from pgstatus.http.channel import FastChannel
from pgstatus.http.fastpath import FastSite
from pgstatus.http.transport import NODELAY_INHERITED, Connection, listen_tcp


@pytest.fixture
def site(reactor):
    made = []

    def make(**kwargs):
        v = view()
        api = make_api(lambda: v, CONFIG, "9.9.9")
        s = FastSite(api.resource(), api.renderer, reactor, **kwargs)
        port = listen_tcp(reactor, 0, s, interface="127.0.0.1")
        made.append(port)
        return s, port

    yield make
    for p in made:
        pytest_twisted.blockon(p.stopListening())


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)


@pytest_twisted.inlineCallbacks
def test_accepted_connection_has_nodelay_and_names_itself(reactor, site, monkeypatch):
    """
    The listening socket has ``TCP_NODELAY``; an accepted connection has it
    too although nothing set it on it (where the system passes it on).
    """
    calls = []
    monkeypatch.setattr(Connection, "setTcpNoDelay",
                        lambda self, enabled: calls.append(enabled))
    s, port = site()
    assert port.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    client = connect(port.getHost().port)
    try:
        yield wait_for(reactor, lambda: the_channel(s) is not None, "the connection")
        t = the_channel(s).transport
        assert type(t) is Connection and isinstance(t.protocol, FastChannel)
        assert t.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert calls == ([] if NODELAY_INHERITED else [True])
        assert t.logPrefix() == "FastChannel"
        assert repr(t) == f"<FastChannel #{t.sessionno} on {port.getHost().port}>"
        assert t.getPeer().port == client.getsockname()[1]
        assert t.getHost().port == port.getHost().port
    finally:
        client.close()
    yield wait_for(reactor, lambda: s.connections == 0, "the connection to close")
    assert repr(t) == f"<FastChannel #{t.sessionno} on {port.getHost().port}>"  # closed too


@pytest_twisted.inlineCallbacks
def test_answered_close_is_orderly(reactor, site):
    """
    ``Connection: close``: the answer, then end of file (a FIN, no reset),
    and the server forgets the connection.
    """
    s, port = site()

    def exchange() -> bytes:
        with connect(port.getHost().port) as c:
            c.sendall(get("/master", close=True))
            return read_to_eof(c)

    got = yield threads.deferToThread(exchange)
    assert got.startswith(b"HTTP/1.1 200 ") and got.count(b"HTTP/1.1 ") == 1
    yield wait_for(reactor, lambda: s.connections == 0, "the connection to close")


@pytest_twisted.inlineCallbacks
def test_cut_connection_is_reset(reactor, site):
    """
    A request head that does not arrive in time: the connection is aborted,
    which the client sees as a reset, not as end of file.
    """
    s, port = site(header_timeout=0.2)

    def slow_head() -> type:
        with connect(port.getHost().port) as c:
            c.sendall(b"GET /master HTTP/1.1\r\nHost: x\r\n")
            try:
                while c.recv(4096):
                    pass
            except ConnectionResetError as e:
                return type(e)
            return type(None)

    got = yield threads.deferToThread(slow_head)
    assert got is ConnectionResetError
    yield wait_for(reactor, lambda: s.connections == 0, "the connection to close")


def test_listening_socket_defers_accept(site):
    """
    The kernel hands over a connection with its first data (HTTP clients
    speak first), so the request can be read at once.
    """
    _, port = site()
    assert port.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT) > 0


@pytest_twisted.inlineCallbacks
def test_silent_client_is_still_accepted_and_closed(reactor, site):
    """
    A client that connects and sends nothing is handed over all the same
    (about a second later) and then closed when idle too long.
    """
    s, port = site(idle_timeout=0.3)

    def silent() -> bytes:
        with connect(port.getHost().port) as c:
            return read_to_eof(c)  # times out (fails) if never accepted

    got = yield threads.deferToThread(silent)
    assert got == b""
    yield wait_for(reactor, lambda: s.connections == 0, "the connection to close")


@pytest_twisted.inlineCallbacks
def test_connection_closed_in_its_first_read_never_registers(reactor, site, monkeypatch):
    """
    ``Connection: close`` answered in the first read: the socket never
    joins the reactor.  A keep-alive connection joins it once, after its
    first answer.
    """
    registered = []
    real = Connection.startReading
    monkeypatch.setattr(Connection, "startReading",
                        lambda self: (registered.append(self.sessionno), real(self))[1])
    s, port = site()

    def exchange(close: bool) -> bytes:
        with connect(port.getHost().port) as c:
            c.sendall(get("/master", close=close))
            if close:
                return read_to_eof(c)
            data = b""
            while not data.endswith(b"\r\n\r\npg-1"):  # the answer's body
                data += c.recv(4096)
            return data

    got = yield threads.deferToThread(exchange, True)
    assert got.startswith(b"HTTP/1.1 200 ") and registered == []
    yield wait_for(reactor, lambda: s.connections == 0, "the connection to close")
    got = yield threads.deferToThread(exchange, False)
    assert got.startswith(b"HTTP/1.1 200 ") and len(registered) == 1
    yield wait_for(reactor, lambda: s.connections == 0, "the connection to close")


@pytest_twisted.inlineCallbacks
def test_paused_in_its_first_read_waits_to_resume(reactor, site):
    """
    Answers to a pipelined burst fill the socket during the first read, so
    the channel pauses the transport: it must not read on until the client
    drains its answers; then every answer arrives, in order.
    """
    s, port = site()
    port.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # inherited
    burst = get("/hosts") * 400 + get("/version", close=True)
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.settimeout(DEADLINE)
    client.connect(("127.0.0.1", port.getHost().port))
    try:
        sending = threads.deferToThread(client.sendall, burst)
        yield wait_for(reactor, lambda: the_channel(s) is not None
                       and the_channel(s).transport._paused, "the transport paused")
        assert the_channel(s).transport not in reactor.getReaders()
        got = yield threads.deferToThread(read_to_eof, client)
        yield sending
    finally:
        client.close()
    assert got.count(b"HTTP/1.1 200 ") == 401
    assert got.rstrip().endswith(b"9.9.9")


class Exploding:
    """A protocol whose first read raises."""

    reads_first = True

    def makeConnection(self, transport):
        self.transport = transport
        transport.read_first()

    def dataReceived(self, data):
        raise RuntimeError("boom")

    def connectionLost(self, reason):
        self.lost = reason


@pytest_twisted.inlineCallbacks
def test_exception_in_first_read_closes_and_is_logged(reactor, site):
    from twisted.internet.protocol import Factory
    from twisted.logger import globalLogPublisher

    events = []
    globalLogPublisher.addObserver(events.append)
    protocols = []

    class Boom(Factory):
        def buildProtocol(self, addr):
            protocols.append(Exploding())
            return protocols[-1]

    port = listen_tcp(reactor, 0, Boom(), interface="127.0.0.1")
    try:
        def exchange() -> bytes:
            with connect(port.getHost().port) as c:
                c.sendall(get("/master"))
                try:
                    return read_to_eof(c)
                except ConnectionResetError:
                    return b"reset"

        got = yield threads.deferToThread(exchange)
    finally:
        globalLogPublisher.removeObserver(events.append)
        yield port.stopListening()
    assert got in (b"", b"reset")
    assert protocols and protocols[0].lost.check(RuntimeError)
    assert any(e.get("log_format") == "reading a new connection failed" for e in events)


@pytest_twisted.inlineCallbacks
def test_end_of_file_or_reset_in_the_first_read(reactor, site):
    """
    A client that connects and closes at once (a TCP probe) or resets: the
    first read meets end of file or the error and the connection is gone,
    without a request or an error logged.
    """
    from twisted.logger import LogLevel, globalLogPublisher

    s, port = site()
    errors = []

    def observe(event):
        if event.get("log_level") in (LogLevel.error, LogLevel.critical):
            errors.append(event)

    globalLogPublisher.addObserver(observe)
    try:
        def probe(reset: bool) -> None:
            c = socket.create_connection(("127.0.0.1", port.getHost().port), timeout=DEADLINE)
            if reset:
                c.sendall(b"GET /master HTTP/1.1\r\n")  # handed over, then reset
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()

        for reset in (False, True, False, True):
            yield threads.deferToThread(probe, reset)
        yield wait_for(reactor, lambda: s.connections == 0 and not s._channels,
                       "the connections to be gone")
    finally:
        globalLogPublisher.removeObserver(observe)
    assert errors == []
    assert sum(s.renderer.requests.values()) == 0


@pytest_twisted.inlineCallbacks
def test_ipv6_listener(reactor):
    """
    The port listens on IPv6 too (``pg_status__http_listen_address=*``
    listens on ``::``).
    """
    v = view()
    api = make_api(lambda: v, CONFIG, "9.9.9")
    s = FastSite(api.resource(), api.renderer, reactor)
    try:
        port = listen_tcp(reactor, 0, s, interface="::1")
    except Exception as e:
        assert not os.environ.get("CI"), f"no IPv6 loopback in CI: {e}"
        pytest.skip(f"no IPv6 loopback here: {e}")
    try:
        def exchange() -> bytes:
            with socket.create_connection(("::1", port.getHost().port), timeout=DEADLINE) as c:
                c.sendall(get("/version", close=True))
                return read_to_eof(c)

        got = yield threads.deferToThread(exchange)
        assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"9.9.9")
    finally:
        yield port.stopListening()
