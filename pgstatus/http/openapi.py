"""
The OpenAPI 3.1 description of the HTTP API, served at ``/openapi.json``.

:data:`DOCUMENT` is plain JSON data (dicts, lists, strings, numbers), built
once when the module is imported, which the service does on the first
request for it (not at start: most sidecars are never asked, and the
document and its schemas hold about 0.6 MiB); :data:`RESPONSE` is its
rendered answer, so serving it costs nothing per request after that.  The document describes what
:mod:`pgstatus.http.responses` answers; ``tests/http/test_openapi.py`` validates the
document and checks real answers of a running service against it.

One extension is used: ``x-empty-body: true`` on a response that has a JSON
body when the request's ``Accept`` lists ``application/json`` and is
otherwise answered with an empty body and no ``Content-Type`` (``404`` of
the host selection endpoints).
"""

from __future__ import annotations

import json
from typing import Any

from pgstatus import __version__
from pgstatus.http.answer import JSON, Response
from pgstatus.http.schemas import (
    APPLICATION_JSON,
    MOST_SYNC_PARAMS,
    PARAMETERS,
    REPLICA_PARAMS,
    RESPONSES,
    SCHEMAS,
    TEXT,
    error_schema,
    json_content,
    schema_ref,
)

#: the methods answered; every other one gets 405
METHODS = ("get", "head")
#: the other methods an OpenAPI 3.1 path item can describe
OTHER_METHODS = ("put", "post", "delete", "options", "patch", "trace")


_HEAD_NOTE = " HEAD: the same status and headers (Content-Type, Content-Length), no body."


def _selection_responses(params: tuple[str, ...]) -> dict[str, Any]:
    """
    The GET responses of a host selection endpoint taking ``params``.
    """
    out: dict[str, Any] = {
        "200": {
            "description": "The chosen host: its name as plain text, or, when `Accept` lists "
                           "`application/json`, a JSON object with its locality.",
            "content": {
                TEXT: {"schema": schema_ref("schemas", "HostName"), "example": "host-2"},
                APPLICATION_JSON: {"schema": schema_ref("schemas", "HostChoice")},
            },
        },
        "404": {
            "description": "No host fits and there is no master: an empty body without "
                           "Content-Type, or, when `Accept` lists `application/json`, "
                           "`{\"host\": null, \"dc\": null, \"geo\": null}`.",
            "content": json_content(schema_ref("schemas", "NoHost")),
            "x-empty-body": True,
        },
        "503": schema_ref("responses", "NotReady"),
        "500": schema_ref("responses", "InternalError"),
    }
    if params:
        out["400"] = {
            "description": "An invalid parameter value; the first invalid one in the order "
                           + ", ".join(f"`{p}`" for p in params) + " is named.",
            "content": json_content(error_schema(*(f"Invalid {p}" for p in params))),
        }
    return dict(sorted(out.items()))


def _text(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {TEXT: {"schema": schema}}}


#: path -> (tag, summary, description, parameter names, GET responses)
_ENDPOINTS: dict[str, tuple[str, str, str, tuple[str, ...], dict[str, Any]]] = {
    "/master": (
        "selection", "The master",
        "The selected master: fully responsive masters first, then possibly dead ones; "
        "with several, the first in `pg_status__hosts`. Query parameters are ignored.",
        (), _selection_responses(()),
    ),
    "/replica": (
        "selection", "A replica",
        "A live replica matching the optional limits, by locality preference and "
        "round-robin (or `key`); healthy replicas before possibly dead ones. Without "
        "limits any live replica. When none matches: the master.",
        REPLICA_PARAMS, _selection_responses(REPLICA_PARAMS),
    ),
    "/sync_by_time": (
        "selection", "A replica within the time lag limit",
        "A replica with `lag_ms` within `lag_ms` (default `pg_status__sync_max_lag_ms`), "
        "by locality preference and round-robin (or `key`); otherwise the master.",
        REPLICA_PARAMS, _selection_responses(REPLICA_PARAMS),
    ),
    "/sync_by_bytes": (
        "selection", "A replica within the byte lag limit",
        "A replica with `lag_bytes` within `lag_bytes` (default "
        "`pg_status__sync_max_lag_bytes`), by locality preference and round-robin (or `key`); "
        "otherwise the master.",
        REPLICA_PARAMS, _selection_responses(REPLICA_PARAMS),
    ),
    "/sync_by_time_or_bytes": (
        "selection", "A replica within either lag limit",
        "A replica within the time or the byte limit (defaults: the global thresholds), "
        "by locality preference and round-robin (or `key`); otherwise the master.",
        REPLICA_PARAMS, _selection_responses(REPLICA_PARAMS),
    ),
    "/sync_by_time_and_bytes": (
        "selection", "A replica within both lag limits",
        "A replica within the time and the byte limit (defaults: the global thresholds), "
        "by locality preference and round-robin (or `key`); otherwise the master.",
        REPLICA_PARAMS, _selection_responses(REPLICA_PARAMS),
    ),
    "/most_sync_by_bytes": (
        "selection", "The replica with the smallest byte lag",
        "The replica with the smallest `lag_bytes` within `lag_bytes` (default "
        "`pg_status__sync_max_lag_bytes`) and the optional `min_lsn` and `timeline`; "
        "ties by host order, no locality. Otherwise the master.",
        MOST_SYNC_PARAMS, _selection_responses(MOST_SYNC_PARAMS),
    ),
    "/hosts": (
        "status", "Every host",
        "Every configured host in `pg_status__hosts` order. Query parameters are ignored.",
        (), {
            "200": {
                "description": "One object per configured host.",
                "content": json_content(
                    {"type": "array", "items": schema_ref("schemas", "HostsItem")}),
            },
            "503": schema_ref("responses", "NotReady"),
            "500": schema_ref("responses", "InternalError"),
        },
    ),
    "/status": (
        "status", "One host",
        "The `/hosts` object of one host, without `host`. With the name given twice, the "
        "first counts.",
        ("host",), {
            "200": {
                "description": "The host's status.",
                "content": json_content(schema_ref("schemas", "HostStatus")),
            },
            "400": {
                "description": "No `host` parameter.",
                "content": json_content(error_schema("Get parameter 'host' wasn't passed")),
            },
            "404": {"description": "The host is not monitored. Empty body."},
            "503": schema_ref("responses", "NotReady"),
            "500": schema_ref("responses", "InternalError"),
        },
    ),
    "/version": (
        "service", "The version",
        "The pg-status version, also during startup.",
        (), {
            "200": _text({"type": "string", "minLength": 1}, "The version."),
            "500": schema_ref("responses", "InternalError"),
        },
    ),
    "/live": (
        "service", "Liveness",
        "`OK` as soon as the HTTP server runs, whatever PostgreSQL does.",
        (), {
            "200": _text({"type": "string", "const": "OK"}, "The HTTP server runs."),
            "500": schema_ref("responses", "InternalError"),
        },
    ),
    "/ready": (
        "service", "Readiness",
        "`OK` once every host has completed its first check (successfully or not); "
        "later outages do not make pg-status unready. `503` again during a delayed "
        "stop (`pg_status__shutdown_delay_ms`), so that load balancers send new "
        "clients elsewhere.",
        (), {
            "200": _text({"type": "string", "const": "OK"}, "Every host was checked."),
            "503": schema_ref("responses", "NotReadyOrShuttingDown"),
            "500": schema_ref("responses", "InternalError"),
        },
    ),
    "/metrics": (
        "service", "Prometheus metrics",
        "Host states, lags, timelines, check durations, connection opens, request "
        "counts by route and status, and replica-to-master fallbacks by reason, in the "
        "Prometheus text exposition format 0.0.4. Answered also during startup.",
        (), {
            "200": {
                "description": "The metrics.",
                "content": {"text/plain; version=0.0.4; charset=utf-8": {
                    "schema": {"type": "string", "minLength": 1}}},
            },
            "500": schema_ref("responses", "InternalError"),
        },
    ),
    "/follow": (
        "follow", "The view, streamed to followers",
        "Follower mode's stream (Server-Sent Events, `text/event-stream`): a `snapshot` "
        "event at once and after every change of this instance's view, each a complete "
        "`FollowSnapshot` (see the schemas) in its `data` line, and a `heartbeat` event "
        "(`{\"version\": N}`) every half second. The stream stays open until either side "
        "closes it; a follower that does not keep reading is disconnected. An instance "
        "that follows another refuses (`409`): no chains.",
        (), {
            "200": {
                "description": "The event stream (HEAD: its headers only).",
                "content": {"text/event-stream": {
                    "schema": {"type": "string"},
                    "x-event-data": {"snapshot": schema_ref("schemas", "FollowSnapshot"),
                                     "heartbeat": {"type": "object",
                                                   "required": ["version"]}},
                }},
            },
            "409": schema_ref("responses", "FollowsAnother"),
            "503": schema_ref("responses", "NotReady"),
            "500": schema_ref("responses", "InternalError"),
        },
    ),
    "/follow/check": (
        "follow", "An extra check, asked by a follower",
        "Brings the host's next check forward, for a follower's `wait_ms` reads; the "
        "result arrives in the next snapshots of `/follow`. Answered only while a "
        "follower stream is open here. One cap per host for these and fresh reads: a "
        "check starts no sooner than `pg_status__extra_check_interval_ms` (20 ms) after "
        "the previous one started; a running or already due check answers the request, "
        "and a dead host gets none beyond its schedule.",
        ("index",), {
            "200": _text({"type": "string", "const": "OK"},
                         "Asked: the check is under way, due or capped."),
            "400": {
                "description": "`index` missing or not a number.",
                "content": json_content(error_schema("Invalid index")),
            },
            "404": {"description": "No host at that index. Empty body."},
            "409": schema_ref("responses", "NotServingFollowers"),
            "503": schema_ref("responses", "NotReady"),
            "500": schema_ref("responses", "InternalError"),
        },
    ),
    "/openapi.json": (
        "service", "This document",
        "The OpenAPI 3.1 description of this API, also during startup.",
        (), {
            "200": {
                "description": "The OpenAPI document.",
                "content": json_content(
                    {"type": "object", "required": ["openapi", "info", "paths"]}),
            },
            "500": schema_ref("responses", "InternalError"),
        },
    ),
}


def _operation_id(method: str, path: str) -> str:
    name = path.strip("/").replace(".", "_")
    return f"{method}_{name}"


def _head(responses: dict[str, Any]) -> dict[str, Any]:
    """
    The HEAD variant of GET responses: same codes, no body.
    """
    out: dict[str, Any] = {}
    for code, r in responses.items():
        if "$ref" in r:
            r = RESPONSES[r["$ref"].rsplit("/", 1)[1]]
        out[code] = {"description": r["description"] + _HEAD_NOTE}
    return out


def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for path, (tag, summary, description, params, responses) in _ENDPOINTS.items():
        item: dict[str, Any] = {}
        if params:
            item["parameters"] = [schema_ref("parameters", p) for p in params]
        item["get"] = {
            "tags": [tag],
            "operationId": _operation_id("get", path),
            "summary": summary,
            "description": description,
            "responses": responses,
        }
        item["head"] = {
            "tags": [tag],
            "operationId": _operation_id("head", path),
            "summary": summary + " (headers only)",
            "description": description + _HEAD_NOTE,
            "responses": _head(responses),
        }
        for method in OTHER_METHODS:
            item[method] = {
                "tags": [tag],
                "operationId": _operation_id(method, path),
                "summary": f"{method.upper()} is not allowed",
                "responses": {"405": schema_ref("responses", "MethodNotAllowed")},
            }
        paths[path] = item
    return paths


DESCRIPTION = """\
pg-status watches a set of PostgreSQL servers and answers which host is the \
master and which replica to read from, from memory.

- Every path answers GET and HEAD; any other method gets `405` with \
`Allow: GET, HEAD` and an empty body. Unknown paths get `404` with an empty body.
- Host selection endpoints answer the host name as `text/plain; charset=utf-8`, \
or JSON when the `Accept` header lists `application/json`.
- Until every host has completed its first check, `/ready` and every host \
endpoint answer `503 {"error_text": "pg_monitor is not ready"}`, before any \
parameter is validated.
- Of a repeated query parameter the first value counts; unknown parameters are \
ignored.
- On any path: a request head over 16 KiB is refused at once with `431` \
and `{"error_text": "request head too large"}`, a request body over 16 KiB \
with `413` and `{"error_text": "request body too large"}`; a request twisted.web cannot \
parse gets its `400` (empty body) and a close; a connection over \
`pg_status__http_max_connections` (or the lower cap the open-files limit \
leaves, logged at start) gets `503` with an empty body and is closed.
"""

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "pg-status",
        "version": __version__,
        "summary": "PostgreSQL master, replicas and replica lag over HTTP",
        "description": DESCRIPTION,
        "license": {"name": "MIT", "identifier": "MIT"},
    },
    "tags": [
        {"name": "selection", "description": "Which host to use."},
        {"name": "status", "description": "What pg-status knows about each host."},
        {"name": "service", "description": "pg-status itself."},
        {"name": "follow", "description": "Follower mode: other pg-status instances that "
                                          "mirror this one's view (`pg_status__follow`)."},
    ],
    "paths": _paths(),
    "components": {
        "schemas": SCHEMAS,
        "parameters": PARAMETERS,
        "responses": RESPONSES,
    },
}

#: ``/openapi.json``, rendered once
RESPONSE = Response(200, JSON, json.dumps(DOCUMENT, separators=(",", ":")).encode())
