"""
The whole service built in memory: a ``MemoryReactorClock`` for time and
listening, fake probes for PostgreSQL, the Klein resource queried through
``treq.testing.StubTreq``.  No socket, no database, no real time: this tests
the wiring (checks published, answers served, roles followed, a reload
applied, a clean stop), the real-PostgreSQL suites test the parts.
"""

from __future__ import annotations

from typing import Any

from fakeprobe import FakeProbe, master_obs, replica_obs
from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import globalLogPublisher

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config, ConfigError
from pgstatus.listening import tcp_candidates
from pgstatus.monitor.scheduler import Probe
from pgstatus.service import PgStatusService

P = "pg_status__"
BASE = {P + "hosts": "m,r", P + "sleep_ms": "1000", P + "query_timeout_ms": "500",
        P + "max_fails": "1", P + "http_listen_address": "127.0.0.1", P + "http_port": "8000"}


class Reloader:
    """
    Gives the configuration the next reload applies.
    """

    source = "test environment"

    def __init__(self) -> None:
        self.env: dict[str, str] = dict(BASE)

    def load(self) -> Config:
        return load_config(self.env)


class Built:
    """
    A service on a memory reactor, with a fake probe per host.
    """

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.reactor = MemoryReactorClock()
        self.probes: dict[str, FakeProbe] = {}
        self.reloader = Reloader()
        self.settings = ConfigProvider(load_config(env or BASE))
        self.svc = PgStatusService(self.settings, self.reactor,
                                   probe_factory=self.probe_for,
                                   http_listen=tcp_candidates(self.reactor, "127.0.0.1", 8000),
                                   reloader=self.reloader)
        self.http = StubTreq(self.svc.api.resource())

    def probe_for(self, index: int) -> Probe:
        name = self.settings.current.hosts[index].name
        probe = self.probes[name] = FakeProbe()
        return probe

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        d = self.http.get("http://pg-status" + path, headers=headers)
        self.http.flush()
        response = _result(d)
        body = _result(response.content())
        return response.code, body


def _result(d: Deferred[Any]) -> Any:
    out: list[Any] = []
    d.addBoth(out.append)
    assert out, "the in-memory request did not finish"
    if hasattr(out[0], "raiseException"):
        out[0].raiseException()
    return out[0]


def test_first_checks_make_it_ready_and_answer_through_klein() -> None:
    """
    The service listens where it is configured; before the first checks it
    is not ready; once both hosts are checked ``/ready``, ``/master`` and
    ``/replica`` answer from the published view, in text and JSON.
    """
    b = Built()
    b.svc.startService()
    assert [(port, interface) for port, _, _, interface in b.reactor.tcpServers] == \
        [(8000, "127.0.0.1")]
    assert b.get("/live") == (200, b"OK")
    assert b.get("/ready") == (503, b'{"error_text": "pg_monitor is not ready"}')
    b.probes["m"].answer(master_obs(b.reactor, lsn=5000))
    assert b.get("/ready")[0] == 503
    b.probes["r"].answer(replica_obs(b.reactor, replay=5000))
    assert b.get("/ready") == (200, b"OK")
    assert b.get("/master") == (200, b"m")
    assert b.get("/replica") == (200, b"r")
    code, body = b.get("/master", {"Accept": "application/json"})
    assert (code, body) == (200, b'{"host": "m", "dc": null, "geo": null}')
    b.svc.stopService()


def test_role_change_is_published_and_logged() -> None:
    """
    A promotion: the old master's check fails (dead at once with
    ``max_fails=1``), the replica reports itself master; ``/master``
    follows, and the change is logged in the original's words.
    """
    b = Built()
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(events.append)
    try:
        b.svc.startService()
        b.probes["m"].answer(master_obs(b.reactor))
        b.probes["r"].answer(replica_obs(b.reactor))
        assert b.get("/master") == (200, b"m")
        b.reactor.advance(1.0)
        b.probes["m"].fail()
        b.probes["r"].answer(master_obs(b.reactor, lsn=9000, timeline=2))
        assert b.get("/master") == (200, b"r")
        assert b.get("/replica") == (200, b"r")  # no replica: the master
        view = b.svc.current_view()
        assert not view.hosts[0].alive and view.master is view.hosts[1]
    finally:
        globalLogPublisher.removeObserver(events)
        b.svc.stopService()
    changed = [(e["master"], e["previous"]) for e in events
               if e.get("log_format", "").startswith("master changed")]
    assert changed == [("m", "none"), ("none", "m"), ("r", "none")]


def test_reload_swaps_the_configuration_once_and_adds_a_host() -> None:
    """
    A reload puts the new configuration in the one provider every part
    reads, keeps the running hosts' probes, makes a probe for an added host
    (which starts checking at once), and republishes; an invalid one
    changes nothing.
    """
    b = Built()
    b.svc.startService()
    b.probes["m"].answer(master_obs(b.reactor))
    b.probes["r"].answer(replica_obs(b.reactor))
    first = b.settings.current
    kept = dict(b.probes)
    b.reloader.env = {**BASE, P + "hosts": "m,r,r2", P + "sync_max_lag_ms": "50"}
    assert b.svc.reload()
    assert b.settings.current is not first and b.settings.current.sync_max_lag_ms == 50
    assert b.probes["m"] is kept["m"] and b.probes["r"] is kept["r"]
    assert b.probes["r2"].pending is not None  # the added host is being checked
    assert [h.name for h in b.svc.current_view().hosts] == ["m", "r", "r2"]
    assert b.get("/ready") == (200, b"OK")  # readiness reached stays
    b.probes["r2"].answer(replica_obs(b.reactor))
    assert b.get("/status?host=r2")[0] == 200
    applied = b.settings.current
    b.reloader.env = {**BASE, P + "sleep_ms": "0"}
    assert not b.svc.reload()
    assert b.settings.current is applied
    b.svc.stopService()


def test_invalid_reload_is_a_config_error() -> None:
    """
    The reloader's error is the configuration's: it names the variable.
    """
    r = Reloader()
    r.env = {**BASE, P + "sleep_ms": "0"}
    try:
        r.load()
    except ConfigError as e:
        assert "pg_status__sleep_ms" in str(e)
    else:
        raise AssertionError("sleep_ms=0 was accepted")


def test_clean_stop_closes_probes_stops_listening_and_leaves_no_timer() -> None:
    """
    Stopping the service closes every probe, stops listening, and leaves
    no delayed call behind on the reactor (no check, deadline or trimmer
    timer keeps running).
    """
    b = Built()
    b.svc.startService()
    b.probes["m"].answer(master_obs(b.reactor))
    b.probes["r"].answer(replica_obs(b.reactor))
    assert b.reactor.getDelayedCalls()
    done: list[object] = []
    d = b.svc.stopService()
    assert d is not None
    d.addBoth(done.append)
    assert len(done) == 1 and not hasattr(done[0], "raiseException")
    assert all(p.closed for p in b.probes.values())
    assert b.svc.http.port is None
    assert [c for c in b.reactor.getDelayedCalls() if c.active()] == []


def test_drain_makes_ready_503_and_keeps_every_other_answer() -> None:
    """
    During a delayed stop (``pg_status__shutdown_delay_ms``) ``/ready``
    answers 503 with its own error text, through Klein and through the
    answer cache alike; ``/master``, ``/replica`` and ``/live`` answer as
    before.
    """
    b = Built()
    b.svc.startService()
    b.probes["m"].answer(master_obs(b.reactor))
    b.probes["r"].answer(replica_obs(b.reactor))
    assert b.get("/ready") == (200, b"OK")
    cache = b.svc.site.cache
    ready_head = b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n"
    cached = cache.serve(ready_head)
    assert isinstance(cached, tuple) and cached[0].startswith(b"HTTP/1.1 200 OK\r\n")
    b.svc.drain()
    shutting_down = b'{"error_text": "pg-status is shutting down"}'
    assert b.get("/ready") == (503, shutting_down)
    cached = cache.serve(ready_head)
    assert isinstance(cached, tuple)
    assert cached[0].startswith(b"HTTP/1.1 503 ") and cached[0].endswith(shutting_down)
    assert b.get("/master") == (200, b"m")
    assert b.get("/replica") == (200, b"r")
    assert b.get("/live") == (200, b"OK")
    b.svc.stopService()
