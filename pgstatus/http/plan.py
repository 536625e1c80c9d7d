"""
What a replica request gets from one view, decided once: a :data:`Plan`.

``/replica``, ``/sync_by_*`` and ``/most_sync_by_bytes`` are the hottest
requests of the service, and their answer depends only on the view, the
configuration and the query string.  The
:class:`~pgstatus.http.responses.Renderer` therefore parses and judges a
query once per view, keeps the resulting plan in its
:class:`~pgstatus.http.memo.ViewMemo` under the raw query bytes, and for
every request only follows the plan: return a fixed answer, take the next
turn of a rotation, count a fallback to the master, or wait for a replica
to catch up.  A plan carries everything following it needs, so nothing is
parsed again per request.  Plans are frozen values of final classes: the
renderer tells them apart by their class alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias, final

from pgstatus.http.answer import Response
from pgstatus.model.selection import Filters


@final
@dataclass(frozen=True, slots=True)
class Fixed:
    """
    Always the same answer: the one qualifying replica, a session key's
    replica, or a 400 for an invalid parameter.
    """

    response: Response


@final
@dataclass(frozen=True, slots=True)
class Rotate:
    """
    Round robin through ``answers``, one per qualifying replica, with the
    rotation of the group whose host indices are ``key``.
    """

    answers: tuple[Response, ...]
    key: tuple[int, ...]


@final
@dataclass(frozen=True, slots=True)
class Fallback:
    """
    The master's ``response`` because no replica qualifies, for ``reason``
    (counted per request for ``/metrics``).
    """

    response: Response
    reason: str


@final
@dataclass(frozen=True, slots=True)
class Wait:
    """
    A ``min_lsn`` request no replica satisfies yet, with a wait: wait up to
    ``wait_ms`` for a view whose group for ``route`` and ``filters`` is not
    empty, asking for extra checks of the replicas that are ``behind``,
    then answer as ``as_json`` asks (the session ``key``'s replica, or the
    next in turn, or the master).
    """

    route: str
    filters: Filters
    key: str | None
    wait_ms: int
    behind: tuple[int, ...]
    as_json: bool


#: a replica request's plan
Plan: TypeAlias = Fixed | Rotate | Fallback | Wait
