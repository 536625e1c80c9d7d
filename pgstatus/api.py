"""
The HTTP API bound to a monitor's published view: the
:class:`~pgstatus.responses.Renderer` the fast path answers from, and the
Klein application (:mod:`pgstatus.webapp`) for everything else, imported at
first use.

Every Klein handler is a thin adapter from a Klein request to the renderer,
which owns what is answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pgstatus.config import Config
from pgstatus.freshness import FreshReads
from pgstatus.responses import Renderer, Response, wants_json
from pgstatus.state import View

if TYPE_CHECKING:
    from twisted.web.iweb import IRequest

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


class _LazyApp:
    """
    ``StatusAPI.app``: the Klein application of :mod:`pgstatus.webapp`,
    imported when first used (Klein and werkzeug cost several MiB that a
    process answering only the fast path's routes never needs).
    """

    def __get__(self, instance: Any, owner: Any) -> Any:
        from pgstatus.webapp import app

        return app.__get__(instance, owner)


class StatusAPI:
    """
    The pg-status HTTP API.

    :param current: returns the monitor's current :class:`View`.
    :param config: the service configuration.
    :param version: served by ``/version``.
    """

    #: the Klein application (imported at first use)
    app: Any = _LazyApp()

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
