"""
The Klein application of the HTTP API, bound to a
:class:`~pgstatus.api.StatusAPI` (``StatusAPI.app``): every route, the
answers for unknown paths and methods, and ``/openapi.json`` and
``/metrics``, which only Klein serves.

Imported at first use (see :meth:`pgstatus.fastpath.FastSite.web`).
"""

from __future__ import annotations

from typing import Any

from klein import Klein
from twisted.internet.defer import Deferred
from twisted.logger import Logger, LogLevel
from twisted.web.iweb import IRequest
from werkzeug.exceptions import MethodNotAllowed, NotFound

from pgstatus.api import METHODS, StatusAPI, _accepts_json, first_args, send
from pgstatus.openapi import RESPONSE as OPENAPI
from pgstatus.responses import EMPTY_404, EMPTY_405, REPLICA_ROUTES, error

log = Logger(namespace="pgstatus.http")

#: bound to a StatusAPI when read through it: handlers get it as ``api``
app = Klein()


@app.route("/master", methods=METHODS)
def master(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.master(_accepts_json(request)), api._counter("master"))


@app.route(f"/<any({', '.join(sorted(REPLICA_ROUTES))}):route>", methods=METHODS)
def replica(api: StatusAPI, request: IRequest, route: str) -> bytes | Deferred[bytes]:
    r = api.renderer.replica(route, first_args(request), _accepts_json(request))
    count = api._counter(route)
    if isinstance(r, Deferred):
        return r.addCallback(lambda answer: send(request, answer, count))
    return send(request, r, count)


@app.route("/hosts", methods=METHODS)
def hosts(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.hosts(), api._counter("hosts"))


@app.route("/status", methods=METHODS)
def status(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.status(first_args(request).get("host")),
                api._counter("status"))


@app.route("/version", methods=METHODS)
def version(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.version, api._counter("version"))


@app.route("/live", methods=METHODS)
def live(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.live(), api._counter("live"))


@app.route("/ready", methods=METHODS)
def ready(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, api.renderer.ready(), api._counter("ready"))


@app.route("/openapi.json", methods=METHODS)
def openapi(api: StatusAPI, request: IRequest) -> bytes:
    return send(request, OPENAPI, api._counter("openapi.json"))


@app.route("/metrics", methods=METHODS)
def metrics(api: StatusAPI, request: IRequest) -> bytes:
    r = api.metrics_source() if api.metrics_source is not None else EMPTY_404
    return send(request, r, api._counter("metrics"))


@app.handle_errors(NotFound)
def not_found(api: StatusAPI, request: IRequest, failure: Any) -> bytes:
    return send(request, EMPTY_404, api._counter("other"))


@app.handle_errors(MethodNotAllowed)
def not_allowed(api: StatusAPI, request: IRequest, failure: Any) -> bytes:
    return send(request, EMPTY_405, api._counter("other"))


@app.handle_errors(Exception)
def internal_error(api: StatusAPI, request: IRequest, failure: Any) -> bytes:
    log.failure("request failed path={path}", failure, level=LogLevel.error,
                path=request.path.decode("latin-1", "replace"))
    return send(request, error(500, "internal error"), api._counter("other"))
