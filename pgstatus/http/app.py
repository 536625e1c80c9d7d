"""
The HTTP API: a Klein application in a class, the one definition of every
route.  The routes the published view answers come from the route table
(:mod:`pgstatus.http.routes`) and all go to one handler, which calls the
answer function (:meth:`~pgstatus.http.responses.Renderer.answer`); the
others (``/openapi.json``, ``/metrics``, ``/follow``) have handlers of
their own.  Unknown paths and methods, and errors, are answered here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from klein import Klein
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request
from werkzeug.exceptions import BadHost, MethodNotAllowed, NotFound

from pgstatus.http.answer import EMPTY_404, EMPTY_405, NOT_READY, Response, error, text
from pgstatus.http.params import parse_query, wants_json
from pgstatus.http.responses import Renderer
from pgstatus.http.routes import ROUTES
from pgstatus.logging.throttle import Throttle
from pgstatus.model.status import View

if TYPE_CHECKING:
    from pgstatus.http.hub import Hub

log = Logger(namespace="pgstatus.http")

FOLLOWING_ANOTHER = error(409, "this pg-status follows another instance; follow a hub instead")
#: ``/follow/check`` serves followers only: it brings checks forward
NO_FOLLOWERS = error(409, "no follower stream is open on this pg-status; "
                          "/follow/check serves its followers")
OK_TEXT = text("OK")
INVALID_INDEX = error(400, "Invalid index")
INTERNAL_ERROR = error(500, "internal error")
BAD_HOST = error(400, "Invalid Host header")
#: the ``Host`` a request without one is routed with when the listener's
#: address names no host (a UNIX socket); see :func:`_name_the_host`
NO_HOST = b"localhost"
EVENT_STREAM_HEAD = Response(200, b"text/event-stream", b"")
_DIGITS = re.compile(r"[0-9]+")

METHODS = ("GET", "HEAD")
ALLOW = b"GET, HEAD"
#: seconds between two log lines about failed requests
ERROR_LOG_INTERVAL = 10.0


def raw_query(request: IRequest) -> bytes:
    """
    The request target's query string, as sent.
    """
    _, _, query = request.uri.partition(b"?")
    return query


def accepts_json(request: IRequest) -> bool:
    """
    Whether the request's ``Accept`` header asks for JSON.
    """
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
    # Klein hands twisted.web requests; IRequest does not declare this
    cast(Request, request).defaultContentType = None
    if r.content_type is not None:
        request.setHeader(b"content-type", r.content_type)
    else:
        request.responseHeaders.removeHeader(b"content-type")
    if r.status == 405:
        request.setHeader(b"allow", ALLOW)
    request.setHeader(b"content-length", b"%d" % len(r.body))
    return r.body


def _answering(name: str) -> Callable[[StatusApp, IRequest], bytes | Deferred[bytes]]:
    """
    The handler of a route the answer function answers.
    """
    def handler(self: StatusApp, request: IRequest) -> bytes | Deferred[bytes]:
        return self.serve(name, request)

    handler.__name__ = "answer_" + name
    return handler


class StatusApp:
    """
    The pg-status HTTP API.

    :param renderer: the answer function's owner (answers from the view).
    :param metrics: renders ``/metrics``; ``None``: 404.
    :param hub: returns the followers' streams, made at the first
        ``/follow`` request; ``None`` on a follower, which refuses
        ``/follow``.
    :param check_soon: ``(host_index) -> None``: an extra check asked for by
        a follower (``/follow/check``).
    :param followers: the number of ``/follow`` streams open now;
        ``/follow/check`` is answered only while there is one.
    :param clock: for the rate limit of error log lines.
    """

    app = Klein()

    for _route in ROUTES:
        if _route.from_view:
            app.route(_route.path, methods=METHODS)(_answering(_route.name))
    del _route

    def __init__(self, renderer: Renderer, *,
                 metrics: Callable[[], Response] | None = None,
                 hub: Callable[[], Hub] | None = None,
                 check_soon: Callable[[int], None] | None = None,
                 followers: Callable[[], int] = lambda: 0,
                 clock: Any = None) -> None:
        self.renderer = renderer
        self.metrics = metrics
        self.hub = hub
        self.check_soon = check_soon
        self.followers = followers
        self._errors = Throttle(clock, ERROR_LOG_INTERVAL)

    def current(self) -> View:
        """
        The published view.
        """
        return self.renderer.current()

    def counter(self, route: str) -> Callable[[int], None]:
        """
        Counts answers of ``route`` by status (for ``/metrics``).
        """
        count = self.renderer.count
        return lambda status: count(route, status)

    def resource(self) -> IResource:
        """
        The ``twisted.web`` resource serving this API.
        """
        return _Guard(cast(IResource, self.app.resource()), self)

    def serve(self, route: str, request: IRequest) -> bytes | Deferred[bytes]:
        """
        Answer ``request`` for ``route`` with what the answer function gives.
        """
        r = self.renderer.answer(route, raw_query(request), accepts_json(request))
        count = self.counter(route)
        if isinstance(r, Deferred):
            return r.addCallback(lambda answer: send(request, answer, count))
        return send(request, r, count)

    @app.route("/openapi.json", methods=METHODS)
    def openapi(self, request: IRequest) -> bytes:
        # imported (the document built) on the first request: tools ask for
        # it now and then, and it would hold ~0.6 MiB of every sidecar
        from pgstatus.http.openapi import RESPONSE

        return send(request, RESPONSE, self.counter("openapi.json"))

    @app.route("/metrics", methods=METHODS)
    def metrics_route(self, request: IRequest) -> bytes:
        r = self.metrics() if self.metrics is not None else EMPTY_404
        return send(request, r, self.counter("metrics"))

    @app.route("/follow", methods=METHODS)
    def follow(self, request: IRequest) -> bytes | Deferred[bytes]:
        """
        Follower mode's stream of this instance's view (Server-Sent Events).
        """
        count = self.counter("follow")
        if self.hub is None:
            return send(request, FOLLOWING_ANOTHER, count)
        if not self.current().ready:
            return send(request, NOT_READY, count)
        if request.method == b"HEAD":
            return send(request, EVENT_STREAM_HEAD, count)
        count(200)
        # fires when the hub closes the stream; Klein cancels it if the
        # follower goes away first
        return self.hub().subscribe(cast(Request, request))

    @app.route("/follow/check", methods=METHODS)
    def follow_check(self, request: IRequest) -> bytes:
        """
        A follower's request for an extra check of one host (its ``wait_ms``
        reads): ``?index=<position in pg_status__hosts>``.  Only a hub with a
        follower stream open answers it, so that not every client of every
        instance can bring checks forward; the monitor caps the checks
        (see :meth:`pgstatus.monitor.scheduler.HostMonitor.check_soon`).
        """
        count = self.counter("follow")
        if self.hub is None or self.check_soon is None:
            return send(request, FOLLOWING_ANOTHER, count)
        view = self.current()
        if not view.ready:
            return send(request, NOT_READY, count)
        if not self.followers():
            return send(request, NO_FOLLOWERS, count)
        value = parse_query(raw_query(request)).get("index", "")
        if not _DIGITS.fullmatch(value):
            return send(request, INVALID_INDEX, count)
        if len(value) > 9 or int(value) >= len(view.hosts):
            return send(request, EMPTY_404, count)
        self.check_soon(int(value))
        return send(request, OK_TEXT, count)

    @app.handle_errors(NotFound)
    def not_found(self, request: IRequest, failure: Failure) -> bytes:
        return send(request, EMPTY_404, self.counter("other"))

    @app.handle_errors(MethodNotAllowed)
    def not_allowed(self, request: IRequest, failure: Failure) -> bytes:
        return send(request, EMPTY_405, self.counter("other"))

    @app.handle_errors(Exception)
    def internal_error(self, request: IRequest, failure: Failure) -> bytes:
        """
        A request that failed: one line (no traceback: what a client sends
        must not fill the log), at most one per :data:`ERROR_LOG_INTERVAL`,
        with the number of failures since the last line.
        """
        failures = self._errors.due()
        if failures:
            log.error("request failed path={path} error={error} failures={failures}",
                      path=request.path.decode("latin-1", "replace")[:200],
                      error=f"{type(failure.value).__name__}: {failure.getErrorMessage()}"[:200],
                      failures=failures)
        return send(request, INTERNAL_ERROR, self.counter("other"))

    def failed(self, request: IRequest, failure: Failure) -> bytes:
        """
        The answer to a request whose routing itself failed (see
        :class:`_Guard`).
        """
        return self.internal_error(request, failure)


class _Guard(Resource):
    """
    Klein's resource, with the requests it cannot route answered rather
    than raised: a path that is not UTF-8 names no route (404, as any
    unknown path), a ``Host`` header Klein cannot read is a bad request
    (400), a request without ``Host`` on a UNIX socket is routed as on TCP,
    and any other error is answered by :meth:`StatusApp.failed`.
    Without this, twisted.web would log such a request as a critical
    error with a traceback.
    """

    isLeaf = True

    def __init__(self, inner: IResource, api: StatusApp) -> None:
        super().__init__()
        self._inner = inner
        self._api = api

    def render(self, request: IRequest) -> Any:
        try:
            request.path.decode("utf-8")
        except UnicodeDecodeError:
            return send(request, EMPTY_404, self._api.counter("other"))
        try:
            _name_the_host(request)
            request.getRequestHostname().decode("utf-8")
            return self._inner.render(request)
        except (BadHost, UnicodeDecodeError):
            return send(request, BAD_HOST, self._api.counter("other"))
        except Exception:
            return self._api.failed(request, Failure())


def _name_the_host(request: IRequest) -> None:
    """
    Give a request without a ``Host`` header the placeholder
    :data:`NO_HOST` when the local address has no host (a UNIX socket's).
    twisted.web's ``getRequestHostname`` (which Klein calls to route) takes
    the host from the header, else from the local address: without a host
    there it raised ``AttributeError``, and such a request, answered on TCP,
    failed on a UNIX socket.  The answers never show the host.
    """
    if request.getHeader(b"host") is None and not hasattr(request.getHost(), "host"):
        request.requestHeaders.setRawHeaders(b"host", [NO_HOST])
