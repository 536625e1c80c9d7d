"""
The bare-Twisted ceiling for ``make bench``: the least work a Twisted
process can do per HTTP request.

A plain ``Protocol`` that answers every request head (up to ``\\r\\n\\r\\n``)
with constant bytes, handling pipelined requests and keep-alive.  A head
that asks for ``Connection: close`` gets the same answer with
``Connection: close`` and the connection is closed, so the
new-connection-per-request profile measures connection setup here too.
Request bodies are not expected (the bench sends only GETs).

Usage: ``python tests/bench/ceiling.py PORT [ADDRESS]``
"""

from __future__ import annotations

import sys

from twisted.internet import protocol

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


class CeilingFactory(protocol.Factory):
    protocol = Ceiling
    noisy = False


def main(argv: list[str]) -> None:
    from twisted.internet import reactor

    port = int(argv[1])
    address = argv[2] if len(argv) > 2 else "127.0.0.1"
    reactor.listenTCP(port, CeilingFactory(), backlog=1024, interface=address)
    sys.stdout.write(f"ceiling listening on {address}:{port}\n")
    sys.stdout.flush()
    reactor.run()


if __name__ == "__main__":
    main(sys.argv)
