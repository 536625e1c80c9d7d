"""
The PROXY protocol (HAProxy's, versions 1 and 2) for ``haproxy:`` listeners:
a proxy in front of pg-status sends, before the client's first byte, a
header naming the client's address and the address it connected to; the
connection's ``getPeer()`` and ``getHost()`` then return those.

Our own, instead of Twisted's ``haproxy:`` wrapper, which logged an
``Unhandled Error`` for a version 1 line ended by a bare LF, took port 99999
and address 256.0.0.1, refused the valid ``PROXY UNKNOWN`` line and closed
a connection whose first segment held fewer than 8 bytes (16 for
version 2).  Built the same way (a
:class:`~twisted.protocols.policies.ProtocolWrapper`, so the connection
protocol behind it still sees a protocol, not the reactor's own transport,
and never reads the socket itself): :func:`parse_header` is a pure function
over the bytes received so far, :class:`ProxyHeaderProtocol` feeds it and
hands everything after the header to the wrapped protocol, byte for byte,
however the bytes were split into segments.

A header that is malformed or too long closes the connection without an
answer and with one debug line at most: what a client sends must not fill
the log, and an answer would tell a scanner what listens.
"""

from __future__ import annotations

import ipaddress
import re
import struct
from dataclasses import dataclass
from typing import Any, TypeAlias

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import (
    IAddress,
    IHalfCloseableProtocol,
    IListeningPort,
    IProtocolFactory,
    IStreamServerEndpoint,
    ITransport,
)
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from zope.interface import implementer

log = Logger(namespace="pgstatus.http.proxyheader")

#: what a version 2 header starts with
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
#: what a version 1 header starts with
V1_PREFIX = b"PROXY "
#: the longest version 1 line the protocol allows, CRLF included
V1_MAX_LENGTH = 107
#: the longest version 2 address block (addresses and TLVs) taken: far more
#: than proxies send (the TCP6 addresses are 36 bytes, TLVs a few dozen),
#: and a bound on what a connection may make the server hold
V2_MAX_LENGTH = 4096

_PORT = re.compile(rb"0|[1-9][0-9]{0,4}")
_V2_HEAD = 16
#: version 2 command (low nibble of byte 13)
_LOCAL, _PROXY = 0x0, 0x1
#: version 2 family and transport byte: the valid values and the length of
#: their address block (UNSPEC, TCP4, UDP4, TCP6, UDP6, UNIX stream, dgram)
_V2_ADDRESS_LENGTH = {0x00: 0, 0x11: 12, 0x12: 12, 0x21: 36, 0x22: 36, 0x31: 216, 0x32: 216}
_TCP4, _TCP6 = 0x11, 0x21

#: the addresses a header can name
Address: TypeAlias = IPv4Address | IPv6Address


class InvalidHeader(ValueError):
    """
    The bytes received are not the start of a valid PROXY header (the
    message says why, for the debug line).
    """


@dataclass(frozen=True)
class ProxyHeader:
    """
    A complete PROXY header.

    :ivar length: how many bytes it took; the client's bytes follow.
    :ivar source: the client's address, or ``None`` to keep the
        connection's own (``UNKNOWN``, ``LOCAL``, ``UNSPEC`` and the
        families a TCP service has no address type for).
    :ivar destination: the address the client connected to, or ``None``
        as for ``source``.
    """

    length: int
    source: Address | None = None
    destination: Address | None = None


def parse_header(data: bytes) -> ProxyHeader | None:
    """
    Parse the PROXY header at the start of ``data``, the bytes received so
    far.

    Version 1 (``PROXY TCP4|TCP6 <source> <destination> <sport> <dport>``
    or ``PROXY UNKNOWN ...``, single spaces, at most 107 bytes, ended by
    CRLF; addresses as :mod:`ipaddress` reads them, without a zone; ports
    0 to 65535 in plain decimal without a leading zero) and version 2 (the
    signature, version 2, ``LOCAL`` or ``PROXY``, a valid family and
    transport byte, a length that covers the family's addresses and is at
    most :data:`V2_MAX_LENGTH`; TLVs skipped).

    :return: the header once complete; ``None`` while ``data`` is a valid
        beginning of one.
    :raise InvalidHeader: ``data`` cannot start a valid header.
    """
    if data[:len(V2_SIGNATURE)] == V2_SIGNATURE[:len(data)]:
        return _parse_v2(data)
    if data[:len(V1_PREFIX)] == V1_PREFIX[:len(data)]:
        return _parse_v1(data)
    raise InvalidHeader("not a PROXY header")


def _parse_v1(data: bytes) -> ProxyHeader | None:
    """
    A version 1 line (``data`` starts as one does): refused as soon as it
    cannot become a valid line, so that a client never waits for nothing.
    """
    end = data.find(b"\n", 0, V1_MAX_LENGTH)
    if end < 0:
        if len(data) >= V1_MAX_LENGTH:
            raise InvalidHeader("version 1 line longer than 107 bytes")
        if b"\r" in data[:-1]:
            raise InvalidHeader("CR inside the version 1 line")
        return None
    if data[end - 1:end] != b"\r":
        raise InvalidHeader("version 1 line not ended by CRLF")
    line = data[:end - 1]
    if b"\r" in line:
        raise InvalidHeader("CR inside the version 1 line")
    fields = line.split(b" ")
    if fields[1] == b"UNKNOWN":
        # the rest of the line, if any, is to be ignored
        return ProxyHeader(end + 1)
    if len(fields) != 6 or fields[1] not in (b"TCP4", b"TCP6"):
        raise InvalidHeader("not a TCP4, TCP6 or UNKNOWN version 1 line")
    kind = IPv4Address if fields[1] == b"TCP4" else IPv6Address
    src, dst = (_v1_address(fields[1], f) for f in fields[2:4])
    sport, dport = (_v1_port(f) for f in fields[4:6])
    return ProxyHeader(end + 1, kind("TCP", src, sport), kind("TCP", dst, dport))


def _v1_address(family: bytes, field: bytes) -> str:
    """
    A version 1 address field, checked for its family and written in the
    usual form.
    """
    try:
        text = field.decode("ascii")
        if family == b"TCP4":
            return str(ipaddress.IPv4Address(text))
        if "%" in text:
            raise ValueError("a zone is no TCP6 address")
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        # UnicodeDecodeError and AddressValueError are ValueErrors
        raise InvalidHeader(f"not a {family.decode()} address") from None


def _v1_port(field: bytes) -> int:
    """
    A version 1 port field: ASCII digits only (``int()`` alone would take
    signs, spaces, underscores and other scripts' digits).
    """
    if not _PORT.fullmatch(field) or int(field) > 65535:
        raise InvalidHeader("not a port number")
    return int(field)


def _parse_v2(data: bytes) -> ProxyHeader | None:
    """
    A version 2 header (``data`` starts as the signature does): its fixed
    part is checked as soon as it arrives, and the length before waiting
    for the rest, so an invalid or oversized header is never waited for.
    """
    if len(data) <= 12:
        return None
    version, command = data[12] >> 4, data[12] & 0x0F
    if version != 2 or command not in (_LOCAL, _PROXY):
        raise InvalidHeader("not a version 2 LOCAL or PROXY command")
    if len(data) > 13 and command == _PROXY and data[13] not in _V2_ADDRESS_LENGTH:
        raise InvalidHeader("not a valid version 2 family and transport")
    if len(data) < _V2_HEAD:
        return None
    length = int.from_bytes(data[14:16], "big")
    if length > V2_MAX_LENGTH:
        raise InvalidHeader("version 2 header too long")
    total = _V2_HEAD + length
    if command == _LOCAL:
        # the proxy's own connection (a health check): the family and the
        # addresses are to be ignored
        return ProxyHeader(total) if len(data) >= total else None
    kind = data[13]
    if length < _V2_ADDRESS_LENGTH[kind]:
        raise InvalidHeader("version 2 length shorter than its addresses")
    if len(data) < total:
        return None
    block = data[_V2_HEAD:total]
    if kind == _TCP4:
        sport, dport = struct.unpack("!HH", block[8:12])
        return ProxyHeader(total,
                           IPv4Address("TCP", str(ipaddress.IPv4Address(block[0:4])), sport),
                           IPv4Address("TCP", str(ipaddress.IPv4Address(block[4:8])), dport))
    if kind == _TCP6:
        sport, dport = struct.unpack("!HH", block[32:36])
        return ProxyHeader(total,
                           IPv6Address("TCP", str(ipaddress.IPv6Address(block[0:16])), sport),
                           IPv6Address("TCP", str(ipaddress.IPv6Address(block[16:32])), dport))
    # UNSPEC, and the valid families with no TCP address (UDP, UNIX): as
    # the protocol asks of a receiver that does not support them, the
    # connection's own addresses are kept
    return ProxyHeader(total)


@implementer(IHalfCloseableProtocol)
class ProxyHeaderProtocol(ProtocolWrapper):
    """
    Reads the PROXY header, then passes everything after it to the wrapped
    protocol; until then the wrapped protocol receives nothing.  The
    wrapped protocol is connected at once (its idle and head deadlines run
    from the connection, so a client that never completes its header is
    still closed); its ``getPeer()`` and ``getHost()`` return the header's
    addresses once the header is read.

    Half-closeable, so that a client's half-close reaches the wrapped
    protocol as it does on a ``tcp:`` listener: the transport asks the
    protocol it holds (this wrapper), and without the interface it drops
    the connection, with the answers still due, at the client's end of
    stream.
    """

    def __init__(self, factory: WrappingFactory[ProxyHeaderProtocol],
                 wrappedProtocol: Any) -> None:
        super().__init__(factory, wrappedProtocol)
        self._pending = b""
        self.header: ProxyHeader | None = None
        self._refused = False

    def dataReceived(self, data: bytes) -> None:
        """
        Parse the header from what arrived so far; pass on what follows it.
        """
        if self.header is not None:
            self.wrappedProtocol.dataReceived(data)
            return
        if self._refused:
            return
        received = self._pending + data
        try:
            header = parse_header(received)
        except InvalidHeader as e:
            self._refused = True
            self._pending = b""
            log.debug("PROXY header refused peer={peer} reason={reason}",
                      peer=_shown(self._transport().getPeer()), reason=str(e))
            self.loseConnection()
            return
        if header is None:
            self._pending = received
            return
        self._pending = b""
        self.header = header
        rest = received[header.length:]
        if rest:
            self.wrappedProtocol.dataReceived(rest)

    def readConnectionLost(self) -> None:
        """
        The client half-closed: passed on to a half-closeable wrapped
        protocol once the header is read, so that it answers what came
        before closing.  Otherwise the connection is closed (after what was
        written is sent), as the transport closes a connection whose
        protocol is not half-closeable: a header cut short by the end of
        stream can never be completed, and a refused one is closing already.
        """
        if self.header is not None and IHalfCloseableProtocol.providedBy(self.wrappedProtocol):
            self.wrappedProtocol.readConnectionLost()
        elif not self.disconnecting:
            self.loseConnection()

    def writeConnectionLost(self) -> None:
        """
        The write side is closed (the wrapped protocol asked for it through
        this wrapper): passed on to a half-closeable wrapped protocol, as
        the transport would tell it; nothing to do otherwise.
        """
        if IHalfCloseableProtocol.providedBy(self.wrappedProtocol):
            self.wrappedProtocol.writeConnectionLost()

    def getPeer(self) -> IAddress:
        """
        The client's address from the header, else the connection's.
        """
        if self.header is not None and self.header.source is not None:
            return self.header.source
        peer: IAddress = self._transport().getPeer()
        return peer

    def getHost(self) -> IAddress:
        """
        The address the client connected to from the header, else the
        connection's.
        """
        if self.header is not None and self.header.destination is not None:
            return self.header.destination
        host: IAddress = self._transport().getHost()
        return host

    def _transport(self) -> ITransport:
        transport = self.transport
        assert transport is not None, "not connected"
        return transport


def _shown(address: object) -> str:
    """
    An address for the debug line.
    """
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    return f"{host}:{port}" if host is not None else str(address)


class ProxyHeaderFactory(WrappingFactory[ProxyHeaderProtocol]):
    """
    Wraps a protocol factory so that each connection reads a PROXY header
    first (:class:`ProxyHeaderProtocol`).
    """

    protocol = ProxyHeaderProtocol


@implementer(IStreamServerEndpoint)
class ProxyHeaderEndpoint:
    """
    A server endpoint whose connections start with a PROXY header: it
    listens on ``inner`` with the factory wrapped in a
    :class:`ProxyHeaderFactory`.  What ``haproxy:<description>`` builds.
    """

    def __init__(self, inner: IStreamServerEndpoint) -> None:
        self.inner = inner

    def listen(self, protocolFactory: IProtocolFactory) -> Deferred[IListeningPort]:
        """
        Listen on the inner endpoint, each connection reading its header
        first.
        """
        listening: Deferred[IListeningPort] = self.inner.listen(
            ProxyHeaderFactory(protocolFactory))
        return listening
