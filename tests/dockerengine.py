"""
A Docker engine for the container tests, and the images they use.

Plain synchronous code (subprocess), no pytest: ``conftest.py`` wraps it in
the session fixtures ``docker_engine`` and ``docker_images``.

Where the engine comes from, first match wins:

1. ``DOCKER_HOST`` is set (a laptop, a CI service): that engine.
2. ``dockerd`` is installed and we are root: our own ``dockerd``, started for
   the session and stopped by its pid at the end, with its own
   ``--exec-root``, ``--pidfile`` and unix socket, ``--bridge=none
   --iptables=false`` (every container runs with host networking, so all
   traffic stays on loopback).  Its ``--data-root`` is
   ``$PGSTATUS_DOCKER_DATA_ROOT`` (default ``/var/tmp/pg-status-docker``),
   kept between runs as the image cache; a lock file next to it lets only
   one such engine use it at a time.
3. The default socket ``/var/run/docker.sock`` answers.

Images: with ``PGSTATUS_DOCKER_PUBLIC_IMAGES=1`` the public ones
(``python:3.11-slim``, ``postgres:15``, ``haproxy:2.8``, pulled as usual);
otherwise the local ones ``docker/offline-images.sh`` builds from Debian
packages (root and ``debootstrap`` needed, no registry).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from pgtopology import poll

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFLINE_IMAGES = os.path.join(ROOT, "docker", "offline-images.sh")
DEFAULT_DATA_ROOT = "/var/tmp/pg-status-docker"
#: the tag of the pg-status image the tests build
PG_STATUS_IMAGE = "pg-status:test"


class EngineUnavailable(RuntimeError):
    """No Docker engine could be found or started (the message says why)."""


def docker_client() -> str | None:
    """
    The docker CLI: Debian's ``/usr/bin/docker`` when present (it matches
    Debian's engine; a newer static client earlier on PATH lacks buildx),
    else whatever ``docker`` is on PATH.
    """
    if os.access("/usr/bin/docker", os.X_OK):
        return "/usr/bin/docker"
    return shutil.which("docker")


@dataclass
class DockerEngine:
    """
    A reachable engine.

    :ivar host: its ``DOCKER_HOST`` URL.
    :ivar client: the docker CLI.
    """

    host: str
    client: str
    _proc: subprocess.Popen[bytes] | None = None
    _lock: IO[str] | None = None
    _dirs: str | None = None
    _log: str | None = None

    @property
    def owned(self) -> bool:
        """Whether we started this engine (and own its data root)."""
        return self._proc is not None

    def env(self, **extra: str) -> dict[str, str]:
        """The process environment for docker, compose and testcontainers."""
        env = dict(os.environ)
        env.update(DOCKER_HOST=self.host, DOCKER_BUILDKIT="0",
                   COMPOSE_DOCKER_CLI_BUILD="0",
                   TESTCONTAINERS_RYUK_DISABLED="true",
                   TESTCONTAINERS_CONNECTION_MODE="docker_host")
        env.update(extra)
        return env

    def run(self, args: Sequence[str], timeout: float = 120, check: bool = True,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run ``docker <args>`` against this engine; raise on failure if ``check``."""
        out = subprocess.run([self.client, *args], env=self.env(), capture_output=True,
                             text=True, timeout=timeout, **kwargs)
        if check and out.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} failed ({out.returncode}):\n"
                               f"{out.stdout}{out.stderr}")
        return out

    def answers(self) -> bool:
        """Whether the engine answers ``docker version``."""
        try:
            return self.run(["version"], timeout=10, check=False).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def log_tail(self, lines: int = 30) -> str:
        """The end of our dockerd's log, if we started one."""
        if self._log is None or not os.path.exists(self._log):
            return ""
        with open(self._log, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    @classmethod
    def find_or_start(cls) -> DockerEngine:
        """
        The engine to test with (see the module docstring).

        :raises EngineUnavailable: with the reason.
        """
        client = docker_client()
        if client is None:
            raise EngineUnavailable("no docker client (apt-get install docker.io)")
        if os.environ.get("DOCKER_HOST"):
            engine = cls(os.environ["DOCKER_HOST"], client)
            if not engine.answers():
                raise EngineUnavailable(f"DOCKER_HOST={engine.host} does not answer")
            return engine
        dockerd = shutil.which("dockerd")
        if dockerd is not None and os.geteuid() == 0:
            return cls._start(client, dockerd)
        engine = cls("unix:///var/run/docker.sock", client)
        if engine.answers():
            return engine
        raise EngineUnavailable("no DOCKER_HOST, no dockerd to start as root, and "
                                "/var/run/docker.sock does not answer")

    @classmethod
    def _start(cls, client: str, dockerd: str, timeout: float = 60) -> DockerEngine:
        data_root = os.environ.get("PGSTATUS_DOCKER_DATA_ROOT", DEFAULT_DATA_ROOT)
        os.makedirs(data_root, exist_ok=True)
        lock = open(data_root + ".lock", "a")  # noqa: SIM115 - held for the session
        deadline = time.monotonic() + 600
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    lock.close()
                    raise EngineUnavailable(f"{data_root} stayed locked by another "
                                            "test engine for 10 minutes") from None
                time.sleep(0.5)
        dirs = tempfile.mkdtemp(prefix="pgsd.", dir="/var/tmp")
        sock = os.path.join(dirs, "docker.sock")
        log = os.path.join(dirs, "dockerd.log")
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [dockerd, "--data-root", data_root, "--exec-root", os.path.join(dirs, "exec"),
                 "--pidfile", os.path.join(dirs, "dockerd.pid"), "-H", f"unix://{sock}",
                 "--bridge=none", "--iptables=false", "--ip-masq=false"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        engine = cls(f"unix://{sock}", client, proc, lock, dirs, log)
        try:
            poll(lambda: proc.poll() is not None or engine.answers(), timeout,
                 "dockerd to answer", interval=0.2)
            if proc.poll() is not None:
                raise EngineUnavailable(f"dockerd exited with {proc.returncode}:\n"
                                        f"{engine.log_tail()}")
        except TimeoutError as e:
            engine.stop()
            raise EngineUnavailable(f"{e}\n{engine.log_tail()}") from None
        except EngineUnavailable:
            engine.stop()
            raise
        return engine

    def stop(self) -> None:
        """Stop the dockerd we started (by its pid), if any; release the lock."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        if self._dirs is not None:
            # dockerd leaves its default network namespace mounted there
            with open("/proc/self/mounts") as f:
                mounts = [line.split()[1] for line in f]
            for m in sorted((m for m in mounts if m.startswith(self._dirs + "/")), reverse=True):
                subprocess.run(["umount", m], check=False, capture_output=True)
            shutil.rmtree(self._dirs, ignore_errors=True)
            self._dirs = None


@dataclass(frozen=True)
class Images:
    """The image names the container tests use."""

    python: str
    postgres: str
    haproxy: str
    pg_status: str


def base_images(engine: DockerEngine) -> Images:
    """
    The base images: public ones (``PGSTATUS_DOCKER_PUBLIC_IMAGES=1``), or
    the local ones, built by ``docker/offline-images.sh`` when missing.
    """
    if os.environ.get("PGSTATUS_DOCKER_PUBLIC_IMAGES") == "1":
        return Images("python:3.11-slim", "postgres:15", "haproxy:2.8", PG_STATUS_IMAGE)
    out = subprocess.run(["bash", OFFLINE_IMAGES], env=engine.env(DOCKER=engine.client),
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"docker/offline-images.sh failed:\n{out.stdout}{out.stderr}")
    names = subprocess.run(["bash", OFFLINE_IMAGES, "--print"], capture_output=True,
                           text=True, check=True).stdout
    values = dict(line.split("=", 1) for line in names.split())
    return Images(values["PYTHON_IMAGE"], values["POSTGRES_IMAGE"], values["HAPROXY_IMAGE"],
                  PG_STATUS_IMAGE)


#: this machine's extra CA certificates (a TLS-intercepting proxy in front
#: of the package index), handed to the build as docker/build.sh documents
EXTRA_CAS = "/usr/local/share/ca-certificates"
BUILD_SCRIPT = os.path.join(ROOT, "docker", "build.sh")


def build_env(engine: DockerEngine, **extra: str) -> dict[str, str]:
    """
    The environment for ``docker/build.sh`` against ``engine``: its client,
    and ``CA_CERTS`` naming this machine's extra CA certificates when it has
    some (pip settings such as ``PIP_INDEX_URL`` pass through as set).
    """
    env = engine.env(DOCKER=engine.client, **extra)
    if os.path.isdir(EXTRA_CAS) and any(n.endswith(".crt") for n in os.listdir(EXTRA_CAS)):
        env.setdefault("CA_CERTS", EXTRA_CAS)
    return env


def build_pg_status(engine: DockerEngine, images: Images) -> None:
    """
    Build ``docker/Dockerfile`` as ``images.pg_status`` on ``images.python``
    with ``docker/build.sh`` (as users do), with host networking.
    """
    out = subprocess.run(["bash", BUILD_SCRIPT, "--network", "host"],
                         env=build_env(engine, TAG=images.pg_status, PYTHON_IMAGE=images.python),
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"docker/build.sh failed ({out.returncode}):\n"
                           f"{out.stdout[-5000:]}{out.stderr[-5000:]}")
    if engine.owned:
        # earlier builds' stages pile up in our data root; keep a day's cache
        engine.run(["image", "prune", "-f", "--filter", "until=24h"])
