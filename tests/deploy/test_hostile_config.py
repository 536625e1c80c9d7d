"""
Hostile settings (issue 33) through the real commands: ``pg-status`` and
``twistd -n pgstatus`` print one line naming the variable (or option) and
exit 2 before anything listens or connects, and ``pg-status
--check-config`` prints the same line and exits 2; no traceback anywhere.
And every integer setting at the largest value it accepts starts and
listens.
"""

from __future__ import annotations

import os
import re
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon import Daemon

from pgstatus.config.table import SETTINGS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")
#: how long one command may take; a start that hangs (a FIFO) fails the test
TIMEOUT = 30
#: the address space each command gets: ample for a start, while a command
#: that reads /dev/zero without end fails soon instead of taking the machine
MEMORY = 1 << 30
NOT_UTF8 = b"127.0.0.1\xff".decode("utf-8", "surrogateescape")
LONG = "0" * 4298 + "1000"
COMMANDS = {
    "pg-status": [sys.executable, "-m", "pgstatus.launch"],
    "twistd -n": [TWISTD, "-n", "--pidfile=", "pgstatus"],
}


def _limit_memory() -> None:
    # in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


@pytest.fixture
def pg() -> Iterator[socket.socket]:
    """
    A listening socket on loopback standing for the PostgreSQL server, to
    see whether anything connects to it.
    """
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    """
    A FIFO that no one writes: a start that opens it for reading blocks
    until ``TIMEOUT`` ends the command.
    """
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _cases(tmp: Path, fifo: Path) -> dict[str, tuple[dict[str, str], list[str], str]]:
    """
    Case name: (variables, twistd options, the line every command prints).
    """
    missing = str(tmp / "missing" / "x")
    return {
        "1 integer of 4302 digits": (
            {"pg_status__sleep_ms": LONG}, [],
            "pg_status__sleep_ms: must be an integer greater than 0, got "
            f"{LONG[:61] + '...'!r}, which has 4302 digits (at most 32, leading zeros "
            "included)"),
        "2 hosts not UTF-8": (
            {"pg_status__hosts": NOT_UTF8}, [],
            "pg_status__hosts: must be UTF-8 text, got b'127.0.0.1\\xff'"),
        "3 env_file a FIFO": (
            {"pg_status__env_file": str(fifo)}, [],
            f"pg_status__env_file: {str(fifo)!r} is not a regular file"),
        "3 env_file /dev/zero": (
            {"pg_status__env_file": "/dev/zero"}, [],
            "pg_status__env_file: '/dev/zero' is not a regular file"),
        "4 --logfile in a missing directory": (
            {}, [f"--logfile={missing}"],
            f"--logfile: cannot open {missing!r} for appending: No such file or directory"),
        "5 header timeout of 2^31 s": (
            {"pg_status__http_header_timeout_ms": str(2**31 * 1000)}, [],
            "pg_status__http_header_timeout_ms: must be an integer from 1 to 2147483647, "
            f"got '{2**31 * 1000}'"),
        "6 pg_user not UTF-8": (
            {"pg_status__pg_user": NOT_UTF8}, [],
            "pg_status__pg_user: must be UTF-8 text, got b'127.0.0.1\\xff'"),
        "6 pg_database not UTF-8": (
            {"pg_status__pg_database": NOT_UTF8}, [],
            "pg_status__pg_database: must be UTF-8 text, got b'127.0.0.1\\xff'"),
    }


CASES = list(_cases(Path("/"), Path("/")))


def _env(pg: socket.socket, values: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("pg_status__")}
    env.update(PYTHONPATH=ROOT, pg_status__hosts="127.0.0.1",
               pg_status__pg_port=str(pg.getsockname()[1]),
               pg_status__http_listen_address="127.0.0.1", pg_status__http_port="0")
    env.update(values)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, preexec_fn=_limit_memory)


@pytest.mark.parametrize("case", CASES)
def test_hostile_setting_one_line_exit_2(case: str, pg: socket.socket, fifo: Path,
                                         tmp_path: Path) -> None:
    """
    Each start prints exactly the line and exits 2, without listening,
    connecting or writing a file; the check prints the same line and its
    summary, and exits 2.
    """
    values, options, line = _cases(tmp_path, fifo)[case]
    env = _env(pg, values)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for name, argv in COMMANDS.items():
        done = _run([*argv[:-1], *options, argv[-1]] if name == "twistd -n"
                    else [*argv, *options], env, cwd)
        assert done.returncode == 2, (name, done)
        assert (done.stdout + done.stderr).splitlines() == [
            f"pg-status: configuration error: {line}"], (name, done)
    checked = _run([*COMMANDS["pg-status"], *options, "--check-config"], env, cwd)
    assert checked.returncode == 2, checked
    assert checked.stdout.splitlines() == [
        f"pg-status: configuration error: {line}",
        "pg-status: configuration invalid (1 error, 0 warnings): pg-status would not start",
    ], checked
    assert checked.stderr == "", checked
    pg.setblocking(False)
    with pytest.raises(BlockingIOError):
        pg.accept()
    assert list(cwd.iterdir()) == []


def test_every_integer_at_its_largest_value_starts(pg: socket.socket) -> None:
    """
    Every integer setting at the largest value the settings table says it
    accepts (ports aside, and the agent left off): the service starts,
    listens and answers; a value the check accepts never fails at listen
    (a header timeout of 2^31 s or more did: its seconds overflowed the C
    int of TCP_DEFER_ACCEPT).
    """
    largest = {}
    for s in SETTINGS:
        m = re.match(r"integer (\d+)\.\.(\d+)\b", s.accepts)
        if m and s.name not in ("pg_port", "http_port", "agent_port"):
            largest["pg_status__" + s.name] = m.group(2)
    assert "pg_status__http_header_timeout_ms" in largest and len(largest) > 15
    daemon = Daemon({"pg_status__hosts": "127.0.0.1",
                     "pg_status__pg_port": str(pg.getsockname()[1]), **largest})
    try:
        daemon.start()
        assert daemon.get("/live") == (200, "OK")
        log = daemon.log()
    finally:
        daemon.stop()
    assert " INFO http: server started " in log, log
    assert "Traceback" not in log and "ERROR" not in log, log
