"""
The README's first command on a fresh Debian 12: ``make run``, in a minimal
debootstrap chroot (``tests/debchroot.py``) that has only ``python3``,
``make`` and ``git``, answers 200 on ``/master``.

The repository's committed ``HEAD`` is cloned into the chroot (uncommitted
changes are not what a newcomer gets, so they are not tested).  Before
``make run``, a first ``python3 -m venv .venv`` is made to fail the way it
does on such a machine (no ``python3-venv``): that proves the machine is as
fresh as claimed, and leaves the half-made ``.venv`` that ``make`` must
recover from.  Everything else (PostgreSQL, compilers, headers, the
``postgres`` OS user) must come from the project's own scripts.

``make run`` must change the machine as little as it can, and cope with
what a real machine does meanwhile:

- the chroot gets no ``policy-rc.d`` of the test's own (a fresh machine has
  none): ``.ci/apt-install`` must put one that refuses service starts in
  place while dpkg runs (seen by a watcher), and take it away afterwards;
- another process holds the dpkg locks (``/var/lib/dpkg/lock-frontend`` and
  ``/var/lib/dpkg/lock``, POSIX locks as apt and dpkg take them, as an
  unattended upgrade would) from just before ``make run`` for at least
  :data:`LOCK_HOLD` seconds, and until ``apt-get install`` is waiting for
  them: ``make run`` must wait and then pass, and dpkg must have written
  nothing while they were held;
- afterwards, no test-only package (:data:`TEST_ONLY_PACKAGES`) is installed,
  Debian made no PostgreSQL cluster, and no haproxy, pgbouncer or system
  PostgreSQL runs.

The chroot shares this machine's network namespace, so the service's port
is picked free on the host and handed to ``make run`` as
``pg_status__http_port``; PostgreSQL's ports are picked free by the
topology inside.  The first run builds and caches the base system (a few
minutes); every run then installs the packages and the venv (several more).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from debchroot import ChrootUnavailable, DebianChroot
from pgtopology import free_port, poll

pytestmark = [pytest.mark.chroot]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the whole first `make run`: packages, venv, psycopg2 build, topology
FIRST_RUN_TIMEOUT = 1800
#: seconds the dpkg locks are held at least, from just before `make run`
LOCK_HOLD = 20
#: what only the tests use (.ci/test-deps, .ci/patroni-deps, .ci/prometheus-deps)
TEST_ONLY_PACKAGES = ("haproxy", "pgbouncer", "etcd-server", "prometheus", "systemd")
#: the policy-rc.d that .ci/apt-install puts in place while dpkg runs
POLICY_MARK = "# pg-status .ci/apt-install: no service starts while it installs"
#: run by the chroot's python3: hold the dpkg locks until /run/release-dpkg-lock
#: exists (POSIX locks, as apt and dpkg take them; flock(1) would not stop apt)
LOCK_HOLDER = """
import fcntl, os, sys, time
held = []
for path in ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock"):
    f = open(path, "a")
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    held.append(f)
print("held", time.strftime("%Y-%m-%d %H:%M:%S"), flush=True)
while not os.path.exists("/run/release-dpkg-lock"):
    time.sleep(0.05)
print("released", time.strftime("%Y-%m-%d %H:%M:%S"), flush=True)
"""


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _tail(path: str, lines: int = 60) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def _cmdlines(chroot: DebianChroot) -> dict[int, list[str]]:
    """The command lines of the processes running in the chroot."""
    found = {}
    for pid in chroot.processes():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        found[pid] = [a for a in argv if a]
    return found


def _apt_get_install(chroot: DebianChroot) -> list[str] | None:
    """The command line of an ``apt-get install`` running in the chroot."""
    for argv in _cmdlines(chroot).values():
        if argv and os.path.basename(argv[0]) == "apt-get" and "install" in argv:
            return argv
    return None


def _installed(chroot: DebianChroot) -> set[str]:
    out = chroot.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n"])
    assert out.returncode == 0, out
    return {line.split()[0] for line in out.stdout.splitlines()
            if len(line.split()) > 1 and line.split()[1].startswith(("ii", "iF", "iU", "iH"))}


class _PolicyWatch(threading.Thread):
    """Samples the chroot's policy-rc.d and createcluster.d until stopped."""

    def __init__(self, chroot: DebianChroot) -> None:
        super().__init__(daemon=True)
        self.chroot = chroot
        self.stopped = threading.Event()
        #: the policy-rc.d texts seen (None: no file)
        self.policies: set[str | None] = set()
        #: the createcluster.d drop-ins seen: name -> text
        self.dropins: dict[str, str] = {}

    def run(self) -> None:
        policy = self.chroot.path("/usr/sbin/policy-rc.d")
        dropdir = self.chroot.path("/etc/postgresql-common/createcluster.d")
        while not self.stopped.wait(0.05):
            try:
                with open(policy) as f:
                    self.policies.add(f.read())
            except OSError:
                self.policies.add(None)
            try:
                for name in os.listdir(dropdir):
                    with open(os.path.join(dropdir, name)) as f:
                        self.dropins[name] = f.read()
            except OSError:
                pass


@pytest.fixture
def fresh_debian() -> Any:
    """A fresh Debian chroot, removed after the test (skipped locally without
    root or debootstrap, a failure in CI)."""
    try:
        chroot = DebianChroot.create()
    except ChrootUnavailable as e:
        if _in_ci():
            pytest.fail(f"CI needs a Debian chroot for the fresh-machine test: {e}")
        pytest.skip(str(e))
    with chroot:
        yield chroot


def test_make_run_on_fresh_debian(fresh_debian: DebianChroot, tmp_path: Any) -> None:
    """
    In a chroot with only python3, make and git: a first ``python3 -m venv``
    fails for want of ensurepip (the machine is fresh) and leaves a
    ``.venv`` without pip; then ``make run``, started while another process
    holds the dpkg locks, waits for them, installs what running needs (no
    test-only package, no service started, no PostgreSQL cluster made),
    recovers from that venv, starts the local topology and pg-status, and
    ``/master`` answers 200 with the primary; Ctrl-C stops it all.
    """
    chroot = fresh_debian
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", ROOT, chroot.path("/src")],
                   check=True, capture_output=True)
    subprocess.run(["git", "-C", chroot.path("/src"), "checkout", "--quiet", head],
                   check=True, capture_output=True)

    for cmd in (["make", "--version"], ["git", "--version"]):
        assert chroot.run(cmd).returncode == 0, cmd
    first = chroot.run(["python3", "-m", "venv", ".venv"], cwd="/src")
    assert first.returncode != 0, "python3 -m venv worked: the chroot is not a fresh machine"
    assert "ensurepip" in first.stdout + first.stderr, first
    assert os.path.exists(chroot.path("/src/.venv/bin/python"))
    assert chroot.run([".venv/bin/python", "-m", "pip", "--version"], cwd="/src").returncode != 0

    # a fresh machine has no policy-rc.d: the project's scripts bring their own
    os.remove(chroot.path("/usr/sbin/policy-rc.d"))
    watch = _PolicyWatch(chroot)
    watch.start()
    installed_before = _installed(chroot)

    # an unattended upgrade holds the dpkg locks as make run starts
    holder = chroot.popen(["python3", "-c", LOCK_HOLDER], stdout=subprocess.PIPE)
    assert holder.stdout is not None
    held = holder.stdout.readline().decode().split()
    assert held[:1] == ["held"], held
    held_at = " ".join(held[1:])
    hold_start = time.monotonic()

    port = free_port()
    log = str(tmp_path / "make-run.log")
    with open(log, "wb") as out:
        proc = chroot.popen(["make", "run"], cwd="/src",
                            env={"pg_status__http_port": str(port)},
                            stdout=out, stderr=subprocess.STDOUT)
    try:
        # at least LOCK_HOLD seconds, and until apt-get install waits
        def waiting() -> list[str] | None:
            if proc.poll() is not None:
                return ["(make run exited)"]
            if time.monotonic() - hold_start < LOCK_HOLD:
                return None
            return _apt_get_install(chroot)

        try:
            waiter = poll(waiting, 900, "apt-get install waiting for the dpkg lock",
                          interval=0.2, context=lambda: _tail(log))
        finally:
            with open(chroot.path("/run/release-dpkg-lock"), "w"):
                pass
            released = holder.stdout.readline().decode().split()
            holder.wait(30)
        assert proc.poll() is None, \
            f"make run exited with {proc.returncode} while the dpkg lock was held:\n{_tail(log)}"
        assert released[:1] == ["released"], released
        released_at = " ".join(released[1:])
        held_for = time.monotonic() - hold_start
        print(f"dpkg locks held {held_at} .. {released_at} ({held_for:.0f} s), "
              f"waited for by: {' '.join(waiter)}")

        def master() -> tuple[int, str] | None:
            # make run ending is an answer too (poll retries on exceptions)
            if proc.poll() is not None:
                return (-1, f"make run exited with {proc.returncode}")
            try:
                answer = _get(f"http://127.0.0.1:{port}/master")
            except OSError:
                return None
            return answer if answer[0] == 200 else None

        try:
            status, body = poll(master, FIRST_RUN_TIMEOUT, "/master to answer 200",
                                interval=1, context=lambda: _tail(log))
        except TimeoutError as e:
            raise AssertionError(str(e)) from None
        assert (status, body) == (200, "127.0.0.1"), f"{status} {body}\n{_tail(log)}"
        # the banner with the nodes and the commands to try follows /ready
        poll(lambda: "pg-status is ready" in _tail(log, 200), 30, "make run's banner",
             context=lambda: _tail(log))
        watch.stopped.set()
        watch.join()

        # the install waited for the lock, and said so
        with open(log, errors="replace") as f:
            output = f.read()
        assert "Could not get lock /var/lib/dpkg/lock-frontend" in output, output[-3000:]
        free = re.search(r"apt-install: the dpkg lock is free, after (\d+) s", output)
        assert free, output[-3000:]
        print(f"make run: {free.group(0)}")
        assert "Error 100" not in output
        # dpkg changed nothing while the locks were held, and did afterwards
        with open(chroot.path("/var/log/dpkg.log")) as f:
            stamps = [line[:19] for line in f if line[:19] >= held_at]
        assert stamps, "dpkg installed nothing"
        assert min(stamps) >= released_at, (held_at, released_at, min(stamps))

        # services: refused while dpkg ran, and the refusal taken away after
        assert any(p is not None and POLICY_MARK in p and "exit 101" in p
                   for p in watch.policies), watch.policies
        assert not os.path.exists(chroot.path("/usr/sbin/policy-rc.d"))
        assert any("create_main_cluster = false" in t for t in watch.dropins.values()), \
            watch.dropins
        assert not os.path.exists(chroot.path("/etc/postgresql-common/createcluster.d"))

        # only what running needs: no test-only package
        installed = _installed(chroot)
        assert "postgresql-common" in installed - installed_before
        assert not installed & set(TEST_ONLY_PACKAGES), installed & set(TEST_ONLY_PACKAGES)
        listed = chroot.run(["dpkg", "-l", *TEST_ONLY_PACKAGES])
        assert not re.search(r"^ii ", listed.stdout, re.M), listed.stdout

        # no cluster of Debian's, and no system service running: the only
        # PostgreSQL servers are make run's own (data in its scratch directory)
        clusters = chroot.run(["pg_lsclusters", "--no-header"])
        assert clusters.returncode == 0 and clusters.stdout.strip() == "", clusters
        assert not os.path.exists(chroot.path("/var/lib/postgresql/15/main"))
        for pid, argv in _cmdlines(chroot).items():
            name = os.path.basename(argv[0]) if argv else ""
            assert name not in ("haproxy", "pgbouncer"), (pid, argv)
            if name in ("postgres", "postmaster"):
                assert not any("/var/lib/postgresql" in a or "/etc/postgresql" in a
                               for a in argv), (pid, argv)
    finally:
        watch.stopped.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert "stopping PostgreSQL" in _tail(log), _tail(log)
    # Ctrl-C took PostgreSQL and pg-status down with it
    poll(lambda: not chroot.processes(), 30, "no process left in the chroot",
         context=lambda: str(chroot.processes()))
