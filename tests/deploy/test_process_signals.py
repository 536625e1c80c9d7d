"""
The signals of a real ``twistd pgstatus`` process: every handled signal is
the one owner's (:mod:`pgstatus.signals`), whatever was set before twistd
ran; SIGHUP reopens the log file and reloads with one handler; SIGTERM
with ``pg_status__shutdown_delay_ms`` keeps answering for that long, then
exits 0, against the real PostgreSQL topology.
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
from pathlib import Path

import pytest
from pgtopology import PgTopology, free_port, poll

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")
SHUTTING_DOWN = (503, '{"error_text": "pg-status is shutting down"}')


def _signals_not_ignored() -> None:
    """
    In the service's process before exec: SIGINT and SIGTERM at their
    default (a test runner started in the background has SIGINT ignored,
    and pg-status leaves an ignored SIGINT ignored).
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("pg_status__")}
    env["PYTHONPATH"] = ROOT
    env.update(values)
    return env


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _start(env: dict[str, str], port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([TWISTD, "-n", "--pidfile=", "pgstatus"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_signals_not_ignored)
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        try:
            return _get(base + "/ready") == (200, "OK")
        except OSError:
            return False

    poll(ready, 30, "pg-status to be ready")
    return proc


def _topology_env(topo: PgTopology, port: int, **values: str) -> dict[str, str]:
    return _env(**topo.hosts_env(), pg_status__http_listen_address="127.0.0.1",
                pg_status__http_port=str(port), pg_status__sleep_ms="200", **values)


def _lines(log: str, text: str) -> list[str]:
    return [ln for ln in log.splitlines() if text in ln]


@pytest.mark.pg
def test_sigterm_with_delay_keeps_answering_then_exits_0(guarded_topology: PgTopology) -> None:
    """
    ``pg_status__shutdown_delay_ms=2000``: after SIGTERM ``/master`` still
    answers 200 with the master for 1.5 s while ``/ready`` answers 503; the
    process then stops (the original's lines) and exits 0 between 2 s and
    2 s plus a margin after the signal.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    master = guarded_topology.primary.host
    proc = _start(_topology_env(guarded_topology, port, pg_status__shutdown_delay_ms="2000"),
                  port)
    try:
        assert _get(base + "/master") == (200, master)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        poll(lambda: _get(base + "/ready") == SHUTTING_DOWN, 1, "/ready to answer 503")
        answers = 0
        while time.monotonic() - t0 < 1.5:
            assert _get(base + "/master") == (200, master)
            assert _get(base + "/live") == (200, "OK")
            answers += 1
            time.sleep(0.05)
        assert answers >= 5
        rc = proc.wait(10)
        took = time.monotonic() - t0
        log = proc.communicate()[0]
        assert rc == 0, log
        assert 1.9 < took < 2 + 2, took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(_lines(log, " INFO main: received signal=SIGTERM")) == 1, log
    delayed = _lines(log, " INFO main: shutdown delayed delay_ms=2000")
    assert len(delayed) == 1, log
    assert log.index(delayed[0]) < log.index(" INFO main: shutting down")
    assert "server stopped" in log and "Traceback" not in log, log


@pytest.mark.pg
def test_sigterm_by_default_exits_at_once(guarded_topology: PgTopology) -> None:
    """
    Without ``pg_status__shutdown_delay_ms`` (0): SIGTERM stops at once, as
    before and as the original, with no delay line.
    """
    port = free_port()
    proc = _start(_topology_env(guarded_topology, port), port)
    try:
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
        took = time.monotonic() - t0
        log = proc.communicate()[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0 and took < 1, (rc, took, log)
    assert "shutdown delayed" not in log and "server stopped" in log, log


@pytest.mark.pg
@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_second_signal_during_the_delay_exits_at_once(guarded_topology: PgTopology,
                                                      second: int) -> None:
    """
    A second SIGTERM, or a SIGINT, during a long delay stops at once, with
    exit status 0.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start(_topology_env(guarded_topology, port, pg_status__shutdown_delay_ms="60000"),
                  port)
    try:
        proc.send_signal(signal.SIGTERM)
        poll(lambda: _get(base + "/ready") == SHUTTING_DOWN, 1, "/ready to answer 503")
        t0 = time.monotonic()
        proc.send_signal(second)
        rc = proc.wait(10)
        took = time.monotonic() - t0
        log = proc.communicate()[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0 and took < 1, (rc, took, log)
    name = signal.Signals(second).name
    assert len(_lines(log, " INFO main: received signal=")) == 2, log
    assert log.rindex(" INFO main: received signal=" + name) < log.index("shutting down"), log


#: run in the service's process: foreign handlers for every signal pg-status
#: handles (as anything set up before twistd would leave them), and a SIGUSR2
#: handler that writes which handler each one has, then twistd
_WRAPPER = """\
import json, os, signal, sys
OUT = sys.argv.pop(1)
HANDLED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1")
def foreign(signum, frame):
    pass
for name in HANDLED:
    signal.signal(getattr(signal, name), foreign)
def dump(signum, frame):
    out = {}
    for name in HANDLED:
        h = signal.getsignal(getattr(signal, name))
        owner = getattr(h, "__self__", None)
        out[name] = [getattr(h, "__module__", repr(h)), getattr(h, "__qualname__", repr(h)),
                     None if owner is None else id(owner)]
    with open(OUT + ".tmp", "w") as f:
        json.dump(out, f)
    os.rename(OUT + ".tmp", OUT)
signal.signal(signal.SIGUSR2, dump)
"""


@pytest.mark.parametrize("launcher", [False, True], ids=["twistd", "pg-status"])
def test_every_signal_has_the_one_owners_handler(tmp_path: Path, launcher: bool) -> None:
    """
    In a real process, with a log file and ``pg_status__env_file``, and a
    foreign handler for each signal set before twistd ran: once started,
    SIGTERM, SIGINT, SIGHUP and SIGUSR1 each have a handler of one
    :class:`pgstatus.signals.ProcessSignals`; then one SIGHUP both reopens
    the rotated log file and reloads the environment file.
    """
    port = free_port()
    out = tmp_path / "handlers.json"
    logfile = tmp_path / "pg-status.log"
    env_file = tmp_path / "pg-status.env"
    env_file.write_text("pg_status__sleep_ms=60000\n")
    env = _env(pg_status__hosts="127.0.0.1", pg_status__pg_port=str(free_port()),
               pg_status__http_listen_address="127.0.0.1", pg_status__http_port=str(port),
               pg_status__env_file=str(env_file))
    if launcher:
        code = _WRAPPER + "from pgstatus.launch import main\nmain(sys.argv[1:])\n"
    else:
        code = (_WRAPPER + "from twisted.scripts.twistd import run\n"
                "sys.argv[0] = 'twistd'\nrun()\n")
    args = ([f"--logfile={logfile}"] if launcher
            else ["-n", "--pidfile=", f"--logfile={logfile}", "pgstatus"])
    proc = subprocess.Popen([sys.executable, "-c", code, str(out), *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        def live() -> bool:
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            try:
                return _get(base + "/live")[0] == 200
            except OSError:
                return False

        poll(live, 30, "pg-status to answer /live")
        proc.send_signal(signal.SIGUSR2)
        poll(out.exists, 10, "the handlers' dump")
        handlers = json.loads(out.read_text())
        assert {name: h[:2] for name, h in handlers.items()} == {
            "SIGTERM": ["pgstatus.signals", "ProcessSignals._on_stop"],
            "SIGINT": ["pgstatus.signals", "ProcessSignals._on_stop"],
            "SIGHUP": ["pgstatus.signals", "ProcessSignals._on_hangup"],
            "SIGUSR1": ["pgstatus.signals", "ProcessSignals._on_reopen"],
        }, handlers
        assert len({h[2] for h in handlers.values()}) == 1, handlers

        logfile.rename(tmp_path / "pg-status.log.1")
        env_file.write_text("pg_status__sleep_ms=30000\n")
        proc.send_signal(signal.SIGHUP)
        poll(lambda: logfile.exists() and "configuration reloaded" in logfile.read_text(), 10,
             "the reload's line in the reopened log file")
        assert "changed=sleep_ms=30000" in logfile.read_text()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, proc.communicate()[0][-3000:]
    assert " INFO main: received signal=SIGTERM" in logfile.read_text()
