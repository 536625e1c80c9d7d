"""
An HTTP answer as plain data (:class:`Response`), the fixed answers every
route shares, and a host rendered as ``/hosts`` and ``/status`` show it.
Both front ends (the Klein app and the fast path) send these values, so
they cannot disagree on bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pgstatus.http.params import format_lsn
from pgstatus.model.status import HostStatus

TEXT = b"text/plain; charset=utf-8"
JSON = b"application/json"


@dataclass(frozen=True, slots=True)
class Response:
    """
    An HTTP answer: status code, ``Content-Type`` (``None`` for an empty
    body) and body.
    """

    status: int
    content_type: bytes | None
    body: bytes

    # Hash by identity (C speed): responses are memoised objects, and the
    # HTTP layer's per-response caches only need identity; equality still
    # compares the fields.
    __hash__ = object.__hash__


def json_response(status: int, obj: object) -> Response:
    """
    A JSON response.
    """
    return Response(status, JSON, json.dumps(obj).encode())


def error(status: int, text: str) -> Response:
    """
    ``{"error_text": text}`` with ``status``.
    """
    return json_response(status, {"error_text": text})


def text(body: str, status: int = 200) -> Response:
    """
    A plain-text response.
    """
    return Response(status, TEXT, body.encode())


EMPTY_404 = Response(404, None, b"")
EMPTY_405 = Response(405, None, b"")
NOT_READY = error(503, "pg_monitor is not ready")
#: ``/ready`` during a delayed stop (``pg_status__shutdown_delay_ms``)
SHUTTING_DOWN = error(503, "pg-status is shutting down")
OK = text("OK")
NO_HOST_JSON = json_response(404, {"host": None, "dc": None, "geo": None})
NO_STATUS_HOST = error(400, "Get parameter 'host' wasn't passed")


def host_json(h: HostStatus, with_name: bool = True, extras: bool = False) -> dict[str, Any]:
    """
    One host as ``/hosts`` and ``/status`` show it.

    :param extras: add ``sync_note`` (why a replica is out of the sync
        set), only when hysteresis or a serving floor is configured.
    """
    d: dict[str, Any] = {"host": h.name} if with_name else {}
    d["dc"] = h.dc
    d["geo"] = h.geo
    d["master"] = h.master
    d["alive"] = h.alive
    d["possible_dead"] = h.possible_dead
    d["lag_ms"] = h.lag_ms
    d["sync_by_time"] = h.sync_by_time
    d["lag_bytes"] = h.lag_bytes
    d["sync_by_bytes"] = h.sync_by_bytes
    d["lsn"] = None if h.lsn is None else format_lsn(h.lsn)
    if extras:
        d["sync_note"] = h.sync_note
    return d
