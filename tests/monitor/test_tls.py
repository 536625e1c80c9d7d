"""
TLS through libpq's own environment variables: with the server's
certificate issued to the name ``localhost`` and ``PGSSLMODE=verify-full``,
a host configured as ``localhost`` is verified against that name although
libpq is handed the resolved address; a host configured by address, which
the certificate does not name, fails verification.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import pytest_twisted
from pgtopology import _pg_ids

from service import RunningService, blocking, wait_until

pytestmark = pytest.mark.pg


def make_cert(directory: str) -> tuple[str, str]:
    cert, key = os.path.join(directory, "server.crt"), os.path.join(directory, "server.key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", key, "-out", cert],
        check=True, capture_output=True, timeout=60)
    ids = _pg_ids()
    for path in (cert, key):
        if ids is not None:
            os.chown(path, *ids)
    os.chmod(key, 0o600)
    return cert, key


def enable_ssl(node, cert: str, key: str) -> None:
    with open(os.path.join(node.datadir, "postgresql.auto.conf"), "a") as f:
        f.write(f"\nssl = on\nssl_cert_file = '{cert}'\nssl_key_file = '{key}'\n")
    node.restart()


@pytest_twisted.inlineCallbacks
def test_verify_full_uses_the_configured_name(fresh_topology, reactor, monkeypatch):
    topo = yield blocking(fresh_topology, 0)
    node = topo.primary
    assert node.host == "127.0.0.1"
    cert, key = yield blocking(make_cert, topo.base_dir)
    yield blocking(enable_ssl, node, cert, key)
    monkeypatch.setenv("PGSSLMODE", "verify-full")
    monkeypatch.setenv("PGSSLROOTCERT", cert)
    env = {**topo.hosts_env(), "pg_status__hosts": "localhost,127.0.0.1",
           "pg_status__pg_port": f"{node.port},{node.port}",
           "pg_status__sleep_ms": "200", "pg_status__query_timeout_ms": "1000"}
    svc = RunningService(reactor, env)
    try:
        yield wait_until(reactor, lambda: svc.view.ready, 10, "readiness")
        yield wait_until(reactor, lambda: svc.view.hosts[0].healthy, 5, "localhost over TLS")
        assert svc.view.master.name == "localhost"
        assert not svc.view.hosts[1].alive, "the certificate does not name 127.0.0.1"
        ssl_used = yield blocking(
            node.value,
            "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
            "WHERE a.application_name = 'pg-status'")
        assert ssl_used is True
    finally:
        yield svc.stop()
