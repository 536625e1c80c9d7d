"""
Shared fixtures: a real PostgreSQL topology and TCP proxies.

Fixtures
--------
``pg_topology`` (session)
    One primary and two streaming replicas (``tests/pgtopology/``), started
    from the local PostgreSQL binaries for the whole session.  Without
    PostgreSQL the tests fail; they never skip.
``guarded_topology`` (function)
    The same topology, checked (and repaired if needed) before the test and
    repaired after it: frozen nodes are unfrozen, stopped ones started,
    paused replay resumed, and streaming awaited.
``fresh_topology`` (function)
    Factory: ``fresh_topology(replicas=2)`` starts an independent topology
    with its own ports and data, torn down after the test.
``tcp_proxy`` (function)
    Factory: ``tcp_proxy(node)`` or ``tcp_proxy(host, port)`` starts a
    ``tests.tcpproxy.TcpProxy`` on the reactor; all are stopped after the test.
``pgbouncer`` (function)
    Factory: ``pgbouncer(node, extra=None)`` starts a real PgBouncer
    (``tests/pgbouncer.py``, ``pool_mode = transaction``) in front of
    ``node``, listening on the node's loopback address and a free port; all
    are stopped and removed after the test.  Without the ``pgbouncer``
    binary the tests fail; they never skip.
``reactor`` (function)
    The reactor that pytest-twisted runs.
``log_events`` (function)
    Every log event published during the test, at any level, with
    ``.text()`` and ``.json()`` renderings in the service's formats.
``docker_engine`` (session)
    A Docker engine (``tests/dockerengine.py``): ``DOCKER_HOST``, or our own
    ``dockerd`` started for the session, or the default socket.  Without one
    the container tests skip with the reason, except in CI (``CI=true``),
    where they fail.  Sets the testcontainers variables (ryuk off, host
    connection mode) and ``DOCKER_HOST`` for the session.
``docker_images`` (session)
    The base images (local, from Debian packages, unless
    ``PGSTATUS_DOCKER_PUBLIC_IMAGES=1``) and the pg-status image built from
    ``docker/Dockerfile``.

Rules for the shared topology
-----------------------------
- A test that disturbs ``pg_topology`` (stop, kill, sigstop, pause_replay,
  ...) must request ``guarded_topology`` instead, which puts things back.
- A test that changes roles (promotion, failover) or data irreversibly must
  use ``fresh_topology``: a promoted shared replica cannot be restored, and
  the guard fails the test that did it.
- Rows in ``rw_check`` accumulate; never assume the table is empty.
- The topology methods block.  In ``@pytest_twisted.inlineCallbacks`` tests
  where the service under test runs on the reactor, call the ones that wait
  (``start``, ``stop``, ``promote``, ``wait_*`` ...) through
  ``twisted.internet.threads.deferToThread``; likewise any psycopg2 connect
  through a ``TcpProxy``, which needs the reactor to answer.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import pytest_twisted

sys.path.insert(0, os.path.dirname(__file__))

from pgbouncer import PgBouncer  # noqa: E402
from pgtopology import PgNode, PgTopology  # noqa: E402
from tcpproxy import TcpProxy  # noqa: E402


@pytest.fixture
def reactor() -> Any:
    """The reactor pytest-twisted installed and runs."""
    from twisted.internet import reactor as _reactor

    return _reactor


@pytest.fixture
def service(reactor: Any) -> Iterator[Callable[..., Any]]:
    """
    Factory: ``service(env)`` starts the real service in this process
    (``tests/service.py``); every one is stopped after the test.
    """
    from service import RunningService

    started: list[Any] = []

    def make(env: dict[str, str]) -> Any:
        svc = RunningService(reactor, env)
        started.append(svc)
        return svc

    yield make
    for svc in started:
        pytest_twisted.blockon(svc.stop())


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """A Docker engine for the session (see the module docstring)."""
    from dockerengine import DockerEngine, EngineUnavailable

    try:
        engine = DockerEngine.find_or_start()
    except EngineUnavailable as e:
        if _in_ci():
            pytest.fail(f"CI needs a Docker engine for the container tests: {e}")
        pytest.skip(f"no Docker engine: {e}")
    saved = {k: os.environ.get(k) for k in ("DOCKER_HOST", "TESTCONTAINERS_RYUK_DISABLED",
                                            "TESTCONTAINERS_CONNECTION_MODE")}
    os.environ.update(DOCKER_HOST=engine.host, TESTCONTAINERS_RYUK_DISABLED="true",
                      TESTCONTAINERS_CONNECTION_MODE="docker_host")
    try:
        yield engine
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        engine.stop()


@pytest.fixture(scope="session")
def docker_images(docker_engine: Any) -> Any:
    """Base images plus the pg-status image, built once per session."""
    from dockerengine import base_images, build_pg_status

    images = base_images(docker_engine)
    build_pg_status(docker_engine, images)
    return images


@pytest.fixture(scope="session")
def pg_topology() -> Iterator[PgTopology]:
    """A primary and two streaming replicas for the whole session."""
    topo = PgTopology.start(replicas=2)
    try:
        yield topo
    finally:
        topo.teardown()


@pytest.fixture
def guarded_topology(pg_topology: PgTopology) -> Iterator[PgTopology]:
    """The session topology, healthy before the test and restored after it."""
    pg_topology.restore()
    yield pg_topology
    pg_topology.restore()


@pytest.fixture
def fresh_topology() -> Iterator[Callable[..., PgTopology]]:
    """Factory of independent topologies, torn down after the test."""
    made: list[PgTopology] = []

    def make(replicas: int = 2, **kwargs: Any) -> PgTopology:
        topo = PgTopology.start(replicas=replicas, **kwargs)
        made.append(topo)
        return topo

    yield make
    errors = []
    for topo in made:
        try:
            topo.teardown()
        except Exception as e:  # noqa: BLE001 - tear down the rest first
            errors.append(e)
    if errors:
        raise errors[0]


@pytest.fixture
def tcp_proxy(reactor: Any) -> Iterator[Callable[..., TcpProxy]]:
    """
    Factory of started proxies: ``tcp_proxy(node)`` or
    ``tcp_proxy(host, port, listen_host="127.0.0.1")``.
    """
    proxies: list[TcpProxy] = []

    def make(
        target: PgNode | str, port: int | None = None, listen_host: str = "127.0.0.1"
    ) -> TcpProxy:
        if isinstance(target, PgNode):
            host, port = target.host, target.port
        else:
            host = target
        assert port is not None, "tcp_proxy(host, port) needs a port"
        proxy = TcpProxy(reactor, host, port, listen_host=listen_host)
        proxy.start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        pytest_twisted.blockon(proxy.stop())


@pytest.fixture
def pgbouncer() -> Iterator[Callable[..., PgBouncer]]:
    """
    Factory of started poolers: ``pgbouncer(node, extra=None)`` (blocking:
    call it through ``deferToThread`` while a service runs on the reactor).
    """
    started: list[PgBouncer] = []

    def make(node: PgNode, extra: dict[str, str] | None = None,
             listen_host: str | None = None) -> PgBouncer:
        bouncer = PgBouncer(node, listen_host=listen_host, extra=extra)
        started.append(bouncer)
        bouncer.start()
        return bouncer

    yield make
    for bouncer in started:
        bouncer.remove()


@pytest.fixture
def blackhole() -> Iterator[int]:
    """
    A port on 127.0.0.1 whose accept queue is full: TCP connects to it
    neither succeed nor fail (until the client gives up).
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))
    yield port
    filler.close()
    listener.close()


class LogEvents(list):
    """
    The log events published while a test runs, and their lines as the
    service writes them (every level: the level filter is the observer's).
    """

    def text(self) -> list[str]:
        from pgstatus.logging.formats import format_text

        return [format_text(e) for e in list(self)]

    def json(self) -> list[dict]:
        import json

        from pgstatus.logging.formats import format_json

        return [json.loads(format_json(e)) for e in list(self)]


@pytest.fixture
def log_events() -> Iterator[LogEvents]:
    """Log events published during the test (see :class:`LogEvents`)."""
    from twisted.logger import globalLogPublisher

    events = LogEvents()
    globalLogPublisher.addObserver(events.append)
    try:
        yield events
    finally:
        globalLogPublisher.removeObserver(events.append)
