"""
The HTTP API bound to the published view: the
:class:`~pgstatus.http.responses.Renderer` that owns every answer, and the
Klein application (:mod:`pgstatus.http.webapp`) that routes to it, imported
at first use.

Every Klein handler is a thin adapter from a Klein request to the renderer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pgstatus.http.answer import Response
from pgstatus.http.responses import Renderer
from pgstatus.model.status import View

if TYPE_CHECKING:
    from pgstatus.http.hub import Hub


class _LazyApp:
    """
    ``StatusAPI.app``: the Klein application of :mod:`pgstatus.http.webapp`,
    imported when first used (a process answering only the fast path's
    routes never needs Klein and werkzeug).
    """

    def __get__(self, instance: Any, owner: Any) -> Any:
        from pgstatus.http.webapp import app

        return app.__get__(instance, owner)


class StatusAPI:
    """
    The pg-status HTTP API.

    :param renderer: renders every answer from the published view.
    :param metrics: renders ``/metrics``; ``None``: 404.
    :param hub: returns the followers' streams, made at the first
        ``/follow`` request; ``None`` on a follower, which refuses
        ``/follow``.
    :param check_soon: ``(host_index) -> None``: an extra check asked for by
        a follower (``/follow/check``).
    """

    #: the Klein application (imported at first use)
    app: Any = _LazyApp()

    def __init__(self, renderer: Renderer, *,
                 metrics: Callable[[], Response] | None = None,
                 hub: Callable[[], Hub] | None = None,
                 check_soon: Callable[[int], None] | None = None) -> None:
        self.renderer = renderer
        self.metrics = metrics
        self.hub = hub
        self.check_soon = check_soon

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

    def resource(self) -> Any:
        """
        The ``twisted.web`` resource serving this API.
        """
        return self.app.resource()
