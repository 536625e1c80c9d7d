"""
``make dist``: the sdist and the wheel (``python -m build``: the sdist, then
the wheel built from it), ``twine check --strict`` clean; then the wheel as
a user gets it: installed into a new venv of this interpreter with its
dependencies from the package index pip is configured with, away from the
source tree (no ``PYTHONPATH``, another working directory), where
``pg-status`` reports the version, checks a configuration and, against the
session's PostgreSQL topology, answers ``/live`` and ``/master``.

Built once per module into a temporary directory (``DIST=``), with the venv
the suite runs in (``VENV=``: ``make dist`` uses its ``build`` and
``twine``, from the test extra).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from typing import Any

import pytest
from pgtopology import PgTopology, free_port, poll
from test_twistd import _get

from pgstatus import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WHEEL = f"pg_status-{__version__}-py3-none-any.whl"
SDIST = f"pg_status-{__version__}.tar.gz"


def _clean_env(**values: str) -> dict[str, str]:
    """This environment without the source tree on the path or pg-status settings."""
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("pg_status__", "VIRTUAL_ENV"))}
    env.update(values)
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory: Any) -> tuple[str, str]:
    """``make dist`` into a new directory: (its output, that directory)."""
    out_dir = str(tmp_path_factory.mktemp("dist"))
    venv = sys.prefix
    stamp = os.path.join(venv, ".installed")
    # the suite's venv is the one make made: never remade from here
    out = subprocess.run(["make", "-C", ROOT, "-o", stamp, "dist", f"VENV={venv}",
                          f"PY={sys.executable}", f"DIST={out_dir}"],
                         env=_clean_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout + out.stderr, out_dir


@pytest.fixture(scope="module")
def installed(dist: tuple[str, str], tmp_path_factory: Any) -> str:
    """A new venv with the wheel installed: its bin directory."""
    venv = str(tmp_path_factory.mktemp("wheel-venv") / "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True,
                   timeout=300)
    out = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install",
                          "--quiet", os.path.join(dist[1], WHEEL)],
                         env=_clean_env(), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return os.path.join(venv, "bin")


def test_dist_builds_both_and_twine_passes(dist: tuple[str, str]) -> None:
    output, out_dir = dist
    assert sorted(os.listdir(out_dir)) == sorted([WHEEL, SDIST])
    for name in (WHEEL, SDIST):
        assert f"Checking {os.path.join(out_dir, name)}: " in output, output
    checks = [line for line in output.splitlines() if line.startswith("Checking ")]
    assert len(checks) == 2 and all("PASSED" in line for line in checks), output
    assert "WARNING" not in output.split("twine check", 1)[1], output


def test_wheel_contents(dist: tuple[str, str]) -> None:
    """
    The wheel has pg-status's package and its twistd plugin, never a
    ``twisted/__init__.py`` (it would hide Twisted itself) nor a plugin
    cache; its metadata has the version and the ``pg-status`` command.
    """
    with zipfile.ZipFile(os.path.join(dist[1], WHEEL)) as whl:
        names = whl.namelist()
        meta = Parser().parsestr(whl.read(f"pg_status-{__version__}.dist-info/METADATA").decode())
        entry_points = whl.read(f"pg_status-{__version__}.dist-info/entry_points.txt").decode()
    assert "pgstatus/__init__.py" in names and "pgstatus/tap.py" in names
    assert "twisted/plugins/pgstatus_plugin.py" in names
    assert [n for n in names if n.startswith("twisted/")] == ["twisted/plugins/pgstatus_plugin.py"]
    assert not [n for n in names if n.startswith("tests/") or n.endswith((".pyc", "dropin.cache"))]
    assert (meta["Name"], meta["Version"]) == ("pg-status", __version__)
    assert meta["Requires-Python"] == ">=3.11"
    assert "pg-status = pgstatus.launch:main" in entry_points


def test_sdist_contents(dist: tuple[str, str]) -> None:
    """The sdist holds what builds the wheel, the licence and the release
    notes; no tests, no bytecode."""
    with tarfile.open(os.path.join(dist[1], SDIST)) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for need in ("setup.py", "pyproject.toml", "README.md", "LICENSE", "NEWS.md", "PKG-INFO",
                 "pgstatus/__init__.py", "twisted/plugins/pgstatus_plugin.py"):
        assert need in names, need
    assert not [n for n in names if n.startswith("tests") or n.endswith(".pyc")]


def test_wheel_installs_and_runs(installed: str, tmp_path: Any) -> None:
    """
    In the new venv, pg-status runs from the venv (not the source tree),
    says its version, and checks a configuration: 0 when it would start, 2
    with the variable named when not.
    """
    bindir = installed
    where = subprocess.run([os.path.join(bindir, "python"), "-c",
                            "import pgstatus; print(pgstatus.__file__)"],
                           env=_clean_env(), cwd=tmp_path, capture_output=True, text=True,
                           check=True)
    assert where.stdout.startswith(os.path.dirname(bindir) + "/"), where.stdout
    version = subprocess.run([os.path.join(bindir, "pg-status"), "--version"], env=_clean_env(),
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith(f"pg-status {__version__}\n")
    plugins = subprocess.run([os.path.join(bindir, "twistd"), "--help"], env=_clean_env(),
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "pgstatus" in plugins.stdout
    good = subprocess.run([os.path.join(bindir, "pg-status"), "--check-config"],
                          env=_clean_env(pg_status__hosts="db1,db2"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (good.returncode, good.stdout + good.stderr) == (
        0, "pg-status: configuration OK (0 warnings)\n")
    bad = subprocess.run([os.path.join(bindir, "pg-status"), "--check-config"],
                         env=_clean_env(), cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "pg_status__hosts" in bad.stdout + bad.stderr


@pytest.mark.pg
def test_wheel_serves_the_topology(installed: str, pg_topology: PgTopology,
                                   tmp_path: Any) -> None:
    """
    The installed ``pg-status`` against the session's primary and replicas:
    ``/live`` and ``/version`` at once, ``/master`` names the primary once
    checked; SIGTERM stops it with status 0.
    """
    port = free_port()
    env = _clean_env(**pg_topology.hosts_env(), pg_status__http_listen_address="127.0.0.1",
                     pg_status__http_port=str(port), pg_status__sleep_ms="200")
    log = tmp_path / "pg-status.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([os.path.join(installed, "pg-status")], env=env, cwd=tmp_path,
                                stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def answer(path: str) -> tuple[int, str] | None:
            assert proc.poll() is None, log.read_text()
            try:
                return _get(base + path)
            except OSError:
                return None

        assert poll(lambda: answer("/live"), 30, "/live", context=log.read_text) == (200, "OK")
        assert answer("/version") == (200, __version__)
        master = poll(lambda: (a := answer("/master")) and a[0] == 200 and a, 30,
                      "/master to answer 200", context=log.read_text)
        assert master == (200, pg_topology.primary.host)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
