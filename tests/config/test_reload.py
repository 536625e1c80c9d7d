"""
Reloading the configuration (``pg_status__env_file``, SIGHUP) with the
service running in this process against real PostgreSQL servers.

Most tests call :meth:`PgStatusService.reload`, which is what the SIGHUP
handler schedules on the reactor; one sends a real SIGHUP.
"""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet.task import deferLater
from twisted.logger import Logger, globalLogPublisher

from pgstatus import logging as pglog
from pgstatus.config.files import parse_env_file, with_env_file
from pgstatus.config.settings import ConfigError
from service import RunningService, blocking, wait_until

pytestmark = pytest.mark.pg

FAST = {
    "pg_status__sleep_ms": "200",
    "pg_status__query_timeout_ms": "500",
    "pg_status__max_fails": "3",
}


def write_env(path: Path, env: dict[str, str]) -> None:
    lines = ["# written by tests/config/test_reload.py", ""]
    lines += [f'export {k}="{v}"' for k, v in env.items()]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def reloading(reactor, tmp_path):
    """
    Factory: ``reloading(env)`` writes ``env`` to an environment file and
    starts a service reading it; returns ``(service, write)`` where
    ``write(env)`` rewrites the file.  Stopped after the test.
    """
    started = []
    path = tmp_path / "pg-status.env"

    def write(env):
        write_env(path, env)

    def make(env):
        write(env)
        svc = RunningService(reactor, {"pg_status__env_file": str(path)})
        started.append(svc)
        return svc, write

    yield make
    for svc in started:
        if svc.svc.running:
            pytest_twisted.blockon(svc.stop())


@pytest.fixture
def logged():
    """
    Every log event emitted during the test, as formatted text lines.
    """
    lines: list[str] = []

    def observer(event):
        lines.append(pglog.format_text(event, False, lambda: 0.0))

    globalLogPublisher.addObserver(observer)
    yield lines
    globalLogPublisher.removeObserver(observer)


def ready(svc):
    return lambda: svc.view.ready


# --- the file format -------------------------------------------------------


def test_env_file_syntax_and_precedence(tmp_path):
    text = (
        "# comment\n\n; also a comment\n"
        "export pg_status__hosts=db1,db2\n"
        "pg_status__pg_password='p a$s'\n"
        'pg_status__pg_user="mon \\"x\\" \\$HOME"\n'
        "pg_status__current_dc=\n"
        "  pg_status__sleep_ms = 250  \n"
    )
    assert parse_env_file(text) == {
        "pg_status__hosts": "db1,db2",
        "pg_status__pg_password": "p a$s",
        "pg_status__pg_user": 'mon "x" $HOME',
        "pg_status__current_dc": "",
        "pg_status__sleep_ms": "250",
    }
    for bad in ("just words", "1x=2", "pg_status__a='unterminated"):
        with pytest.raises(ConfigError) as e:
            parse_env_file("ok=1\n" + bad + "\n", "f")
        assert e.value.variable == "pg_status__env_file"
        assert "line 2" in str(e.value)
        assert bad not in str(e.value)
    path = tmp_path / "env"
    path.write_text("pg_status__sleep_ms=250\npg_status__env_file=/elsewhere\n")
    merged = with_env_file({"pg_status__env_file": str(path), "pg_status__sleep_ms": "9",
                            "pg_status__hosts": "a"})
    assert merged["pg_status__sleep_ms"] == "250"  # the file wins
    assert merged["pg_status__hosts"] == "a"  # the process environment fills in
    assert merged["pg_status__env_file"] == str(path)  # only the process names the file
    with pytest.raises(ConfigError, match="pg_status__env_file: cannot read"):
        with_env_file({"pg_status__env_file": str(tmp_path / "missing")})


# --- reloads ----------------------------------------------------------------


@pytest_twisted.inlineCallbacks
def test_threshold_reload_changes_sync_flags_and_routes(guarded_topology, reloading, reactor,
                                                         logged):
    """
    Lowering sync_max_lag_ms/bytes by a reload takes a replica whose
    replay is paused out of /hosts' sync flags and of /sync_by_time and
    /sync_by_bytes; the other replica stays.
    """
    topo = guarded_topology
    paused, other = topo.replicas
    env = {**topo.hosts_env(), **FAST, "pg_status__sync_max_lag_ms": "600000"}
    svc, write = reloading(env)
    yield wait_until(reactor, ready(svc), 10, "readiness")
    # a replayed commit first, so the paused replica's lag_ms is known
    yield blocking(topo.write, "first")
    yield wait_until(reactor, lambda: all(svc.host(n.host).lag_ms is not None
                                          for n in topo.replicas), 5, "replayed commits")
    yield blocking(paused.pause_replay)
    yield blocking(topo.write, os.urandom(20000).hex())

    def lagging():
        h = svc.host(paused.host)
        return (h.lag_bytes or 0) > 10000 and (h.lag_ms or 0) > 1500 and h

    yield wait_until(reactor, lagging, 10, "the paused replica to lag")
    assert svc.host(paused.host).sync_by_time and svc.host(paused.host).sync_by_bytes
    seen = set()
    for _ in range(4):
        r = yield svc.get("/sync_by_time")
        seen.add(r.text)
    assert seen == {paused.host, other.host}

    write({**env, "pg_status__sync_max_lag_ms": "1000", "pg_status__sync_max_lag_bytes": "1000"})
    assert svc.svc.reload()
    assert svc.svc.settings.current.sync_max_lag_ms == 1000

    def out_of_sync():
        h = svc.host(paused.host)
        o = svc.host(other.host)
        return not h.sync_by_time and not h.sync_by_bytes and o.sync_by_bytes and o.sync_by_time

    yield wait_until(reactor, out_of_sync, 5, "the paused replica to leave the sync sets")
    r = yield svc.get("/hosts")
    hosts = {h["host"]: h for h in r.json()}
    assert hosts[paused.host]["sync_by_time"] is False
    assert hosts[paused.host]["sync_by_bytes"] is False
    assert hosts[other.host]["sync_by_bytes"] is True
    for path in ("/sync_by_time", "/sync_by_bytes"):
        for _ in range(4):
            r = yield svc.get(path)
            assert (r.code, r.text) == (200, other.host), path
    assert any("configuration reloaded" in line and "sync_max_lag_ms=1000" in line
               and "sync_max_lag_bytes=1000" in line for line in logged)


@pytest_twisted.inlineCallbacks
def test_hosts_added_and_removed(pg_topology, reloading, reactor):
    """
    An added host starts being polled and appears in /hosts; a removed one
    stops being polled and its PostgreSQL connection goes away; a kept host
    keeps its monitor and connection; readiness never drops.
    """
    topo = pg_topology
    primary, first, second = topo.nodes
    env = {**topo.hosts_env(nodes=[primary, first]), **FAST}
    svc, write = reloading(env)
    yield wait_until(reactor, ready(svc), 10, "readiness")
    readiness = []
    svc.monitor.registry.observe(lambda old, new: readiness.append(new.ready))
    kept = svc.monitor.monitors[0]
    pid = kept.probe.backend_pid
    assert pid is not None

    # add the second replica
    write({**env, **topo.hosts_env(nodes=[primary, first, second])})
    assert svc.svc.reload()
    assert svc.view.ready
    assert [h.name for h in svc.view.hosts] == [primary.host, first.host, second.host]
    r = yield svc.get("/ready")
    assert r.code == 200
    yield wait_until(reactor, lambda: svc.host(second.host).alive, 5, "the added host's check")
    r = yield svc.get("/hosts")
    hosts = {h["host"]: h for h in r.json()}
    assert hosts[second.host]["alive"] is True and hosts[second.host]["master"] is False
    yield wait_until(reactor, lambda: blocking(second.backend_pids, application_name="pg-status"),
                     5, "a connection to the added host")

    # remove the first replica
    write({**env, **topo.hosts_env(nodes=[primary, second])})
    assert svc.svc.reload()
    assert [h.name for h in svc.view.hosts] == [primary.host, second.host]
    assert [h.index for h in svc.view.hosts] == [0, 1]
    assert svc.view.master is not None and svc.view.master.name == primary.host
    assert len(svc.monitor.monitors) == 2 and svc.monitor.monitors[0] is kept
    assert svc.monitor.registry.index_of(svc.monitor.monitors[1].state) == 1

    def gone():
        d = blocking(first.backend_pids, application_name="pg-status")
        return d.addCallback(lambda pids: pids == [])

    yield wait_until(reactor, gone, 5, "the removed host's connection to close")
    r = yield svc.get("/hosts")
    assert [h["host"] for h in r.json()] == [primary.host, second.host]
    checks = {m.name: m.checks for m in svc.monitor.monitors}
    yield wait_until(reactor, lambda: all(m.checks > checks[m.name] + 1
                                          for m in svc.monitor.monitors), 5, "more checks")
    r = yield svc.get("/replica")
    assert (r.code, r.text) == (200, second.host)
    assert kept.probe.backend_pid == pid, "the kept host kept its connection"
    assert readiness and all(readiness), "readiness never dropped"
    r = yield svc.get("/metrics")
    assert f'host="{first.host}"' not in r.text


@pytest_twisted.inlineCallbacks
def test_invalid_reload_changes_nothing(pg_topology, reloading, reactor, logged):
    """
    An invalid value is logged naming the variable and the running
    configuration stays; settings that need a restart keep their values
    with a warning, while the rest of the reload applies.
    """
    topo = pg_topology
    env = {**topo.hosts_env(), **FAST}
    svc, write = reloading(env)
    yield wait_until(reactor, ready(svc), 10, "readiness")
    before, view = svc.svc.settings.current, svc.view
    write({**env, **topo.hosts_env(nodes=[topo.primary]), "pg_status__sleep_ms": "0"})
    assert svc.svc.reload() is False
    assert svc.svc.settings.current is before
    assert len(svc.monitor.monitors) == 3
    assert [h.name for h in svc.view.hosts] == [n.host for n in topo.nodes]
    assert svc.view.generation >= view.generation
    errors = [line for line in logged if "configuration reload failed" in line]
    assert len(errors) == 1 and "pg_status__sleep_ms" in errors[0] and " ERROR " in errors[0]

    (tmp := Path(svc.svc.reload_source)).write_text("pg_status__sleep_ms='300\n")
    assert svc.svc.reload() is False
    assert svc.svc.settings.current is before
    assert any("pg_status__env_file" in line and "line 1" in line for line in logged)

    port = svc.svc.http.port.getHost().port
    write({**env, "pg_status__http_port": "1", "pg_status__min_lsn_wait_ms": "250"})
    assert tmp.exists()
    assert svc.svc.reload()
    assert svc.svc.settings.current.http_port == before.http_port
    assert svc.svc.settings.current.min_lsn_wait_ms == 250
    assert svc.svc.http.port.getHost().port == port
    assert any("http_port=1 needs a restart" in line and " WARNING " in line for line in logged)
    r = yield svc.get("/ready")
    assert r.code == 200


@pytest_twisted.inlineCallbacks
def test_log_level_and_format_reload(pg_topology, reloading, reactor):
    """
    The log observer's level and format follow a reload.
    """
    topo = pg_topology
    env = {**topo.hosts_env(), **FAST}
    svc, write = reloading(env)
    out = io.StringIO()
    obs = pglog.make_observer("info", "text", out)
    svc.svc.log_observer = obs
    globalLogPublisher.addObserver(obs)
    log = Logger(namespace="pgstatus.main")
    try:
        yield wait_until(reactor, ready(svc), 10, "readiness")
        log.info("probe one")
        assert "probe one" in out.getvalue()
        assert "DEBUG" not in out.getvalue()

        write({**env, "pg_status__log_level": "debug"})
        assert svc.svc.reload()
        yield wait_until(reactor, lambda: "DEBUG monitor: checked host=" in out.getvalue(), 5,
                         "debug lines")

        write({**env, "pg_status__log_level": "warning", "pg_status__log_format": "json"})
        assert svc.svc.reload()
        mark = len(out.getvalue())
        log.info("probe two")
        log.warn("probe three")
        tail = out.getvalue()[mark:].splitlines()
        assert "probe two" not in "".join(tail)
        assert [json.loads(line)["message"] for line in tail] == ["probe three"]
    finally:
        globalLogPublisher.removeObserver(obs)


@pytest_twisted.inlineCallbacks
def test_real_sighup_reloads_and_reopens_log(pg_topology, reloading, reactor, tmp_path):
    """
    A real SIGHUP both reopens the log file (logrotate) and reloads the
    configuration, through the one handler of :mod:`pgstatus.signals`;
    once the signals' owner stops (the process is shutting down), SIGHUP
    still reopens but no longer reloads, and ``uninstall`` puts the
    previous handler back.
    """
    from pgstatus.signals import ProcessSignals

    topo = pg_topology
    previous = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGUSR1)}
    logfile = tmp_path / "pg-status.log"
    obs = pglog.make_observer("info", "text", pglog.ReopenableFile(str(logfile)))
    owner = None
    try:
        env = {**topo.hosts_env(), **FAST}
        svc, write = reloading(env)
        reloads = []

        def reload():
            reloads.append(svc.svc.reload())

        owner = ProcessSignals(reactor, reload=reload, reopen=pglog.reopener(obs))
        owner.startService()
        assert signal.getsignal(signal.SIGHUP) == owner.handlers()[signal.SIGHUP]
        yield wait_until(reactor, ready(svc), 10, "readiness")
        obs(_event("before"))
        logfile.rename(tmp_path / "pg-status.log.1")

        write({**env, "pg_status__sleep_ms": "300"})
        os.kill(os.getpid(), signal.SIGHUP)
        yield wait_until(reactor, lambda: svc.svc.settings.current.sleep_ms == 300, 5, "the reload")
        obs(_event("after"))
        assert (tmp_path / "pg-status.log.1").read_text().endswith("before\n")
        assert logfile.read_text().endswith("after\n")
        assert reloads == [True]

        owner.stopService()
        yield svc.stop()
        logfile.rename(tmp_path / "pg-status.log.2")
        os.kill(os.getpid(), signal.SIGHUP)
        obs(_event("stopping"))
        assert logfile.read_text().endswith("stopping\n")
        # the reload a SIGHUP schedules runs at the reactor's next turn
        yield deferLater(reactor, 0.2, lambda: None)
        assert reloads == [True]

        owner.uninstall()
        assert signal.getsignal(signal.SIGHUP) == previous[signal.SIGHUP]
    finally:
        if owner is not None:
            owner.uninstall()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _event(text: str) -> dict:
    from twisted.logger import LogLevel

    return {"log_format": text, "log_level": LogLevel.info, "log_namespace": "pgstatus.main",
            "log_time": 0.0}
