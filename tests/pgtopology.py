"""
A real PostgreSQL primary + streaming replicas, run from the local binaries.

Plain synchronous code (psycopg2 and subprocess), no pytest and no Twisted:
the fixtures in ``conftest.py`` wrap it.  Every method blocks the calling
thread; from a test whose reactor must keep running (a service under test in
the same process), call the ones that wait (``start``, ``stop``, ``restart``,
``promote``, ``wait_*``, ``failover``...) through
``twisted.internet.threads.deferToThread``.  Signal-only methods
(``sigstop``, ``sigcont``, ``kill``) return at once or within a few
milliseconds.

Layout of one topology (``PgTopology.start``)::

    primary   127.0.0.1:<free port>  data dir <base>/primary
    replica1  127.0.0.2:<free port>  data dir <base>/replica1  (pg_basebackup)
    replica2  127.0.0.3:<free port>  data dir <base>/replica2

Each node listens only on its own loopback address (Linux routes all of
127.0.0.0/8 to ``lo``), so host names in the service under test are distinct.
The superuser is ``postgres``/``postgres``; ``pgstatus_monitor``/``monitor``
has ``pg_monitor``; ``pgstatus_plain``/``plain`` has no grants.  Table
``rw_check`` exists on every node.

PostgreSQL refuses to run as root: when we are root, every server and tool
runs as the ``postgres`` OS user, and data directories are owned by it.

Every wait is a poll with a deadline that raises ``TimeoutError`` naming what
it waited for, with the tail of the node's server log.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import psycopg2

T = TypeVar("T")

PG_OS_USER = "postgres"
SUPERUSER = "postgres"
SUPERUSER_PASSWORD = "postgres"
MONITOR_USER = "pgstatus_monitor"
MONITOR_PASSWORD = "monitor"
PLAIN_USER = "pgstatus_plain"
PLAIN_PASSWORD = "plain"

#: Listen address of the n-th node: primary first, then replica1, replica2...
LOOPBACK_HOSTS = tuple(f"127.0.0.{i}" for i in range(1, 33))

NODE_CONF = "pgstatus_node.conf"
LOG_FILE = "server.log"

#: Settings shared by every node (written into the template's postgresql.conf).
COMMON_CONF = """
# --- pg-status test topology ---
fsync = off
wal_level = replica
max_wal_senders = 10
wal_keep_size = '128MB'
hot_standby = on
wal_receiver_status_interval = '1s'
wal_retrieve_retry_interval = '200ms'
shared_buffers = '16MB'
max_connections = 60
autovacuum = off
jit = off
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%m [%p] %q%a '
log_connections = off
password_encryption = 'scram-sha-256'
include_if_exists 'pgstatus_node.conf'
"""

HBA_CONF = """\
# pg-status test topology
local   all          all                  trust
local   replication  all                  trust
host    replication  all   127.0.0.0/8    trust
host    all          all   127.0.0.0/8    scram-sha-256
"""

SETUP_SQL = [
    f"ALTER ROLE {SUPERUSER} PASSWORD '{SUPERUSER_PASSWORD}'",
    f"CREATE ROLE {MONITOR_USER} LOGIN PASSWORD '{MONITOR_PASSWORD}'",
    f"GRANT pg_monitor TO {MONITOR_USER}",
    f"CREATE ROLE {PLAIN_USER} LOGIN PASSWORD '{PLAIN_PASSWORD}'",
    "CREATE TABLE rw_check ("
    " id bigserial PRIMARY KEY,"
    " payload text,"
    " at timestamptz DEFAULT clock_timestamp())",
]

WRITE_POSITION_SQL = (
    "SELECT pg_current_wal_insert_lsn()::text,"
    " ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))"
    "::bit(32)::bigint"
)

_PM_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


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


def free_port(host: str = "127.0.0.1") -> int:
    """
    Return a TCP port that is free on ``host`` right now (bind to port 0).

    :param host: the address the port will be used on.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
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


# --------------------------------------------------------------------------
# template data directory (initdb once per process)

_TEMPLATES: dict[str, str] = {}
_TEMPLATE_LOCK = threading.Lock()


def template_datadir(bindir: str | None = None) -> str:
    """
    Return a cleanly shut down data directory with roles, password and
    ``rw_check`` in place, built once per process and copied for each
    topology.  It is removed at interpreter exit.

    :param bindir: PostgreSQL binaries; default ``find_pg_bindir()``.
    """
    bindir = bindir or find_pg_bindir()
    with _TEMPLATE_LOCK:
        if bindir in _TEMPLATES and os.path.isdir(_TEMPLATES[bindir]):
            return _TEMPLATES[bindir]
        root = _new_scratch_root("pgstatus-tpl-")
        atexit.register(shutil.rmtree, root, True)
        _make_pg_dir(root)
        datadir = os.path.join(root, "data")
        _run(
            [
                os.path.join(bindir, "initdb"), "-D", datadir, "-U", SUPERUSER,
                "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
                "--locale=C", "--no-sync", "--no-instructions",
            ],
            timeout=120,
            what="initdb",
        )
        with open(os.path.join(datadir, "postgresql.conf"), "a") as f:
            f.write(COMMON_CONF)
        with open(os.path.join(datadir, "pg_hba.conf"), "w") as f:
            f.write(HBA_CONF)
        node = PgNode("template", "127.0.0.1", free_port(), datadir, bindir)
        try:
            node.start()
            conn = psycopg2.connect(
                host=datadir, port=node.port, user=SUPERUSER, dbname="postgres",
                connect_timeout=5,
            )
            try:
                conn.autocommit = True
                with conn.cursor() as cur:
                    for q in SETUP_SQL:
                        cur.execute(q)
            finally:
                conn.close()
            node.stop("fast")
        except BaseException:
            node.kill()
            raise
        for junk in (NODE_CONF, LOG_FILE, "postmaster.opts"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(datadir, junk))
        _TEMPLATES[bindir] = datadir
        return datadir


# --------------------------------------------------------------------------
# one server


class PgNode:
    """
    One PostgreSQL server (postmaster run as our child process).

    :ivar name: ``"primary"``, ``"replica1"``...
    :ivar host: the loopback address it listens on (only there).
    :ivar port: its TCP port.
    :ivar datadir: its data directory (also its unix socket directory; its
        server log is ``<datadir>/server.log``).
    :ivar upstream: the node it streams from, or None for a primary.
    :ivar frozen: True between ``sigstop()`` and ``sigcont()``.
    """

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        datadir: str,
        bindir: str,
        upstream: PgNode | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.datadir = datadir
        self.bindir = bindir
        self.upstream = upstream
        self.frozen = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_once = False

    def __repr__(self) -> str:
        return f"<PgNode {self.name} {self.host}:{self.port}>"

    # -- process control ---------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The postmaster pid from ``postmaster.pid``, or None if not running."""
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                pid = int(f.readline().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def is_running(self) -> bool:
        """True if the postmaster process is alive (possibly frozen)."""
        if self._proc is not None and self._proc.poll() is None:
            return True
        return self.pid is not None

    def all_pids(self) -> list[int]:
        """The postmaster and all its live descendants."""
        pm = self.pid or (self._proc.pid if self._proc and self._proc.poll() is None else None)
        return [] if pm is None else [pm, *descendants(pm)]

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines of the server log."""
        try:
            with open(os.path.join(self.datadir, LOG_FILE), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 16384))
                text = f.read().decode("utf-8", "replace")
        except OSError as e:
            return f"[{self.name}: no server log: {e}]"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- {self.name} server log ({self.datadir}/{LOG_FILE}) ---\n{tail}"

    def write_conf(self) -> None:
        """Write this node's own settings (address, port, upstream)."""
        lines = [
            f"listen_addresses = '{self.host}'",
            f"port = {self.port}",
            f"unix_socket_directories = '{self.datadir}'",
            f"cluster_name = '{self.name}'",
        ]
        if self.upstream is not None:
            lines.append(f"primary_conninfo = '{self.upstream_conninfo()}'")
        path = os.path.join(self.datadir, NODE_CONF)
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        ids = _pg_ids()
        if ids is not None:
            os.chown(path, *ids)

    def upstream_conninfo(self) -> str:
        """``primary_conninfo`` for streaming from ``self.upstream``."""
        assert self.upstream is not None
        return (
            f"host={self.upstream.host} port={self.upstream.port} user={SUPERUSER} "
            f"application_name={self.name} connect_timeout=2"
        )

    def start(self, timeout: float = 30) -> None:
        """
        Start the postmaster and wait until it accepts connections (a
        standby: until hot standby accepts read-only connections).

        On the very first start, a port taken meanwhile is replaced by a new
        free one.  No-op if already running.

        :raises RuntimeError: if the server exits during startup.
        :raises TimeoutError: if it is not ready in time.
        """
        if self.is_running():
            return
        sock = os.path.join(self.datadir, f".s.PGSQL.{self.port}")
        if len(sock) > 100:
            raise RuntimeError(f"unix socket path too long ({len(sock)} bytes): {sock}")
        _become_subreaper()
        for attempt in range(4):
            self.write_conf()
            try:
                self._spawn_and_wait(timeout)
            except _BindError:
                if self._started_once or attempt == 3:
                    raise
                self.port = free_port(self.host)
                continue
            self._started_once = True
            return

    def _spawn_and_wait(self, timeout: float) -> None:
        log_path = os.path.join(self.datadir, LOG_FILE)
        log_start = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [os.path.join(self.bindir, "postgres"), "-D", self.datadir],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(),
                cwd="/",
                **_run_as(),
            )
        self._proc = proc
        self.frozen = False
        pidfile = os.path.join(self.datadir, "postmaster.pid")

        def ready() -> bool:
            if proc.poll() is not None:
                with open(log_path, "rb") as f:
                    f.seek(log_start)
                    out = f.read().decode("utf-8", "replace")
                if "could not bind" in out or "Address already in use" in out:
                    raise _BindError(out)
                raise RuntimeError(
                    f"{self.name}: postgres exited with {proc.returncode} during startup\n"
                    + self.log_tail()
                )
            try:
                with open(pidfile) as f:
                    lines = f.read().splitlines()
            except OSError:
                return False
            return (
                len(lines) >= 8
                and lines[0].strip() == str(proc.pid)
                and lines[7].strip() in ("ready", "standby")
            )

        try:
            poll(ready, timeout, f"{self.name} to accept connections", 0.02, self.log_tail)
        except _BindError:
            raise
        except (RuntimeError, TimeoutError):
            self._kill_now()
            raise

    def stop(self, mode: str = "fast", timeout: float = 30) -> None:
        """
        Shut the server down and wait for every process of it to exit.

        :param mode: ``"smart"``, ``"fast"`` or ``"immediate"`` (as pg_ctl).
        :raises ValueError: for an unknown mode.
        """
        sig = _PM_SIGNALS.get(mode)
        if sig is None:
            raise ValueError(f"unknown shutdown mode {mode!r}")
        pm = self.pid or (self._proc.pid if self._proc and self._proc.poll() is None else None)
        if pm is None:
            self._reap_proc()
            return
        if self.frozen:
            self.sigcont()
        kids = descendants(pm)
        _signal([pm], sig)
        try:
            poll(
                lambda: not _alive(pm) and self._reap_proc(),
                timeout,
                f"{self.name} to stop ({mode})",
                0.02,
                self.log_tail,
            )
        except TimeoutError:
            self._kill_now()
            raise
        self._wait_gone(kids)

    def kill(self) -> None:
        """
        SIGKILL the postmaster (a crash), then make sure its children die
        and are reaped.  The next ``start()`` does crash recovery.
        """
        pm = self.pid or (self._proc.pid if self._proc and self._proc.poll() is None else None)
        if pm is None:
            self._reap_proc()
            return
        self._kill_now(pm)

    def _kill_now(self, pm: int | None = None) -> None:
        if pm is None:
            pm = self.pid or (self._proc.pid if self._proc and self._proc.poll() is None else None)
        if pm is None:
            return
        kids = descendants(pm)
        _signal([pm], signal.SIGKILL)
        # Frozen children would never notice the postmaster's death.
        _signal(kids, signal.SIGCONT)
        self.frozen = False
        with contextlib.suppress(TimeoutError):
            poll(lambda: not _alive(pm) and self._reap_proc(), 10, f"{self.name} to die", 0.01)
        self._wait_gone(kids)

    def _wait_gone(self, pids: list[int], timeout: float = 5) -> None:
        """Wait for ``pids`` to exit (children notice postmaster death by
        themselves), SIGKILL stragglers, and reap the ones we adopted."""

        def gone() -> bool:
            _reap(pids)
            return not any(_alive(p) for p in pids)

        try:
            poll(gone, timeout, f"{self.name} child processes to exit", 0.01)
        except TimeoutError:
            _signal(pids, signal.SIGKILL)
            poll(gone, 5, f"{self.name} child processes to die", 0.01)

    def _reap_proc(self) -> bool:
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=0.5)
        return True

    def restart(self, mode: str = "fast", timeout: float = 30) -> None:
        """Stop (``mode``) and start again."""
        self.stop(mode, timeout)
        self.start(timeout)

    def sigstop(self) -> None:
        """
        Freeze the postmaster and all its children (SIGSTOP): new connection
        attempts get TCP-accepted by the kernel but never answered, and
        existing sessions hang.  Returns once all are stopped.
        """
        pm = self.pid
        if pm is None:
            raise RuntimeError(f"{self.name} is not running")
        _signal([pm], signal.SIGSTOP)  # first: no new children meanwhile
        pids = [pm, *descendants(pm)]
        _signal(pids, signal.SIGSTOP)
        self.frozen = True
        poll(
            lambda: all(_proc_state(p) in ("T", "t", "Z", None) for p in pids),
            5,
            f"{self.name} processes to stop",
            0.005,
        )

    def sigcont(self) -> None:
        """Unfreeze what ``sigstop()`` froze (SIGCONT)."""
        pm = self.pid
        if pm is not None:
            pids = [pm, *descendants(pm)]
            _signal(reversed(pids), signal.SIGCONT)
        self.frozen = False

    # -- SQL -----------------------------------------------------------------

    def connect(
        self,
        user: str = SUPERUSER,
        password: str = SUPERUSER_PASSWORD,
        dbname: str = "postgres",
        connect_timeout: int = 3,
        **kwargs: Any,
    ) -> Any:
        """
        A new autocommit psycopg2 connection over TCP to ``host:port``.

        :param connect_timeout: seconds (libpq treats values below 2 as 2).
        :param kwargs: more libpq parameters (e.g. ``application_name``).
        """
        kwargs.setdefault("application_name", "pgtopology")
        kwargs.setdefault("sslmode", "disable")
        conn = psycopg2.connect(
            host=self.host,
            port=self.port,
            user=user,
            password=password,
            dbname=dbname,
            connect_timeout=connect_timeout,
            **kwargs,
        )
        conn.autocommit = True
        return conn

    def sql(
        self,
        query: str,
        params: Sequence[Any] | dict[str, Any] | None = None,
        user: str = SUPERUSER,
        password: str = SUPERUSER_PASSWORD,
        dbname: str = "postgres",
        connect_timeout: int = 3,
    ) -> list[tuple[Any, ...]]:
        """
        Run one statement in autocommit on a new connection; return all rows
        (``[]`` for statements without a result).
        """
        conn = self.connect(user, password, dbname, connect_timeout)
        try:
            with conn.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description is not None else []
        finally:
            conn.close()

    def value(self, query: str, params: Sequence[Any] | None = None) -> Any:
        """First column of the first row of ``query`` (None if no row)."""
        rows = self.sql(query, params)
        return rows[0][0] if rows else None

    def wait_for(
        self,
        predicate_sql: str,
        params: Sequence[Any] | None = None,
        timeout: float = 10,
        what: str | None = None,
        interval: float = 0.05,
    ) -> Any:
        """
        Poll ``predicate_sql`` until its first value is truthy; return it.
        Connection errors meanwhile are retried.

        :raises TimeoutError: with the last error and the server log tail.
        """
        return poll(
            lambda: self.value(predicate_sql, params),
            timeout,
            what or f"{self.name}: {predicate_sql}",
            interval,
            self.log_tail,
        )

    def is_in_recovery(self) -> bool:
        """``pg_is_in_recovery()``."""
        return bool(self.value("SELECT pg_is_in_recovery()"))

    def replay_lsn(self) -> str | None:
        """``pg_last_wal_replay_lsn()`` (None on a primary that never was a
        standby)."""
        return self.value("SELECT pg_last_wal_replay_lsn()::text")

    def receive_lsn(self) -> str | None:
        """``pg_last_wal_receive_lsn()``."""
        return self.value("SELECT pg_last_wal_receive_lsn()::text")

    def current_lsn(self) -> str:
        """``pg_current_wal_lsn()`` (primary only)."""
        return self.value("SELECT pg_current_wal_lsn()::text")

    def timeline(self) -> int:
        """
        The node's timeline: on a primary, that of its WAL insert position
        (as in the spec's recipe); on a standby, the WAL receiver's
        ``received_tli``, else the control file's checkpoint timeline.
        """
        if not self.is_in_recovery():
            return int(self.sql(WRITE_POSITION_SQL)[0][1])
        return int(
            self.value(
                "SELECT coalesce((SELECT received_tli FROM pg_stat_wal_receiver),"
                " (SELECT timeline_id FROM pg_control_checkpoint()))"
            )
        )

    def backend_pids(
        self, application_name: str | None = None, user: str | None = None
    ) -> list[int]:
        """
        Pids of client backends (from ``pg_stat_activity``), excluding the
        querying session itself.
        """
        q = (
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"
            " AND pid <> pg_backend_pid()"
        )
        params: list[Any] = []
        if application_name is not None:
            q += " AND application_name = %s"
            params.append(application_name)
        if user is not None:
            q += " AND usename = %s"
            params.append(user)
        return [r[0] for r in self.sql(q + " ORDER BY pid", params)]

    def connections(self, user: str | None = None, application_name: str | None = None) -> int:
        """Number of client connections (optionally of ``user`` / app name)."""
        return len(self.backend_pids(application_name=application_name, user=user))

    def terminate_backends(
        self, application_name: str | None = None, user: str | None = None
    ) -> int:
        """``pg_terminate_backend`` the matching client backends; return how many."""
        pids = self.backend_pids(application_name=application_name, user=user)
        for p in pids:
            self.sql("SELECT pg_terminate_backend(%s)", (p,))
        return len(pids)

    # -- replication -------------------------------------------------------

    def is_streaming(self) -> bool:
        """True if this standby's WAL receiver is streaming."""
        return bool(
            self.value(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')"
            )
        )

    def replay_pause_state(self) -> str:
        """``pg_get_wal_replay_pause_state()``: 'not paused', 'pause requested'
        or 'paused'."""
        return self.value("SELECT pg_get_wal_replay_pause_state()")

    def pause_replay(self, timeout: float = 10) -> None:
        """``pg_wal_replay_pause()`` and wait until replay is really paused."""
        self.sql("SELECT pg_wal_replay_pause()")
        self.wait_for(
            "SELECT pg_get_wal_replay_pause_state() = 'paused'",
            timeout=timeout,
            what=f"{self.name}: WAL replay to pause",
        )

    def resume_replay(self, timeout: float = 10) -> None:
        """``pg_wal_replay_resume()`` and wait until replay is not paused."""
        self.sql("SELECT pg_wal_replay_resume()")
        self.wait_for(
            "SELECT pg_get_wal_replay_pause_state() = 'not paused'",
            timeout=timeout,
            what=f"{self.name}: WAL replay to resume",
        )

    def promote(self, timeout: float = 30) -> None:
        """Promote this standby (``pg_promote``) and wait until it is out of
        recovery; it then has no upstream."""
        self.sql("SELECT pg_promote(true, %s)", (int(timeout),))
        self.wait_for(
            "SELECT NOT pg_is_in_recovery()", timeout=timeout, what=f"{self.name}: promotion"
        )
        self.upstream = None

    def follow(self, new_primary: PgNode, timeout: float = 30) -> None:
        """
        Re-point this node at ``new_primary`` (primary_conninfo; a former
        primary gets ``standby.signal``), restart it and wait until it
        streams.  Best effort: a node whose WAL went past the new primary's
        fork point cannot follow (that needs pg_rewind) and times out.
        """
        self.upstream = new_primary
        if self.is_running():
            self.stop("fast", timeout)
        signal_file = os.path.join(self.datadir, "standby.signal")
        if not os.path.exists(signal_file):
            open(signal_file, "w").close()
            ids = _pg_ids()
            if ids is not None:
                os.chown(signal_file, *ids)
        self.start(timeout)
        self.wait_for(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')",
            timeout=timeout,
            what=f"{self.name}: streaming from {new_primary.name}",
        )


class _BindError(RuntimeError):
    pass


# --------------------------------------------------------------------------
# a topology


class PgTopology:
    """
    A primary and its streaming replicas, each on its own loopback address.

    Build with ``PgTopology.start()``; each call makes an independent
    topology (own data dirs and ports), so destructive tests can have one to
    themselves.  Always call ``teardown()``.

    :ivar nodes: every node, primary first.
    :ivar primary: the node that writes go to (``failover`` changes it).
    :ivar base_dir: the directory holding the data directories.
    """

    def __init__(self, base_dir: str, bindir: str, owns_base_dir: bool) -> None:
        self.base_dir = base_dir
        self.bindir = bindir
        self.nodes: list[PgNode] = []
        self.primary: PgNode | None = None  # type: ignore[assignment]
        self._owns_base_dir = owns_base_dir
        self._torn_down = False

    def __repr__(self) -> str:
        return f"<PgTopology {self.nodes!r}>"

    @property
    def replicas(self) -> list[PgNode]:
        """Every node but the primary."""
        return [n for n in self.nodes if n is not self.primary]

    def node(self, name: str) -> PgNode:
        """The node called ``name``."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @classmethod
    def start(
        cls,
        base_dir: str | None = None,
        replicas: int = 2,
        *,
        bindir: str | None = None,
        hosts: Sequence[str] | None = None,
        timeout: float = 60,
    ) -> PgTopology:
        """
        Create, start and verify a primary and ``replicas`` streaming
        replicas.  On any failure everything started so far is torn down.

        :param base_dir: directory for the data dirs; created (and removed by
            ``teardown``) if it does not exist; default: a new one in
            ``scratch_dir()``.
            The ``postgres`` OS user must be able to reach it.
        :param hosts: listen addresses, primary first; default
            127.0.0.1, 127.0.0.2, ...
        """
        bindir = bindir or find_pg_bindir()
        hosts = list(hosts or LOOPBACK_HOSTS[: replicas + 1])
        if len(hosts) < replicas + 1:
            raise ValueError("need one host per node")
        if base_dir is None:
            base_dir = _new_scratch_root("pgstatus-topo-")
            owns = True
        else:
            owns = not os.path.exists(base_dir)
        topo = cls(base_dir, bindir, owns)
        try:
            _make_pg_dir(base_dir)
            template = template_datadir(bindir)
            primary = topo._add_primary(template, hosts[0])
            for i in range(1, replicas + 1):
                topo._add_replica(f"replica{i}", hosts[i], primary, timeout)
            topo.wait_streaming(timeout)
        except BaseException:
            topo.teardown()
            raise
        return topo

    def _add_primary(self, template: str, host: str) -> PgNode:
        datadir = os.path.join(self.base_dir, "primary")
        _run(["cp", "-a", template, datadir], 60, "copying the template data dir")
        node = PgNode("primary", host, free_port(host), datadir, self.bindir)
        self.nodes.append(node)
        self.primary = node
        node.start()
        return node

    def _add_replica(self, name: str, host: str, upstream: PgNode, timeout: float) -> PgNode:
        datadir = os.path.join(self.base_dir, name)
        node = PgNode(name, host, free_port(host), datadir, self.bindir, upstream=upstream)
        self.nodes.append(node)
        _run(
            [
                os.path.join(self.bindir, "pg_basebackup"),
                "-D", datadir,
                "-d", f"host={upstream.host} port={upstream.port} user={SUPERUSER} "
                f"application_name={name}_basebackup",
                "-R", "-c", "fast", "-X", "stream", "--no-sync",
            ],
            timeout,
            f"pg_basebackup for {name}",
        )
        # -R put primary_conninfo into postgresql.auto.conf, which would
        # override ours (and follow() could not change it): drop it.
        auto = os.path.join(datadir, "postgresql.auto.conf")
        with open(auto) as f:
            kept = [ln for ln in f if not ln.startswith("primary_conninfo")]
        with open(auto, "w") as f:
            f.writelines(kept)
        for junk in [LOG_FILE, NODE_CONF, *glob.glob(os.path.join(datadir, ".s.PGSQL.*"))]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(datadir, junk))
        node.start(timeout)
        return node

    # -- data ----------------------------------------------------------------

    def write(self, payload: str | None = None, node: PgNode | None = None) -> tuple[str, int, int]:
        """
        Insert a ``rw_check`` row on the primary (autocommit), then read the
        WAL insert position and timeline after the commit, as the
        read-your-writes recipe in the spec does.

        :param node: write there instead of ``self.primary``.
        :return: ``(lsn, timeline, row_id)``.
        """
        target = node or self.primary
        assert target is not None
        conn = target.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO rw_check (payload) VALUES (%s) RETURNING id", (payload,))
                row_id = cur.fetchone()[0]
                cur.execute(WRITE_POSITION_SQL)
                lsn, timeline = cur.fetchone()
        finally:
            conn.close()
        return lsn, int(timeline), int(row_id)

    def has_row(self, node: PgNode, row_id: int) -> bool:
        """True if ``node`` has the ``rw_check`` row ``row_id``."""
        return bool(node.sql("SELECT 1 FROM rw_check WHERE id = %s", (row_id,)))

    def wait_replicated(
        self, lsn: str, timeout: float = 10, nodes: Sequence[PgNode] | None = None
    ) -> None:
        """
        Wait until every running replica (or every node in ``nodes``) has
        replayed WAL up to ``lsn``.
        """
        targets = (
            list(nodes)
            if nodes is not None
            else [n for n in self.replicas if n.is_running() and not n.frozen]
        )
        for n in targets:
            n.wait_for(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                (lsn,),
                timeout=timeout,
                what=f"{n.name} to replay {lsn} (at {_safe(n.replay_lsn)})",
            )

    def wait_streaming(self, timeout: float = 30) -> None:
        """Wait until every replica streams from its upstream, as seen by
        both ends."""
        for n in self.replicas:
            up = n.upstream
            if up is None:
                continue
            n.wait_for(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')",
                timeout=timeout,
                what=f"{n.name} WAL receiver to stream from {up.name}",
            )
            up.wait_for(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_replication"
                " WHERE application_name = %s AND state = 'streaming')",
                (n.name,),
                timeout=timeout,
                what=f"{up.name} to stream to {n.name}",
            )

    # -- for the service under test ---------------------------------------------

    def hosts_env(
        self,
        user: str = SUPERUSER,
        password: str = SUPERUSER_PASSWORD,
        dbname: str = "postgres",
        nodes: Sequence[PgNode] | None = None,
    ) -> dict[str, str]:
        """
        ``pg_status__*`` environment for a service watching these nodes.

        :param nodes: which nodes, in which order; default all, primary first.
        """
        nodes = list(nodes) if nodes is not None else self.nodes
        return {
            "pg_status__hosts": ",".join(n.host for n in nodes),
            "pg_status__pg_port": ",".join(str(n.port) for n in nodes),
            "pg_status__pg_user": user,
            "pg_status__pg_password": password,
            "pg_status__pg_database": dbname,
        }

    # -- disturbance helpers --------------------------------------------------

    def failover(self, new_primary: PgNode, old_primary_stop: str | None = "fast") -> None:
        """
        Stop the primary (unless ``old_primary_stop`` is None), promote
        ``new_primary``, make it ``self.primary`` and re-point the other
        running replicas at it.  With a "fast" stop, replicas have all WAL up
        to the shutdown checkpoint, so they can follow.
        """
        old = self.primary
        if old is not None and old_primary_stop is not None and old.is_running():
            old.stop(old_primary_stop)
        new_primary.promote()
        self.primary = new_primary
        for n in self.nodes:
            if n is new_primary or n is old:
                continue
            if n.is_running():
                n.follow(new_primary)
            else:
                n.upstream = new_primary

    def health_problems(self) -> list[str]:
        """What is wrong compared to the healthy state (empty if healthy)."""
        problems: list[str] = []
        for n in self.nodes:
            if n.frozen:
                problems.append(f"{n.name} frozen")
                continue
            if not n.is_running():
                problems.append(f"{n.name} not running")
                continue
            try:
                in_recovery = n.is_in_recovery()
                if n is self.primary and in_recovery:
                    problems.append(f"{n.name} is in recovery")
                if n is not self.primary:
                    if not in_recovery:
                        problems.append(f"{n.name} is not in recovery")
                    elif n.replay_pause_state() != "not paused":
                        problems.append(f"{n.name} replay paused")
                    elif not n.is_streaming():
                        problems.append(f"{n.name} not streaming")
            except psycopg2.Error as e:
                problems.append(f"{n.name} unreachable: {e}".strip())
        return problems

    def restore(self, timeout: float = 30) -> list[str]:
        """
        Bring the topology back to healthy: unfreeze frozen nodes, start
        stopped ones, resume paused replay, wait for streaming.

        :return: the problems found (empty if it was healthy).
        :raises RuntimeError: if roles changed (a promoted replica): that
            cannot be undone; destructive tests must use their own topology.
        """
        problems = self.health_problems()
        if not problems:
            return problems
        for n in self.nodes:
            if n.frozen:
                n.sigcont()
        for n in self.nodes:
            if not n.is_running():
                n.start(timeout)
        for n in self.nodes:
            in_recovery = n.is_in_recovery()
            if (n is self.primary) == in_recovery:
                raise RuntimeError(
                    f"{n.name} changed role (in recovery: {in_recovery}); a test promoted "
                    "a node of a shared topology: use a fresh topology for that"
                )
            if n is not self.primary and n.replay_pause_state() != "not paused":
                n.resume_replay(timeout)
        self.wait_streaming(timeout)
        return problems

    def all_pids(self) -> list[int]:
        """Every live process of every node."""
        return [p for n in self.nodes for p in n.all_pids()]

    def teardown(self) -> None:
        """
        Stop every node (immediate shutdown, SIGKILL fallback) and remove
        the data. Idempotent; safe after a partial start.

        :raises RuntimeError: if a server process survived.
        """
        survivors: list[str] = []
        for n in reversed(self.nodes):
            try:
                n.stop("immediate", timeout=10)
            except Exception:  # noqa: BLE001 - fall back to SIGKILL
                n.kill()
            left = [p for p in n.all_pids() if _alive(p)]
            if left:
                survivors.append(f"{n.name}: {left}")
        if not survivors:
            if self._owns_base_dir:
                shutil.rmtree(self.base_dir, ignore_errors=True)
            else:
                for n in self.nodes:
                    shutil.rmtree(n.datadir, ignore_errors=True)
        self._torn_down = True
        if survivors:
            raise RuntimeError(f"PostgreSQL processes survived teardown: {survivors}")


def _safe(f: Callable[[], Any]) -> Any:
    try:
        return f()
    except Exception as e:  # noqa: BLE001 - for messages only
        return f"<{type(e).__name__}>"
