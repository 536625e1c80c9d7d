"""
One PostgreSQL server of the test topology (:class:`PgNode`): its data
directory from a template, its postmaster as our child process, and SQL.
Replication and fault injection are in :mod:`pgtopology.replication` and
:mod:`pgtopology.faults`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Sequence
from typing import Any

import psycopg2

from pgtopology.conf import (
    _PM_SIGNALS,
    COMMON_CONF,
    HBA_CONF,
    LOG_FILE,
    NODE_CONF,
    SETUP_SQL,
    SUPERUSER,
    SUPERUSER_PASSWORD,
)
from pgtopology.faults import NodeFaults
from pgtopology.processes import (
    _alive,
    _become_subreaper,
    _env,
    _make_pg_dir,
    _new_scratch_root,
    _pg_ids,
    _reap,
    _run,
    _run_as,
    _signal,
    descendants,
    find_pg_bindir,
    free_port,
    poll,
)
from pgtopology.replication import NodeReplication

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


class PgNode(NodeReplication, NodeFaults):
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


class _BindError(RuntimeError):
    pass
