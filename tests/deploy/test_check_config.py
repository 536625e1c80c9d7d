"""
``twistd pgstatus --check-config`` and ``pg-status --check-config`` as
users run them (real subprocesses), and the unknown-variable warning in a
running daemon's log.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon import Daemon
from pgtopology import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")
COMMANDS = {
    "twistd": [TWISTD, "pgstatus", "--check-config"],
    "twistd -n": [TWISTD, "-n", "--pidfile=", "pgstatus", "--check-config"],
    "pg-status": [sys.executable, "-m", "pgstatus.launch", "--check-config"],
    "pg-status --daemon": [sys.executable, "-m", "pgstatus.launch", "--daemon",
                           "--check-config"],
}
HOTS = "unknown variable pg_status__hots is ignored; did you mean pg_status__hosts?"


def env_with(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("pg_status__")}
    env["PYTHONPATH"] = ROOT
    env.update(values)
    return env


@pytest.fixture
def held() -> Iterator[tuple[socket.socket, socket.socket]]:
    """
    Two listening sockets on loopback, held by the test: one stands for
    the PostgreSQL server (to see whether anything connects to it), the
    other holds the HTTP port (which a service that started would need).
    """
    pg = socket.create_server(("127.0.0.1", 0))
    http = socket.create_server(("127.0.0.1", 0))
    yield pg, http
    pg.close()
    http.close()


def run(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(COMMANDS[command], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def assert_nothing_happened(pg: socket.socket, cwd: Path) -> None:
    """
    Nothing connected to the PostgreSQL host, and twistd wrote no pid file
    or log file: the service never ran.
    """
    pg.setblocking(False)
    with pytest.raises(BlockingIOError):
        pg.accept()
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_good_configuration_exits_0(command: str, held, tmp_path: Path) -> None:
    """
    A configuration that would start: exit 0, the warnings (a misspelt
    variable here), a summary; nothing connects to PostgreSQL and nothing
    listens (the HTTP port is held by the test all along, and the
    process does not mind).
    """
    pg, http = held
    env = env_with(pg_status__hosts="127.0.0.1", pg_status__pg_port=str(pg.getsockname()[1]),
                   pg_status__http_listen_address="127.0.0.1",
                   pg_status__http_port=str(http.getsockname()[1]), pg_status__hots="db2")
    done = run(command, env, tmp_path)
    assert done.returncode == 0, done
    assert done.stdout.splitlines() == [f"pg-status: configuration warning: {HOTS}",
                                        "pg-status: configuration OK (1 warning)"], done
    assert done.stderr == "", done
    assert_nothing_happened(pg, tmp_path)


@pytest.mark.parametrize("command", COMMANDS)
def test_bad_configuration_names_every_variable(command: str, held, tmp_path: Path) -> None:
    """
    Several invalid variables, from the environment and the environment
    file: exit 2, and each is named on a line of its own, as a start would
    name it, with the warnings and a summary.
    """
    pg, http = held
    env_file = tmp_path.parent / f"{tmp_path.name}.env"
    env_file.write_text("pg_status__log_level=loud\npg_status__hots=x\n")
    env = env_with(pg_status__hosts="127.0.0.1,127.0.0.2", pg_status__pg_port="1,2,3",
                   pg_status__sleep_ms="0", pg_status__http_listen_address="nowhere",
                   pg_status__http_port=str(http.getsockname()[1]),
                   pg_status__env_file=str(env_file))
    try:
        done = run(command, env, tmp_path)
    finally:
        env_file.unlink()
    assert done.returncode == 2, done
    lines = done.stdout.splitlines()
    errors = [ln.split(": ")[2] for ln in lines if ln.startswith("pg-status: configuration "
                                                                  "error: ")]
    assert errors == ["pg_status__pg_port", "pg_status__sleep_ms",
                      "pg_status__http_listen_address", "pg_status__log_level"], done
    assert f"pg-status: configuration warning: {HOTS}" in lines
    assert lines[-1] == ("pg-status: configuration invalid (4 errors, 1 warning): "
                         "pg-status would not start")
    assert len(lines) == 6, done
    assert_nothing_happened(pg, tmp_path)


def test_missing_hosts_exits_2(tmp_path: Path) -> None:
    """
    The empty configuration: ``pg_status__hosts`` is required.
    """
    done = run("pg-status", env_with(), tmp_path)
    assert done.returncode == 2, done
    assert done.stdout.splitlines()[0] == (
        "pg-status: configuration error: pg_status__hosts: is required: a comma-separated "
        "list of PostgreSQL hosts")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_running_daemon_logs_the_unknown_variable(fmt: str) -> None:
    """
    ``twistd -n pgstatus`` with a misspelt variable starts (it is not an
    error) and logs one warning naming it and the variable meant.
    """
    daemon = Daemon({"pg_status__hosts": "127.0.0.1", "pg_status__pg_port": str(free_port()),
                     "pg_status__hots": "db2", "pg_status__log_format": fmt})
    try:
        daemon.start()
        log = daemon.log()
    finally:
        daemon.stop()
    if fmt == "text":
        lines = [ln for ln in log.splitlines() if "unknown variable" in ln]
        assert len(lines) == 1 and lines[0].endswith(f" WARNING config: {HOTS}"), log
    else:
        records = [json.loads(ln) for ln in log.splitlines() if ln.startswith("{")]
        warned = [r for r in records if "unknown variable" in r["message"]]
        assert len(warned) == 1, log
        assert warned[0]["message"] == HOTS and warned[0]["component"] == "config", warned
        assert warned[0]["levelStr"] == "WARNING", warned
