"""
The Klein application of the HTTP API, bound to a
:class:`~pgstatus.http.api.StatusAPI` (``StatusAPI.app``): every route, the
answers for unknown paths and methods, and ``/openapi.json`` and
``/metrics``, which only Klein serves.

Imported at first use (see :meth:`pgstatus.http.fastpath.FastSite.web`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

from klein import Klein
from twisted.internet.defer import Deferred
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.server import Request
from werkzeug.exceptions import MethodNotAllowed, NotFound

from pgstatus.http.answer import EMPTY_404, EMPTY_405, NOT_READY, Response, error, text
from pgstatus.http.openapi import RESPONSE as OPENAPI
from pgstatus.http.params import REPLICA_ROUTES, wants_json

#: the handlers' ``api`` is the :class:`~pgstatus.http.api.StatusAPI` the app
#: is read through (not imported here: api imports this module at first use)
StatusAPI = Any

log = Logger(namespace="pgstatus.http")

FOLLOWING_ANOTHER = error(409, "this pg-status follows another instance; follow a hub instead")
OK_TEXT = text("OK")
INVALID_INDEX = error(400, "Invalid index")
EVENT_STREAM_HEAD = Response(200, b"text/event-stream", b"")
_DIGITS = re.compile(r"[0-9]+")

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


#: bound to a StatusAPI when read through it: handlers get it as ``api``
app = Klein()


@app.route("/master", methods=METHODS)
def master(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.master(_accepts_json(request)), api.counter("master"))


@app.route(f"/<any({', '.join(sorted(REPLICA_ROUTES))}):route>", methods=METHODS)
def replica(api: StatusAPI, request: IRequest, route: str) -> bytes | Deferred[bytes]:
    r = api.renderer.replica(route, first_args(request), _accepts_json(request))
    count = api.counter(route)
    if isinstance(r, Deferred):
        return r.addCallback(lambda answer: send(request, answer, count))
    return send(request, r, count)


@app.route("/hosts", methods=METHODS)
def hosts(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.hosts(), api.counter("hosts"))


@app.route("/status", methods=METHODS)
def status(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.status(first_args(request).get("host")),
                api.counter("status"))


@app.route("/version", methods=METHODS)
def version(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.version, api.counter("version"))


@app.route("/live", methods=METHODS)
def live(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.live(), api.counter("live"))


@app.route("/ready", methods=METHODS)
def ready(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.ready(), api.counter("ready"))


@app.route("/openapi.json", methods=METHODS)
def openapi(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, OPENAPI, api.counter("openapi.json"))


@app.route("/metrics", methods=METHODS)
def metrics(api: StatusAPI, request: IRequest) -> bytes:
    r = api.metrics() if api.metrics is not None else EMPTY_404
    return send(request, r, api.counter("metrics"))


@app.route("/follow", methods=METHODS)
def follow(api: StatusAPI, request: IRequest) -> bytes | Deferred[bytes]:
    """
    Follower mode's stream of this instance's view (Server-Sent Events).
    """
    count = api.counter("follow")
    if api.hub is None:
        return send(request, FOLLOWING_ANOTHER, count)
    if not api.current().ready:
        return send(request, NOT_READY, count)
    if request.method == b"HEAD":
        return send(request, EVENT_STREAM_HEAD, count)
    count(200)
    # fires when the hub closes the stream; Klein cancels it if the
    # follower goes away first
    return api.hub().subscribe(request)


@app.route("/follow/check", methods=METHODS)
def follow_check(api: StatusAPI, request: IRequest) -> bytes:
    """
    A follower's request for an extra check of one host (its ``wait_ms``
    reads): ``?index=<position in pg_status__hosts>``.
    """
    count = api.counter("follow")
    if api.hub is None or api.check_soon is None:
        return send(request, FOLLOWING_ANOTHER, count)
    view = api.current()
    if not view.ready:
        return send(request, NOT_READY, count)
    value = first_args(request).get("index", "")
    if not _DIGITS.fullmatch(value):
        return send(request, INVALID_INDEX, count)
    if len(value) > 9 or int(value) >= len(view.hosts):
        return send(request, EMPTY_404, count)
    api.check_soon(int(value))
    return send(request, OK_TEXT, count)


@app.handle_errors(NotFound)
def not_found(self: StatusAPI, request: IRequest, failure: Failure) -> bytes:
    return send(request, EMPTY_404, self.counter("other"))


@app.handle_errors(MethodNotAllowed)
def not_allowed(self: StatusAPI, request: IRequest, failure: Failure) -> bytes:
    return send(request, EMPTY_405, self.counter("other"))


@app.handle_errors(Exception)
def internal_error(self: StatusAPI, request: IRequest, failure: Failure) -> bytes:
    log.failure("request failed path={path}", failure, level=LogLevel.error,
                path=request.path.decode("latin-1", "replace"))
    return send(request, error(500, "internal error"), self.counter("other"))
