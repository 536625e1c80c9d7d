"""
The ``twistd pgstatus`` command as users run it: a real subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from pgtopology import PgTopology, _become_subreaper, free_port, poll

from pgstatus import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")


def _signals_not_ignored() -> None:
    """
    In the service's process before exec: SIGINT and SIGTERM at their
    default.  A test runner started in the background (``cmd &`` in a
    script) has SIGINT ignored, and pg-status, as a shell expects of a
    background job, leaves an ignored SIGINT ignored; these tests are about
    a SIGINT that is not ignored.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def env_with(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("pg_status__")}
    env["PYTHONPATH"] = ROOT
    env.update(values)
    return env


def run_twistd(env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([TWISTD, "-n", "--pidfile=", "pgstatus"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_help_lists_plugin() -> None:
    out = subprocess.run([TWISTD, "--help"], env=env_with(), capture_output=True, text=True,
                         timeout=30)
    assert "pgstatus" in out.stdout


@pytest.mark.parametrize("values,variable", [
    ({}, "pg_status__hosts"),
    ({"pg_status__hosts": "db", "pg_status__sleep_ms": "0"}, "pg_status__sleep_ms"),
    ({"pg_status__hosts": "db", "pg_status__log_level": "loud"}, "pg_status__log_level"),
    ({"pg_status__hosts": "db", "pg_status__http_listen_address": "nowhere"},
     "pg_status__http_listen_address"),
    ({"pg_status__hosts": "a,b", "pg_status__pg_port": "1,2,3"}, "pg_status__pg_port"),
])
def test_config_error_exits_before_listening(values, variable) -> None:
    """
    An invalid configuration exits non-zero with one line naming the
    variable, and never listens.
    """
    port = free_port()
    started = time.monotonic()
    out = run_twistd(env_with(**values, pg_status__http_port=str(port)))
    took = time.monotonic() - started
    assert out.returncode != 0
    lines = [ln for ln in out.stderr.splitlines() if "configuration error" in ln]
    assert len(lines) == 1 and variable in lines[0], out.stderr
    assert "server started" not in out.stderr + out.stdout
    assert took < 15, took


def test_password_never_echoed_in_config_error() -> None:
    out = run_twistd(env_with(pg_status__hosts="db", pg_status__pg_password="s3cr\x01t",
                              pg_status__sleep_ms="-1"))
    assert out.returncode != 0 and "s3cr" not in out.stderr + out.stdout


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_live_and_version_at_once_then_sigterm() -> None:
    """
    With a host that never answers (a port nobody listens on, with a long
    deadline), /live and /version answer at once while /ready is 503;
    SIGTERM stops the process cleanly.
    """
    port = free_port()
    dead = free_port()
    env = env_with(pg_status__hosts="127.0.0.1", pg_status__pg_port=str(dead),
                   pg_status__http_listen_address="127.0.0.1",
                   pg_status__http_port=str(port),
                   pg_status__sleep_ms="60000", pg_status__query_timeout_ms="60000")
    proc = subprocess.Popen([TWISTD, "-n", "--pidfile=", "pgstatus"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline:
            try:
                status = _get(base + "/live")
                break
            except OSError:
                time.sleep(0.05)
        assert status == (200, "OK")
        assert _get(base + "/version") == (200, __version__)
        code, body = _get(base + "/ready")
        # a refused port fails the first check quickly, so either answer is
        # possible here; both must be well-formed
        assert (code, body) in [(503, '{"error_text": "pg_monitor is not ready"}'),
                                (200, "OK")]
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
        took = time.monotonic() - t0
        # as the original: a clean stop on SIGTERM exits with status 0
        assert rc == 0
        assert took < 5, took
        log = proc.stdout.read()
        assert "shutting down" in log and "server stopped" in log
        assert "Traceback" not in log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _frozen_topology_env(topo: PgTopology, port: int, fmt: str) -> dict[str, str]:
    # checks every 100 ms, with a deadline far beyond the test: once the
    # servers are frozen, every host has a check hanging on its connection
    return env_with(**topo.hosts_env(), pg_status__http_listen_address="127.0.0.1",
                    pg_status__http_port=str(port), pg_status__log_format=fmt,
                    pg_status__sleep_ms="100", pg_status__query_timeout_ms="60000")


def _wait_ready_then_freeze(topo: PgTopology, base: str) -> None:
    poll(lambda: _get(base + "/ready") == (200, "OK"), 30, "pg-status to be ready")
    assert _get(base + "/master")[0] == 200
    for node in topo.nodes:
        node.sigstop()


def _assert_signal_logged(log: str, fmt: str, name: str) -> None:
    if fmt == "text":
        want = f" INFO main: received signal={name}"
        lines = [ln for ln in log.splitlines() if ln.endswith(want)]
    else:
        lines = [ln for ln in log.splitlines() if ln.startswith("{")
                 and json.loads(ln) | {"@timestamp": None} == {
                     "@timestamp": None, "levelStr": "INFO", "component": "main",
                     "message": f"received signal={name}"}]
    assert len(lines) == 1, log
    assert "server stopped" in log and "Traceback" not in log, log


@pytest.mark.pg
@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_exits_0_while_hosts_hang(guarded_topology: PgTopology, sig: int,
                                              fmt: str) -> None:
    """
    ``twistd -n pgstatus``: SIGTERM or SIGINT while every PostgreSQL server is
    frozen (checks hanging on their connections) logs ``main: received
    signal=...`` in the configured format, stops listening, and exits with
    status 0 within 1 s, as the original does.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([TWISTD, "-n", "--pidfile=", "pgstatus"],
                            env=_frozen_topology_env(guarded_topology, port, fmt), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_signals_not_ignored)
    try:
        _wait_ready_then_freeze(guarded_topology, base)
        t0 = time.monotonic()
        proc.send_signal(sig)
        rc = proc.wait(10)
        took = time.monotonic() - t0
        log = proc.stdout.read()
        assert rc == 0, log
        assert took < 1, took
        _assert_signal_logged(log, fmt, signal.Signals(sig).name)
        with pytest.raises(OSError):
            _get(base + "/live")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.pg
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_daemon_stop_signal_exits_0_and_removes_pidfile(guarded_topology: PgTopology,
                                                         tmp_path, sig: int) -> None:
    """
    Daemonized (``twistd --pidfile=... pgstatus``): the signal stops the
    daemon within 1 s while hosts hang, with exit status 0, the signal line
    in its log file, and the pid file removed.
    """
    # the daemon double-forks; as a subreaper we adopt it and see its status
    _become_subreaper()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    pidfile, logfile = tmp_path / "pg-status.pid", tmp_path / "pg-status.log"
    started = subprocess.run([TWISTD, f"--pidfile={pidfile}", f"--logfile={logfile}",
                              "pgstatus"],
                             env=_frozen_topology_env(guarded_topology, port, "text"), cwd=ROOT,
                             capture_output=True, text=True, timeout=30,
                             preexec_fn=_signals_not_ignored)
    assert started.returncode == 0, started.stderr
    pid = poll(lambda: pidfile.exists() and int(pidfile.read_text()), 10, "the pid file")
    try:
        _wait_ready_then_freeze(guarded_topology, base)
        t0 = time.monotonic()
        os.kill(pid, sig)
        status = None
        while time.monotonic() - t0 < 10:
            waited, status = os.waitpid(pid, os.WNOHANG)
            if waited == pid:
                break
            time.sleep(0.01)
        took = time.monotonic() - t0
        log = logfile.read_text()
        assert status is not None and os.waitstatus_to_exitcode(status) == 0, (status, log)
        assert took < 1, took
        assert not pidfile.exists()
        _assert_signal_logged(log, "text", signal.Signals(sig).name)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


class _FakeReactor:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.running = True

    def callFromThread(self, f, *args) -> None:  # noqa: N802 - Twisted's name
        self.calls.append("callFromThread")
        f(*args)

    def stop(self) -> None:
        from twisted.internet.error import ReactorNotRunning

        if not self.running:
            raise ReactorNotRunning()
        self.running = False
        self.calls.append("stop")


def test_stop_signal_handlers_stop_once_and_keep_ignored_signals() -> None:
    """
    ``ProcessSignals``: SIGTERM schedules a reactor stop on the reactor
    thread (a second one during shutdown is harmless); an ignored SIGINT stays
    ignored; ``uninstall`` puts the previous handlers back.
    """
    from pgstatus.signals import ProcessSignals

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reactor = _FakeReactor()
    try:
        owner = ProcessSignals(reactor)
        owner.install()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
        assert reactor.calls == ["callFromThread", "stop", "callFromThread"]
        owner.uninstall()
        assert signal.getsignal(signal.SIGTERM) == before[signal.SIGTERM]
    finally:
        for s, h in before.items():
            signal.signal(s, h)
