"""
The ``twisted.web`` side of the HTTP server: what
:class:`~pgstatus.http.channel.FastChannel` hands a connection to when the fast
path does not answer a request (other methods, unknown paths, ``/metrics``,
``/openapi.json``, requests with a body, ...).

Imported at the first such request, with ``twisted.web.server`` and (through
the resource) Klein: a sidecar asked only the API's routes never loads them.
"""

from __future__ import annotations

from typing import Any

from twisted.web.server import Site


class WebSite(Site):
    """
    A ``Site`` without access log (the API is called on every application
    request), whose channels :class:`~pgstatus.http.channel.FastChannel`
    connects to its transport itself.

    :param idle_timeout: seconds after which an idle connection is closed.
    """

    noisy = False

    def __init__(self, resource: Any, reactor: Any, idle_timeout: float) -> None:
        super().__init__(resource, reactor=reactor, timeout=idle_timeout)

    def log(self, request: Any) -> None:
        """
        No access log.
        """
