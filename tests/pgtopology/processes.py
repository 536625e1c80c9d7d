"""
The operating-system side of the test topology: PostgreSQL binaries, ports,
polling with a deadline, running tools as the ``postgres`` OS user, process
trees and reaping, and scratch directories (with a sweep of stale ones).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import pwd
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from pgtopology.conf import PG_OS_USER

T = TypeVar("T")

# --------------------------------------------------------------------------
# small helpers


def find_pg_bindir() -> str:
    """
    Find the directory of the PostgreSQL server binaries.

    Order: ``$PGSTATUS_PG_BINDIR``; ``pg_config --bindir`` if it holds
    ``initdb``; the newest ``/usr/lib/postgresql/*/bin``.

    :raises RuntimeError: when none is found (real-PostgreSQL tests must
        fail, not skip, without a server).
    """
    def usable(d: str) -> bool:
        return all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "postgres"))

    env = os.environ.get("PGSTATUS_PG_BINDIR")
    if env:
        if not usable(env):
            raise RuntimeError(f"PGSTATUS_PG_BINDIR={env!r} holds no initdb/postgres binaries")
        return env
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            if out and usable(out):
                return out

    def version(d: str) -> tuple[int, ...]:
        v = os.path.basename(os.path.dirname(d))
        return tuple(int(x) for x in re.findall(r"\d+", v)) or (0,)

    found = sorted(
        (d for d in glob.glob("/usr/lib/postgresql/*/bin") if usable(d)), key=version
    )
    if found:
        return found[-1]
    raise RuntimeError(
        "PostgreSQL server binaries not found: install the server package "
        "(e.g. apt-get install postgresql) or set PGSTATUS_PG_BINDIR to the "
        "directory that holds initdb and postgres"
    )


#: ports handed out by :func:`free_port` in this process
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """The lowest port the kernel gives outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """
    Return a TCP port that is free on ``host`` right now, below the kernel's
    range for outgoing connections: a port from that range (what binding to
    port 0 gives) can become the local port of any outgoing connection
    before whoever asked binds it (seen: ``Address already in use`` for a
    service's agent port).  Never the same port twice in one process.

    :param host: the address the port will be used on.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    high = min(_ephemeral_low(), 65536) - 1
    low = 20000 if high > 25000 else 1024
    # (outgoing connections may use nearly every port: then port 0 it is)
    for _ in range(200 if high - low >= 1000 else 0):
        port = random.randint(low, high)
        if port in _handed_out:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def lsn_to_int(lsn: str) -> int:
    """
    Convert a PostgreSQL LSN such as ``"0/3000060"`` to an integer.

    :param lsn: ``HI/LO`` in hexadecimal.
    """
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def poll(
    check: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.05,
    context: Callable[[], str] | None = None,
) -> T:
    """
    Call ``check`` until it returns a truthy value, and return that value.

    Exceptions from ``check`` count as "not yet" and are reported if the
    deadline passes.

    :param check: the condition; a truthy result ends the wait.
    :param timeout: seconds before giving up.
    :param what: what is awaited, for the error message.
    :param interval: seconds between attempts.
    :param context: called on timeout for more detail (e.g. a log tail).
    :raises TimeoutError: when the deadline passes.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = check()
            if result:
                return result
            last_error = None
        except Exception as e:  # noqa: BLE001 - retried, then reported
            last_error = e
        if time.monotonic() >= deadline:
            msg = f"timed out after {timeout:.1f}s waiting for {what}"
            if last_error is not None:
                msg += f"; last error: {type(last_error).__name__}: {last_error}".rstrip()
            if context is not None:
                with contextlib.suppress(Exception):
                    msg += "\n" + context()
            raise TimeoutError(msg)
        time.sleep(interval)


def scratch_dir() -> str:
    """
    Where data directories go by default: ``$PGSTATUS_TEST_TMPDIR``, else
    ``/dev/shm`` if it is a tmpfs with at least 2 GiB free (much faster than
    a disk), else ``/tmp``.
    """
    env = os.environ.get("PGSTATUS_TEST_TMPDIR")
    if env:
        return env
    with contextlib.suppress(OSError):
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= 2 << 30 and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    return "/tmp"


def _pg_ids() -> tuple[int, int] | None:
    """uid/gid to run PostgreSQL as, or None to run as ourselves (not root)."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(PG_OS_USER)
    except KeyError:
        raise RuntimeError(
            f"running as root, but there is no {PG_OS_USER!r} OS user to run PostgreSQL as"
        ) from None
    return pw.pw_uid, pw.pw_gid


def _run_as() -> dict[str, Any]:
    ids = _pg_ids()
    if ids is None:
        return {}
    return {"user": ids[0], "group": ids[1], "extra_groups": []}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    return env


def _run(cmd: Sequence[str], timeout: float, what: str) -> str:
    """Run a PostgreSQL tool as the PostgreSQL OS user; raise with its output."""
    try:
        r = subprocess.run(
            list(cmd),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_env(),
            cwd="/",
            **_run_as(),
        )
    except subprocess.TimeoutExpired as e:
        raise TimeoutError(f"{what}: {cmd[0]} took longer than {timeout}s: {e.output}") from e
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {r.returncode}): {r.stdout}\n{r.stderr}")
    return r.stdout


def _make_pg_dir(path: str) -> None:
    """Create ``path`` (if needed) owned by the PostgreSQL OS user, and check
    that user can reach it."""
    os.makedirs(path, exist_ok=True)
    ids = _pg_ids()
    if ids is None:
        return
    uid, gid = ids
    os.chown(path, uid, gid)
    parent = os.path.dirname(os.path.abspath(path))
    while True:
        st = os.stat(parent)
        ok = (
            st.st_mode & stat.S_IXOTH
            or (st.st_uid == uid and st.st_mode & stat.S_IXUSR)
            or (st.st_gid == gid and st.st_mode & stat.S_IXGRP)
        )
        if not ok:
            raise RuntimeError(
                f"{parent} is not searchable by the {PG_OS_USER!r} OS user, so "
                f"PostgreSQL cannot use {path}: chmod o+x it or pick another base dir "
                "(pytest's tmp_path is under a mode 0700 directory)"
            )
        if parent == "/":
            return
        parent = os.path.dirname(parent)


_SUBREAPER_DONE = False


def _become_subreaper() -> None:
    """
    Adopt orphaned descendants (Linux PR_SET_CHILD_SUBREAPER).

    When a postmaster is SIGKILLed, its children are orphaned; PID 1 here
    does not reap them, so we adopt and reap them ourselves.
    """
    global _SUBREAPER_DONE
    if _SUBREAPER_DONE:
        return
    _SUBREAPER_DONE = True
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) for every process."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(")") + 2 :].split()
        table[int(entry)] = (int(rest[1]), rest[0])
    return table


def descendants(pid: int) -> list[int]:
    """
    All live descendants of ``pid`` (children first), from ``/proc``.

    :param pid: the root process.
    """
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for p, (ppid, _state) in table.items():
        children.setdefault(ppid, []).append(p)
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _proc_state(pid: int) -> str | None:
    """Process state letter (R, S, T, Z...), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(")") + 2 :].split()[0]


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (reaping zombies we own)."""
    state = _proc_state(pid)
    if state is None:
        return False
    if state == "Z":
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def _signal(pids: Iterable[int], sig: int) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


def _reap(pids: Iterable[int]) -> None:
    for p in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(p, os.WNOHANG)


# --------------------------------------------------------------------------
# scratch directories: owner marks, and sweeping what killed runs left behind

OWNER_FILE = "owner.pid"
_SWEPT = False


def _start_time(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (None if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(")") + 2 :].split()[19]


def _mark_owner(root: str) -> None:
    """Record this process as the owner of ``root`` (see ``sweep_stale``)."""
    with open(os.path.join(root, OWNER_FILE), "w") as f:
        f.write(f"{os.getpid()} {_start_time(os.getpid())}\n")


def _owner_alive(root: str) -> bool:
    try:
        with open(os.path.join(root, OWNER_FILE)) as f:
            pid_text, start = f.read().split()
    except (OSError, ValueError):
        return True  # unmarked (being created, or not ours): leave it alone
    return _start_time(int(pid_text)) == start


def sweep_stale(directory: str | None = None) -> list[str]:
    """
    Remove topology and template directories whose owning process is gone
    (a test run that was killed before its teardown), stopping any server
    still running from them.  Directories of live processes, including
    other concurrent test runs, are left alone.

    :param directory: where to look; default ``scratch_dir()``.
    :return: the directories removed.
    """
    removed = []
    directory = directory or scratch_dir()
    for root in glob.glob(os.path.join(directory, "pgstatus-topo-*")) + glob.glob(
        os.path.join(directory, "pgstatus-tpl-*")
    ):
        if _owner_alive(root):
            continue
        for pidfile in glob.glob(os.path.join(root, "*", "postmaster.pid")):
            try:
                with open(pidfile) as f:
                    pm = int(f.readline())
                with open(f"/proc/{pm}/cmdline", "rb") as f:
                    cmdline = f.read()
            except (OSError, ValueError):
                continue
            if os.path.dirname(pidfile).encode() in cmdline:
                _signal([pm], signal.SIGQUIT)
                with contextlib.suppress(TimeoutError):
                    poll(lambda pm=pm: not _alive(pm), 5, f"stale postmaster {pm} to exit")
                _signal([pm], signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
        removed.append(root)
    return removed


def _new_scratch_root(prefix: str) -> str:
    global _SWEPT
    if not _SWEPT:
        _SWEPT = True
        with contextlib.suppress(Exception):
            sweep_stale()
    root = tempfile.mkdtemp(prefix=prefix, dir=scratch_dir())
    _mark_owner(root)
    return root
