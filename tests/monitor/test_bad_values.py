"""
A host that answers the status query with values no server should send: a
replay timestamp of ``-Infinity``, ``NaN`` or far outside PostgreSQL's
timestamp range.

The real service runs in this process against the real primary and one
real replica of the shared topology, and a fake PostgreSQL server
(``tests/fakepg.py``, the wire protocol) that is a third host, a replica
whose status row the test crafts.  Such a check is a failed check, exactly
as a failed query is: the host is possibly dead after the first one and
dead after ``max_fails`` in a row, ``/replica`` stops choosing it, a host
that answers so from its very first check does not keep ``/ready`` at 503,
and the poll-error lines stay under ``pg_status__poll_error_log_interval_ms``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import pytest_twisted
from fakepg import FakePostgres, replica_row
from twisted.internet.task import deferLater
from twisted.logger import LogLevel

from pgstatus.logging.formats import format_text
from service import RunningService, wait_until

pytestmark = pytest.mark.pg

SLEEP_MS, TIMEOUT_MS, MAX_FAILS, INTERVAL_MS = 200, 500, 3, 1500
ENV = {
    "pg_status__sleep_ms": str(SLEEP_MS),
    "pg_status__query_timeout_ms": str(TIMEOUT_MS),
    "pg_status__max_fails": str(MAX_FAILS),
    "pg_status__poll_error_log_interval_ms": str(INTERVAL_MS),
}
#: the spec's detection bound, plus a period and a second of margin
DETECTION = (SLEEP_MS + TIMEOUT_MS + (MAX_FAILS - 1) * max(SLEEP_MS, TIMEOUT_MS)
             + SLEEP_MS) / 1000 + 1.0
#: how long the poll-error lines are counted
WATCH = 4.0
#: a loopback address no node of the topology listens on
FAKE_HOST = "127.0.0.9"
#: the original's poll-error lines, under one rate limit per host
POLL_ERRORS = ("PostgreSQL operation failed", "PostgreSQL poll timed out",
               "unexpected PostgreSQL result row count")

#: replay timestamps (as PostgreSQL sends a float8) that are not a time
BAD_TIMESTAMPS = ["-Infinity", "NaN", "1e300"]


@pytest.fixture
def fake(reactor):
    server = FakePostgres(reactor, FAKE_HOST).start()
    yield server
    pytest_twisted.blockon(server.stop())


def env_with_fake(topo: Any, fake: FakePostgres, *extra: tuple[str, int]) -> dict[str, str]:
    primary, replica = topo.primary, topo.replicas[0]
    env = topo.hosts_env(nodes=[primary, replica])
    entries = [(FAKE_HOST, fake.port), *extra]
    env["pg_status__hosts"] += "".join(f",{h}" for h, _ in entries)
    env["pg_status__pg_port"] += "".join(f",{p}" for _, p in entries)
    return {**env, **ENV}


def is_poll_error(event: dict, host: str) -> bool:
    return event.get("host") == host and any(
        str(event.get("log_format", "")).startswith(p) for p in POLL_ERRORS)


def sequence(events: list[dict], host: str) -> list[str]:
    """
    The host's poll failures (``fail``) and state changes (``possible_dead``,
    ``dead``, ``alive``) in the order they were logged.
    """
    out = []
    for e in events:
        if is_poll_error(e, host):
            out.append("fail")
        elif e.get("host") == host and str(e.get("log_format", "")).startswith(
                "host state changed"):
            out.append(e["state"])
    return out


def check_rate_limit(events: list[dict], host: str, since: float, until: float) -> None:
    """
    The host's poll-error lines between ``since`` and ``until``: at error at
    most once per interval (the others at debug), and none of them an
    "internal error".
    """
    polls = [e for e in events if is_poll_error(e, host) and since <= e["log_time"] <= until]
    errors = [e["log_time"] for e in polls if e["log_level"] == LogLevel.error]
    for e in polls:  # shown with ``pytest -rP``
        print(f"[bad_values] +{e['log_time'] - since:.2f}s {format_text(e)}")
    assert errors, "no poll error logged at error"
    gaps = [b - a for a, b in zip(errors, errors[1:], strict=False)]
    assert all(g >= INTERVAL_MS / 1000 - 0.01 for g in gaps), gaps
    assert len(errors) <= 1 + math.floor((until - since) / (INTERVAL_MS / 1000)), errors
    assert len(polls) > len(errors), "every failure was logged at error"
    internal = [e for e in events if "internal error" in str(e.get("log_format", ""))]
    assert not internal, internal


def fake_status(svc: RunningService) -> Any:
    return svc.host(FAKE_HOST)


@pytest_twisted.inlineCallbacks
def replica_answers(svc: RunningService, n: int) -> Any:
    out = []
    for _ in range(n):
        r = yield svc.get("/replica")
        assert r.code == 200, r
        out.append(r.text)
    return out


@pytest.mark.parametrize("bad", BAD_TIMESTAMPS)
@pytest_twisted.inlineCallbacks
def test_bad_replay_timestamp_after_normal_checks(pg_topology, service, fake, reactor,
                                                  log_events, bad):
    """
    A replica that answered normally, then sends a bad replay timestamp:
    possibly dead after the first such check, dead after ``max_fails``
    (the poll-error lines counted between the state changes), never chosen
    by ``/replica`` from possibly dead on, null lags once dead, each error
    naming the host and the field, at error at most once per interval.
    """
    topo = pg_topology
    svc = service(env_with_fake(topo, fake))
    names = [topo.primary.host, topo.replicas[0].host, FAKE_HOST]
    yield wait_until(reactor, lambda: svc.view.ready and all(svc.host(n).healthy for n in names),
                     10, "all hosts healthy")
    seen = yield replica_answers(svc, 20)
    assert FAKE_HOST in seen and topo.replicas[0].host in seen, seen

    mark, t0 = len(log_events), reactor.seconds()
    fake.row = lambda: replica_row(replay_ts=bad)
    yield wait_until(reactor, lambda: fake_status(svc).possible_dead, DETECTION,
                     "the fake replica possibly dead")
    answers = yield replica_answers(svc, 10)
    yield wait_until(reactor, lambda: not fake_status(svc).alive, DETECTION,
                     "the fake replica dead")
    answers += yield replica_answers(svc, 10)
    assert FAKE_HOST not in answers, answers

    events = list(log_events)[mark:]
    assert sequence(events, FAKE_HOST)[:MAX_FAILS + 2] == \
        ["fail", "possible_dead", *["fail"] * (MAX_FAILS - 1), "dead"], sequence(events, FAKE_HOST)
    first = next(e for e in events if is_poll_error(e, FAKE_HOST))
    text = log_events.text()[mark + events.index(first)]
    assert (f"ERROR monitor: PostgreSQL operation failed operation=validate_result "
            f"host={FAKE_HOST} error=") in text, text
    assert "replay_ts" in text, text

    yield deferLater(reactor, max(0.0, t0 + WATCH - reactor.seconds()), lambda: None)
    check_rate_limit(list(log_events)[mark:], FAKE_HOST, t0, reactor.seconds())
    r = yield svc.get("/ready")
    assert r.code == 200, r
    r = yield svc.get(f"/status?host={FAKE_HOST}", json_=True)
    st = r.json()
    assert (st["alive"], st["possible_dead"], st["lag_ms"], st["lsn"]) == \
        (False, True, None, None), st
    answers = yield replica_answers(svc, 10)
    assert FAKE_HOST not in answers, answers


@pytest.mark.parametrize("bad", BAD_TIMESTAMPS)
@pytest_twisted.inlineCallbacks
def test_bad_replay_timestamp_from_first_check(pg_topology, service, fake, reactor,
                                               log_events, bad):
    """
    A replica that sends a bad replay timestamp from its first check on:
    ``/ready`` is 200 within the first checks' deadline (plus the spacing
    of connection starts and a margin), and the host is what a host whose
    first check fails is (here, one whose port refuses): dead, after one
    poll-error line; ``/replica`` never names it; its errors are rate-limited.
    """
    topo = pg_topology
    refused = _free_port()
    fake.row = lambda: replica_row(replay_ts=bad)
    mark, t0 = len(log_events), reactor.seconds()
    svc = service(env_with_fake(topo, fake, ("127.0.0.10", refused)))
    yield wait_until(reactor, lambda: svc.view.ready, 4 * SLEEP_MS / 1000 + TIMEOUT_MS / 1000 + 1,
                     "readiness")
    r = yield svc.get("/ready")
    assert r.code == 200, r
    assert fake.answered >= 1

    def as_published(name: str) -> tuple:
        h = svc.host(name)
        return h.checked, h.alive, h.possible_dead, h.lag_ms, h.lsn

    assert as_published(FAKE_HOST) == as_published("127.0.0.10") == \
        (True, False, True, None, None)
    events = list(log_events)[mark:]
    assert sequence(events, FAKE_HOST)[:2] == ["fail", "dead"], sequence(events, FAKE_HOST)
    yield wait_until(reactor, lambda: svc.host(topo.replicas[0].host).healthy, 10,
                     "the real replica healthy")
    answers = yield replica_answers(svc, 10)
    assert FAKE_HOST not in answers, answers

    yield deferLater(reactor, max(0.0, t0 + WATCH - reactor.seconds()), lambda: None)
    check_rate_limit(list(log_events)[mark:], FAKE_HOST, t0, reactor.seconds())
    assert fake_status(svc).checked and not fake_status(svc).alive


def _free_port() -> int:
    """A port on 127.0.0.10 that nothing listens on (connections are refused)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.10", 0))
    port = s.getsockname()[1]
    s.close()
    return port
