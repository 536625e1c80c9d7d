"""
The OpenAPI 3.1 description of the HTTP API, served at ``/openapi.json``.

:data:`DOCUMENT` is plain JSON data (dicts, lists, strings, numbers), built
once when the module is imported; :data:`RESPONSE` is its rendered answer,
so serving it costs nothing per request.  The document describes what
:mod:`pgstatus.responses` answers; ``tests/test_openapi.py`` validates the
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
from pgstatus.responses import JSON, MAX_KEY, MAX_TIMELINE, MAX_U64, MAX_WAIT_MS, Response

TEXT = "text/plain; charset=utf-8"
APPLICATION_JSON = "application/json"

#: the methods answered; every other one gets 405
METHODS = ("get", "head")
#: the other methods an OpenAPI 3.1 path item can describe
OTHER_METHODS = ("put", "post", "delete", "options", "patch", "trace")


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _error(*texts: str) -> dict[str, Any]:
    """
    The schema of ``{"error_text": ...}`` with one of ``texts``.
    """
    text: dict[str, Any] = {"const": texts[0]} if len(texts) == 1 else {"enum": list(texts)}
    return {
        "type": "object",
        "required": ["error_text"],
        "additionalProperties": False,
        "properties": {"error_text": {"type": "string", **text}},
    }


def _json(schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {APPLICATION_JSON: {"schema": schema, **extra}}


# -- schemas -------------------------------------------------------------

_HOST_FIELDS: dict[str, Any] = {
    "dc": {
        "description": "The host's data centre from `pg_status__hosts_dc`, or null.",
        "type": ["string", "null"],
    },
    "geo": {
        "description": "The host's geo from `pg_status__hosts_geo`, or null.",
        "type": ["string", "null"],
    },
    "master": {
        "description": "The host was a master (not in recovery) at its last successful "
                       "check; false for a dead host.",
        "type": "boolean",
    },
    "alive": {
        "description": "False once the host is dead: `pg_status__max_fails` consecutive "
                       "checks failed, or its first check failed.",
        "type": "boolean",
    },
    "possible_dead": {
        "description": "The host's last check failed (true for a dead host too).",
        "type": "boolean",
    },
    "lag_ms": {
        "description": "Time lag in milliseconds; 0 on the master; null when unknown or "
                       "for a dead host.",
        "type": ["integer", "null"],
        "minimum": 0,
    },
    "sync_by_time": {
        "description": "`lag_ms` is known and within `pg_status__sync_max_lag_ms`.",
        "type": "boolean",
    },
    "lag_bytes": {
        "description": "WAL bytes not yet replayed; 0 on the master; null when unknown "
                       "(no master seen, another timeline) or for a dead host.",
        "type": ["integer", "null"],
        "minimum": 0,
    },
    "sync_by_bytes": {
        "description": "`lag_bytes` is known and within `pg_status__sync_max_lag_bytes`.",
        "type": "boolean",
    },
    "lsn": {
        "description": "`pg_current_wal_lsn()` on the master, `pg_last_wal_replay_lsn()` "
                       "on a replica; null when unknown or for a dead host.",
        "oneOf": [_ref("schemas", "Lsn"), {"type": "null"}],
    },
}

#: consistency rules that hold for every host object
_HOST_RULES: list[dict[str, Any]] = [
    {   # a dead host shows no measurements
        "if": {"properties": {"alive": {"const": False}}},
        "then": {"properties": {
            "master": {"const": False}, "lag_ms": {"type": "null"},
            "lag_bytes": {"type": "null"}, "lsn": {"type": "null"},
            "sync_by_time": {"const": False}, "sync_by_bytes": {"const": False},
        }},
    },
    {   # a master has no lag
        "if": {"properties": {"master": {"const": True}}},
        "then": {"properties": {
            "alive": {"const": True}, "lag_ms": {"const": 0}, "lag_bytes": {"const": 0},
            "sync_by_time": {"const": True}, "sync_by_bytes": {"const": True},
        }},
    },
    {   # a sync flag needs a known lag
        "if": {"properties": {"sync_by_time": {"const": True}}},
        "then": {"properties": {"lag_ms": {"type": "integer"}}},
    },
    {
        "if": {"properties": {"sync_by_bytes": {"const": True}}},
        "then": {"properties": {"lag_bytes": {"type": "integer"}}},
    },
]


def _host_object(with_name: bool, description: str) -> dict[str, Any]:
    props: dict[str, Any] = {}
    if with_name:
        props["host"] = {**_ref("schemas", "HostName"),
                         "description": "The host as written in `pg_status__hosts`."}
    props.update(_HOST_FIELDS)
    return {
        "description": description,
        "type": "object",
        "required": list(props),
        "additionalProperties": False,
        "properties": props,
        "allOf": _HOST_RULES,
    }


SCHEMAS: dict[str, Any] = {
    "HostName": {
        "description": "A host name or address as written in `pg_status__hosts`.",
        "type": "string",
        "minLength": 1,
    },
    "Lsn": {
        "description": "A WAL position as PostgreSQL prints it: two hexadecimal numbers, "
                       "upper case, without leading zeros.",
        "type": "string",
        "pattern": "^[0-9A-F]{1,8}/[0-9A-F]{1,8}$",
        "examples": ["0/3000060"],
    },
    "HostChoice": {
        "description": "The chosen host and its locality.",
        "type": "object",
        "required": ["host", "dc", "geo"],
        "additionalProperties": False,
        "properties": {
            "host": _ref("schemas", "HostName"),
            "dc": {"type": ["string", "null"]},
            "geo": {"type": ["string", "null"]},
        },
        "examples": [{"host": "host-2", "dc": "amsterdam", "geo": "europe"}],
    },
    "NoHost": {
        "description": "No host fits and there is no master.",
        "type": "object",
        "required": ["host", "dc", "geo"],
        "additionalProperties": False,
        "properties": {
            "host": {"type": "null"},
            "dc": {"type": "null"},
            "geo": {"type": "null"},
        },
    },
    "HostsItem": _host_object(
        True, "One host in `/hosts`, as of its last successful check: all fields come "
              "from the same check."),
    "HostStatus": _host_object(
        False, "One host in `/status`: the `/hosts` object without `host`."),
    "FollowSnapshot": {
        "description": "The data of a `snapshot` event of `/follow`: the hub's whole view. "
                       "Hosts are identified by name and port and must be the follower's "
                       "`pg_status__hosts` in the same order; locality is not sent (each "
                       "instance uses its own), nor any credential.",
        "type": "object",
        "required": ["format", "version", "ready", "master", "hosts"],
        "properties": {
            "format": {"const": 1},
            "version": {"type": "integer", "minimum": 1,
                        "description": "Increases with every snapshot of this hub process."},
            "ready": {"type": "boolean"},
            "master": {"type": ["integer", "null"], "minimum": 0,
                       "description": "Index of the master the hub selected."},
            "hosts": {"type": "array", "items": {
                "type": "object",
                "required": ["host", "port", "checked", "reached", "alive", "possible_dead",
                             "master", "lag_ms", "lag_bytes", "lsn", "reach", "timeline",
                             "sync_by_time", "sync_by_bytes", "sync_note"],
                "properties": {
                    "host": _ref("schemas", "HostName"),
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                    **{k: {"type": "boolean"} for k in (
                        "checked", "reached", "alive", "possible_dead", "master",
                        "sync_by_time", "sync_by_bytes")},
                    **{k: {"type": ["integer", "null"], "minimum": 0} for k in (
                        "lag_ms", "lag_bytes", "timeline")},
                    "lsn": {"type": ["integer", "null"], "minimum": 0,
                            "description": "The WAL position in bytes."},
                    "reach": {"type": ["integer", "null"], "minimum": 0,
                              "description": "The last position a `min_lsn` may name and be "
                                             "met (`lsn`, or past a page header)."},
                    "sync_note": {"type": ["string", "null"]},
                },
            }},
        },
    },
    "ErrorText": {
        "description": "An error.",
        "type": "object",
        "required": ["error_text"],
        "additionalProperties": False,
        "properties": {"error_text": {"type": "string"}},
    },
}


# -- parameters ----------------------------------------------------------

PARAMETERS: dict[str, Any] = {
    "lag_ms": {
        "name": "lag_ms",
        "in": "query",
        "description": "Time lag limit in milliseconds for this request, overriding "
                       "`pg_status__sync_max_lag_ms`. Used by `/replica` (no limit when "
                       "absent), `/sync_by_time`, `/sync_by_time_or_bytes` and "
                       "`/sync_by_time_and_bytes`; validated but without effect on "
                       "`/sync_by_bytes` and `/most_sync_by_bytes`. An unknown lag meets "
                       "no limit. Leading zeros are accepted. Invalid: `400 Invalid lag_ms`.",
        "required": False,
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_U64},
        "example": 1000,
    },
    "lag_bytes": {
        "name": "lag_bytes",
        "in": "query",
        "description": "Byte lag limit for this request, overriding "
                       "`pg_status__sync_max_lag_bytes`. Used by `/replica` (no limit when "
                       "absent), `/sync_by_bytes`, `/most_sync_by_bytes`, "
                       "`/sync_by_time_or_bytes` and `/sync_by_time_and_bytes`; validated "
                       "but without effect on `/sync_by_time`. An unknown lag meets no "
                       "limit. Leading zeros are accepted. Invalid: `400 Invalid lag_bytes`.",
        "required": False,
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_U64},
        "example": 1000000,
    },
    "min_lsn": {
        "name": "min_lsn",
        "in": "query",
        "description": "Read-your-writes: only a replica on the master's timeline that has "
                       "replayed WAL up to this position matches; otherwise the master. "
                       "Take it from `pg_current_wal_insert_lsn()` after COMMIT returned. "
                       "Invalid: `400 Invalid min_lsn`.",
        "required": False,
        "schema": {"type": "string", "pattern": "^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"},
        "example": "0/3000060",
    },
    "timeline": {
        "name": "timeline",
        "in": "query",
        "description": "The timeline of the write (from `pg_walfile_name()` of the insert "
                       "position): only a replica known to be on it matches. Usually with "
                       "`min_lsn`, also alone. At most 12 characters, leading zeros "
                       "included. Invalid: `400 Invalid timeline`.",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TIMELINE},
        "example": 1,
    },
    "wait_ms": {
        "name": "wait_ms",
        "in": "query",
        "description": "Opt-in (default `pg_status__min_lsn_wait_ms`, 0): when no replica "
                       "meets `min_lsn` yet, check the replicas that are behind at once and "
                       "answer as soon as one qualifies, or with the master after this many "
                       "milliseconds. Without `min_lsn`, and on `/most_sync_by_bytes`, it is "
                       "validated but has no effect. Invalid: `400 Invalid wait_ms`.",
        "required": False,
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS},
        "example": 500,
    },
    "key": {
        "name": "key",
        "in": "query",
        "description": "Opt-in sticky reads: a session key. Among the eligible replicas (after "
                       "filters and locality) the one with the highest rendezvous hash of "
                       "key and host name is chosen instead of the round-robin one, so a "
                       "session keeps its replica while that replica stays eligible. Not on "
                       "`/most_sync_by_bytes`. Invalid (empty or longer than "
                       f"{MAX_KEY} characters): `400 Invalid key`.",
        "required": False,
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY},
        "example": "session-42",
    },
    "index": {
        "name": "index",
        "in": "query",
        "description": "A host's position in `pg_status__hosts`, from 0. Not a number: "
                       "`400 Invalid index`; no such host: `404`.",
        "required": True,
        "schema": {"type": "integer", "minimum": 0},
        "example": 1,
    },
    "host": {
        "name": "host",
        "in": "query",
        "description": "A host as written in `pg_status__hosts`. Missing: `400`; not "
                       "monitored (or empty): `404`.",
        "required": True,
        "schema": {"type": "string"},
        "example": "host-2",
    },
}

#: parameters of /replica and /sync_by_*, in the order they are validated
_REPLICA_PARAMS = ("lag_ms", "lag_bytes", "min_lsn", "timeline", "wait_ms", "key")
#: /most_sync_by_bytes takes no session key
_MOST_SYNC_PARAMS = _REPLICA_PARAMS[:-1]


# -- responses -----------------------------------------------------------

RESPONSES: dict[str, Any] = {
    "FollowsAnother": {
        "description": "This instance follows another one (follower mode): it is no hub.",
        "content": _json(_error(
            "this pg-status follows another instance; follow a hub instead")),
    },
    "NotReady": {
        "description": "Not every host has completed its first check yet. Answered before "
                       "any parameter is validated, whatever the `Accept` header.",
        "content": _json(_error("pg_monitor is not ready")),
    },
    "InternalError": {
        "description": "The request failed inside pg-status (logged); the service keeps "
                       "serving.",
        "content": _json(_error("internal error")),
    },
    "MethodNotAllowed": {
        "description": "Only GET and HEAD are answered. Empty body.",
        "headers": {
            "Allow": {"required": True, "schema": {"type": "string", "const": "GET, HEAD"}},
        },
    },
}

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
                TEXT: {"schema": _ref("schemas", "HostName"), "example": "host-2"},
                APPLICATION_JSON: {"schema": _ref("schemas", "HostChoice")},
            },
        },
        "404": {
            "description": "No host fits and there is no master: an empty body without "
                           "Content-Type, or, when `Accept` lists `application/json`, "
                           "`{\"host\": null, \"dc\": null, \"geo\": null}`.",
            "content": _json(_ref("schemas", "NoHost")),
            "x-empty-body": True,
        },
        "503": _ref("responses", "NotReady"),
        "500": _ref("responses", "InternalError"),
    }
    if params:
        out["400"] = {
            "description": "An invalid parameter value; the first invalid one in the order "
                           + ", ".join(f"`{p}`" for p in params) + " is named.",
            "content": _json(_error(*(f"Invalid {p}" for p in params))),
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
        _REPLICA_PARAMS, _selection_responses(_REPLICA_PARAMS),
    ),
    "/sync_by_time": (
        "selection", "A replica within the time lag limit",
        "A replica with `lag_ms` within `lag_ms` (default `pg_status__sync_max_lag_ms`), "
        "by locality preference and round-robin (or `key`); otherwise the master.",
        _REPLICA_PARAMS, _selection_responses(_REPLICA_PARAMS),
    ),
    "/sync_by_bytes": (
        "selection", "A replica within the byte lag limit",
        "A replica with `lag_bytes` within `lag_bytes` (default "
        "`pg_status__sync_max_lag_bytes`), by locality preference and round-robin (or `key`); "
        "otherwise the master.",
        _REPLICA_PARAMS, _selection_responses(_REPLICA_PARAMS),
    ),
    "/sync_by_time_or_bytes": (
        "selection", "A replica within either lag limit",
        "A replica within the time or the byte limit (defaults: the global thresholds), "
        "by locality preference and round-robin (or `key`); otherwise the master.",
        _REPLICA_PARAMS, _selection_responses(_REPLICA_PARAMS),
    ),
    "/sync_by_time_and_bytes": (
        "selection", "A replica within both lag limits",
        "A replica within the time and the byte limit (defaults: the global thresholds), "
        "by locality preference and round-robin (or `key`); otherwise the master.",
        _REPLICA_PARAMS, _selection_responses(_REPLICA_PARAMS),
    ),
    "/most_sync_by_bytes": (
        "selection", "The replica with the smallest byte lag",
        "The replica with the smallest `lag_bytes` within `lag_bytes` (default "
        "`pg_status__sync_max_lag_bytes`) and the optional `min_lsn` and `timeline`; "
        "ties by host order, no locality. Otherwise the master.",
        _MOST_SYNC_PARAMS, _selection_responses(_MOST_SYNC_PARAMS),
    ),
    "/hosts": (
        "status", "Every host",
        "Every configured host in `pg_status__hosts` order. Query parameters are ignored.",
        (), {
            "200": {
                "description": "One object per configured host.",
                "content": _json({"type": "array", "items": _ref("schemas", "HostsItem")}),
            },
            "503": _ref("responses", "NotReady"),
            "500": _ref("responses", "InternalError"),
        },
    ),
    "/status": (
        "status", "One host",
        "The `/hosts` object of one host, without `host`. With the name given twice, the "
        "first counts.",
        ("host",), {
            "200": {
                "description": "The host's status.",
                "content": _json(_ref("schemas", "HostStatus")),
            },
            "400": {
                "description": "No `host` parameter.",
                "content": _json(_error("Get parameter 'host' wasn't passed")),
            },
            "404": {"description": "The host is not monitored. Empty body."},
            "503": _ref("responses", "NotReady"),
            "500": _ref("responses", "InternalError"),
        },
    ),
    "/version": (
        "service", "The version",
        "The pg-status version, also during startup.",
        (), {
            "200": _text({"type": "string", "minLength": 1}, "The version."),
            "500": _ref("responses", "InternalError"),
        },
    ),
    "/live": (
        "service", "Liveness",
        "`OK` as soon as the HTTP server runs, whatever PostgreSQL does.",
        (), {
            "200": _text({"type": "string", "const": "OK"}, "The HTTP server runs."),
            "500": _ref("responses", "InternalError"),
        },
    ),
    "/ready": (
        "service", "Readiness",
        "`OK` once every host has completed its first check (successfully or not); "
        "later outages do not make pg-status unready.",
        (), {
            "200": _text({"type": "string", "const": "OK"}, "Every host was checked."),
            "503": _ref("responses", "NotReady"),
            "500": _ref("responses", "InternalError"),
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
            "500": _ref("responses", "InternalError"),
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
                    "x-event-data": {"snapshot": _ref("schemas", "FollowSnapshot"),
                                     "heartbeat": {"type": "object",
                                                   "required": ["version"]}},
                }},
            },
            "409": _ref("responses", "FollowsAnother"),
            "503": _ref("responses", "NotReady"),
            "500": _ref("responses", "InternalError"),
        },
    ),
    "/follow/check": (
        "follow", "An extra check, asked by a follower",
        "Checks the host now (unless a check runs or one started within 10 ms), for a "
        "follower's `wait_ms` reads; the result arrives in the next snapshots of "
        "`/follow`.",
        ("index",), {
            "200": _text({"type": "string", "const": "OK"}, "The check is under way."),
            "400": {
                "description": "`index` missing or not a number.",
                "content": _json(_error("Invalid index")),
            },
            "404": {"description": "No host at that index. Empty body."},
            "409": _ref("responses", "FollowsAnother"),
            "503": _ref("responses", "NotReady"),
            "500": _ref("responses", "InternalError"),
        },
    ),
    "/openapi.json": (
        "service", "This document",
        "The OpenAPI 3.1 description of this API, also during startup.",
        (), {
            "200": {
                "description": "The OpenAPI document.",
                "content": _json({"type": "object", "required": ["openapi", "info", "paths"]}),
            },
            "500": _ref("responses", "InternalError"),
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
            item["parameters"] = [_ref("parameters", p) for p in params]
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
                "responses": {"405": _ref("responses", "MethodNotAllowed")},
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
- On any path: a request head over 16 KiB gets `431` and the connection is \
closed; a connection over `pg_status__http_max_connections` gets `503` with an \
empty body and is closed.
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
