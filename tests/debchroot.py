"""
A minimal Debian chroot, standing in for a freshly installed machine.

Plain synchronous code (subprocess), no pytest: ``tests/deploy/test_fresh_debian.py``
uses it to run the README's commands where only ``python3``, ``make`` and
``git`` are installed.

The base system is ``debootstrap --variant=minbase`` plus :data:`PACKAGES`,
from the Debian mirror this machine's apt uses, with this machine's apt
sources.  It is built once and kept as a tarball under :func:`cache_dir`,
named by a hash of everything that went into it (suite, variant, packages,
mirror, architecture), so a changed package list builds a new one.  Each
:class:`DebianChroot` unpacks a private copy, so every run starts from the
same untouched system.

What the chroot gets from the host, because a real machine would have it:
``/proc``, ``/dev`` (a recursive bind, made a slave so nothing mounted
inside reaches the host) with a private ``/dev/shm``, DNS settings, and this
machine's extra CA certificates (a TLS-intercepting proxy in front of the
package index).  A ``policy-rc.d`` that refuses service starts, as in any
chroot without an init: packages such as ``postgresql`` would otherwise
start a cluster of their own that outlives the test.  apt's and pip's
download caches are bind-mounted from :func:`cache_dir` so that later runs
download less; what gets installed is decided by the project's scripts as on
a fresh machine.

Everything is undone on exit, even after a failure: processes whose root is
the chroot are killed (by pid), every mount under it is unmounted (deepest
first), and the copy is removed.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

SUITE = "bookworm"
VARIANT = "minbase"
#: what the fresh machine has besides minbase
PACKAGES = ("python3", "make", "git")
#: the PATH of a root login shell on Debian
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: environment variables naming a CA bundle: copied in (file and value) when set
CA_VARIABLES = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE")
#: pip and proxy settings passed through when set
PASS_THROUGH = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST",
                "PIP_DEFAULT_TIMEOUT", "http_proxy", "https_proxy", "no_proxy",
                "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
EXTRA_CAS = "/usr/local/share/ca-certificates"
POLICY_RC_D = "#!/bin/sh\n# a chroot has no init: no service starts here\nexit 101\n"


class ChrootUnavailable(RuntimeError):
    """A prerequisite for building a chroot is missing (the message says which)."""


def cache_dir() -> str:
    """``$PGSTATUS_CACHE_DIR``, else ``~/.cache/pg-status`` (created)."""
    path = os.environ.get("PGSTATUS_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "pg-status")
    os.makedirs(path, exist_ok=True)
    return path


def missing_prerequisites() -> list[str]:
    """What this machine lacks to build and enter a chroot (empty: nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (debootstrap, chroot and mount need it)")
    for tool in ("debootstrap", "chroot", "mount", "umount", "tar", "git"):
        if shutil.which(tool) is None and not os.access(f"/usr/sbin/{tool}", os.X_OK):
            missing.append(f"{tool} (apt-get install debootstrap)" if tool == "debootstrap"
                           else tool)
    return missing


def apt_sources() -> list[str]:
    """This machine's deb822 apt source files for Debian (``*.sources``)."""
    found = []
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as f:
            if "/debian" in f.read():
                found.append(path)
    return found


def debian_mirror() -> str:
    """
    The Debian mirror this machine's apt uses: the ``URIs:`` of the first
    deb822 source for :data:`SUITE`, else the first ``deb`` line of
    ``/etc/apt/sources.list``.

    :raises ChrootUnavailable: when neither names one.
    """
    for path in apt_sources():
        with open(path) as f:
            stanzas = f.read().split("\n\n")
        for stanza in stanzas:
            fields = dict(line.split(":", 1) for line in stanza.splitlines()
                          if ":" in line and not line.startswith(("#", " ")))
            if SUITE in fields.get("Suites", "").split() and "URIs" in fields:
                return fields["URIs"].split()[0]
    if os.path.exists("/etc/apt/sources.list"):
        with open("/etc/apt/sources.list") as f:
            for line in f:
                words = line.split()
                if words[:1] == ["deb"]:
                    return next(w for w in words[1:] if not w.startswith("["))
    raise ChrootUnavailable("no Debian mirror in /etc/apt/sources.list*")


def _arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True).stdout.strip()


def base_tarball(packages: Sequence[str] = PACKAGES) -> str:
    """
    The path of the cached base system tarball, built first if missing
    (a few minutes; later calls return at once).

    :param packages: installed on top of minbase; part of the cache key.
    """
    mirror = debian_mirror()
    key = "\n".join([SUITE, VARIANT, ",".join(sorted(packages)), mirror, _arch()])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    path = os.path.join(cache_dir(), f"debian-{SUITE}-{VARIANT}-{digest}.tar")
    if os.path.exists(path):
        return path
    rootfs = tempfile.mkdtemp(prefix="pg-status-debootstrap.", dir="/var/tmp")
    try:
        out = subprocess.run(
            ["debootstrap", f"--variant={VARIANT}", f"--include={','.join(packages)}",
             SUITE, rootfs, mirror], capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({out.returncode}):\n"
                               f"{out.stdout[-3000:]}{out.stderr[-3000:]}")
        sources = apt_sources()
        if sources:
            for src in sources:
                shutil.copy(src, os.path.join(rootfs, "etc/apt/sources.list.d"))
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(rootfs, "etc/apt/sources.list"))
        subprocess.run(["chroot", rootfs, "apt-get", "clean"], check=True, capture_output=True)
        for leftover in glob.glob(os.path.join(rootfs, "var/lib/apt/lists/*")):
            if os.path.isfile(leftover):
                os.remove(leftover)
        partial = path + ".partial"
        subprocess.run(["tar", "--numeric-owner", "-C", rootfs, "-cf", partial, "."],
                       check=True, capture_output=True)
        os.replace(partial, path)
    finally:
        _remove_tree(rootfs)
    return path


def _mounts_under(path: str) -> list[str]:
    """Mount points at or below ``path``, deepest first."""
    with open("/proc/self/mounts") as f:
        points = [line.split()[1].encode().decode("unicode_escape") for line in f]
    return sorted((p for p in points if p == path or p.startswith(path + "/")),
                  key=len, reverse=True)


def _remove_tree(path: str) -> None:
    """Remove ``path``, refusing while anything is still mounted under it."""
    if _mounts_under(path):
        raise RuntimeError(f"still mounted under {path}: {_mounts_under(path)}")
    shutil.rmtree(path, ignore_errors=True)


class DebianChroot:
    """
    A private copy of the base system, mounted and ready to ``chroot`` into;
    a context manager that undoes everything on exit.

    :ivar root: the chroot's directory on the host.
    """

    def __init__(self, root: str) -> None:
        self.root = root

    @classmethod
    def create(cls, packages: Sequence[str] = PACKAGES) -> DebianChroot:
        """
        Unpack the base system (:func:`base_tarball`) into a new directory
        under ``/var/tmp`` and mount what it needs.

        :raises ChrootUnavailable: when a prerequisite is missing.
        """
        missing = missing_prerequisites()
        if missing:
            raise ChrootUnavailable("cannot build a Debian chroot, missing: " + ", ".join(missing))
        tarball = base_tarball(packages)
        chroot = cls(tempfile.mkdtemp(prefix="pg-status-chroot.", dir="/var/tmp"))
        try:
            subprocess.run(["tar", "--numeric-owner", "-C", chroot.root, "-xf", tarball],
                           check=True, capture_output=True)
            # it is /, for every user (mkdtemp, here and for debootstrap, made it 0700)
            os.chmod(chroot.root, 0o755)
            chroot._prepare()
        except BaseException:
            chroot.close()
            raise
        return chroot

    def path(self, inside: str) -> str:
        """The host path of ``inside`` (an absolute path in the chroot)."""
        return os.path.join(self.root, inside.lstrip("/"))

    def _mount(self, *args: str) -> None:
        subprocess.run(["mount", *args], check=True, capture_output=True)

    def _prepare(self) -> None:
        with open(self.path("/usr/sbin/policy-rc.d"), "w") as f:
            f.write(POLICY_RC_D)
        os.chmod(self.path("/usr/sbin/policy-rc.d"), 0o755)
        for name in ("/etc/resolv.conf", "/etc/hosts"):
            if os.path.exists(name):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.path(name))
                shutil.copy(name, self.path(name))
        if os.path.isdir(EXTRA_CAS):
            os.makedirs(self.path(EXTRA_CAS), exist_ok=True)
            for crt in glob.glob(os.path.join(EXTRA_CAS, "*.crt")):
                shutil.copy(crt, self.path(EXTRA_CAS))
        for var in CA_VARIABLES:
            bundle = os.environ.get(var)
            if bundle and os.path.isfile(bundle) and not os.path.exists(self.path(bundle)):
                os.makedirs(os.path.dirname(self.path(bundle)), exist_ok=True)
                shutil.copy(bundle, self.path(bundle))
        self._mount("-t", "proc", "proc", self.path("/proc"))
        self._mount("--rbind", "/dev", self.path("/dev"))
        self._mount("--make-rslave", self.path("/dev"))
        self._mount("-t", "tmpfs", "-o", "mode=1777", "shm", self.path("/dev/shm"))
        for cache, inside in (("apt-archives", "/var/cache/apt/archives"),
                              ("pip", "/root/.cache/pip")):
            host = os.path.join(cache_dir(), "chroot-" + cache)
            os.makedirs(host, exist_ok=True)
            os.makedirs(self.path(inside), exist_ok=True)
            self._mount("--bind", host, self.path(inside))

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """
        A root login's environment on a fresh machine, plus this machine's
        pip, proxy and CA bundle settings when set, plus ``extra``.
        """
        env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "dumb",
               "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash"}
        for var in (*PASS_THROUGH, *CA_VARIABLES):
            if os.environ.get(var):
                env[var] = os.environ[var]
        env.update(extra or {})
        return env

    def command(self, args: Sequence[str], cwd: str = "/") -> list[str]:
        """The host command line that runs ``args`` in the chroot, in ``cwd``."""
        script = 'cd "$1" && shift && exec "$@"'
        return ["chroot", self.root, "/bin/sh", "-c", script, "sh", cwd, *args]

    def run(self, args: Sequence[str], cwd: str = "/", timeout: float = 600,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``args`` in the chroot and wait; the result, whatever the status."""
        return subprocess.run(self.command(args, cwd), env=self.env(env), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def popen(self, args: Sequence[str], cwd: str = "/", env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``args`` in the chroot, in a new session (signal it with ``os.killpg``)."""
        return subprocess.Popen(self.command(args, cwd), env=self.env(env),
                                stdin=subprocess.DEVNULL, start_new_session=True, **kwargs)

    def processes(self) -> list[int]:
        """Pids of the processes whose root directory is this chroot."""
        found = []
        for entry in glob.glob("/proc/[0-9]*/root"):
            try:
                if os.readlink(entry) == self.root:
                    found.append(int(entry.split("/")[2]))
            except OSError:
                continue
        return found

    def _kill_processes(self, grace: float = 10) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self.processes()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.1)

    def close(self) -> None:
        """Kill what still runs inside, unmount everything under it, remove it."""
        self._kill_processes()
        for point in _mounts_under(self.root):
            if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True)
        _remove_tree(self.root)

    def __enter__(self) -> DebianChroot:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
