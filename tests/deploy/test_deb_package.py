"""
The Debian package (``make deb``) on a fresh Debian 12: built once per
module, with lintian finding no error; then, in a minimal debootstrap
chroot (``tests/debchroot.py``, the cached base system of
``test_fresh_debian.py``), installed as an operator would, configured,
started by the init script, reinstalled, purged.

- ``apt-get install ./pg-status_<version>_<arch>.deb`` runs without a
  network (``unshare --net``): the package brings its whole virtual
  environment, and apt takes its Debian dependencies (``libpq5``) from what
  ``--download-only`` fetched before.  Its Python is the chroot's
  ``/usr/bin/python3.11``.
- The chroot shares this machine's network namespace otherwise, so the
  service is pointed at the session's PostgreSQL topology over loopback,
  in ``/etc/default/pg-status``, and listens on a free loopback port.
- The chroot has no init: its ``policy-rc.d`` refuses service starts, as in
  any chroot, so the install starts nothing.  ``/etc/init.d/pg-status``
  starts and stops the service by hand; then, with a ``policy-rc.d`` that
  allows them, as on a booted machine without systemd, the maintainer
  scripts do: ``--reinstall`` restarts it and keeps the edited
  configuration, ``purge`` stops it and removes the system user.

apt runs with an archives directory of its own inside the chroot: the
shared download cache that ``DebianChroot`` mounts may be locked by another
chroot test running at the same time.  The daemon, orphaned by its double
fork, is adopted by this process (the topology helpers make it a child
subreaper): a thread reaps it once it exits, as a machine's init would, or
``start-stop-daemon`` would see its zombie still running.
"""

from __future__ import annotations

import contextlib
import glob
import os
import subprocess
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from debchroot import ChrootUnavailable, DebianChroot
from pgtopology import PgTopology, free_port, poll
from test_twistd import _get

from pgstatus import __version__

pytestmark = [pytest.mark.chroot]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: apt's own archives directory in the chroot (see the module docstring)
ARCHIVES = "/var/cache/apt/pg-status-deb-test/"
APT = ("apt-get", "-y", "-o", f"Dir::Cache::Archives={ARCHIVES}",
       "-o", "DPkg::Lock::Timeout=600")
PIDFILE = "/run/pg-status/pg-status.pid"
LOGFILE = "/var/log/pg-status/pg-status.log"
ALLOW_STARTS = "#!/bin/sh\n# a machine whose init runs the services: allow them\nexit 0\n"
#: what the package installs besides the venv, and where from in the repository
INSTALLED = {
    "/lib/systemd/system/pg-status.service": "service/pg-status.service",
    "/etc/init.d/pg-status": "service/pg-status.init",
    "/etc/default/pg-status": "service/pg-status.default",
}
#: what the purge leaves nothing of
PACKAGE_PATHS = ("/usr/lib/pg-status", "/usr/bin/pg-status", "/etc/default/pg-status",
                 "/etc/init.d/pg-status", "/lib/systemd/system/pg-status.service",
                 "/run/pg-status", "/var/log/pg-status", "/usr/share/doc/pg-status")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"CI needs the Debian package test: {reason}")
    pytest.skip(reason)


def _debian_version() -> str:
    return subprocess.run([os.path.join(ROOT, "packaging", "version"), "--debian"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def deb(tmp_path_factory: Any) -> tuple[str, str]:
    """``make deb`` into a new directory: (the .deb, the build's output)."""
    if os.geteuid() != 0:
        _unavailable("make deb installs its build dependencies as root")
    if not os.path.exists("/usr/bin/apt-get"):
        _unavailable("not a Debian machine (no apt-get)")
    out_dir = str(tmp_path_factory.mktemp("deb"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run(["make", "-C", ROOT, "deb", f"DIST={out_dir}"], env=env,
                         capture_output=True, text=True, timeout=1800)
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-6000:]
    debs = glob.glob(os.path.join(out_dir, "*.deb"))
    assert len(debs) == 1, (os.listdir(out_dir), output[-3000:])
    return debs[0], output


@pytest.fixture
def fresh_debian() -> Iterator[DebianChroot]:
    """A fresh Debian chroot, removed after the test."""
    try:
        chroot = DebianChroot.create()
    except ChrootUnavailable as e:
        _unavailable(str(e))
    with chroot:
        yield chroot


def _dpkg_field(deb: str, field: str) -> str:
    return subprocess.run(["dpkg-deb", "--field", deb, field], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_lintian_finds_no_error(deb: tuple[str, str]) -> None:
    """``make deb`` runs lintian (``--fail-on error``); its report has no
    error (the warnings left are documented in docs/deploy/debian.md)."""
    _, output = deb
    assert "lintian " in output, output[-3000:]
    assert not [line for line in output.splitlines() if line.startswith("E: ")], output[-3000:]


def test_control_fields(deb: tuple[str, str]) -> None:
    """
    Named and versioned after the one version; depends on Debian's
    python3.11 (the venv's interpreter), libpq5 and adduser.
    """
    path, _ = deb
    version = _debian_version()
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert os.path.basename(path) == f"pg-status_{version}_{arch}.deb"
    assert _dpkg_field(path, "Package") == "pg-status"
    assert _dpkg_field(path, "Version") == version
    depends = {d.strip().split()[0] for d in _dpkg_field(path, "Depends").split(",")}
    assert {"python3.11", "libpq5", "adduser"} <= depends, depends
    files = subprocess.run(["dpkg-deb", "--contents", path], capture_output=True, text=True,
                           check=True).stdout
    assert "__pycache__" not in files and ".pyc" not in files and "dropin.cache" not in files
    assert "./usr/bin/pg-status -> ../lib/pg-status/bin/pg-status" in files
    control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", path], capture_output=True,
                             check=True).stdout
    listing = subprocess.run(["tar", "-xO", "./conffiles"], input=control, capture_output=True,
                             check=True).stdout.decode()
    assert sorted(listing.split()) == ["/etc/default/pg-status", "/etc/init.d/pg-status"]


def _run(chroot: DebianChroot, args: Sequence[str], ok: bool = True, timeout: float = 600,
         network: bool = True, env: dict[str, str] | None = None) -> str:
    """Run ``args`` in the chroot (without a network: ``unshare --net``);
    its output (stdout and stderr together), which must be a success when
    ``ok``."""
    command = chroot.command(args)
    if not network:
        command = ["unshare", "--net", *command]
    out = subprocess.run(command, env=chroot.env({"DEBIAN_FRONTEND": "noninteractive",
                                                  **(env or {})}),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=timeout, stdin=subprocess.DEVNULL)
    text = out.stdout
    if ok:
        assert out.returncode == 0, f"{list(args)} exited with {out.returncode}:\n{text[-4000:]}"
    return text


def _status(chroot: DebianChroot) -> int:
    return subprocess.run(chroot.command(["/etc/init.d/pg-status", "status"]), env=chroot.env(),
                          capture_output=True).returncode


def _tail(chroot: DebianChroot, path: str = LOGFILE, lines: int = 40) -> str:
    try:
        with open(chroot.path(path), errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"({path}: {e})"


def _service_pid(chroot: DebianChroot) -> int:
    with open(chroot.path(PIDFILE)) as f:
        return int(f.read().strip())


def _zombie_children(comm: str) -> list[int]:
    """This process's exited, unreaped children named ``comm``."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        state, ppid = text[text.rindex(")") + 2:].split()[:2]
        if name == comm and state == "Z" and int(ppid) == os.getpid():
            found.append(int(text.split()[0]))
    return found


@contextlib.contextmanager
def _reaping(comm: str = "pg-status") -> Iterator[None]:
    """Reap this process's ``comm`` children as they exit, until the end of
    the block (see the module docstring)."""
    done = threading.Event()

    def reap() -> None:
        while not done.wait(0.05):
            for pid in _zombie_children(comm):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    thread = threading.Thread(target=reap, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _wait_serving(chroot: DebianChroot, base: str, primary: str) -> None:
    """``/live``, then ``/master`` naming the primary, both 200."""
    def answer(path: str) -> tuple[int, str] | None:
        try:
            return _get(base + path)
        except OSError:
            return None

    assert poll(lambda: answer("/live"), 30, "/live",
                context=lambda: _tail(chroot)) == (200, "OK")
    master = poll(lambda: (a := answer("/master")) and a[0] == 200 and a, 30,
                  "/master to answer 200", context=lambda: _tail(chroot))
    assert master == (200, primary)
    assert answer("/version") == (200, __version__)


def test_install_start_stop_purge(deb: tuple[str, str], fresh_debian: DebianChroot,
                                  pg_topology: PgTopology) -> None:
    """
    The package's life on a fresh Debian 12 with no init: install without
    a network; start, serve and stop with the init script; reinstall while
    the maintainer scripts may start services (a restart, the edited
    configuration kept); purge (stopped, user and files gone, nothing left
    running).
    """
    chroot = fresh_debian
    path, _ = deb
    inside = "/tmp/" + os.path.basename(path)
    with open(path, "rb") as src, open(chroot.path(inside), "wb") as dst:
        dst.write(src.read())
    os.makedirs(chroot.path(ARCHIVES + "partial"), exist_ok=True)

    # --- install, without a network ---------------------------------------
    _run(chroot, [*APT, "update", "-q"], timeout=300)
    _run(chroot, [*APT, "install", "--download-only", inside], timeout=600)
    install_log = _run(chroot, [*APT, "install", inside], network=False)
    print("apt-get install, last lines:\n" + "\n".join(install_log.splitlines()[-12:]))
    assert "Setting up pg-status (" in install_log
    assert "policy-rc.d denied execution of start" in install_log
    assert not chroot.processes(), "the install started a process in a chroot without init"

    version = _run(chroot, ["dpkg-query", "-W", "-f=${Version} ${Status}", "pg-status"])
    assert version == f"{_debian_version()} install ok installed"
    assert _run(chroot, ["readlink", "-f", "/usr/lib/pg-status/bin/python"]) == \
        "/usr/bin/python3.11\n"
    assert _run(chroot, ["pg-status", "--version"]).startswith(f"pg-status {__version__}\n")
    user = _run(chroot, ["getent", "passwd", "pg-status"]).strip().split(":")
    assert user[5:] == ["/nonexistent", "/usr/sbin/nologin"], user
    assert int(user[2]) < 1000, f"not a system user: {user}"
    assert _run(chroot, ["stat", "-c", "%U:%G %a", "/etc/default/pg-status"]) == \
        "root:pg-status 640\n"
    for installed, source in INSTALLED.items():
        with open(chroot.path(installed), "rb") as a, open(os.path.join(ROOT, source), "rb") as b:
            assert a.read() == b.read(), f"{installed} is not {source}"
    assert os.path.exists(chroot.path(
        "/usr/lib/pg-status/lib/python3.11/site-packages/twisted/plugins/dropin.cache"))

    # --- configure as an operator would, start with the init script ----------
    port = free_port()
    settings = {**pg_topology.hosts_env(), "pg_status__http_listen_address": "127.0.0.1",
                "pg_status__http_port": str(port), "pg_status__sleep_ms": "200",
                "PGSTATUS_LOGFILE": LOGFILE}
    with open(chroot.path("/etc/default/pg-status"), "a") as f:
        f.write("".join(f"{k}={v}\n" for k, v in settings.items()))
    base = f"http://127.0.0.1:{port}"
    with _reaping():
        _serve_reinstall_purge(chroot, inside, base, pg_topology, user[2], port)
    assert not chroot.processes(), "the purge left a process running"
    with pytest.raises(OSError):
        _get(base + "/live")
    assert _run(chroot, ["getent", "passwd", "pg-status"], ok=False) == ""
    assert _run(chroot, ["getent", "group", "pg-status"], ok=False) == ""
    assert _run(chroot, ["dpkg-statoverride", "--list"], ok=False) == ""
    left = [p for p in PACKAGE_PATHS if os.path.lexists(chroot.path(p))]
    assert not left, f"left after the purge: {left}"
    assert "pg-status" not in _run(chroot, ["dpkg", "-l"])


def _serve_reinstall_purge(chroot: DebianChroot, inside: str, base: str,
                           pg_topology: PgTopology, uid: str, port: int) -> None:
    """
    Start, check and stop the configured service with the init script;
    reinstall and purge with the maintainer scripts allowed to start and
    stop it.
    """
    try:
        assert "configuration OK" in _run(
            chroot, ["runuser", "-u", "pg-status", "--", "pg-status", "--check-config"],
            env={"pg_status__env_file": "/etc/default/pg-status"})
        _run(chroot, ["/etc/init.d/pg-status", "start"])
        _wait_serving(chroot, base, pg_topology.primary.host)
        assert _status(chroot) == 0
        pid = _service_pid(chroot)
        assert chroot.processes() == [pid]
        with open(f"/proc/{pid}/status") as f:
            running_as = next(line.split()[1] for line in f if line.startswith("Uid:"))
        assert running_as == uid, "the service does not run as pg-status"
        assert os.readlink(f"/proc/{pid}/exe") == chroot.path("/usr/bin/python3.11")

        _run(chroot, ["/etc/init.d/pg-status", "stop"])
        assert not chroot.processes()
        assert _status(chroot) == 3
        assert "server stopped" in _tail(chroot), _tail(chroot)

        # --- the maintainer scripts may start and stop services now ----------
        with open(chroot.path("/usr/sbin/policy-rc.d"), "w") as f:
            f.write(ALLOW_STARTS)
        _run(chroot, [*APT, "install", "--reinstall", inside])
        _wait_serving(chroot, base, pg_topology.primary.host)
        with open(chroot.path("/etc/default/pg-status")) as f:
            assert f"pg_status__http_port={port}\n" in f.read(), "the edited conffile was replaced"
        assert _run(chroot, ["stat", "-c", "%U:%G %a", "/etc/default/pg-status"]) == \
            "root:pg-status 640\n"

        purge_log = _run(chroot, [*APT, "purge", "pg-status"])
        assert "Stopping pg-status" in purge_log, purge_log
    finally:
        if chroot.processes() and os.path.exists(chroot.path("/etc/init.d/pg-status")):
            _run(chroot, ["/etc/init.d/pg-status", "stop"], ok=False)
