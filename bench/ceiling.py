"""
The bare-Twisted ceiling for ``make bench``: the least work a Twisted
process can do per HTTP request.

A plain ``Protocol`` that answers every request head (up to ``\\r\\n\\r\\n``)
with constant bytes, handling pipelined requests and keep-alive.  A head
that asks for ``Connection: close`` gets the same answer with
``Connection: close`` and the connection is closed, so the
new-connection-per-request profile measures connection setup here too.
Request bodies are not expected (the bench sends only GETs).

With ``--direct``, the answer goes straight to the socket with
``socket.send`` when the transport has nothing queued (the rest, if any,
through ``transport.write``), and a ``Connection: close`` answer sent
whole closes at once: the ceiling of a Twisted protocol that skips the
buffered write, which is what ``pgstatus/http/front.py`` does.

Usage: ``python bench/ceiling.py [--direct] PORT [ADDRESS]``
"""

from __future__ import annotations

import sys

from twisted.internet import protocol
from twisted.internet.main import CONNECTION_DONE
from twisted.python.failure import Failure

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n127.0.0.1"
CLOSE_RESPONSE = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 9\r\n\r\n127.0.0.1"


class Ceiling(protocol.Protocol):
    """
    Answer each request head with :data:`RESPONSE`.
    """

    _buf = b""

    def dataReceived(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        out = []
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            if b"Connection: close" in buf[:end]:
                out.append(CLOSE_RESPONSE)
                self.transport.write(b"".join(out))
                self.transport.loseConnection()
                self._buf = b""
                return
            out.append(RESPONSE)
            buf = buf[end + 4:]
        self._buf = buf
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))


class DirectCeiling(Ceiling):
    """
    :class:`Ceiling`, writing with ``socket.send`` when nothing is queued.
    """

    def dataReceived(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        out = []
        close = False
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            if b"Connection: close" in buf[:end]:
                out.append(CLOSE_RESPONSE)
                close = True
                buf = b""
                break
            out.append(RESPONSE)
            buf = buf[end + 4:]
        self._buf = buf
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        t = self.transport
        if t.dataBuffer or t._tempDataLen:
            t.write(data)
        else:
            try:
                sent = t.socket.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                sent = -1
            if sent < 0:
                t.write(data)
            elif sent < len(data):
                t.write(data[sent:])
            elif close:
                # all sent: close now rather than on the next iteration
                t.stopReading()
                t.stopWriting()
                t.connectionLost(Failure(CONNECTION_DONE))
                return
        if close:
            t.loseConnection()


class CeilingFactory(protocol.Factory):
    protocol = Ceiling
    noisy = False


class DirectCeilingFactory(CeilingFactory):
    protocol = DirectCeiling


def main(argv: list[str]) -> None:
    from twisted.internet import reactor

    args = argv[1:]
    direct = "--direct" in args
    args = [a for a in args if a != "--direct"]
    port = int(args[0])
    address = args[1] if len(args) > 1 else "127.0.0.1"
    factory = DirectCeilingFactory() if direct else CeilingFactory()
    reactor.listenTCP(port, factory, backlog=1024, interface=address)
    kind = "direct-send ceiling" if direct else "ceiling"
    sys.stdout.write(f"{kind} listening on {address}:{port}\n")
    sys.stdout.flush()
    reactor.run()


if __name__ == "__main__":
    main(sys.argv)
