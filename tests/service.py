"""
Helpers for tests that run the real service in this process, on the reactor
pytest-twisted runs, against real PostgreSQL servers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import treq
from twisted.internet import threads
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.task import deferLater
from twisted.web.client import HTTPConnectionPool

from pgstatus.config.environ import load_config
from pgstatus.config.files import with_env_file
from pgstatus.tap import make_service


class Answer:
    """
    An HTTP answer: status code, headers and body.
    """

    def __init__(self, code: int, headers: Any, body: bytes) -> None:
        self.code = code
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode()

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        v = self.headers.getRawHeaders(name)
        return v[0] if v else None

    def __repr__(self) -> str:
        return f"Answer({self.code}, {self.body[:200]!r})"


class RunningService:
    """
    A started :class:`~pgstatus.service.PgStatusService` listening on 127.0.0.1 and an HTTP
    client for it.
    """

    def __init__(self, reactor: Any, env: Mapping[str, str]) -> None:
        environ = {
            "pg_status__http_listen_address": "127.0.0.1",
            "pg_status__http_port": "0",
        }
        environ.update(env)
        self.reactor = reactor
        self.config = load_config(with_env_file(environ))
        self.svc = make_service(self.config, reactor, environ=environ)
        self.svc.startService()
        self.base = f"http://127.0.0.1:{self.svc.http.port.getHost().port}"
        self._pool = HTTPConnectionPool(reactor, persistent=False)

    @property
    def monitor(self) -> Any:
        return self.svc.monitor

    @property
    def view(self) -> Any:
        return self.svc.monitor.registry.view

    def host(self, name: str) -> Any:
        """
        The published status of host ``name``.
        """
        return next(h for h in self.view.hosts if h.name == name)

    @inlineCallbacks
    def get(self, path: str, json_: bool = False, method: str = "GET",
            headers: Mapping[str, str] | None = None) -> Any:
        hdrs = dict(headers or {})
        if json_:
            hdrs["Accept"] = "application/json"
        r = yield treq.request(method, self.base + path, headers=hdrs, pool=self._pool)
        body = yield r.content()
        return Answer(r.code, r.headers, body)

    @inlineCallbacks
    def stop(self) -> Any:
        yield self.svc.stopService()
        yield self._pool.closeCachedConnections()


@inlineCallbacks
def wait_until(reactor: Any, predicate: Callable[[], Any], timeout: float,
               what: str, interval: float = 0.05) -> Any:
    """
    Poll ``predicate`` (which may return a Deferred) until it is truthy;
    fail with ``what`` after ``timeout`` seconds.

    :return: the predicate's last (truthy) value and the seconds waited.
    """
    start = reactor.seconds()
    last = None
    while True:
        last = yield predicate()
        if last:
            return last, reactor.seconds() - start
        if reactor.seconds() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}")
        yield deferLater(reactor, interval, lambda: None)


def blocking(f: Callable[..., Any], *args: Any, **kwargs: Any) -> Deferred[Any]:
    """
    Run a blocking topology helper off the reactor thread.
    """
    return threads.deferToThread(f, *args, **kwargs)


def ready(svc: RunningService) -> Callable[[], bool]:
    """
    A predicate for :func:`wait_until`: the service is ready.
    """
    return lambda: svc.view.ready
