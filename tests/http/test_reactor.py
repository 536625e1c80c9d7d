"""
:mod:`pgstatus.reactor`: the HTTP listener's events are dispatched without
Twisted's per-event logging context, every other descriptor's as Twisted
does; the service installs it unless a reactor is installed already.  The
whole suite runs on it (``conftest.py``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest_twisted
from http_apis import make_api
from test_direct_send import DEADLINE, get
from test_fastpath import CONFIG, view
from test_launch import run_python
from twisted.internet import threads
from twisted.internet.protocol import Factory, Protocol
from twisted.python import log

import pgstatus.reactor
from pgstatus.http.fastpath import FastSite
from pgstatus.http.transport import Connection, Port, listen_tcp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Echo(Protocol):
    def dataReceived(self, data: bytes) -> None:
        self.transport.write(data)


def keep_alive_exchange(port: int, payloads: list[bytes], answer_end: bytes) -> list[bytes]:
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as c:
        for p in payloads:
            c.sendall(p)
            data = b""
            while not data.endswith(answer_end):
                data += c.recv(65536)
            answers.append(data)
    return answers


def test_suite_runs_on_it(reactor):
    assert type(reactor) is pgstatus.reactor.EPollReactor
    assert {Connection, Port} <= reactor._bare


@pytest_twisted.inlineCallbacks
def test_http_events_skip_the_log_context_others_keep_it(reactor, monkeypatch):
    """
    Requests on the service's listener are dispatched without
    ``log.callWithLogger``; a plain Twisted server's events still go through
    it.
    """
    seen: list[type] = []
    real = log.callWithLogger

    def counting(logger, func, *args, **kw):
        seen.append(type(logger))
        return real(logger, func, *args, **kw)

    monkeypatch.setattr(log, "callWithLogger", counting)
    v = view()
    api = make_api(lambda: v, CONFIG, "9.9.9")
    http = listen_tcp(reactor, 0, FastSite(api.resource(), api.renderer, reactor),
                      interface="127.0.0.1")
    echo = reactor.listenTCP(0, Factory.forProtocol(Echo), interface="127.0.0.1")
    try:
        answers = yield threads.deferToThread(
            keep_alive_exchange, http.getHost().port, [get("/version")] * 5, b"9.9.9")
        assert len(answers) == 5 and all(a.startswith(b"HTTP/1.1 200 ") for a in answers)
        assert not {Connection, Port} & set(seen)
        echoed = yield threads.deferToThread(
            keep_alive_exchange, echo.getHost().port, [b"ping\n"] * 3, b"ping\n")
        assert echoed == [b"ping\n"] * 3
        assert len(seen) >= 3  # the echo server's accept and reads
    finally:
        yield http.stopListening()
        yield echo.stopListening()


def test_installed_by_default_else_the_installed_one_is_kept():
    fresh = run_python(
        "from pgstatus.reactor import install_default\n"
        "install_default()\n"
        "from twisted.internet import reactor\n"
        "print(type(reactor).__module__, type(reactor).__name__)\n")
    assert fresh == "pgstatus.reactor EPollReactor"
    chosen = run_python(
        "from twisted.internet import pollreactor\n"
        "pollreactor.install()\n"
        "from pgstatus.reactor import install_default\n"
        "install_default()\n"
        "from twisted.internet import reactor\n"
        "print(type(reactor).__module__, type(reactor).__name__)\n")
    assert chosen == "twisted.internet.pollreactor PollReactor"


def test_the_service_runs_on_it():
    """
    ``twistd pgstatus`` and ``pg-status`` build the service on it (twistd
    names the reactor class in its start-up lines).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("pg_status__")}
    env.update(PYTHONPATH=ROOT, pg_status__hosts="127.0.0.1",
               pg_status__http_listen_address="127.0.0.1", pg_status__http_port="0")
    for cmd in ([sys.executable, "-m", "pgstatus.launch"],
                [os.path.join(os.path.dirname(sys.executable), "twistd"),
                 "-n", "--pidfile=", "pgstatus"]):
        proc = subprocess.Popen(cmd, env=env, cwd="/", stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if "server started" in line:
                    break
        finally:
            proc.terminate()
            proc.communicate(timeout=DEADLINE)
        assert any("reactor class: pgstatus.reactor.EPollReactor" in x for x in lines), lines
