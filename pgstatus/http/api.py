"""
The HTTP API bound to a monitor's published view: the
:class:`~pgstatus.http.responses.Renderer` the fast path answers from, and the
Klein application (:mod:`pgstatus.http.webapp`) for everything else, imported at
first use.

Every Klein handler is a thin adapter from a Klein request to the renderer,
which owns what is answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgstatus.config.settings import Config
from pgstatus.http.freshness import FreshReads
from pgstatus.http.responses import Renderer, Response
from pgstatus.model.status import View


class _LazyApp:
    """
    ``StatusAPI.app``: the Klein application of :mod:`pgstatus.http.webapp`,
    imported when first used (Klein and werkzeug cost several MiB that a
    process answering only the fast path's routes never needs).
    """

    def __get__(self, instance: Any, owner: Any) -> Any:
        from pgstatus.http.webapp import app

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
        #: makes the followers' streams (:class:`pgstatus.http.hub.Hub`) at the
        #: first ``/follow`` request; ``None`` on a follower (set by the service
        #: wiring)
        self.hub_factory: Callable[[], Any] | None = None
        self._hub: Any = None
        #: ``(host_index) -> None``: an extra check asked for by a follower
        self.check_soon: Callable[[int], None] | None = None
        self._current = current

    @property
    def hub(self) -> Any:
        """
        The followers' streams, made when first asked for (``None`` on a
        follower).
        """
        if self._hub is None and self.hub_factory is not None:
            self._hub = self.hub_factory()
        return self._hub

    def _counter(self, route: str) -> Callable[[int], None]:
        count = self.renderer.count
        return lambda status: count(route, status)

    def resource(self) -> Any:
        """
        The ``twisted.web`` resource serving this API.
        """
        return self.app.resource()
