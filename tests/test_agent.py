"""
The HAProxy agent check (``pg_status__agent_port``).

First the pure parts (request parsing, the decision from a hand-built
:class:`View`, the answer lines), then the protocol on a fake transport and
clock, then the listener over real TCP, and last end to end: the service in
this process against the real PostgreSQL topology, steering a real HAProxy
(Debian's ``haproxy``) started by the test.  Without HAProxy those tests
fail; they never skip.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from typing import Any

import psycopg2
import pytest
import pytest_twisted
from pgtopology import SUPERUSER, SUPERUSER_PASSWORD, free_port
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import formatEvent, globalLogPublisher

from pgstatus.agent import REQUEST_TIMEOUT, AgentFactory, AgentService
from pgstatus.agent_answer import (
    DOWN,
    DRAIN,
    MAX_LINE,
    NO_CHANGE,
    UP,
    Answer,
    BadRequest,
    Request,
    answer_line,
    decide,
    parse_request,
)
from pgstatus.config.environ import load_config
from pgstatus.config.settings import ConfigError
from pgstatus.model.selection import Filters, matches, select_master
from pgstatus.model.status import HostStatus, View
from service import blocking, ready, wait_until

# ---------------------------------------------------------------------------
# Hand-built views


def host(index: int, name: str, **kw: Any) -> HostStatus:
    """
    A checked, alive, healthy replica unless ``kw`` says otherwise.
    """
    fields: dict[str, Any] = {"checked": True, "reached": True, "alive": True,
                              "lag_ms": 0, "lag_bytes": 0}
    fields.update(kw)
    if not fields["alive"]:
        fields.update(lag_ms=None, lag_bytes=None, possible_dead=True)
    return HostStatus(index, name, None, None, **fields)


def view(*hosts: HostStatus, ready: bool = True) -> View:
    return View(tuple(hosts), select_master(hosts), ready, 1)


def cluster(**replica: Any) -> View:
    """
    ``m`` the master, ``r`` a replica shaped by ``replica``, ``d`` dead.
    """
    return view(host(0, "m", master=True), host(1, "r", **replica), host(2, "d", alive=False))


# ---------------------------------------------------------------------------
# Requests


@pytest.mark.parametrize(("line", "expected"), [
    (b"db1 master", Request("db1", "master")),
    (b"db1 MASTER", Request("db1", "master")),
    (b"  db1\tmaster  ", Request("db1", "master")),
    (b"db1 replica", Request("db1", "replica")),
    (b"db1 Replica 1000", Request("db1", "replica", 1000)),
    (b"db1 replica 1000 1000000", Request("db1", "replica", 1000, 1000000)),
    (b"db1 replica - 5", Request("db1", "replica", None, 5)),
    (b"db1 replica 0 -", Request("db1", "replica", 0, None)),
    (b"db1 replica - -", Request("db1", "replica")),
    (b"10.0.0.1 replica 007 0\r", Request("10.0.0.1", "replica", 7, 0)),
    (b"db1 replica 9223372036854775807 0",
     Request("db1", "replica", 2**63 - 1, 0)),
])
def test_parse_valid(line, expected):
    assert parse_request(line) == expected


@pytest.mark.parametrize(("line", "reason"), [
    (b"", "empty"),
    (b"   ", "empty"),
    (b"db1", "no role"),
    (b"db1 primary", "unknown role"),
    (b"db1 master 1000", "no limits"),
    (b"db1 replica 1 2 3", "too many fields"),
    (b"db1 replica -1", "invalid lag_ms"),
    (b"db1 replica 1.5", "invalid lag_ms"),
    (b"db1 replica 1e3", "invalid lag_ms"),
    (b"db1 replica 1 x", "invalid lag_bytes"),
    (b"db1 replica 1 \xd9\xa1", "not ASCII"),
    (b"db1 replica 9223372036854775808", "invalid lag_ms"),
    (b"db1 replica 1 99999999999999999999", "invalid lag_bytes"),
    (b"db1 replica " + b"1" * 5000, "too long"),
    (b"h" * (MAX_LINE + 1), "too long"),
])
def test_parse_invalid(line, reason):
    with pytest.raises(BadRequest) as e:
        parse_request(line)
    assert reason in str(e.value)


def test_parse_longest_line():
    line = b"h" * (MAX_LINE - len(b" master")) + b" master"
    assert len(line) == MAX_LINE
    assert parse_request(line).role == "master"


# ---------------------------------------------------------------------------
# Decisions


@pytest.mark.parametrize(("request_", "state", "reason"), [
    (Request("m", "master"), UP, "master"),
    (Request("r", "master"), DOWN, "replica"),
    (Request("d", "master"), DOWN, "dead"),
    (Request("x", "master"), DOWN, "unknown host"),
    (Request("m", "replica"), DOWN, "master"),
    (Request("m", "replica", 10, 10), DOWN, "master"),
    (Request("d", "replica"), DOWN, "dead"),
    (Request("x", "replica"), DOWN, "unknown host"),
    (Request("r", "replica"), UP, "replica lag_ms=500 lag_bytes=2000"),
    (Request("r", "replica", 500, 2000), UP, "replica lag_ms=500 lag_bytes=2000"),
    (Request("r", "replica", 499), DRAIN, "replica lag_ms=500 over 499"),
    (Request("r", "replica", None, 1999), DRAIN, "replica lag_bytes=2000 over 1999"),
    (Request("r", "replica", 0, 0), DRAIN,
     "replica lag_ms=500 over 0 and lag_bytes=2000 over 0"),
])
def test_decide(request_, state, reason):
    answer = decide(cluster(lag_ms=500, lag_bytes=2000), request_)
    assert (answer.state, answer.reason) == (state, reason)


def test_unknown_lag_meets_no_limit():
    v = cluster(lag_ms=None, lag_bytes=None)
    assert decide(v, Request("r", "replica")).state == UP
    a = decide(v, Request("r", "replica", 1000))
    assert (a.state, a.reason) == (DRAIN, "replica lag_ms=null over 1000")
    a = decide(v, Request("r", "replica", None, 10**9))
    assert (a.state, a.reason) == (DRAIN, "replica lag_bytes=null over 1000000000")


def test_ready_only_where_pg_status_may_drain():
    v = cluster()
    assert decide(v, Request("m", "master")).ready is False
    assert decide(v, Request("r", "replica")).ready is False
    assert decide(v, Request("r", "replica", 10)).ready is True
    assert decide(v, Request("r", "replica", None, 10)).ready is True


def test_not_ready_changes_nothing():
    v = view(host(0, "m", master=True), host(1, "r"), ready=False)
    for r in [Request("m", "master"), Request("r", "replica", 1, 1), Request("x", "master")]:
        assert decide(v, r) == Answer(NO_CHANGE, "pg-status is not ready")


def test_unchecked_host_changes_nothing():
    v = view(host(0, "m", master=True), HostStatus(1, "new", None, None))
    assert decide(v, Request("new", "replica")).state == NO_CHANGE


def test_possibly_dead_hosts_keep_their_role():
    v = view(host(0, "m", master=True, possible_dead=True),
             host(1, "r", possible_dead=True, lag_ms=10, lag_bytes=0))
    assert decide(v, Request("m", "master")) == Answer(UP, "possibly dead master")
    a = decide(v, Request("r", "replica", 100))
    assert (a.state, a.reason) == (UP, "possibly dead replica lag_ms=10 lag_bytes=0")
    a = decide(v, Request("r", "replica", 5))
    assert a.state == DRAIN and a.reason.startswith("possibly dead replica lag_ms=10 over 5")


def test_split_brain_only_selected_master_is_up():
    v = view(host(0, "a", master=True), host(1, "b", master=True))
    assert decide(v, Request("a", "master")).state == UP
    assert decide(v, Request("b", "master")) == Answer(DOWN, "master but not the selected one")
    # a possibly dead master loses to a healthy one
    v = view(host(0, "a", master=True, possible_dead=True), host(1, "b", master=True))
    assert decide(v, Request("a", "master")).state == DOWN
    assert decide(v, Request("b", "master")).state == UP


def test_no_master_selected():
    v = view(host(0, "m", alive=False), host(1, "r"))
    assert decide(v, Request("m", "master")) == Answer(DOWN, "dead")
    assert decide(v, Request("r", "master")) == Answer(DOWN, "replica")
    assert decide(v, Request("r", "replica", 0, 0)).state == UP


def test_duplicate_names_use_the_first_as_status_does():
    v = view(host(0, "m", master=True), host(1, "r", lag_ms=1), host(2, "r", lag_ms=99))
    assert decide(v, Request("r", "replica", 10)).state == UP


@pytest.mark.parametrize("lag_ms", [None, 0, 5, 10, 11])
@pytest.mark.parametrize("lag_bytes", [None, 0, 99, 100, 101])
@pytest.mark.parametrize("limits", [(None, None), (10, None), (None, 100), (10, 100),
                                    (0, 0)])
def test_up_exactly_when_replica_would_match(lag_ms, lag_bytes, limits):
    """
    For an alive replica, ``up`` is ``/replica``'s filter with the same
    limits: an agent pool and ``/replica?lag_ms=&lag_bytes=`` agree.
    """
    v = cluster(lag_ms=lag_ms, lag_bytes=lag_bytes)
    r = v.hosts[1]
    a = decide(v, Request("r", "replica", *limits))
    assert (a.state == UP) == matches(r, Filters(*limits), v.master)
    assert a.state in (UP, DRAIN)


# ---------------------------------------------------------------------------
# Answer lines


@pytest.mark.parametrize(("answer", "line"), [
    (Answer(UP, "master"), b"up #master\n"),
    (Answer(UP, "replica lag_ms=1 lag_bytes=0", ready=True),
     b"up ready #replica lag_ms=1 lag_bytes=0\n"),
    (Answer(DRAIN, "replica lag_ms=5 over 1"), b"up drain #replica lag_ms=5 over 1\n"),
    (Answer(DOWN, "dead"), b"down #dead\n"),
    (Answer(NO_CHANGE, "pg-status is not ready"), b"#pg-status is not ready\n"),
])
def test_answer_lines(answer, line):
    assert answer.line() == line


def test_answer_line_of_bad_and_missing_requests():
    v = cluster()
    a, r = answer_line(v, None)
    assert r is None and a.line() == b"down #no request; set agent-send\n"
    a, r = answer_line(v, b"m primary")
    assert r is None and a.state == DOWN and a.line().startswith(b"down #bad request: ")
    assert b"\n" not in a.line()[:-1] and b"\r" not in a.line()
    a, r = answer_line(v, b"m master")
    assert r == Request("m", "master") and a.line() == b"up #master\n"


# ---------------------------------------------------------------------------
# The protocol on a fake transport and clock


class Fake:
    """
    An agent factory on a :class:`Clock`, serving a fixed view.
    """

    def __init__(self, v: View | None = None, max_connections: int = 1000) -> None:
        self.clock = Clock()
        self.view = v if v is not None else cluster()
        self.factory = AgentFactory(lambda: self.view, self.clock, max_connections)

    def connect(self) -> tuple[Any, StringTransport]:
        p = self.factory.buildProtocol(None)
        t = StringTransport()
        if p is not None:
            p.makeConnection(t)
        return p, t


def test_protocol_answers_one_line_and_closes():
    f = Fake()
    p, t = f.connect()
    p.dataReceived(b"m ma")
    assert t.value() == b"" and not t.disconnecting
    p.dataReceived(b"ster\r\nr replica\n")
    assert t.value() == b"up #master\n" and t.disconnecting
    p.dataReceived(b"r replica\n")
    assert t.value() == b"up #master\n"
    p.connectionLost(None)
    assert f.factory.connections == 0 and not f.clock.getDelayedCalls()


def test_protocol_no_request_answers_down_after_timeout():
    f = Fake()
    p, t = f.connect()
    f.clock.advance(REQUEST_TIMEOUT - 0.01)
    assert t.value() == b""
    f.clock.advance(0.02)
    assert t.value() == b"down #no request; set agent-send\n" and t.disconnecting
    # a client that does not let go is cut one timeout later
    assert not t.disconnected
    f.clock.advance(REQUEST_TIMEOUT)
    assert t.disconnected
    p.connectionLost(None)
    assert f.factory.connections == 0


def test_protocol_request_without_line_feed_at_timeout_or_half_close():
    f = Fake()
    p, t = f.connect()
    p.dataReceived(b"r replica 1000")
    f.clock.advance(REQUEST_TIMEOUT)
    assert t.value() == b"up ready #replica lag_ms=0 lag_bytes=0\n"
    p, t = f.connect()
    p.dataReceived(b"r master")
    p.readConnectionLost()
    assert t.value() == b"down #replica\n" and t.disconnecting
    p, t = f.connect()
    p.readConnectionLost()
    assert t.value() == b"down #no request; set agent-send\n"


def test_protocol_long_line_refused_at_once():
    f = Fake()
    p, t = f.connect()
    p.dataReceived(b"x" * 300)
    p.dataReceived(b"x" * 300)
    assert t.value() == b"down #bad request: request too long\n" and t.disconnecting
    p, t = f.connect()
    p.dataReceived(b"x" * (MAX_LINE + 1) + b"\n")
    assert t.value() == b"down #bad request: request too long\n"


def test_protocol_answers_from_the_current_view():
    f = Fake()
    p, t = f.connect()
    f.view = cluster(lag_ms=5000)
    p.dataReceived(b"r replica 1000\n")
    assert t.value() == b"up drain #replica lag_ms=5000 over 1000\n"


def test_connection_limit():
    f = Fake(max_connections=2)
    a, _ = f.connect()
    b, _ = f.connect()
    c, _ = f.connect()
    assert a is not None and b is not None and c is None
    assert f.factory.refused == 1
    a.connectionLost(None)
    d, _ = f.connect()
    assert d is not None


# ---------------------------------------------------------------------------
# Configuration


def test_agent_port_setting():
    env = {"pg_status__hosts": "a"}
    assert load_config(env).agent_port == 0
    assert load_config({**env, "pg_status__agent_port": " 6432 "}).agent_port == 6432
    assert load_config({**env, "pg_status__agent_port": ""}).agent_port == 0
    assert dict(load_config({**env, "pg_status__agent_port": "7"}).public_items())[
        "agent_port"] == "7"
    for bad in ["65536", "-1", "x", "1.0"]:
        with pytest.raises(ConfigError) as e:
            load_config({**env, "pg_status__agent_port": bad})
        assert e.value.variable == "pg_status__agent_port"
        assert "0 to 65535 (0: off)" in e.value.reason


# ---------------------------------------------------------------------------
# Over real TCP


def exchange(port: int, data: bytes, half_close: bool = False, host: str = "127.0.0.1"
             ) -> tuple[bytes, float]:
    """
    Connect, send ``data``, read to EOF (blocking; run in a thread).

    :return: what came back and how long it took.
    """
    t0 = time.monotonic()
    with socket.create_connection((host, port), timeout=5) as s:
        if data:
            s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
    return out, time.monotonic() - t0


@pytest_twisted.inlineCallbacks
def test_listener_over_tcp(reactor):
    current = [cluster(lag_ms=20)]
    svc = AgentService(reactor, "127.0.0.1", 0, lambda: current[0])
    svc.startService()
    try:
        port = svc.port.getHost().port
        out, _ = yield blocking(exchange, port, b"m master\n")
        assert out == b"up #master\n"
        out, _ = yield blocking(exchange, port, b"r replica 10 0\n")
        assert out == b"up drain #replica lag_ms=20 over 10\n"
        out, took = yield blocking(exchange, port, b"r replica", True)
        assert out == b"up #replica lag_ms=20 lag_bytes=0\n" and took < REQUEST_TIMEOUT / 2
        out, took = yield blocking(exchange, port, b"")
        assert out == b"down #no request; set agent-send\n"
        assert REQUEST_TIMEOUT * 0.9 <= took < REQUEST_TIMEOUT + 2
        out, _ = yield blocking(exchange, port, b"x" * 2000)
        assert out == b"down #bad request: request too long\n"
        yield wait_until(reactor, lambda: svc.factory.connections == 0, 5, "connections closed")
    finally:
        yield svc.stopService()
    assert svc.port is None


# ---------------------------------------------------------------------------
# In the service, against the real topology

FAST = {
    "pg_status__sleep_ms": "200",
    "pg_status__query_timeout_ms": "300",
    "pg_status__max_fails": "3",
}


@pytest_twisted.inlineCallbacks
def test_service_wiring(pg_topology, service, reactor):
    """
    Without the setting there is no agent; with it, the agent listens on
    the HTTP listen address, logs so and answers from the live view.
    """
    topo = pg_topology
    svc = service({**topo.hosts_env(), **FAST})
    assert svc.svc.agent is None
    assert "agent" not in [s.name for s in svc.svc]
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    port = free_port()
    try:
        svc2 = service({**topo.hosts_env(), **FAST, "pg_status__agent_port": str(port)})
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert svc2.svc.agent is not None and svc2.svc.agent.port.getHost().port == port
    lines = [formatEvent(e) for e in events if e.get("log_namespace") == "pgstatus.agent"]
    assert f"agent started address=127.0.0.1 port={port}" in lines
    assert any(f"agent_port={port}" in formatEvent(e) for e in events)
    yield wait_until(reactor, ready(svc2), 10, "readiness")
    yield wait_until(reactor, lambda: all(h.healthy for h in svc2.view.hosts), 5, "healthy")
    out, _ = yield blocking(exchange, port, f"{topo.primary.host} master\n".encode())
    assert out == b"up #master\n"
    r1 = topo.replicas[0]
    out, _ = yield blocking(exchange, port, f"{r1.host} master\n".encode())
    assert out == b"down #replica\n"
    out, _ = yield blocking(exchange, port, f"{r1.host} replica\n".encode())
    assert out.startswith(b"up #replica lag_ms=")


# ---------------------------------------------------------------------------
# A real HAProxy


HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


class HAProxy:
    """
    HAProxy run in the foreground (``-db``) from a config in ``directory``,
    with an admin stats socket there.
    """

    def __init__(self, directory: str, body: str) -> None:
        if not os.path.exists(HAPROXY):
            pytest.fail("haproxy is not installed (Debian package haproxy; "
                        "see .ci/test-deps, run by make test); the HAProxy agent tests need it")
        self.directory = directory
        self.socket = os.path.join(directory, "admin.sock")
        self.config = os.path.join(directory, "haproxy.cfg")
        self.log = os.path.join(directory, "haproxy.log")
        with open(self.config, "w") as f:
            f.write(f"global\n    stats socket {self.socket} mode 600 level admin\n{body}")
        check = subprocess.run([HAPROXY, "-c", "-f", self.config], capture_output=True,
                               text=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
        self._out = open(self.log, "wb")
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", self.config],
                                     stdout=self._out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.command("show info")
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"haproxy did not start:\n{self.log_tail()}") from None
                time.sleep(0.05)

    def command(self, cmd: str) -> str:
        """
        One runtime API command on the stats socket (blocking).
        """
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.socket)
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        return out.decode()

    def servers(self) -> dict[tuple[str, str], dict[str, str]]:
        """
        ``show stat`` of every server: ``(backend, server) -> fields``.
        """
        lines = self.command("show stat").splitlines()
        names = lines[0].lstrip("# ").split(",")
        out = {}
        for line in lines[1:]:
            if not line:
                continue
            row = dict(zip(names, line.split(","), strict=False))
            if row["svname"] not in ("FRONTEND", "BACKEND"):
                out[(row["pxname"], row["svname"])] = row
        return out

    def log_tail(self) -> str:
        with open(self.log, errors="replace") as f:
            return "".join(f.readlines()[-30:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


@pytest.fixture
def haproxy(tmp_path):
    """
    Factory: ``haproxy(body)`` starts HAProxy with ``body`` after its
    ``global`` section; stopped after the test.
    """
    started: list[HAProxy] = []

    def make(body: str) -> HAProxy:
        hx = HAProxy(str(tmp_path), body)
        started.append(hx)
        return hx

    yield make
    for hx in started:
        hx.stop()


DEFAULTS = """
defaults
    mode tcp
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    timeout check 2s
    default-server check inter 300ms rise 1 fall 1
"""


def server(name: str, node: Any, agent_port: int, send: str | None) -> str:
    """
    A ``server`` line for a PostgreSQL node, agent-checked by pg-status.
    """
    line = (f"    server {name} {node.host}:{node.port} agent-check agent-addr 127.0.0.1"
            f" agent-port {agent_port}")
    if send is None:
        return line + " agent-inter 2s\n"
    return line + f' agent-inter 200ms agent-send "{send}\\n"\n'


def wait_states(reactor: Any, hx: HAProxy, expected: dict[tuple[str, str], str],
                timeout: float = 10, what: str = "HAProxy server states") -> Any:
    """
    Wait until every ``(backend, server)`` has a ``show stat`` status that
    starts with the expected one (``DOWN`` also matches ``DOWN (agent)``).

    :return: a Deferred firing with every server's ``show stat`` row.
    """
    last: dict[str, Any] = {}

    def check(rows):
        got = {k: (rows[k]["status"], rows[k]["last_agt"]) for k in expected}
        last["got"] = got
        return rows if all(got[k][0].startswith(v) for k, v in expected.items()) else False

    def explain(failure):
        failure.trap(AssertionError)
        raise AssertionError(
            f"{what}: expected {expected}, got {last.get('got')}\n{hx.log_tail()}")

    d = wait_until(reactor, lambda: blocking(hx.servers).addCallback(check), timeout, what)
    return d.addCallbacks(lambda found: found[0], explain)


def through(port: int, query: str) -> Any:
    """
    Run ``query`` on whatever server HAProxy's frontend on ``port`` picks
    (blocking).
    """
    conn = psycopg2.connect(host="127.0.0.1", port=port, user=SUPERUSER,
                            password=SUPERUSER_PASSWORD, dbname="postgres",
                            connect_timeout=3, sslmode="disable")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(query)
            return cur.fetchone()
    finally:
        conn.close()


ROUTED = "SELECT host(inet_server_addr()), pg_is_in_recovery()"


@pytest_twisted.inlineCallbacks
def test_haproxy_routes_by_role_and_drains_lagging_replica(guarded_topology, service,
                                                           haproxy, reactor):
    """
    One pg-status steers three HAProxy backends: the write backend has the
    primary UP and the replica DOWN, the read backend the replicas UP and
    the primary DOWN; with replay paused and writes going on, the replica
    becomes DRAIN where agent-send has a small lag_bytes limit and comes
    back when it catches up.  A server without agent-send is DOWN.
    """
    topo = guarded_topology
    p, r1, r2 = topo.nodes
    agent = free_port()
    svc = service({**topo.hosts_env(), **FAST, "pg_status__agent_port": str(agent)})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    wport, rport = free_port(), free_port()
    body = DEFAULTS + f"""
frontend fe_write
    bind 127.0.0.1:{wport}
    default_backend pg_write
frontend fe_read
    bind 127.0.0.1:{rport}
    default_backend pg_read
backend pg_write
{server("primary", p, agent, f"{p.host} master")}\
{server("replica1", r1, agent, f"{r1.host} master")}\

backend pg_read
{server("primary", p, agent, f"{p.host} replica 1000 1000000")}\
{server("replica1", r1, agent, f"{r1.host} replica 1000 1000000")}\
{server("replica2", r2, agent, f"{r2.host} replica 1000 1000000")}\

backend pg_read_tight
{server("replica1", r1, agent, f"{r1.host} replica - 1000")}\
{server("replica2", r2, agent, f"{r2.host} replica - 1000")}\

backend pg_nosend
{server("primary", p, agent, None)}
"""
    hx = yield blocking(haproxy, body)
    rows = yield wait_states(reactor, hx, {
        ("pg_write", "primary"): "UP",
        ("pg_write", "replica1"): "DOWN",
        ("pg_read", "primary"): "DOWN",
        ("pg_read", "replica1"): "UP",
        ("pg_read", "replica2"): "UP",
        ("pg_read_tight", "replica1"): "UP",
        ("pg_read_tight", "replica2"): "UP",
        ("pg_nosend", "primary"): "DOWN",
    }, what="initial routing")
    assert rows[("pg_write", "replica1")]["last_agt"] == "via agent : down (replica)"
    assert rows[("pg_read", "primary")]["last_agt"] == "via agent : down (master)"
    assert rows[("pg_write", "primary")]["last_agt"] == "via agent : up (master)"
    # connections really go where the agent says
    for _ in range(3):
        got = yield blocking(through, wport, ROUTED)
        assert got == (p.host, False)
    seen = set()
    for _ in range(4):
        got = yield blocking(through, rport, ROUTED)
        assert got[1] is True
        seen.add(got[0])
    assert seen == {r1.host, r2.host}
    assert rows[("pg_nosend", "primary")]["last_agt"] == \
        "via agent : down (no request; set agent-send)"

    # replica1 falls behind by more than 1000 bytes
    yield blocking(r1.pause_replay)
    yield blocking(topo.write, secrets.token_hex(10000))  # incompressible
    rows = yield wait_states(reactor, hx, {
        ("pg_read_tight", "replica1"): "DRAIN",
        ("pg_read_tight", "replica2"): "UP",
        ("pg_write", "primary"): "UP",
    }, what="the lagging replica drained")
    assert "lag_bytes=" in rows[("pg_read_tight", "replica1")]["last_agt"]
    assert "over 1000" in rows[("pg_read_tight", "replica1")]["last_agt"]
    for _ in range(3):
        got = yield blocking(through, wport, ROUTED)
        assert got == (p.host, False)

    # it catches up: "ready" undoes the drain
    yield blocking(r1.resume_replay)
    yield wait_states(reactor, hx, {
        ("pg_read_tight", "replica1"): "UP",
        ("pg_read", "replica1"): "UP",
    }, what="the replica back after catching up")


@pytest_twisted.inlineCallbacks
def test_haproxy_write_backend_follows_promotion(fresh_topology, service, haproxy, reactor):
    """
    The primary stops and its replica is promoted: the write backend moves
    to the new master, the read backend takes it out, and a connection
    through the write frontend lands on a writable server again.
    """
    topo = yield blocking(fresh_topology, 1)
    old, new = topo.primary, topo.replicas[0]
    agent = free_port()
    svc = service({**topo.hosts_env(), **FAST, "pg_status__agent_port": str(agent)})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    wport = free_port()
    body = DEFAULTS + f"""
frontend fe_write
    bind 127.0.0.1:{wport}
    default_backend pg_write
backend pg_write
{server("old", old, agent, f"{old.host} master")}\
{server("new", new, agent, f"{new.host} master")}\

backend pg_read
{server("old", old, agent, f"{old.host} replica 1000 1000000")}\
{server("new", new, agent, f"{new.host} replica 1000 1000000")}
"""
    hx = yield blocking(haproxy, body)
    yield wait_states(reactor, hx, {
        ("pg_write", "old"): "UP",
        ("pg_write", "new"): "DOWN",
        ("pg_read", "old"): "DOWN",
        ("pg_read", "new"): "UP",
    }, what="initial routing")
    got = yield blocking(through, wport, ROUTED)
    assert got == (old.host, False)

    yield blocking(old.stop, "fast")
    yield blocking(new.promote)
    rows = yield wait_states(reactor, hx, {
        ("pg_write", "old"): "DOWN",
        ("pg_write", "new"): "UP",
        ("pg_read", "new"): "DOWN",
    }, 15, "the write backend following the promotion")
    assert rows[("pg_write", "new")]["last_agt"] == "via agent : up (master)"
    assert rows[("pg_read", "new")]["last_agt"] == "via agent : down (master)"

    def writable():
        try:
            return through(wport, "INSERT INTO rw_check (payload) VALUES ('via haproxy') "
                                  "RETURNING host(inet_server_addr())")
        except psycopg2.Error:
            return None

    got, _ = yield wait_until(reactor, lambda: blocking(writable), 10,
                              "a write through HAProxy")
    assert got == (new.host,)
