"""
The password never appears in any log line, in either format, whatever
fails: a wrong password against a real server, a libpq error about the
connection parameters, a refused port.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from pgtopology import free_port
from twisted.logger import globalLogPublisher

from pgstatus.logging.formats import format_json, format_text
from service import RunningService, wait_until

pytestmark = pytest.mark.pg

SECRET = "Sup3r-s3cret pass'word"


@pytest.fixture
def captured():
    events = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def lines(events) -> list[str]:
    out = []
    for e in events:
        out.append(format_text(e, include_traceback=True))
        out.append(format_json(e, include_traceback=True))
    return out


@pytest_twisted.inlineCallbacks
def test_wrong_password_never_logged(pg_topology, captured, reactor, monkeypatch):
    topo = pg_topology
    refused = free_port()
    env = {
        **topo.hosts_env(password=SECRET),
        "pg_status__sleep_ms": "200",
        "pg_status__poll_error_log_interval_ms": "0",
        "pg_status__log_level": "debug",
    }
    env["pg_status__hosts"] += ",127.0.0.1"
    env["pg_status__pg_port"] += f",{refused}"
    svc = RunningService(reactor, env)
    try:
        yield wait_until(reactor, lambda: svc.view.ready, 10, "readiness")
        yield wait_until(reactor, lambda: sum(
            "password authentication failed" in ln for ln in lines(captured)) >= 2, 10,
            "authentication failures logged")
        # libpq complains about a connection parameter (sslmode) from the env
        monkeypatch.setenv("PGSSLMODE", "bogus-mode")
        n = len(captured)
        yield wait_until(reactor, lambda: any("sslmode" in ln for ln in lines(captured[n:])),
                         10, "the libpq parameter error logged")
    finally:
        yield svc.stop()
    text = lines(captured)
    assert text
    for ln in text:
        assert SECRET not in ln
        assert "s3cret" not in ln
    assert not any(SECRET in repr(svc.config) for _ in [0])
