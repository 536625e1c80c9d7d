"""
The HTTP side's memo of work derived from one published view.

A view changes only when a check completes (or a reload or a hub's snapshot
republishes it), while requests come thousands of times a second: every
answer that depends on the view alone (a host's encoded name, ``/hosts``,
a replica request's plan, the candidate replicas for a set of filters) is
computed once per view and kept here.  The model's :class:`View` stays a
plain immutable value; the memo belongs to the
:class:`~pgstatus.http.responses.Renderer`, which starts a new one when it
sees a new view, so nothing in it can outlive the view it was derived from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pgstatus.http.params import REPLICA_ROUTES
from pgstatus.model.selection import Filters
from pgstatus.model.status import HostStatus, View

if TYPE_CHECKING:
    from pgstatus.http.answer import Response
    from pgstatus.http.plan import Plan

#: plans kept per view for each route and format (distinct queries beyond
#: are planned for every request, which is correct, only slower)
MAX_PLANS = 1024
#: the longest query whose plan is kept (every query the API needs is far
#: shorter; longer ones are planned for every request)
MAX_PLAN_QUERY = 512
#: candidate groups kept per view
MAX_GROUPS = 512


@dataclass(slots=True, eq=False)
class ViewMemo:
    """
    What has been derived from :attr:`view` so far.

    :ivar answers: a host's answer, by ``(host index or -1 for none,
        as_json)``.
    :ivar plans: replica plans (:mod:`pgstatus.http.plan`) by
        ``(route, as_json)`` (every replica route and format, from the
        start), then by the raw query bytes, as both front ends pass them:
        no parsing per request.
    :ivar groups: candidate replicas by ``(route, filters)``.
    :ivar hosts: the ``/hosts`` answer.
    :ivar status_answers: ``/status`` answers by host index.
    """

    view: View
    answers: dict[tuple[int, bool], Response] = field(default_factory=dict)
    plans: dict[tuple[str, bool], dict[bytes, Plan]] = field(default_factory=lambda: {
        (route, as_json): {} for route in REPLICA_ROUTES for as_json in (False, True)})
    groups: dict[tuple[str, Filters], tuple[HostStatus, ...]] = field(default_factory=dict)
    hosts: Response | None = None
    status_answers: dict[int, Response] = field(default_factory=dict)
    _by_name: dict[str, HostStatus] | None = None

    def by_name(self) -> dict[str, HostStatus]:
        """
        The view's hosts by name (the first of a name, in host order).
        """
        table = self._by_name
        if table is None:
            table = {}
            for h in self.view.hosts:
                table.setdefault(h.name, h)
            self._by_name = table
        return table
