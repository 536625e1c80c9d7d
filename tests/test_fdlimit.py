"""
Open-file limits (``pgstatus.fdlimit``, issue 30): idle HTTP clients must
not take the descriptors the PostgreSQL checks need.

First the pure cap computation and its log line, then the raise of the soft
limit in a child process, and last the real thing: ``twistd pgstatus`` with
a low open-files limit against the real PostgreSQL topology, more idle HTTP
clients than the limit allows, and PostgreSQL connections cut again and
again.  Before the caps, the process ran out of descriptors, its reconnects
failed with ``EMFILE`` and ``/master`` answered 404 while the primary was
fine.
"""

from __future__ import annotations

import os
import re
import resource
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from daemon import ROOT, Daemon

from pgstatus.agent import MAX_CONNECTIONS as AGENT_MAX
from pgstatus.fdlimit import (
    MIN_AGENT,
    MIN_HTTP,
    NOFILE_CEILING,
    ConnectionCaps,
    agent_connection_cap,
    http_connection_cap,
    raise_nofile_limit,
    reserve,
)

# -- the pure computation ---------------------------------------------------


def test_reserve_formula() -> None:
    """
    62 fixed descriptors (63 with the agent's listener), 4 per host, and
    room for one accept batch of over-cap connections.
    """
    assert reserve(0, False) == 62 + 100
    assert reserve(3, False) == 62 + 12 + 100
    assert reserve(3, True) == reserve(3, False) + 1
    assert reserve(100, False) - reserve(99, False) == 4


def test_cap_is_the_soft_limit_minus_the_reserve() -> None:
    """
    systemd's default soft limit: the default 10,000 becomes what fits,
    two descriptors a connection (a request body may take a second).
    """
    assert http_connection_cap(10000, 1024, 3, False) == (1024 - 174) // 2 == 425
    assert http_connection_cap(10000, 65536, 3, False) == 10000


def test_configured_below_the_cap_is_kept() -> None:
    assert http_connection_cap(400, 1024, 3, False) == 400
    assert http_connection_cap(425, 1024, 3, False) == 425
    assert http_connection_cap(1, 1024, 3, False) == 1


def test_soft_limit_below_the_reserve_keeps_a_minimum() -> None:
    """
    A limit too low for the reserve still leaves the API a few connections
    (never more than configured).
    """
    assert http_connection_cap(10000, 64, 3, False) == MIN_HTTP
    assert http_connection_cap(10000, 174, 3, False) == MIN_HTTP
    assert http_connection_cap(10000, 174 + 2 * (MIN_HTTP + 1), 3, False) == MIN_HTTP + 1
    assert http_connection_cap(5, 64, 3, False) == 5


def test_huge_or_unlimited_soft_limit() -> None:
    """
    A huge limit, ``RLIM_INFINITY`` (or any negative value) leaves the
    configured cap, and the agent its own.
    """
    for nofile in (NOFILE_CEILING, 1 << 40, resource.RLIM_INFINITY, -1):
        assert http_connection_cap(10000, nofile, 3, False) == 10000
        assert http_connection_cap(1000000, nofile, 3, True) == 1000000
        assert agent_connection_cap(nofile, 3) == AGENT_MAX


def test_many_hosts_eat_into_the_cap() -> None:
    assert http_connection_cap(10000, 1024, 100, False) == (1024 - (62 + 400 + 100)) // 2
    assert http_connection_cap(10000, 1024, 300, False) == MIN_HTTP


def test_agent_shares_the_limit() -> None:
    """
    With the agent on, it gets an eighth of what the reserve leaves (at
    most its own maximum, at least a few), and the HTTP cap the rest.
    """
    room = 1024 - reserve(3, True)
    assert agent_connection_cap(1024, 3) == room // 8 == 106
    assert http_connection_cap(10000, 1024, 3, True) == (room - 106) // 2
    assert agent_connection_cap(65536, 3) == AGENT_MAX
    assert http_connection_cap(10000, 65536, 3, True) == 10000
    assert agent_connection_cap(100, 3) == MIN_AGENT
    assert http_connection_cap(10000, 100, 3, True) == MIN_HTTP


def test_caps_of_a_configuration() -> None:
    """
    Hosts and followed hubs count alike; the agent is on with its port.
    """
    caps = ConnectionCaps.compute(10000, 1024, 3, False)
    assert (caps.http, caps.agent, caps.configured, caps.nofile, caps.reserve) == (
        425, None, 10000, 1024, 174)
    assert caps.capped
    assert not ConnectionCaps.compute(400, 1024, 3, False).capped
    assert ConnectionCaps.compute(10000, 1024, 3, True).agent == 106


def test_caps_count_hosts_and_hubs(monkeypatch) -> None:
    """
    From a configuration: polled hosts and followed hubs each take their
    share of the reserve; the agent is on with its port.
    """
    from pgstatus.config.environ import load_config

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    config = load_config({"pg_status__hosts": "a,b,c",
                          "pg_status__follow": "http://hub1:8000,http://hub2:8000",
                          "pg_status__agent_port": "8001"})
    caps = ConnectionCaps.for_config(config)
    assert caps == ConnectionCaps.compute(10000, 1024, 5, True)
    assert caps.reserve == reserve(5, True) == 63 + 20 + 100


def test_start_line(log_events) -> None:
    """
    One INFO line of the main component; ``capped`` and the configured
    value when the cap was lowered.
    """
    ConnectionCaps.compute(10000, 1024, 3, False).log_start()
    ConnectionCaps.compute(10000, 65536, 3, True).log_start()
    ConnectionCaps.compute(10000, resource.RLIM_INFINITY, 1, False).log_start()
    lines = [line.split(" ", 1)[1] for line in log_events.text()]
    assert lines == [
        "INFO main: http connections capped max_connections=425 configured=10000 nofile=1024 "
        "reserve=174",
        "INFO main: http connections max_connections=10000 nofile=65536 reserve=175 "
        "agent_max_connections=1000",
        "INFO main: http connections max_connections=10000 nofile=unlimited reserve=166",
    ]


# -- raising the soft limit -------------------------------------------------


def _in_child(code: str, nofile: tuple[int, int]) -> str:
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT}, preexec_fn=limits,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_raise_to_the_hard_limit() -> None:
    """
    The soft limit goes up to the hard one; an already raised one stays.
    """
    code = """
        import resource
        from pgstatus.fdlimit import raise_nofile_limit
        print(raise_nofile_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))
        print(raise_nofile_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))
    """
    assert _in_child(code, (256, 512)).split() == ["512", "512", "512"] * 2
    assert _in_child(code, (512, 512)).split() == ["512", "512", "512"] * 2


def test_raise_refused_is_a_warning(monkeypatch, log_events) -> None:
    """
    Where setrlimit is refused (systemd's ``@resources`` filter answers
    EPERM), the soft limit stays and a warning says why.
    """
    def refuse(which: int, limits: tuple[int, int]) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 524288))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert raise_nofile_limit() == 1024
    lines = [line.split(" ", 1)[1] for line in log_events.text()]
    assert lines == ["WARNING main: cannot raise the open files limit nofile=1024 hard=524288 "
                     "error=[Errno 1] Operation not permitted"]


def test_raise_from_an_unlimited_hard_limit(monkeypatch) -> None:
    """
    An unlimited hard limit is raised to, at most, the ceiling.
    """
    calls = []
    monkeypatch.setattr(resource, "getrlimit",
                        lambda which: (1024, resource.RLIM_INFINITY))
    monkeypatch.setattr(resource, "setrlimit", lambda which, limits: calls.append(limits))
    assert raise_nofile_limit() == NOFILE_CEILING
    assert calls == [(NOFILE_CEILING, resource.RLIM_INFINITY)]


# -- the real service -------------------------------------------------------

#: the daemon's (soft, hard) open-files limits: it raises the soft one
NOFILE = (200, 400)
#: idle HTTP clients: more than even the raised limit allows
CLIENTS = NOFILE[1] + 50
FAST = {
    # the request deadline must not end the bodies under way during the test
    "pg_status__http_header_timeout_ms": "120000",
    "pg_status__sleep_ms": "200",
    "pg_status__query_timeout_ms": "500",
    "pg_status__max_fails": "2",
    "pg_status__poll_error_log_interval_ms": "0",
    "pg_status__http_idle_timeout_ms": "300000",
}


def _ask(s: socket.socket, path: str) -> tuple[int, bytes]:
    """
    One request on a kept-alive connection: ``(status, body)``, or
    ``(0, b"")`` when the connection is closed without an answer.
    """
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: pg-status\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return 0, b""
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = re.search(rb"\r\ncontent-length: *(\d+)", head, re.IGNORECASE)
        while length is not None and len(body) < int(length.group(1)):
            chunk = s.recv(4096)
            if not chunk:
                return 0, b""
            body += chunk
        return int(head.split(b" ", 2)[1]), body
    except OSError:
        return 0, b""


def _raise_own_limit(needed: int) -> tuple[int, int]:
    """
    This process needs a descriptor per client: raise its soft limit.
    """
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft, hard = before
    if soft != resource.RLIM_INFINITY and soft < needed:
        want = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return before


class Arrivals(threading.Thread):
    """
    New clients that keep arriving while the test runs, each asking
    ``/master`` once and staying connected when answered (idle keep-alive
    clients, as in the issue), so that any descriptor the service frees is
    soon taken by one, unless the cap turns them away.
    """

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.statuses: list[int] = []
        self.kept: list[socket.socket] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.005):
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                self.statuses.append(0)
                continue
            status = _ask(s, "/master")[0]
            self.statuses.append(status)
            if status == 200:
                self.kept.append(s)
            else:
                s.close()

    def stop(self) -> None:
        self.done.set()
        if self.ident is not None:
            self.join(10)
        for s in self.kept:
            s.close()


@pytest.mark.pg
def test_idle_clients_over_the_limit_leave_room_for_postgresql(guarded_topology) -> None:
    """
    ``twistd pgstatus`` started with open files 200 (hard 400) raises the
    soft limit to 400 and caps HTTP connections under it.  450 idle
    keep-alive clients connect: those over the cap get 503 and are closed;
    those under it start a chunked request body, which twisted.web writes
    into a temporary file (a second descriptor each).
    Then, while more clients keep arriving, every pg-status session on every
    node is terminated, three times: each time the service reconnects,
    ``/master`` (asked on one of the idle connections) answers the primary
    throughout, the arriving clients get 503, and the log never shows
    ``EMFILE``.
    """
    topo = guarded_topology
    saved = _raise_own_limit(CLIENTS + 2000)
    daemon = Daemon({**topo.hosts_env(), **FAST}, nofile=NOFILE)
    clients: list[socket.socket] = []
    arrivals = Arrivals(daemon.port)
    try:
        daemon.start()
        daemon.wait_ready()
        primary = topo.primary.host.encode()
        statuses = []
        for _ in range(CLIENTS):
            s = socket.create_connection(("127.0.0.1", daemon.port), timeout=5)
            clients.append(s)
            statuses.append(_ask(s, "/master")[0])
        watcher = clients[0]
        assert statuses[0] == 200, statuses
        # every other client starts a request with a body twisted.web writes
        # into a temporary file: a second descriptor per connection
        for s, status in zip(clients[1:], statuses[1:]):
            if status == 200:
                s.sendall(b"POST /master HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"1\r\na\r\n")

        def master_answers() -> None:
            got = _ask(watcher, "/master")
            assert got == (200, primary), (got, daemon.log())

        arrivals.start()
        for _ in range(3):
            cut = {n.name: set(n.backend_pids(application_name="pg-status"))
                   for n in topo.nodes}
            assert all(cut.values()), cut
            for n in topo.nodes:
                n.terminate_backends(application_name="pg-status")
            deadline = time.monotonic() + 15
            while True:
                master_answers()
                now = {n.name: set(n.backend_pids(application_name="pg-status"))
                       for n in topo.nodes}
                if all(now[name] - cut[name] for name in now):
                    break
                assert time.monotonic() < deadline, (
                    f"pg-status did not reconnect to every node: cut {cut}, now {now}\n"
                    f"{daemon.log()}")
                time.sleep(0.05)
        # the master stays answered for longer than max_fails checks take
        settle = time.monotonic() + 1.5
        while time.monotonic() < settle:
            master_answers()
            time.sleep(0.05)
        arrivals.stop()

        log = daemon.log(tail=None)
        assert "EMFILE" not in log and "Too many open files" not in log, log
        line = re.search(r"INFO main: http connections capped max_connections=(\d+) "
                         r"configured=10000 nofile=400 reserve=(\d+)\n", log)
        assert line, log
        cap, kept = int(line.group(1)), int(line.group(2))
        assert cap == (400 - kept) // 2 == http_connection_cap(10000, 400, 3, False)
        ok, busy = statuses.count(200), statuses.count(503)
        assert ok + busy == CLIENTS, statuses
        # the readiness polls' connections may not all be closed yet
        assert cap - 3 <= ok <= cap, (ok, cap)
        assert len(arrivals.statuses) > 50, arrivals.statuses
        assert arrivals.statuses.count(503) >= len(arrivals.statuses) - (cap - ok), (
            arrivals.statuses)
    finally:
        arrivals.stop()
        for s in clients:
            s.close()
        daemon.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, saved)
