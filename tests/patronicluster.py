"""
A real Patroni cluster for tests: one etcd (Debian's ``etcd-server``) and
three Patroni members (PyPI's ``patroni[etcd3]``, the ``test`` extra), each
managing a PostgreSQL server from the local binaries.

Plain synchronous code (subprocess, urllib, psycopg2), like ``pgtopology``.
(Not named ``patroni.py``: the tests directory is on ``sys.path``, and a
module of that name would hide Patroni's own package.)

Layout (``PatroniCluster.start``)::

    etcd      127.0.0.1:<free port>                    <root>/etcd
    node1     127.0.0.21:<pg port>  REST 127.0.0.21:<free port>  <root>/node1/data
    node2     127.0.0.22:<pg port>  REST 127.0.0.22:<free port>  <root>/node2/data
    node3     127.0.0.23:<pg port>  REST 127.0.0.23:<free port>  <root>/node3/data

Every PostgreSQL server uses the same port on its own loopback address, so
pg-status can watch them with one ``pg_status__pg_port``.  Patroni
bootstraps the cluster itself (``initdb`` on the member that wins the
initialize key, ``pg_basebackup`` on the others); the superuser is
``postgres``/``postgres``, the replication user ``replicator``.

Patroni runs as the ``postgres`` OS user (it starts PostgreSQL, which
refuses root), under ``tests/reaper.py`` (a subreaper that reaps the
postmaster Patroni leaves to init).  It needs an interpreter that user can
execute: this one when it can, else Debian's build of the same Python
version (same ABI) with this environment's ``site-packages`` on
``PYTHONPATH`` -- a pyenv interpreter under root's mode 0700 home is out
of that user's reach.  Without either, or without Patroni or etcd, starting
fails with what is missing: these tests never skip.

DCS timings are Patroni's smallest practical ones: ``ttl`` 20 s (Patroni 4
refuses less), ``loop_wait`` 1 s, ``retry_timeout`` 5 s.  A leader whose
Patroni is gone or frozen loses its key after ``ttl``.

Every directory is under one scratch root (``pgtopology.scratch_dir()``),
marked with its owner; roots of test runs that were killed are swept (their
processes killed, the directory removed) by the next start.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib.util
import json
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import psycopg2
import yaml
from pgtopology import (
    SUPERUSER,
    SUPERUSER_PASSWORD,
    _alive,
    _make_pg_dir,
    _mark_owner,
    _owner_alive,
    _pg_ids,
    descendants,
    free_port,
    poll,
    scratch_dir,
)
from pgtopology.processes import find_pg_bindir

HERE = os.path.dirname(os.path.abspath(__file__))
REAPER = os.path.join(HERE, "reaper.py")

#: the members' loopback addresses, in pg-status host order
NODE_HOSTS = ("127.0.0.21", "127.0.0.22", "127.0.0.23")
SCOPE = "pgstatus"
REPLICATION_USER = "replicator"
REPLICATION_PASSWORD = "replicator"
#: Patroni 4 refuses a ttl under 20 s
TTL = 20
LOOP_WAIT = 1
RETRY_TIMEOUT = 5

DIR_PREFIX = "pgstatus-patroni-"
_SWEPT = False


# --------------------------------------------------------------------------
# prerequisites


def etcd_binary() -> str:
    """
    Debian's etcd server binary.

    :raises RuntimeError: with what to install.
    """
    found = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK)
                                     else None)
    if found is None:
        raise RuntimeError("no etcd binary: the Patroni tests need Debian's etcd-server "
                           "(run .ci/patroni-deps, or apt-get install etcd-server)")
    return found


def _patroni_site() -> list[str]:
    """
    The directories to import Patroni and its dependencies from: where
    ``patroni`` is installed, then this environment's ``site-packages``.

    :raises RuntimeError: Patroni is not installed here.
    """
    spec = importlib.util.find_spec("patroni")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "Patroni is not installed in this environment: the tests need the test extra "
            "(make venv, or pip install '.[test]', which brings patroni[etcd3])")
    where = os.path.dirname(list(spec.submodule_search_locations)[0])
    dirs = [where]
    for d in site.getsitepackages():
        if d not in dirs and os.path.isdir(d):
            dirs.append(d)
    return dirs


def _runs_as_postgres(python: str, env: dict[str, str]) -> str | None:
    """
    ``None`` if the ``postgres`` OS user can run ``python`` and import
    Patroni with ``env``; else why not.
    """
    ids = _pg_ids()
    extra: dict[str, Any] = {} if ids is None else {
        "user": ids[0], "group": ids[1], "extra_groups": []}
    try:
        r = subprocess.run([python, "-c", "import patroni, psycopg2, yaml"], env=env, cwd="/",
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=60, **extra)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{python}: {e}"
    if r.returncode != 0:
        return f"{python}: exit {r.returncode}: {r.stderr.strip()[-500:]}"
    return None


def patroni_python() -> tuple[str, dict[str, str]]:
    """
    The interpreter to run Patroni with as the ``postgres`` OS user, and the
    environment it needs (``PYTHONPATH``).

    :raises RuntimeError: no usable interpreter (the reasons, and what to do).
    """
    dirs = _patroni_site()
    env = _base_env()
    reasons = []
    why = _runs_as_postgres(sys.executable, env)
    if why is None:
        return sys.executable, {}
    reasons.append(why)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    extra = {"PYTHONPATH": os.pathsep.join(dirs)}
    for candidate in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if not os.access(candidate, os.X_OK):
            reasons.append(f"{candidate}: not installed")
            continue
        why = _runs_as_postgres(candidate, {**env, **extra})
        if why is None:
            return candidate, extra
        reasons.append(why)
    raise RuntimeError(
        "no Python interpreter that the postgres OS user can run Patroni with: "
        + "; ".join(reasons)
        + f" (Patroni runs as that user; use a venv made from an interpreter it can "
        f"execute, or install Debian's python{version})")


def _base_env() -> dict[str, str]:
    """This environment without libpq's, Patroni's and etcd's variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PG", "PATRONI_", "ETCD", "PYTHON"))}
    env.update(LC_ALL="C", LANG="C")
    return env


# --------------------------------------------------------------------------
# small helpers


def _http(url: str, method: str = "GET", body: Any = None,
          timeout: float = 5) -> tuple[int, Any]:
    """``(status, decoded JSON or text)``; ``(0, error)`` when nothing answers."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except OSError as e:
        return 0, str(e)
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def _port_free_everywhere(hosts: Sequence[str]) -> int:
    """A TCP port free on every one of ``hosts`` right now."""
    for _ in range(50):
        port = free_port(hosts[0])
        ok = True
        for h in hosts[1:]:
            with socket.socket() as s:
                try:
                    s.bind((h, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError(f"no TCP port free on all of {', '.join(hosts)}")


def _pids_mentioning(text: str) -> list[int]:
    """Processes whose command line contains ``text``."""
    found = []
    needle = text.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _kill_all(pids: Sequence[int]) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGCONT)
            os.kill(p, signal.SIGKILL)


def _term_with_parent() -> None:
    """In a child before exec: SIGTERM when the thread that started it exits
    (a test run killed before its teardown leaves nothing running)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _sweep_stale() -> None:
    """
    Once per process: kill what test runs that were killed before their
    teardown left running (etcd, reapers, Patroni, PostgreSQL: every process
    whose command line names their root), and remove their roots.
    """
    global _SWEPT
    if _SWEPT:
        return
    _SWEPT = True
    for root in glob.glob(os.path.join(scratch_dir(), DIR_PREFIX + "*")):
        if _owner_alive(root):
            continue
        for _ in range(3):  # reapers may outlive one round
            pids = _pids_mentioning(root)
            if not pids:
                break
            _kill_all(pids)
            time.sleep(0.2)
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------
# etcd


class Etcd:
    """
    One etcd server on 127.0.0.1 (free client and peer ports), data in
    ``directory``; run as ourselves.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.binary = etcd_binary()
        self.log = os.path.join(directory, "etcd.log")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30, attempts: int = 3) -> None:
        """Start and wait until ``/health`` says healthy."""
        for attempt in range(attempts):
            self.port, peer = free_port(), free_port()
            data = os.path.join(self.directory, "data")
            shutil.rmtree(data, ignore_errors=True)
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [self.binary, "--name", "etcd", "--data-dir", data,
                     "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                     "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                     "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                     "--initial-cluster", f"etcd=http://127.0.0.1:{peer}",
                     "--initial-cluster-state", "new", "--log-level", "warn"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=_base_env(), cwd=self.directory, preexec_fn=_term_with_parent)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                status, body = _http(self.url + "/health", timeout=1)
                if status == 200 and isinstance(body, dict) and body.get("health") == "true":
                    return
                time.sleep(0.05)
            exited = self.proc.poll() is not None
            self.stop()
            if not exited or attempt == attempts - 1:
                raise RuntimeError(f"etcd did not start:\n{self.log_tail()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log, errors="replace") as f:
                text = f.read()
        except OSError as e:
            return f"[no etcd log: {e}]"
        return "--- etcd log ---\n" + "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------
# one member


class PatroniNode:
    """
    One Patroni member and its PostgreSQL server.

    :ivar name: ``node1``...
    :ivar host: its loopback address (PostgreSQL and REST API listen there).
    :ivar port: PostgreSQL's port (the same on every member).
    :ivar api_port: the REST API's port.
    """

    def __init__(self, name: str, host: str, port: int, api_port: int, directory: str,
                 etcd_url: str, bindir: str, python: tuple[str, dict[str, str]]) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.api_port = api_port
        self.directory = directory
        self.datadir = os.path.join(directory, "data")
        self.config = os.path.join(directory, "patroni.yml")
        self.log = os.path.join(directory, "patroni.log")
        self.pidfile = os.path.join(directory, "patroni.pid")
        self.etcd_url = etcd_url
        self.bindir = bindir
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None  # the reaper
        self.frozen = False

    def __repr__(self) -> str:
        return f"<PatroniNode {self.name} {self.host}:{self.port} api :{self.api_port}>"

    @property
    def api(self) -> str:
        return f"http://{self.host}:{self.api_port}"

    def write_config(self) -> None:
        pg_params = {
            "fsync": "off",  # (full_page_writes stays on: pg_rewind needs it)
            "shared_buffers": "16MB",
            "max_connections": 60,
            "max_wal_senders": 10,
            "max_replication_slots": 10,
            "wal_keep_size": "128MB",
            "wal_receiver_status_interval": "1s",
            "wal_retrieve_retry_interval": "200ms",
            "autovacuum": "off",
            "jit": "off",
        }
        config = {
            "scope": SCOPE,
            "namespace": "/service/",
            "name": self.name,
            "log": {"level": "INFO", "format": "%(asctime)s %(levelname)s: %(message)s"},
            "restapi": {"listen": f"{self.host}:{self.api_port}",
                        "connect_address": f"{self.host}:{self.api_port}"},
            "etcd3": {"hosts": [self.etcd_url.removeprefix("http://")], "protocol": "http"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 16 << 20,
                    "postgresql": {"use_pg_rewind": True, "use_slots": True,
                                   "parameters": pg_params},
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, {"auth-local": "trust"},
                           {"auth-host": "scram-sha-256"}],
            },
            "postgresql": {
                "listen": f"{self.host}:{self.port}",
                "connect_address": f"{self.host}:{self.port}",
                "data_dir": self.datadir,
                "bin_dir": self.bindir,
                "pgpass": os.path.join(self.directory, "pgpass"),
                "authentication": {
                    "superuser": {"username": SUPERUSER, "password": SUPERUSER_PASSWORD},
                    "replication": {"username": REPLICATION_USER,
                                    "password": REPLICATION_PASSWORD},
                },
                "parameters": {"unix_socket_directories": self.directory,
                               # segments in the data directory, not /dev/shm: a
                               # killed postmaster leaves none behind
                               "dynamic_shared_memory_type": "mmap",
                               "password_encryption": "scram-sha-256",
                               "logging_collector": "off",
                               "log_line_prefix": "%m [%p] ",
                               "log_min_messages": "warning"},
                "pg_hba": [
                    "local all all trust",
                    "local replication all trust",
                    f"host replication {REPLICATION_USER} 127.0.0.0/8 scram-sha-256",
                    "host all all 127.0.0.0/8 scram-sha-256",
                ],
            },
            "watchdog": {"mode": "off"},
            "tags": {},
        }
        with open(self.config, "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)
        ids = _pg_ids()
        if ids is not None:
            os.chown(self.config, *ids)

    # -- processes -----------------------------------------------------------

    def start(self) -> None:
        """Start Patroni (it starts, bootstraps or joins PostgreSQL itself)."""
        if self.running():
            return
        if not os.path.exists(self.config):
            self.write_config()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pidfile)
        python, extra = self.python
        env = {**_base_env(), **extra, "HOME": self.directory,
               "PATH": self.bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")}
        ids = _pg_ids() or (os.getuid(), os.getgid())
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, REAPER, self.pidfile, str(ids[0]), str(ids[1]), "--",
                 python, "-m", "patroni", self.config],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=self.directory)
        self.frozen = False

    def running(self) -> bool:
        """The reaper runs: Patroni or PostgreSQL of this member is alive."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def patroni_pid(self) -> int | None:
        """Patroni's pid, while it runs."""
        try:
            with open(self.pidfile) as f:
                pid = int(f.read())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    @property
    def postmaster_pid(self) -> int | None:
        """The postmaster's pid (from ``postmaster.pid``), while it runs."""
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                pid = int(f.readline())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def sigstop(self) -> None:
        """Freeze Patroni alone: its PostgreSQL keeps running."""
        pid = self.patroni_pid
        assert pid is not None, f"{self.name}: Patroni is not running"
        os.kill(pid, signal.SIGSTOP)
        self.frozen = True

    def sigcont(self) -> None:
        pid = self.patroni_pid
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        self.frozen = False

    def kill(self) -> None:
        """
        SIGKILL Patroni, then the postmaster and every process of it: the
        member dies at once, as a crashed machine would.
        """
        pids = []
        if self.patroni_pid:
            pids.append(self.patroni_pid)
        pm = self.postmaster_pid
        if pm:
            pids += [pm, *descendants(pm)]
        _kill_all(pids)
        self.frozen = False
        if not self._wait_reaper(10) and self.proc is not None:
            # whatever else of the member is left (nothing, normally)
            _kill_all(descendants(self.proc.pid))
            if not self._wait_reaper(10):
                self.proc.kill()
                self.proc.wait(10)

    def terminate(self) -> None:
        """SIGTERM to Patroni through the reaper, without waiting."""
        if self.running():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30) -> None:
        """
        SIGTERM to Patroni (it stops PostgreSQL and exits) through the
        reaper; SIGKILL to what is left after ``timeout``.  Idempotent.
        """
        if self.proc is None:
            return
        if self.running():
            self.sigcont()
            self.terminate()
            if not self._wait_reaper(timeout):
                _kill_all([p for p in descendants(self.proc.pid)])
                if not self._wait_reaper(10):
                    self.proc.kill()
                    self.proc.wait(10)
        self.proc = None

    def _wait_reaper(self, timeout: float) -> bool:
        """Wait for the reaper (so everything of this member) to exit."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log, errors="replace") as f:
                text = f.read()
        except OSError as e:
            return f"[{self.name}: no log: {e}]"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- {self.name} Patroni log ({self.log}) ---\n{tail}"

    # -- state -----------------------------------------------------------------

    def rest(self, path: str, method: str = "GET", body: Any = None,
             timeout: float = 5) -> tuple[int, Any]:
        """A request to this member's REST API."""
        return _http(self.api + path, method, body, timeout)

    def connect(self, connect_timeout: int = 2) -> Any:
        """An autocommit psycopg2 connection to this member's PostgreSQL."""
        conn = psycopg2.connect(host=self.host, port=self.port, user=SUPERUSER,
                                password=SUPERUSER_PASSWORD, dbname="postgres",
                                connect_timeout=connect_timeout, sslmode="disable",
                                application_name="patroni-test")
        conn.autocommit = True
        return conn

    def in_recovery(self) -> bool:
        """``pg_is_in_recovery()`` on a new connection."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_is_in_recovery()")
                return bool(cur.fetchone()[0])
        finally:
            conn.close()


# --------------------------------------------------------------------------
# the cluster


class PatroniCluster:
    """
    etcd and three Patroni members.  Build with :meth:`start`; always call
    :meth:`teardown`.
    """

    def __init__(self, root: str, nodes: list[PatroniNode], etcd: Etcd) -> None:
        self.root = root
        self.nodes = nodes
        self.etcd = etcd
        self._torn_down = False

    @classmethod
    def start(cls, timeout: float = 120) -> PatroniCluster:
        """
        Start etcd and the three members, and wait until one leads and the
        other two stream from it.

        :raises RuntimeError: a prerequisite is missing.
        """
        python = patroni_python()
        bindir = find_pg_bindir()
        etcd_binary()
        _sweep_stale()
        root = os.path.realpath(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=scratch_dir()))
        _mark_owner(root)
        _make_pg_dir(root)
        etcd_dir = os.path.join(root, "etcd")
        os.makedirs(etcd_dir)
        etcd = Etcd(etcd_dir)
        cluster = cls(root, [], etcd)
        try:
            etcd.start()
            port = _port_free_everywhere(NODE_HOSTS)
            for i, host in enumerate(NODE_HOSTS, start=1):
                directory = os.path.join(root, f"node{i}")
                _make_pg_dir(directory)
                node = PatroniNode(f"node{i}", host, port, free_port(host), directory,
                                   etcd.url, bindir, python)
                node.write_config()
                cluster.nodes.append(node)
            for node in cluster.nodes:
                node.start()
            cluster.wait_healthy(timeout)
        except BaseException:
            cluster.teardown()
            raise
        return cluster

    def node(self, name: str) -> PatroniNode:
        return next(n for n in self.nodes if n.name == name)

    def by_host(self, host: str) -> PatroniNode:
        return next(n for n in self.nodes if n.host == host)

    def hosts_env(self) -> dict[str, str]:
        """The ``pg_status__*`` connection settings for these members."""
        return {
            "pg_status__hosts": ",".join(n.host for n in self.nodes),
            "pg_status__pg_port": str(self.nodes[0].port),
            "pg_status__pg_user": SUPERUSER,
            "pg_status__pg_password": SUPERUSER_PASSWORD,
        }

    # -- Patroni's view ----------------------------------------------------------

    def members(self, exclude: Sequence[PatroniNode] = ()) -> list[dict[str, Any]]:
        """
        ``GET /cluster`` from the first member that answers (frozen ones and
        ``exclude`` are not asked): its ``members``.

        :raises RuntimeError: no member answers.
        """
        errors = []
        for n in self.nodes:
            if n.frozen or n in exclude:
                continue
            status, body = n.rest("/cluster", timeout=2)
            if status == 200 and isinstance(body, dict):
                return list(body.get("members", []))
            errors.append(f"{n.name}: {status} {body}")
        raise RuntimeError("no Patroni REST API answers: " + "; ".join(errors))

    def leader(self, exclude: Sequence[PatroniNode] = ()) -> PatroniNode | None:
        """The member that holds the leader key, as Patroni's ``/cluster`` says."""
        for m in self.members(exclude):
            if m.get("role") == "leader":
                return self.node(m["name"])
        return None

    def health_problems(self) -> list[str]:
        """What keeps the cluster from being one running leader and two streaming replicas."""
        try:
            members = self.members()
        except RuntimeError as e:
            return [str(e)]
        problems = []
        if sorted(m.get("name", "") for m in members) != sorted(n.name for n in self.nodes):
            problems.append(f"members: {[m.get('name') for m in members]}")
        leaders = [m for m in members if m.get("role") == "leader"]
        if len(leaders) != 1 or leaders[0].get("state") != "running":
            problems.append(f"leaders: {leaders}")
        timeline = leaders[0].get("timeline") if leaders else None
        for m in members:
            if m.get("role") == "leader":
                continue
            if m.get("state") != "streaming" or m.get("timeline") != timeline:
                problems.append(f"replica {m.get('name')}: state {m.get('state')}, "
                                f"timeline {m.get('timeline')} (leader's {timeline})")
        for n in self.nodes:
            if n.frozen:
                problems.append(f"{n.name}: Patroni frozen")
            elif not n.running():
                problems.append(f"{n.name}: not running")
        return problems

    def wait_healthy(self, timeout: float = 60) -> None:
        """
        Wait until one member leads and two stream from it on its timeline.

        :raises TimeoutError: with the problems left and the members' logs.
        """
        poll(lambda: not self.health_problems(), timeout,
             "one Patroni leader and two streaming replicas", 0.1,
             lambda: "\n".join(self.health_problems()) + "\n" + self.logs())

    def restore(self, timeout: float = 90) -> None:
        """
        Put the cluster back after a test: thaw frozen members, start
        stopped or killed ones, wait until healthy.
        """
        for n in self.nodes:
            if n.frozen:
                n.sigcont()
            if not n.running():
                n.start()
        self.wait_healthy(timeout)

    def switchover(self, candidate: PatroniNode, timeout: float = 60) -> float:
        """
        ``POST /switchover`` to the leader: ``candidate`` becomes leader.
        Patroni answers once it is done (or failed).

        :return: seconds the request took.
        :raises AssertionError: Patroni refused or failed.
        """
        leader = self.leader()
        assert leader is not None, "no leader to switch over from"
        start = time.monotonic()
        status, body = leader.rest("/switchover", "POST",
                                   {"leader": leader.name, "candidate": candidate.name},
                                   timeout=timeout)
        assert status == 200, f"switchover {leader.name} -> {candidate.name}: {status} {body}"
        return time.monotonic() - start

    def logs(self) -> str:
        return "\n".join([*(n.log_tail() for n in self.nodes), self.etcd.log_tail()])

    def teardown(self) -> None:
        """Stop every member and etcd; remove the root.  Idempotent."""
        if self._torn_down:
            return
        self._torn_down = True
        errors: list[BaseException] = []
        for n in self.nodes:
            n.sigcont()
            n.terminate()  # all at once; stop() then waits for each
        for n in self.nodes:
            try:
                n.stop()
            except BaseException as e:  # noqa: BLE001 - stop the rest first
                errors.append(e)
        try:
            self.etcd.stop()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        # anything still naming the root (should be nothing)
        left = [p for p in _pids_mentioning(self.root) if p != os.getpid()]
        _kill_all(left)
        shutil.rmtree(self.root, ignore_errors=True)
        if errors:
            raise errors[0]
        assert not left, f"processes left running after teardown: {left}"

