"""
A real PgBouncer in front of one PostgreSQL node, started by the tests.

Plain synchronous code (subprocess and psycopg2), like ``pgtopology``: from
a test whose reactor must keep running, call ``start``, ``stop`` and the
admin console helpers through ``twisted.internet.threads.deferToThread``.

Each pooler is its own ``pgbouncer`` process (Debian package ``pgbouncer``;
its system service is not used) with its own directory, ini file, auth file
and log, listening on a loopback address and a free port (no unix socket).
PgBouncer refuses to run as root: as root, it runs as the ``postgres`` OS
user, like the PostgreSQL servers.

The auth file holds the SCRAM secrets copied from the node's ``pg_authid``
(no plain passwords on disk), so clients authenticate to PgBouncer with
SCRAM and PgBouncer logs into PostgreSQL with the same secrets.  The pooled
database ``postgres`` points at the node; the admin console is the database
``pgbouncer`` (admin user: the superuser).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import psycopg2
from pgtopology import (
    SUPERUSER,
    SUPERUSER_PASSWORD,
    PgNode,
    _env,
    _make_pg_dir,
    _mark_owner,
    _owner_alive,
    _pg_ids,
    _run_as,
    free_port,
    scratch_dir,
)

#: Where the Debian package puts the binary (``/usr/sbin`` is not always on PATH).
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"

#: Settings of every pooler; ``extra`` in :class:`PgBouncer` overrides them.
BASE_SETTINGS: dict[str, str] = {
    "pool_mode": "transaction",
    "auth_type": "scram-sha-256",
    "admin_users": SUPERUSER,
    "max_client_conn": "10",
    "default_pool_size": "1",
    "min_pool_size": "0",
    "reserve_pool_size": "0",
    "log_connections": "1",
    "log_disconnections": "1",
    "log_pooler_errors": "1",
    "stats_period": "1",
    # a server that does not answer the TCP connect fails quickly
    "server_connect_timeout": "2",
    "unix_socket_dir": "",
}


DIR_PREFIX = "pgstatus-bouncer-"
_SWEPT = False


def _sweep_stale() -> None:
    """
    Once per process: stop the poolers of test runs that were killed before
    their teardown, and remove their directories (those of live runs stay).
    """
    global _SWEPT
    if _SWEPT:
        return
    _SWEPT = True
    for root in glob.glob(os.path.join(scratch_dir(), DIR_PREFIX + "*")):
        if _owner_alive(root):
            continue
        with contextlib.suppress(OSError, ValueError):
            with open(os.path.join(root, "pgbouncer.pid")) as f:
                pid = int(f.readline())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if root.encode() in f.read():
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


class PgBouncer:
    """
    One ``pgbouncer`` process pooling the database ``postgres`` of ``node``.

    :param node: the PostgreSQL node behind the pooler.
    :param listen_host: the loopback address to listen on; default the
        node's own (a free port differs from the node's).
    :param extra: more ``[pgbouncer]`` settings (they override
        :data:`BASE_SETTINGS`).
    :ivar host: the listen address.
    :ivar port: the listen port (set by :meth:`start`).
    """

    def __init__(self, node: PgNode, listen_host: str | None = None,
                 extra: Mapping[str, str] | None = None) -> None:
        if not os.access(PGBOUNCER, os.X_OK):
            raise RuntimeError(
                "pgbouncer is not installed (Debian package pgbouncer, see "
                ".ci/test-deps, run by make test); the connection pooler tests need it")
        self.node = node
        self.host = listen_host or node.host
        self.port = 0
        self.settings = {**BASE_SETTINGS, **(extra or {})}
        _sweep_stale()
        self.directory = tempfile.mkdtemp(prefix=DIR_PREFIX, dir=scratch_dir())
        _mark_owner(self.directory)
        _make_pg_dir(self.directory)
        self.ini = os.path.join(self.directory, "pgbouncer.ini")
        self.auth_file = os.path.join(self.directory, "userlist.txt")
        self.log = os.path.join(self.directory, "pgbouncer.log")
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<PgBouncer {self.host}:{self.port} -> {self.node!r}>"

    # -- files ---------------------------------------------------------------

    def _write(self, path: str, text: str) -> None:
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
        ids = _pg_ids()
        if ids is not None:
            os.chown(path, *ids)

    def write_auth_file(self) -> None:
        """
        Copy the SCRAM secrets of every login role from the node's
        ``pg_authid`` (the node must be up).
        """
        rows = self.node.sql("SELECT rolname, rolpassword FROM pg_authid"
                             " WHERE rolcanlogin AND rolpassword LIKE 'SCRAM-SHA-256$%'")
        assert rows, f"no SCRAM secrets on {self.node!r}"
        self._write(self.auth_file, "".join(f'"{name}" "{secret}"\n' for name, secret in rows))

    def write_ini(self) -> None:
        """
        Write the ini file for the current ``port`` and ``node`` address.
        """
        settings = {
            **self.settings,
            "listen_addr": self.host,
            "listen_port": str(self.port),
            "auth_file": self.auth_file,
            "logfile": self.log,
            "pidfile": os.path.join(self.directory, "pgbouncer.pid"),
        }
        body = "\n".join(f"{k} = {v}" for k, v in settings.items())
        self._write(self.ini, (
            "[databases]\n"
            f"postgres = host={self.node.host} port={self.node.port} dbname=postgres\n"
            f"[pgbouncer]\n{body}\n"
        ))

    # -- process -------------------------------------------------------------

    def start(self, timeout: float = 15) -> None:
        """
        Start the pooler and wait until its admin console answers.  A port
        taken meanwhile is replaced by a new free one.  The node must be up
        the first time (for the auth file).
        """
        if not os.path.exists(self.auth_file):
            self.write_auth_file()
        for attempt in range(4):
            if not self.port or attempt:
                self.port = free_port(self.host)
            self.write_ini()
            log_start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
            self._proc = subprocess.Popen(
                [PGBOUNCER, self.ini], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=_env(), cwd=self.directory, **_run_as())
            error = self._wait_ready(timeout)
            if error is None:
                return
            self.stop()
            if "Address already in use" not in self.log_text(log_start) or attempt == 3:
                raise RuntimeError(f"{self!r} did not start: {error}\n{self.log_tail()}")

    def _wait_ready(self, timeout: float) -> str | None:
        """
        Poll the admin console until it answers; the reason if the process
        exits or the deadline passes first.
        """
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                return f"pgbouncer exited with {self._proc.returncode}"
            try:
                self.show("VERSION")
                return None
            except psycopg2.Error as e:
                last = e
            time.sleep(0.05)
        return f"no answer within {timeout}s (last error: {last})"

    def stop(self, timeout: float = 10) -> None:
        """
        Immediate shutdown (SIGTERM), SIGKILL if it lingers.  Idempotent.
        """
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def remove(self) -> None:
        """
        Stop and remove the directory.
        """
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def is_running(self) -> bool:
        """The process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def log_text(self, start: int = 0) -> str:
        """The pooler's log from byte ``start``."""
        try:
            with open(self.log, "rb") as f:
                f.seek(start)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_size(self) -> int:
        """The log's current size (a mark for :meth:`log_text`)."""
        try:
            return os.path.getsize(self.log)
        except OSError:
            return 0

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the pooler's log."""
        tail = "\n".join(self.log_text().splitlines()[-lines:])
        return f"--- pgbouncer {self.host}:{self.port} log ({self.log}) ---\n{tail}"

    # -- clients -------------------------------------------------------------

    def connect(self, dbname: str = "postgres", user: str = SUPERUSER,
                password: str = SUPERUSER_PASSWORD, **kwargs: Any) -> Any:
        """
        An autocommit psycopg2 connection through the pooler.
        """
        conn = psycopg2.connect(host=self.host, port=self.port, user=user, password=password,
                                dbname=dbname, connect_timeout=3, sslmode="disable",
                                application_name="pgbouncer-test", **kwargs)
        conn.autocommit = True
        return conn

    def show(self, what: str) -> list[dict[str, Any]]:
        """
        ``SHOW <what>`` on the admin console, as one dict per row.
        """
        conn = self.connect("pgbouncer")
        try:
            with conn.cursor() as cur:
                cur.execute(f"SHOW {what}")
                names = [c.name for c in cur.description]
                return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def pool(self, user: str = SUPERUSER) -> dict[str, Any]:
        """``SHOW POOLS`` row of the database ``postgres`` and ``user``."""
        return next(r for r in self.show("POOLS")
                    if r["database"] == "postgres" and r["user"] == user)

    def stats(self) -> dict[str, Any]:
        """``SHOW STATS`` row of the database ``postgres``."""
        return next(r for r in self.show("STATS") if r["database"] == "postgres")

    def clients(self, application_name: str | None = None) -> list[dict[str, Any]]:
        """``SHOW CLIENTS`` rows of the database ``postgres``."""
        return [r for r in self.show("CLIENTS") if r["database"] == "postgres"
                and (application_name is None or r["application_name"] == application_name)]

    def servers(self) -> list[dict[str, Any]]:
        """``SHOW SERVERS`` rows (connections to PostgreSQL)."""
        return [r for r in self.show("SERVERS") if r["database"] == "postgres"]
