"""
The ``twistd pgstatus`` command as users run it: a real subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from pgtopology import free_port

from pgstatus import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")


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
        # twistd re-raises the signal after a clean shutdown, so the exit
        # status reports SIGTERM (which init systems treat as a clean stop)
        assert rc in (0, -signal.SIGTERM)
        assert took < 5, took
        log = proc.stdout.read()
        assert "shutting down" in log and "server stopped" in log
        assert "Traceback" not in log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
