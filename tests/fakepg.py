"""
A fake PostgreSQL server speaking the version 3 wire protocol on the
reactor, for the checks that real PostgreSQL cannot be made to fail: it
answers pg-status's status query with a row the test crafts (e.g. a replay
timestamp of ``-Infinity``), as text values with the real column types, so
libpq and psycopg2 parse them exactly as they would parse a server's.

It accepts any user and password (``AuthenticationOk``), refuses TLS and GSS
encryption (``N``, after which libpq's default ``prefer`` goes on in
plain text), and understands only simple queries:

- the WAL geometry query (it names ``wal_block_size``): 8 kB pages, 16 MB
  segments;
- the status query (it names ``pg_is_in_recovery``): :attr:`FakePostgres.row`;
- anything else: an empty ``SELECT 0``.

Every status query it answered is counted in :attr:`FakePostgres.answered`.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from typing import Any

from twisted.internet.protocol import Factory, Protocol

#: type OIDs of the status query's columns (bool, float8, int8 ...)
BOOL, INT8, FLOAT8 = 16, 20, 701
STATUS_TYPES = (BOOL, FLOAT8, INT8, INT8, INT8, INT8, INT8, FLOAT8, INT8, INT8, INT8)
_SIZES = {BOOL: 1, INT8: 8, FLOAT8: 8}

_SSL_REQUEST, _GSSENC_REQUEST, _CANCEL_REQUEST = 80877103, 80877104, 80877102

Row = Sequence[str | None]


def replica_row(replay_ts: str | None = None, lsn: int = 0x3000060, timeline: int = 1) -> Row:
    """
    A replica's status row as text: in recovery, the server's clock now,
    replayed and received up to ``lsn`` on ``timeline``, its last replayed
    transaction 0.1 s ago unless ``replay_ts`` (the text PostgreSQL would
    send for ``extract(epoch ...)::float8``) says otherwise.
    """
    now = time.time()
    ts = repr(now - 0.1) if replay_ts is None else replay_ts
    return ("t", repr(now), None, None, None, str(lsn), str(lsn), ts, None, str(timeline),
            str(timeline))


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _cstr(s: str) -> bytes:
    return s.encode() + b"\0"


class _Session(Protocol):
    def __init__(self, server: FakePostgres) -> None:
        self.server = server
        self.buf = b""
        self.started = False

    def connectionMade(self) -> None:
        self.server.connections += 1
        self.server.sessions.append(self)

    def connectionLost(self, reason: Any = None) -> None:
        if self in self.server.sessions:
            self.server.sessions.remove(self)

    def dataReceived(self, data: bytes) -> None:
        self.buf += data
        while True:
            if not self.started:
                if len(self.buf) < 4:
                    return
                (n,) = struct.unpack("!i", self.buf[:4])
                if len(self.buf) < n:
                    return
                packet, self.buf = self.buf[4:n], self.buf[n:]
                self._startup(packet)
            else:
                if len(self.buf) < 5:
                    return
                (n,) = struct.unpack("!i", self.buf[1:5])
                if len(self.buf) < n + 1:
                    return
                kind, body, self.buf = self.buf[:1], self.buf[5:n + 1], self.buf[n + 1:]
                self._message(kind, body)
            if self.transport is None or not self.transport.connected:
                return

    def _startup(self, packet: bytes) -> None:
        (code,) = struct.unpack("!i", packet[:4])
        if code in (_SSL_REQUEST, _GSSENC_REQUEST):
            self.transport.write(b"N")
            return
        if code == _CANCEL_REQUEST:
            self.transport.loseConnection()
            return
        parts = packet[4:].split(b"\0")
        params = dict(zip(parts[0::2], parts[1::2], strict=False))
        user = params.get(b"user", b"postgres").decode()
        self.started = True
        out = [_message(b"R", struct.pack("!i", 0))]
        for name, value in (("server_version", "15.0"), ("server_encoding", "UTF8"),
                            ("client_encoding", "UTF8"), ("DateStyle", "ISO, MDY"),
                            ("integer_datetimes", "on"), ("standard_conforming_strings", "on"),
                            ("TimeZone", "UTC"), ("is_superuser", "on"),
                            ("session_authorization", user)):
            out.append(_message(b"S", _cstr(name) + _cstr(value)))
        out.append(_message(b"K", struct.pack("!ii", 4242, 1234)))
        out.append(_message(b"Z", b"I"))
        self.transport.write(b"".join(out))

    def _message(self, kind: bytes, body: bytes) -> None:
        if kind == b"X":
            self.transport.loseConnection()
            return
        if kind != b"Q":
            return
        sql = body.rstrip(b"\0").decode()
        self.server.queries.append(sql)
        if "wal_block_size" in sql:
            out = self._rows((INT8, INT8), [("8192", "16777216")])
        elif "pg_is_in_recovery" in sql:
            self.server.answered += 1
            out = self._rows(STATUS_TYPES, [self.server.row()])
        else:
            out = _message(b"C", _cstr("SELECT 0"))
        self.transport.write(out + _message(b"Z", b"I"))

    @staticmethod
    def _rows(types: Sequence[int], rows: Sequence[Row]) -> bytes:
        desc = struct.pack("!h", len(types))
        for i, oid in enumerate(types):
            desc += _cstr(f"c{i}") + struct.pack("!ihihih", 0, 0, oid, _SIZES[oid], -1, 0)
        out = [_message(b"T", desc)]
        for row in rows:
            assert len(row) == len(types), row
            data = struct.pack("!h", len(row))
            for v in row:
                if v is None:
                    data += struct.pack("!i", -1)
                else:
                    raw = v.encode()
                    data += struct.pack("!i", len(raw)) + raw
            out.append(_message(b"D", data))
        out.append(_message(b"C", _cstr(f"SELECT {len(rows)}")))
        return b"".join(out)


class _Factory(Factory):
    def __init__(self, server: FakePostgres) -> None:
        self.server = server

    def buildProtocol(self, addr: Any) -> _Session:
        return _Session(self.server)


class FakePostgres:
    """
    The fake server: :meth:`start` listens on ``host`` and an ephemeral
    port (:attr:`port`).

    :ivar row: called for every status query; returns the row's text
        values (``None`` for NULL), see :func:`replica_row`.
    :ivar answered: status queries answered so far.
    :ivar connections: connections accepted so far.
    """

    def __init__(self, reactor: Any, host: str = "127.0.0.1",
                 row: Callable[[], Row] = replica_row) -> None:
        self.reactor = reactor
        self.host = host
        self.row = row
        self.answered = 0
        self.connections = 0
        self.queries: list[str] = []
        self.sessions: list[_Session] = []
        self._port: Any = None

    @property
    def port(self) -> int:
        return self._port.getHost().port

    def start(self) -> FakePostgres:
        self._port = self.reactor.listenTCP(0, _Factory(self), interface=self.host)
        return self

    def stop(self) -> Any:
        for s in list(self.sessions):
            s.transport.abortConnection()
        return self._port.stopListening()
