"""
A published view as a hub sends it to its followers, and back.

Pure functions between :class:`~pgstatus.model.status.View` and the JSON document
of the ``/follow`` stream.  A snapshot carries every host's state as the
hub's checks measured it (roles, availability, lags, positions, timelines,
sync flags) and which master the hub selected; it carries no credentials
and no locality, which each instance takes from its own configuration.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pgstatus.config.settings import HostConfig
from pgstatus.model.status import HostStatus, View

#: the stream's format; a follower refuses any other
FORMAT = 1

_FIELDS = ("checked", "reached", "alive", "possible_dead", "master", "lag_ms", "lag_bytes",
           "lsn", "replayed_through", "timeline", "sync_by_time", "sync_by_bytes", "sync_note")
#: the stream's names of the fields whose attribute was renamed since the
#: format was defined (the stream keeps its names: hubs and followers of
#: other versions read each other's snapshots)
_WIRE_NAMES = {"replayed_through": "reach"}


class SnapshotError(ValueError):
    """
    A snapshot that cannot be mirrored: malformed, another format, or
    another host list than ours.
    """


def encode(view: View, hosts: Sequence[HostConfig], version: int) -> bytes:
    """
    The view as one line of JSON.

    :param hosts: the hub's configured hosts (names and ports identify them).
    :param version: increases with every snapshot the hub sends.
    """
    doc = {
        "format": FORMAT,
        "version": version,
        "ready": view.ready,
        "master": None if view.master is None else view.master.index,
        "hosts": [
            {"host": h.name, "port": cfg.port,
             **{_WIRE_NAMES.get(f, f): getattr(h, f) for f in _FIELDS}}
            for h, cfg in zip(view.hosts, hosts, strict=True)
        ],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode(data: bytes | str, hosts: Sequence[HostConfig]
           ) -> tuple[int, bool, int | None, tuple[HostStatus, ...]]:
    """
    Parse a snapshot for an instance configured with ``hosts``.

    :return: ``(version, ready, master_index, statuses)``; the statuses carry
        our own ``dc``/``geo``.
    :raise SnapshotError: the snapshot is not usable here.
    """
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise SnapshotError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SnapshotError("unknown snapshot format")
    rows = doc.get("hosts")
    if not isinstance(rows, list) or len(rows) != len(hosts):
        raise SnapshotError("the hub watches another host list")
    statuses = []
    for i, (row, cfg) in enumerate(zip(rows, hosts, strict=True)):
        if not isinstance(row, dict) or row.get("host") != cfg.name or row.get("port") != cfg.port:
            raise SnapshotError(f"the hub's host {i + 1} is not {cfg.name}:{cfg.port}")
        try:
            values = {f: _field(f, row.get(_WIRE_NAMES.get(f, f))) for f in _FIELDS}
        except (TypeError, ValueError) as e:
            raise SnapshotError(f"host {cfg.name}: {e}") from None
        statuses.append(HostStatus(i, cfg.name, cfg.dc, cfg.geo, **values))
    master = doc.get("master")
    if master is not None and not (isinstance(master, int) and 0 <= master < len(hosts)
                                   and statuses[master].alive and statuses[master].master):
        raise SnapshotError("the hub's master is not one of its live masters")
    version, ready = doc.get("version"), doc.get("ready")
    if not isinstance(version, int) or not isinstance(ready, bool):
        raise SnapshotError("no version or readiness")
    return version, ready, master, tuple(statuses)


def _field(name: str, value: Any) -> Any:
    if name in ("lag_ms", "lag_bytes", "lsn", "replayed_through", "timeline"):
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer or null")
        return value
    if name == "sync_note":
        if value is not None and not isinstance(value, str):
            raise ValueError("sync_note must be a string or null")
        return value
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false")
    return value
