"""
Building the HTTP API in tests, as the service wiring does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config
from pgstatus.http.api import StatusAPI
from pgstatus.http.responses import Renderer
from pgstatus.model.status import View


def make_api(current: Callable[[], View], config: Config, version: str,
             fresh: Any = None, **kwargs: Any) -> StatusAPI:
    """
    A :class:`StatusAPI` over ``current`` with a fixed ``config``.
    """
    return StatusAPI(Renderer(current, ConfigProvider(config), version, fresh), **kwargs)
