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

The chroot shares this machine's network namespace, so the service's port
is picked free on the host and handed to ``make run`` as
``pg_status__http_port``; PostgreSQL's ports are picked free by the
topology inside.  The first run builds and caches the base system (a few
minutes); every run then installs the packages and the venv (several more).
"""

from __future__ import annotations

import os
import signal
import subprocess
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
    ``.venv`` without pip; then ``make run`` installs what it needs,
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

    port = free_port()
    log = str(tmp_path / "make-run.log")
    with open(log, "wb") as out:
        proc = chroot.popen(["make", "run"], cwd="/src",
                            env={"pg_status__http_port": str(port)},
                            stdout=out, stderr=subprocess.STDOUT)
    try:
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
    finally:
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
