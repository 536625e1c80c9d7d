"""
The API's one route table: every path it serves, the name its answers are
counted under, and whether the answer function
(:meth:`~pgstatus.http.responses.Renderer.answer`) answers it from the
published view alone.  The Klein application registers its routes from
this table, and the answer cache in front of twisted.web answers only the
paths the table marks, so the two cannot disagree on what exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from pgstatus.http.params import REPLICA_ROUTES


@dataclass(frozen=True, slots=True)
class Route:
    """
    One path of the API.

    :ivar path: the path, e.g. ``/master``.
    :ivar name: the answer function's route and the ``/metrics`` label.
    :ivar from_view: answered by the answer function from the view and the
        query alone (so the answer cache may answer it too); other routes have
        handlers of their own in the Klein application.
    """

    path: str
    name: str
    from_view: bool = True


ROUTES: tuple[Route, ...] = (
    Route("/master", "master"),
    *(Route("/" + r, r) for r in sorted(REPLICA_ROUTES)),
    Route("/hosts", "hosts"),
    Route("/status", "status"),
    Route("/version", "version"),
    Route("/live", "live"),
    Route("/ready", "ready"),
    Route("/openapi.json", "openapi.json", from_view=False),
    Route("/metrics", "metrics", from_view=False),
    Route("/follow", "follow", from_view=False),
    Route("/follow/check", "follow", from_view=False),
)

#: the paths the answer function answers, as bytes, to their route names
FROM_VIEW: dict[bytes, str] = {r.path.encode("ascii"): r.name for r in ROUTES if r.from_view}
