"""
The HTTP listener's port and connections (``pgstatus.http.transport``) on
real sockets: accepted connections have ``TCP_NODELAY`` without a system
call of their own, an answered ``Connection: close`` ends with an orderly
close (FIN) and a cut connection with a reset, and the connection names
itself in logs and ``repr`` without per-connection strings.
"""

from __future__ import annotations

import socket

import pytest
import pytest_twisted
from test_direct_send import DEADLINE, get, read_to_eof, the_channel, wait_for
from test_fastpath import CONFIG, view
from twisted.internet import threads

from pgstatus.http.api import StatusAPI
from pgstatus.http.channel import FastChannel
from pgstatus.http.fastpath import FastSite
from pgstatus.http.transport import NODELAY_INHERITED, Connection, listen_tcp


@pytest.fixture
def site(reactor):
    made = []

    def make(**kwargs):
        v = view()
        api = StatusAPI(lambda: v, CONFIG, "9.9.9")
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
