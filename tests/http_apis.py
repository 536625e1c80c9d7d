"""
Building the HTTP API and its server in tests, as the service wiring does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config
from pgstatus.http.app import StatusApp
from pgstatus.http.cache import AnswerCache
from pgstatus.http.server import FrontFactory, QuietSite
from pgstatus.http.responses import Renderer
from pgstatus.model.status import View


def make_api(current: Callable[[], View], config: Config, version: str,
             fresh: Any = None, **kwargs: Any) -> StatusApp:
    """
    A :class:`StatusApp` over ``current`` with a fixed ``config``.
    """
    return StatusApp(Renderer(current, ConfigProvider(config), version, fresh), **kwargs)


def query(args: Mapping[str, str] | None = None) -> bytes:
    """
    ``args`` as a client's raw query string (the ``query`` of
    :meth:`Renderer.answer <pgstatus.http.responses.Renderer.answer>`),
    escaped so that :func:`~pgstatus.http.params.parse_query` reads back
    ``args``.
    """
    return urlencode(args or {}).encode()


def make_site(api: StatusApp, reactor: Any, enabled: bool = True,
              **limits: Any) -> Any:
    """
    The HTTP server of ``api`` as the service builds it: the front (answer
    cache, one request at a time into twisted.web) before the Klein site.
    ``enabled=False``: the plain twisted.web site serving the same Klein
    resource with no front at all, the reference the front is held to.
    """
    web = QuietSite(api.resource(), reactor, limits.get("idle_timeout", 60.0))
    if not enabled:
        return web
    cache = AnswerCache(api.renderer.answer, api.renderer.count, reactor)
    return FrontFactory(web, cache, reactor, **limits)
