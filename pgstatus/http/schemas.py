"""
The OpenAPI document's components: the schemas of the answers, the query
parameters and the shared responses, referred to by the paths of
:mod:`pgstatus.http.openapi`.
"""

from __future__ import annotations

from typing import Any

from pgstatus.http.params import MAX_KEY, MAX_TIMELINE, MAX_U64, MAX_WAIT_MS

TEXT = "text/plain; charset=utf-8"
APPLICATION_JSON = "application/json"

def schema_ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def error_schema(*texts: str) -> dict[str, Any]:
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


def json_content(schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
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
        "oneOf": [schema_ref("schemas", "Lsn"), {"type": "null"}],
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
        props["host"] = {**schema_ref("schemas", "HostName"),
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
            "host": schema_ref("schemas", "HostName"),
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
                    "host": schema_ref("schemas", "HostName"),
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
REPLICA_PARAMS = ("lag_ms", "lag_bytes", "min_lsn", "timeline", "wait_ms", "key")
#: /most_sync_by_bytes takes no session key
MOST_SYNC_PARAMS = REPLICA_PARAMS[:-1]


# -- responses -----------------------------------------------------------

RESPONSES: dict[str, Any] = {
    "FollowsAnother": {
        "description": "This instance follows another one (follower mode): it is no hub.",
        "content": json_content(error_schema(
            "this pg-status follows another instance; follow a hub instead")),
    },
    "NotServingFollowers": {
        "description": "This instance follows another one (follower mode), or no follower "
                       "stream (`/follow`) is open on it: only a hub's followers may ask for "
                       "extra checks.",
        "content": json_content(error_schema(
            "this pg-status follows another instance; follow a hub instead",
            "no follower stream is open on this pg-status; /follow/check serves its "
            "followers")),
    },
    "NotReady": {
        "description": "Not every host has completed its first check yet. Answered before "
                       "any parameter is validated, whatever the `Accept` header.",
        "content": json_content(error_schema("pg_monitor is not ready")),
    },
    "NotReadyOrShuttingDown": {
        "description": "Not every host has completed its first check yet, or a delayed stop "
                       "is under way (`pg_status__shutdown_delay_ms`: every other endpoint "
                       "still answers until the stop).",
        "content": json_content(error_schema("pg_monitor is not ready",
                                             "pg-status is shutting down")),
    },
    "InternalError": {
        "description": "The request failed inside pg-status (logged); the service keeps "
                       "serving.",
        "content": json_content(error_schema("internal error")),
    },
    "MethodNotAllowed": {
        "description": "Only GET and HEAD are answered. Empty body.",
        "headers": {
            "Allow": {"required": True, "schema": {"type": "string", "const": "GET, HEAD"}},
        },
    },
}
