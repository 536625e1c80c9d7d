"""
The front on real sockets: memory stays bounded against clients that
pipeline and never read (a real ``twistd pgstatus``, its RSS read from
/proc); over TLS an oversized head gets its 431 at once and a stalled
handshake is cut at the head deadline; and what a half-closing client gets
(kept from twisted.web, the same on ``tcp:``, ``unix:`` and ``haproxy:``
listeners).
"""

from __future__ import annotations

import socket
import ssl
import time

import pytest
import pytest_twisted
from daemon import Daemon
from http_apis import make_api, make_site
from pgtopology import free_port
from test_front import CONFIG, view
from test_listen import certificate  # noqa: F401 (a fixture)
from twisted.internet import threads
from twisted.logger import Logger

from pgstatus.http.freshness import FreshReads
from pgstatus.listening import ListenerService, description_candidates

log = Logger(namespace="test")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_clients_that_pipeline_and_never_read_cost_little_memory():
    """
    Ten clients pipelining ``GET /metrics`` (118 KB each with 61 hosts) as
    fast as the server reads, reading nothing, for 8 s: the service's RSS
    grows less than 64 MiB in all, and ``/live`` still answers.  (Before:
    +455 MiB from four clients on 31 hosts in 10 s.)
    """
    hosts = ",".join(f"127.0.0.{i}" for i in range(2, 63))
    d = Daemon({"pg_status__hosts": hosts, "pg_status__pg_port": str(free_port())}).start()
    clients: list[socket.socket] = []
    try:
        assert len(d.get("/metrics")[1]) > 100_000
        before = rss_kib(d.proc.pid)
        burst = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
        for _ in range(10):
            c = socket.create_connection(("127.0.0.1", d.port), timeout=5)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.setblocking(False)
            clients.append(c)
        sent = 0
        end = time.monotonic() + 8
        while time.monotonic() < end:
            progress = False
            for c in clients:
                try:
                    sent += c.send(burst)
                    progress = True
                except BlockingIOError:
                    pass
            if not progress:
                time.sleep(0.05)
        grown = rss_kib(d.proc.pid) - before
        status, _ = d.get("/live", timeout=5)
        assert status == 200
        assert sent > 1_000_000, sent
        assert grown < 64 * 1024, f"RSS grew {grown} KiB after {sent} bytes of requests"
    finally:
        for c in clients:
            c.close()
        d.stop()


@pytest_twisted.inlineCallbacks
def test_tls_oversized_head_431_at_once_and_stalled_handshake_cut(reactor, certificate):  # noqa: F811
    """
    Over TLS: a head over 16 KiB gets the 431 and the close at once (the
    head deadline is 30 s here); a client that connects and never finishes
    its handshake is cut at the head deadline of the second listener
    (0.5 s), not at the idle timeout (60 s).  (Before: the close waited
    for the head deadline, and the handshake for the idle timeout.)
    """
    key, cert = certificate
    desc = f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    ports = []
    for header in (30.0, 0.5):
        v = view()
        site = make_site(make_api(lambda: v, CONFIG, "9.9.9"), reactor,
                         header_timeout=header, idle_timeout=60.0)
        svc = ListenerService(description_candidates(reactor, desc), site, log, "server",
                              ("test", 0))
        svc.startService()
        ports.append((svc, svc.port.getHost().port))
    context = ssl.create_default_context(cafile=str(cert))

    def oversized() -> tuple[bytes, float]:
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", ports[0][1]), timeout=20) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(b"GET /master HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
                out = b""
                while True:
                    try:
                        chunk = s.recv(65536)
                    except (ssl.SSLError, ConnectionResetError):
                        break
                    if not chunk:
                        break
                    out += chunk
        return out, time.monotonic() - t0

    def stalled() -> float:
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", ports[1][1]), timeout=20) as raw:
            raw.sendall(b"\x16\x03\x01")  # the start of a ClientHello, never finished
            try:
                while raw.recv(4096):
                    pass
            except ConnectionResetError:
                pass
        return time.monotonic() - t0

    try:
        out, took = yield threads.deferToThread(oversized)
        assert out.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
        assert took < 10
        took = yield threads.deferToThread(stalled)
        assert 0.4 < took < 10
    finally:
        for svc, _ in ports:
            yield svc.stopService()


#: the listeners a half-closing client is tried on, and the bytes each
#: connection starts with (the PROXY header on ``haproxy:``)
HALF_CLOSE_LISTENERS = {
    "tcp": ("tcp:0:interface=127.0.0.1", b""),
    "unix": ("unix:{tmp}/http.sock", b""),
    "haproxy": ("haproxy:tcp:0:interface=127.0.0.1",
                b"PROXY TCP4 10.1.2.3 192.0.2.7 40000 8000\r\n"),
}


@pytest.mark.parametrize("kind", list(HALF_CLOSE_LISTENERS))
@pytest_twisted.inlineCallbacks
def test_a_half_closing_client_gets_every_answer(reactor, tmp_path, kind):
    """
    A client that sends its requests and half-closes (``nc -N``, ``curl``
    with a request body from a pipe) gets every answer, from the cache, from
    twisted.web and after a fresh-read wait, then the close; on every
    listener.  (Before, as with twisted.web alone, the end of stream closed
    the connection, and an answer twisted.web had written but the transport
    not yet sent was lost, depending on whether it came in the same read;
    on ``haproxy:`` listeners the PROXY header's wrapper was not
    half-closeable, so every answer not yet sent was lost.)
    """
    description, header = HALF_CLOSE_LISTENERS[kind]
    v = view()
    site = make_site(make_api(lambda: v, CONFIG, "9.9.9",
                              fresh=FreshReads(reactor, lambda i: None)), reactor)
    svc = ListenerService(description_candidates(reactor, description.format(tmp=tmp_path)),
                          site, log, "server", ("test", 0))
    svc.startService()
    address = svc.port.getHost()

    def ask(path: str, times: int = 1) -> bytes:
        if kind == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(address.name)
        else:
            s = socket.create_connection(("127.0.0.1", address.port), timeout=10)
        with s:
            s.sendall(header + f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * times)
            s.shutdown(socket.SHUT_WR)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            return out

    try:
        cached = yield threads.deferToThread(ask, "/master")
        assert cached.startswith(b"HTTP/1.1 200 OK") and cached.endswith(b"\r\n\r\npg-1")
        # no replica has this LSN: the answer (the master) comes once the
        # 300 ms wait ends, long after the end of stream
        waited = yield threads.deferToThread(ask, "/replica?min_lsn=0/9000000&wait_ms=300", 2)
        assert waited.count(b"HTTP/1.1 200 OK") == 2 and waited.endswith(b"\r\n\r\npg-1")
        for _ in range(20):
            klein = yield threads.deferToThread(ask, "/mas%74er", 3)
            assert klein.count(b"HTTP/1.1 200 OK") == 3 and klein.endswith(b"\r\n\r\npg-1")
    finally:
        yield svc.stopService()
