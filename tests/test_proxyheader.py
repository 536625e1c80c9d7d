"""
The PROXY header parser (:func:`pgstatus.proxyheader.parse_header`) on its
own, and the wrapper protocol over an in-memory transport: every split of
a header and the bytes after it gives the wrapped protocol exactly those
bytes; a bad header closes without a word to the wrapped protocol or the
client; a half-close reaches a half-closeable wrapped protocol once the
header is read, and closes the connection otherwise.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import StringTransport
from twisted.logger import LogLevel
from zope.interface import implementer

from pgstatus.proxyheader import (
    V1_MAX_LENGTH,
    V2_MAX_LENGTH,
    V2_SIGNATURE,
    InvalidHeader,
    ProxyHeader,
    ProxyHeaderFactory,
    parse_header,
)

V1_TCP4 = b"PROXY TCP4 10.1.2.3 192.0.2.7 40000 8000\r\n"


def v2(command: int = 0x1, kind: int = 0x11, block: bytes | None = None,
       version: int = 0x2) -> bytes:
    """
    A version 2 header (by default TCP4 10.1.2.3:40000 -> 192.0.2.7:8000).
    """
    if block is None:
        block = bytes([10, 1, 2, 3, 192, 0, 2, 7]) + struct.pack("!HH", 40000, 8000)
    return (V2_SIGNATURE + bytes([version << 4 | command, kind])
            + struct.pack("!H", len(block)) + block)


@pytest.mark.parametrize("data, header", [
    (V1_TCP4, ProxyHeader(len(V1_TCP4), IPv4Address("TCP", "10.1.2.3", 40000),
                          IPv4Address("TCP", "192.0.2.7", 8000))),
    (b"PROXY TCP6 2001:DB8::1 ::1 0 65535\r\n",
     ProxyHeader(36, IPv6Address("TCP", "2001:db8::1", 0), IPv6Address("TCP", "::1", 65535))),
    (b"PROXY UNKNOWN\r\n", ProxyHeader(15)),
    (b"PROXY UNKNOWN ffff::1 ::1 1 2\r\n", ProxyHeader(31)),
    (v2(), ProxyHeader(28, IPv4Address("TCP", "10.1.2.3", 40000),
                       IPv4Address("TCP", "192.0.2.7", 8000))),
    (v2(kind=0x21, block=bytes(15) + b"\x01" + bytes(10) + b"\xff\xff\xc0\x00\x02\x07"
        + struct.pack("!HH", 1, 2)),
     ProxyHeader(52, IPv6Address("TCP", "::1", 1),
                 IPv6Address("TCP", str(ipaddress.IPv6Address("::ffff:192.0.2.7")), 2))),
    # a TLV after the addresses is skipped
    (v2(block=bytes(12) + b"\x04\x00\x03abc"), ProxyHeader(
        34, IPv4Address("TCP", "0.0.0.0", 0), IPv4Address("TCP", "0.0.0.0", 0))),
    # LOCAL (the proxy's own health check), whatever the family byte says
    (v2(command=0x0, kind=0xFF, block=b""), ProxyHeader(16)),
    # UNSPEC, and valid families without a TCP address: the real addresses
    (v2(kind=0x00, block=b""), ProxyHeader(16)),
    (v2(kind=0x12), ProxyHeader(28)),
    (v2(kind=0x31, block=bytes(216)), ProxyHeader(232)),
], ids=["tcp4", "tcp6", "unknown", "unknown-with-addresses", "v2-tcp4", "v2-tcp6", "v2-tlv",
        "v2-local", "v2-unspec", "v2-udp4", "v2-unix"])
def test_valid_headers(data, header):
    assert parse_header(data) == header
    # what follows is not the header's
    assert parse_header(data + b"GET / HTTP/1.1\r\n\r\n") == header
    # every shorter beginning asks for more
    for n in range(len(data)):
        assert parse_header(data[:n]) is None, n


@pytest.mark.parametrize("data", [
    b"PROXY TCP4 10.1.2.3 192.0.2.7 40000 8000\n",  # bare LF
    b"PROXY TCP4 10.1.2.3 192.0.2.7 40000 8000\r\r\n",
    b"PROXY TCP4 10.1.2.3\r 192.0.2.7 40000 8000\r\n",
    b"PROXY TCP4 256.0.0.1 192.0.2.7 40000 8000\r\n",
    b"PROXY TCP4 10.1.2.3 192.0.2.7 99999 8000\r\n",
    b"PROXY TCP4 10.1.2.3 192.0.2.7 40000 65536\r\n",
    b"PROXY TCP4 10.1.2.3 192.0.2.7 +4000 8000\r\n",
    b"PROXY TCP4 10.1.2.3 192.0.2.7 04000 8000\r\n",
    b"PROXY TCP4 10.1.2.3 192.0.2.7  4000 8000\r\n",
    b"PROXY TCP4 10.1.2.3 192.0.2.7 4_000 8000\r\n",
    b"PROXY TCP4 10.1.2.3 192.0.2.7 \xd9\xa1 8000\r\n",  # an Arabic-Indic digit
    b"PROXY TCP4 010.1.2.3 192.0.2.7 40000 8000\r\n",
    b"PROXY TCP4 ::1 ::1 40000 8000\r\n",
    b"PROXY TCP6 10.1.2.3 ::1 40000 8000\r\n",
    b"PROXY TCP6 fe80::1%eth0 ::1 40000 8000\r\n",
    b"PROXY TCP4 10.1.2.3 192.0.2.7 40000\r\n",
    b"PROXY TCP4 10.1.2.3 192.0.2.7 40000 8000 extra\r\n",
    b"PROXY UDP4 10.1.2.3 192.0.2.7 40000 8000\r\n",
    b"PROXY UNKNOWNX\r\n",
    b"PROXY  UNKNOWN\r\n",
    b"PROXY UNKNOWN " + b"x" * 100 + b"\r\n",  # over 107 bytes
    b"proxy UNKNOWN\r\n",
    b"GET / HTTP/1.1\r\n\r\n",
    b"\x16\x03\x01",  # a TLS ClientHello
    v2(version=0x1),
    v2(command=0x2),
    v2(kind=0x13),  # no such transport
    v2(kind=0x41),  # no such family
    v2(kind=0x10, block=b""),  # INET without a transport is not a valid pair
    v2(kind=0x21),  # TCP6 with a TCP4-sized block
    V2_SIGNATURE + b"\x21\x11" + struct.pack("!H", V2_MAX_LENGTH + 1),
], ids=lambda d: repr(d[:48]))
def test_invalid_headers(data):
    with pytest.raises(InvalidHeader):
        parse_header(data)


def test_invalid_as_soon_as_it_cannot_be_a_header():
    for data in [b"G", b"PROXX", b"\r\n\r\n\x00\r\nQUIX", V2_SIGNATURE + b"\x31",
                 b"PROXY TCP4\r "]:
        with pytest.raises(InvalidHeader):
            parse_header(data)


def test_an_unended_v1_line_is_refused_at_107_bytes():
    line = b"PROXY UNKNOWN " + b"x" * (V1_MAX_LENGTH - 16)
    assert parse_header(line) is None
    assert parse_header(line + b"\r\n") == ProxyHeader(V1_MAX_LENGTH)
    with pytest.raises(InvalidHeader):
        parse_header(line + b"xx")


class Recorder(Protocol):
    """
    Records what it receives and the addresses its transport names.
    """

    def __init__(self) -> None:
        self.received = b""
        self.lost = False

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason) -> None:
        self.lost = True


@implementer(IHalfCloseableProtocol)
class HalfCloseable(Recorder):
    """
    A :class:`Recorder` that is told of half-closes.
    """

    def __init__(self) -> None:
        super().__init__()
        self.half_closed: list[str] = []

    def readConnectionLost(self) -> None:
        self.half_closed.append("read")

    def writeConnectionLost(self) -> None:
        self.half_closed.append("write")


def wrapped(inner: Recorder | None = None):
    inner = Recorder() if inner is None else inner
    factory = ProxyHeaderFactory(Factory.forProtocol(lambda: inner))
    protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
    transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 5555),
                                hostAddress=IPv4Address("TCP", "127.0.0.1", 8000))
    protocol.makeConnection(transport)
    return protocol, inner, transport


REQUEST = b"GET /master HTTP/1.1\r\nHost: x\r\n\r\nGET /live HTTP/1.1\r\n\r\n"


@pytest.mark.parametrize("header", [V1_TCP4, b"PROXY UNKNOWN\r\n", v2(), v2(command=0x0)],
                         ids=["v1", "v1-unknown", "v2", "v2-local"])
def test_every_split_passes_on_exactly_the_bytes_after_the_header(header):
    stream = header + REQUEST
    splits = [[stream], [bytes([b]) for b in stream]]
    splits += [[stream[:n], stream[n:]] for n in range(1, len(stream))]
    for chunks in splits:
        protocol, inner, transport = wrapped()
        for chunk in chunks:
            protocol.dataReceived(chunk)
        assert inner.received == REQUEST
        assert not transport.disconnecting and transport.value() == b""


def test_addresses_are_the_headers_once_read_else_the_connections():
    protocol, inner, transport = wrapped()
    assert inner.transport is protocol
    assert protocol.getPeer() == IPv4Address("TCP", "127.0.0.1", 5555)
    protocol.dataReceived(V1_TCP4[:10])
    assert protocol.getPeer() == IPv4Address("TCP", "127.0.0.1", 5555)
    protocol.dataReceived(V1_TCP4[10:])
    assert inner.transport.getPeer() == IPv4Address("TCP", "10.1.2.3", 40000)
    assert inner.transport.getHost() == IPv4Address("TCP", "192.0.2.7", 8000)
    for header in [b"PROXY UNKNOWN\r\n", v2(command=0x0), v2(kind=0x00, block=b"")]:
        protocol, inner, transport = wrapped()
        protocol.dataReceived(header)
        assert protocol.getPeer() == IPv4Address("TCP", "127.0.0.1", 5555)
        assert protocol.getHost() == IPv4Address("TCP", "127.0.0.1", 8000)


@pytest.mark.parametrize("stream", [
    b"PROXY TCP4 10.1.2.3 192.0.2.7 40000 8000\n" + REQUEST,
    b"PROXY TCP4 256.0.0.1 192.0.2.7 40000 8000\r\n" + REQUEST,
    REQUEST,
], ids=["bare-lf", "bad-address", "no-header"])
def test_a_bad_header_closes_quietly(stream, log_events):
    protocol, inner, transport = wrapped()
    for b in stream:
        protocol.dataReceived(bytes([b]))
    assert transport.disconnecting and transport.value() == b""
    assert inner.received == b""
    assert [e for e in log_events if e["log_level"] > LogLevel.debug] == []
    protocol.connectionLost(None)
    assert inner.lost


def test_a_half_close_after_the_header_reaches_a_half_closeable_protocol():
    """
    The transport asks the wrapper whether it is half-closeable; the
    wrapped protocol then answers what came and closes itself.
    """
    protocol, inner, transport = wrapped(HalfCloseable())
    assert IHalfCloseableProtocol.providedBy(protocol)
    protocol.dataReceived(V1_TCP4 + REQUEST)
    protocol.readConnectionLost()
    assert inner.half_closed == ["read"] and not transport.disconnecting
    protocol.writeConnectionLost()
    assert inner.half_closed == ["read", "write"]


@pytest.mark.parametrize("inner, stream", [
    (HalfCloseable, V1_TCP4[:20]),
    (HalfCloseable, b""),
    (HalfCloseable, b"PROXY TCP4 256.0.0.1 192.0.2.7 40000 8000\r\n"),
    (Recorder, V1_TCP4 + REQUEST),
], ids=["header-cut-short", "nothing-sent", "refused-header", "not-half-closeable"])
def test_a_half_close_otherwise_closes_the_connection(inner, stream):
    """
    A header the end of stream cut short can never be completed; a wrapped
    protocol that is not half-closeable is closed, as the transport closes
    it; neither is told of the half-close.
    """
    protocol, recorder, transport = wrapped(inner())
    protocol.dataReceived(stream)
    protocol.readConnectionLost()
    assert transport.disconnecting
    assert getattr(recorder, "half_closed", []) == []
