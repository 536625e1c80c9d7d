"""
The HTTP API as a Klein application bound to a monitor's published view.

Every handler is a thin adapter from a Klein request to
:class:`~pgstatus.responses.Renderer`, which owns what is answered.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from klein import Klein
from twisted.internet.defer import Deferred
from twisted.logger import Logger, LogLevel
from twisted.web.iweb import IRequest
from werkzeug.exceptions import MethodNotAllowed, NotFound

from pgstatus.config import Config
from pgstatus.freshness import FreshReads
from pgstatus.openapi import RESPONSE as OPENAPI
from pgstatus.responses import (
    EMPTY_404,
    EMPTY_405,
    NOT_READY,
    REPLICA_ROUTES,
    Renderer,
    Response,
    error,
    text,
    wants_json,
)
from pgstatus.state import View

log = Logger(namespace="pgstatus.http")

FOLLOWING_ANOTHER = error(409, "this pg-status follows another instance; follow a hub instead")
OK_TEXT = text("OK")
INVALID_INDEX = error(400, "Invalid index")
_DIGITS = re.compile(r"[0-9]+")
EVENT_STREAM_HEAD = Response(200, b"text/event-stream", b"")

METHODS = ("GET", "HEAD")
ALLOW = b"GET, HEAD"


def first_args(request: IRequest) -> dict[str, str]:
    """
    The first value of every query parameter, decoded leniently.
    """
    out: dict[str, str] = {}
    for k, vs in (request.args or {}).items():
        if vs:
            out.setdefault(k.decode("utf-8", "replace"), vs[0].decode("utf-8", "replace"))
    return out


def _accepts_json(request: IRequest) -> bool:
    accept = request.getHeader(b"accept")
    return wants_json(accept.decode("latin-1") if accept is not None else None)


def send(request: IRequest, r: Response, count: Callable[[int], None] | None = None) -> bytes:
    """
    Apply ``r`` to ``request`` and return the body for Klein to write.

    :param count: called with the status, for the request metrics.
    """
    if count is not None:
        count(r.status)
    request.setResponseCode(r.status)
    request.defaultContentType = None
    if r.content_type is not None:
        request.setHeader(b"content-type", r.content_type)
    else:
        request.responseHeaders.removeHeader(b"content-type")
    if r.status == 405:
        request.setHeader(b"allow", ALLOW)
    request.setHeader(b"content-length", b"%d" % len(r.body))
    return r.body


class StatusAPI:
    """
    The pg-status HTTP API.

    :param current: returns the monitor's current :class:`View`.
    :param config: the service configuration.
    :param version: served by ``/version``.
    """

    app = Klein()

    def __init__(self, current: Callable[[], View], config: Config, version: str,
                 fresh: FreshReads | None = None) -> None:
        self.renderer = Renderer(current, config, version, fresh)
        #: renders ``/metrics`` (set by the service wiring)
        self.metrics_source: Callable[[], Response] | None = None
        #: the followers' streams (:class:`pgstatus.hub.Hub`), ``None`` on a
        #: follower (set by the service wiring)
        self.hub: Any = None
        #: ``(host_index) -> None``: an extra check asked for by a follower
        self.check_soon: Callable[[int], None] | None = None
        self._current = current

    def _counter(self, route: str) -> Callable[[int], None]:
        count = self.renderer.count
        return lambda status: count(route, status)

    def resource(self) -> Any:
        """
        The ``twisted.web`` resource serving this API.
        """
        return self.app.resource()

    @app.route("/master", methods=METHODS)
    def master(self, request: IRequest) -> bytes:
        return send(request, self.renderer.master(_accepts_json(request)), self._counter("master"))

    @app.route(f"/<any({', '.join(sorted(REPLICA_ROUTES))}):route>", methods=METHODS)
    def replica(self, request: IRequest, route: str) -> bytes | Deferred[bytes]:
        r = self.renderer.replica(route, first_args(request), _accepts_json(request))
        count = self._counter(route)
        if isinstance(r, Deferred):
            return r.addCallback(lambda answer: send(request, answer, count))
        return send(request, r, count)

    @app.route("/hosts", methods=METHODS)
    def hosts(self, request: IRequest) -> bytes:
        return send(request, self.renderer.hosts(), self._counter("hosts"))

    @app.route("/status", methods=METHODS)
    def status(self, request: IRequest) -> bytes:
        return send(request, self.renderer.status(first_args(request).get("host")),
                    self._counter("status"))

    @app.route("/version", methods=METHODS)
    def version(self, request: IRequest) -> bytes:
        return send(request, self.renderer.version, self._counter("version"))

    @app.route("/live", methods=METHODS)
    def live(self, request: IRequest) -> bytes:
        return send(request, self.renderer.live(), self._counter("live"))

    @app.route("/ready", methods=METHODS)
    def ready(self, request: IRequest) -> bytes:
        return send(request, self.renderer.ready(), self._counter("ready"))

    @app.route("/openapi.json", methods=METHODS)
    def openapi(self, request: IRequest) -> bytes:
        return send(request, OPENAPI, self._counter("openapi.json"))

    @app.route("/metrics", methods=METHODS)
    def metrics(self, request: IRequest) -> bytes:
        r = self.metrics_source() if self.metrics_source is not None else EMPTY_404
        return send(request, r, self._counter("metrics"))

    @app.route("/follow", methods=METHODS)
    def follow(self, request: IRequest) -> bytes | Deferred[bytes]:
        """
        Follower mode's stream of this instance's view (Server-Sent Events).
        """
        count = self._counter("follow")
        if self.hub is None:
            return send(request, FOLLOWING_ANOTHER, count)
        if not self._current().ready:
            return send(request, NOT_READY, count)
        if request.method == b"HEAD":
            return send(request, EVENT_STREAM_HEAD, count)
        count(200)
        # fires when the hub closes the stream; Klein cancels it if the
        # follower goes away first
        return self.hub.subscribe(request)

    @app.route("/follow/check", methods=METHODS)
    def follow_check(self, request: IRequest) -> bytes:
        """
        A follower's request for an extra check of one host (its ``wait_ms``
        reads): ``?index=<position in pg_status__hosts>``.
        """
        count = self._counter("follow")
        if self.hub is None or self.check_soon is None:
            return send(request, FOLLOWING_ANOTHER, count)
        view = self._current()
        if not view.ready:
            return send(request, NOT_READY, count)
        value = first_args(request).get("index", "")
        if not _DIGITS.fullmatch(value):
            return send(request, INVALID_INDEX, count)
        if len(value) > 9 or int(value) >= len(view.hosts):
            return send(request, EMPTY_404, count)
        self.check_soon(int(value))
        return send(request, OK_TEXT, count)

    @app.handle_errors(NotFound)
    def not_found(self, request: IRequest, failure: Any) -> bytes:
        return send(request, EMPTY_404, self._counter("other"))

    @app.handle_errors(MethodNotAllowed)
    def not_allowed(self, request: IRequest, failure: Any) -> bytes:
        return send(request, EMPTY_405, self._counter("other"))

    @app.handle_errors(Exception)
    def internal_error(self, request: IRequest, failure: Any) -> bytes:
        log.failure("request failed path={path}", failure, level=LogLevel.error,
                    path=request.path.decode("latin-1", "replace"))
        return send(request, error(500, "internal error"), self._counter("other"))
