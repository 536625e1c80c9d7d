"""
The daemon's footprint: ``pip install .`` (no extras) installs no TLS stack
(pyOpenSSL, cryptography, service_identity come with treq, which is the
``client`` extra), and the daemon's start-up and fast-path serving import
neither that stack nor what only other features need (Klein, twisted.web's
server, the client, the OpenAPI document, the agent, reload).

The second part runs the real ``twistd pgstatus`` in a subprocess against an
installation of exactly the daemon's distributions: a directory of links to
the distributions that ``pg-status`` requires without extras (taken from
their installed metadata), used as the only ``site-packages`` (``python
-S``).  The test looks at every module the process imported over its
whole life, lazy imports included: after the requests, a SIGUSR2 handler
set before twistd runs writes out ``sys.modules``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from pgtopology import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEADLINE = 30.0

#: what the daemon must not import on its own (OpenSSL above all)
TLS_STACK = {"OpenSSL", "cryptography", "service_identity"}
NOT_AT_START = TLS_STACK | {
    "treq", "twisted.internet.ssl", "pgstatus.client", "pgstatus.agent",
    "pgstatus.config.reload", "pgstatus.http.metrics", "pgstatus.monitor.follower",
    "pgstatus.proxyheader", "pgstatus.http.openapi",
}
#: what the daemon imports at start: the Klein application is the API, built
#: before the first request, and twisted.web serves what the answer cache leaves
AT_START = {"klein", "twisted.web.server", "pgstatus.http.app", "pgstatus.http.server"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def daemon_distributions() -> dict[str, metadata.Distribution]:
    """
    ``pg-status`` and every distribution it requires, transitively, without
    extras of its own (extras its requirements ask for are followed).
    """
    installed = {_norm(d.metadata["Name"]): d for d in metadata.distributions()}
    seen: dict[str, metadata.Distribution] = {}
    todo: list[tuple[str, frozenset[str]]] = [("pg-status", frozenset())]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        dist = installed[name]
        seen[name] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            envs = [{"extra": e} for e in extras] + [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(e) for e in envs):
                continue
            todo.append((_norm(req.name), frozenset(req.extras)))
    return seen


def test_daemon_install_has_no_tls_stack():
    """
    ``pip install .`` without extras pulls in no pyOpenSSL, cryptography,
    service_identity or treq; the ``client`` extra brings treq.
    """
    names = set(daemon_distributions())
    assert {"twisted", "klein", "psycopg2", "txpostgres"} <= names
    assert names.isdisjoint({"pyopenssl", "cryptography", "service-identity", "treq"})
    client = [Requirement(r) for r in metadata.requires("pg-status") or []]
    assert any(r.name == "treq" and r.marker and r.marker.evaluate({"extra": "client"})
               for r in client)


@pytest.fixture(scope="module")
def daemon_site(tmp_path_factory) -> str:
    """
    A ``site-packages`` of links to the files of the daemon's distributions
    only (``pg-status`` itself comes from the repository).
    """
    site = tmp_path_factory.mktemp("daemon-site")
    for name, dist in daemon_distributions().items():
        if name == "pg-status":
            continue
        tops = set()
        for f in dist.files or []:
            top = f.parts[0]
            if top in ("..", "__pycache__") or top.endswith((".dist-info", ".egg-info")):
                continue
            tops.add(top)
        for top in tops:
            target = dist.locate_file(top)
            if os.path.exists(target) and not (site / top).exists():
                os.symlink(target, site / top)
    return str(site)


def get(port: int, path: str, method: str = "GET") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def run_daemon(site: str, paths: list[str], tmp_path,
               launcher: bool = False) -> tuple[set[str], list[bytes]]:
    """
    Start ``twistd -n pgstatus`` (or, with ``launcher``, the ``pg-status``
    command's ``main``) on the daemon's distributions only, wait until
    ready, ask ``paths`` over real sockets, stop it with SIGTERM (exit
    status 0).

    :return: every module the process imported, and the answers.  The
        state of the process's garbage collector then (enabled, objects
        frozen) is in ``tmp_path / "modules.gc"``.
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("pg_status__", "PYTHON"))}
    env.update({
        "PYTHONPATH": os.pathsep.join([ROOT, site]),
        "pg_status__hosts": "127.0.0.1",
        "pg_status__pg_port": str(free_port()),  # nothing listens: the host is dead
        "pg_status__http_listen_address": "127.0.0.1",
        "pg_status__http_port": str(port),
        "pg_status__log_level": "warning",
    })
    out = tmp_path / "modules"
    code = ("import gc, signal, sys\n"
            "def dump(*_):\n"
            f"    with open({str(out)!r} + '.gc', 'w') as f:\n"
            "        f.write(f'{gc.isenabled()} {gc.get_freeze_count()}')\n"
            f"    with open({str(out)!r} + '.tmp', 'w') as f:\n"
            "        f.write('\\n'.join(list(sys.modules)))\n"
            f"    import os; os.rename({str(out)!r} + '.tmp', {str(out)!r})\n"
            "signal.signal(signal.SIGUSR2, dump)\n")
    if launcher:
        code += "from pgstatus.launch import main\nmain([])\n"
        args: list[str] = []
    else:
        code += "from twisted.scripts.twistd import run\nsys.argv[0] = 'twistd'\nrun()\n"
        args = ["-n", "--pidfile=", "pgstatus"]
    proc = subprocess.Popen(
        [sys.executable, "-S", "-c", code, *args],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    answers = []
    try:
        deadline = time.monotonic() + DEADLINE
        while True:
            assert proc.poll() is None, proc.communicate()[1][-3000:].decode(errors="replace")
            assert time.monotonic() < deadline, "the daemon did not become ready"
            try:
                if get(port, "/ready").startswith(b"HTTP/1.1 200"):
                    break
            except OSError:
                pass
            time.sleep(0.05)
        for path in paths:
            answers.append(get(port, path))
        proc.send_signal(signal.SIGUSR2)
        while not out.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no module list"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert out.exists(), err.decode(errors="replace")[-3000:]
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    return set(out.read_text().split()), answers


FAST_PATHS = ["/master", "/hosts", "/replica?min_lsn=0/1", "/status?host=127.0.0.1",
              "/version", "/live", "/favicon.ico"]


def test_daemon_start_and_fast_path_import_only_what_they_use(daemon_site, tmp_path):
    """
    The daemon starts, polls and answers the API's routes without importing
    the TLS stack or anything only other features use; Klein is loaded (it
    is the API).
    """
    modules, answers = run_daemon(daemon_site, FAST_PATHS, tmp_path)
    assert AT_START <= modules and "psycopg2" in modules
    assert all(a.startswith(b"HTTP/1.1 ") for a in answers)
    assert answers[0].startswith(b"HTTP/1.1 404")  # the only host is dead
    assert answers[1].startswith(b"HTTP/1.1 200")
    assert sorted(modules & NOT_AT_START) == []


@pytest.mark.parametrize("launcher", [False, True], ids=["twistd", "pg-status"])
def test_first_request_for_klein_loads_it_and_no_tls(daemon_site, tmp_path, launcher):
    """
    Requests only Klein's own handlers answer (``/metrics``,
    ``/openapi.json``) work, and still load no TLS stack; under
    ``pg-status`` too.
    """
    modules, answers = run_daemon(daemon_site, ["/metrics", "/master", "/openapi.json"],
                                  tmp_path, launcher=launcher)
    assert answers[0].startswith(b"HTTP/1.1 200")
    assert answers[2].startswith(b"HTTP/1.1 200")
    assert AT_START | {"pgstatus.http.metrics", "pgstatus.http.openapi"} <= modules
    assert sorted(modules & TLS_STACK) == []


def test_launcher_serves_the_same_without_what_the_daemon_must_not_import(daemon_site,
                                                                          tmp_path):
    """
    ``pg-status`` runs the same service (same answers as twistd's, exit
    status 0 on SIGTERM) and imports none of what the daemon must not.
    """
    modules, answers = run_daemon(daemon_site, FAST_PATHS, tmp_path, launcher=True)
    assert AT_START <= modules and "pgstatus.launch" in modules
    assert answers[0].startswith(b"HTTP/1.1 404")  # the only host is dead
    assert answers[1].startswith(b"HTTP/1.1 200")
    assert sorted(modules & NOT_AT_START) == []


def collector_state(tmp_path) -> tuple[bool, int]:
    """The garbage collector's state :func:`run_daemon` saw: enabled, frozen objects."""
    enabled, frozen = (tmp_path / "modules.gc").read_text().split()
    return enabled == "True", int(frozen)


@pytest.mark.parametrize("launcher", [False, True], ids=["twistd", "pg-status"])
def test_started_service_collects_again_with_start_up_frozen(daemon_site, tmp_path, launcher):
    """
    Once started, the daemon's collector is on, and what start-up made is
    frozen out of its collections: tens of thousands of objects.
    """
    run_daemon(daemon_site, ["/master"], tmp_path, launcher=launcher)
    enabled, frozen = collector_state(tmp_path)
    assert enabled
    assert frozen > 20_000, frozen
