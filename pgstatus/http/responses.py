"""
What every endpoint answers, as plain data: a :class:`Response` built from
the current :class:`~pgstatus.model.status.View` and the request's parameters.

Both HTTP front ends (the Klein app and the fast path) render through this
module's one entry, :meth:`Renderer.answer`, so they cannot disagree.  Work
that depends only on the view (``/hosts`` JSON, encoded host names,
candidate lists, and each replica query's :data:`~pgstatus.http.plan.Plan`,
keyed by the raw query bytes) is memoised in a
:class:`~pgstatus.http.memo.ViewMemo` and so done once per state change; a
replica request then costs one lookup and following its plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config
from pgstatus.http.answer import (
    EMPTY_404,
    NO_HOST_JSON,
    NO_STATUS_HOST,
    NOT_READY,
    OK,
    SHUTTING_DOWN,
    Response,
    error,
    host_json,
    json_response,
    text,
)
from pgstatus.http.freshness import FreshReads
from pgstatus.http.memo import MAX_GROUPS, MAX_PLAN_QUERY, MAX_PLANS, ViewMemo
from pgstatus.http.params import (
    REPLICA_ROUTES,
    BadParameter,
    format_lsn,
    parse_filters,
    parse_key,
    parse_query,
    parse_wait,
)
from pgstatus.http.plan import Fallback, Fixed, Plan, Rotate, Wait
from pgstatus.model.selection import (
    Filters,
    Locality,
    RoundRobin,
    candidates,
    fallback_reason,
    local_group,
    most_sync,
    rendezvous,
    replayed,
    with_floor,
)
from pgstatus.model.status import HostStatus, View

log = Logger(namespace="pgstatus.http")
selection_log = Logger(namespace="pgstatus.selection")


def _log_fallback(route: str, reason: str) -> None:
    """
    The original service's debug line for a replica request answered with
    the master.  Logged when the answer is planned (once per view and
    query), not for every request the plan then serves.
    """
    selection_log.debug("master returned instead of replica context={context}",
                        context=f"route=/{route} reason={reason}")


class Renderer:
    """
    Renders every endpoint from the view that ``current`` returns.

    :param current: returns the current :class:`View`.
    :param settings: the running configuration (thresholds, locality, wait).
    :param version: the service version, for ``/version``.
    """

    def __init__(self, current: Callable[[], View], settings: ConfigProvider, version: str,
                 fresh: FreshReads | None = None) -> None:
        self._current = current
        #: returns the current view (the fast path's memo follows it)
        self.current = current
        self._settings = settings
        self._fresh = fresh
        self._memo: ViewMemo | None = None
        self._locality_of: tuple[Config, Locality] | None = None
        self.rr = RoundRobin()
        self.version = text(version)
        #: answered requests by (route, status), counted by the front ends
        self.requests: dict[tuple[str, int], int] = {}
        #: replica requests answered with the master, by reason
        self.fallbacks: dict[str, int] = {}
        #: a delayed stop is under way: ``/ready`` answers 503
        self.draining = False

    def memo(self, view: View) -> ViewMemo:
        """
        The memo of work derived from ``view`` alone, made afresh when the
        view changes (a reload republishes the view, so memoised plans never
        outlive the configuration they were planned with).
        """
        memo = self._memo
        if memo is None or memo.view is not view:
            memo = self._memo = ViewMemo(view)
        return memo

    @property
    def _config(self) -> Config:
        return self._settings.current

    @property
    def _locality(self) -> Locality:
        config = self._settings.current
        known = self._locality_of
        if known is None or known[0] is not config:
            known = self._locality_of = (config, Locality(
                config.current_dc if config.use_dc else None,
                config.current_geo if config.use_geo else None,
            ))
        return known[1]

    def count(self, route: str, status: int) -> None:
        """
        Count one answered request (for ``/metrics``).
        """
        key = (route, status)
        counts = self.requests
        counts[key] = counts.get(key, 0) + 1

    def answer(self, route: str, query: bytes, as_json: bool) -> Response | Deferred[Response]:
        """
        The answer function: what ``route`` (a name of
        :data:`~pgstatus.http.routes.FROM_VIEW`) answers for the raw query
        string ``query`` from the published view.  Both front ends call it;
        a Deferred only for a ``min_lsn`` request that waits for a replica
        (with ``wait_ms``, or the configured ``min_lsn_wait_ms``, on routes
        other than ``/most_sync_by_bytes``: see
        :mod:`pgstatus.http.freshness`).
        """
        if route == "master":
            return self.master(as_json)
        if route in REPLICA_ROUTES:
            view = self._current()
            if not view.ready:
                return NOT_READY
            # one lookup by the raw query string: parsed once per view
            plan = self.memo(view).plans[route, as_json].get(query)
            if plan is None:
                plan = self._planned(view, route, query, as_json)
            return self._follow(plan)
        if route == "hosts":
            return self.hosts()
        if route == "status":
            return self.status(parse_query(query).get("host"))
        if route == "version":
            return self.version
        if route == "live":
            return self.live()
        if route == "ready":
            return self.ready()
        raise KeyError(route)

    # -- host answers --------------------------------------------------
    def _host_answer(self, view: View, h: HostStatus | None, as_json: bool) -> Response:
        answers = self.memo(view).answers
        key = (-1 if h is None else h.index, as_json)
        r = answers.get(key)
        if r is None:
            if h is None:
                r = NO_HOST_JSON if as_json else EMPTY_404
            elif as_json:
                r = json_response(200, {"host": h.name, "dc": h.dc, "geo": h.geo})
            else:
                r = text(h.name)
            answers[key] = r
        return r

    def master(self, as_json: bool) -> Response:
        """
        ``/master``.
        """
        view = self._current()
        if not view.ready:
            return NOT_READY
        return self._host_answer(view, view.master, as_json)

    # -- replica answers: planned once per view and query ---------------
    def _planned(self, view: View, route: str, query: bytes, as_json: bool) -> Plan:
        """
        The plan of a query not yet planned for ``view``, kept in its memo
        (up to :data:`~pgstatus.http.memo.MAX_PLANS` per route and format,
        queries up to :data:`~pgstatus.http.memo.MAX_PLAN_QUERY` bytes).
        """
        plan = self._plan(view, route, parse_query(query), as_json)
        plans = self.memo(view).plans[route, as_json]
        if len(plans) < MAX_PLANS and len(query) <= MAX_PLAN_QUERY:
            plans[query] = plan
        return plan

    def _plan(self, view: View, route: str, args: Mapping[str, str], as_json: bool) -> Plan:
        """
        What a replica request with the arguments ``args`` gets from
        ``view`` (see :mod:`pgstatus.http.plan`).
        """
        try:
            f = parse_filters(route, args, self._config)
            wait = self._wait_ms(route, args, f)
            key = parse_key(route, args)
        except BadParameter as e:
            return Fixed(error(400, str(e)))
        group = self._group(view, route, f)
        if len(group) == 1:
            return Fixed(self._host_answer(view, group[0], as_json))
        if group and key is not None:
            return Fixed(self._host_answer(view, rendezvous(group, key), as_json))
        if group:
            return Rotate(tuple(self._host_answer(view, h, as_json) for h in group),
                          tuple(h.index for h in group))
        min_lsn = f.min_lsn
        if wait and min_lsn is not None and self._fresh is not None:
            behind = tuple(h.index for h in view.hosts
                           if h.alive and not h.master and not replayed(h, min_lsn))
            if behind:
                return Wait(route, f, key, wait, behind, as_json)
        reason = fallback_reason(view, f)
        _log_fallback(route, reason)
        return Fallback(self._host_answer(view, view.master, as_json), reason)

    def _follow(self, plan: Plan) -> Response | Deferred[Response]:
        """
        This request's answer by ``plan``: the one place plans are followed.
        """
        # identity tests of the class (final, so the type checker narrows):
        # the fastest dispatch measured; a match statement was 2-3x slower
        if type(plan) is Rotate:
            answers = plan.answers
            return answers[self.rr.next(plan.key, len(answers))]
        if type(plan) is Fixed:
            return plan.response
        if type(plan) is Fallback:
            counts = self.fallbacks
            counts[plan.reason] = counts.get(plan.reason, 0) + 1
            return plan.response
        return self._wait(plan)

    def _wait(self, plan: Wait) -> Deferred[Response]:
        """
        Wait for a view that has a replica for ``plan``, then answer from it.
        """
        fresh = self._fresh
        # a Wait is planned only with a fresh-read coordinator
        assert fresh is not None
        route, f = plan.route, plan.filters
        d = fresh.wait(lambda v: bool(self._group(v, route, f)), plan.wait_ms / 1000,
                       plan.behind)
        return d.addCallback(lambda _: self._answer_now(route, f, plan.as_json, plan.key))

    def _answer_now(self, route: str, f: Filters, as_json: bool,
                    key: str | None = None) -> Response:
        view = self._current()
        group = self._group(view, route, f)
        if group:
            chosen = rendezvous(group, key) if key is not None else self.rr.pick(group)
            return self._host_answer(view, chosen, as_json)
        reason = fallback_reason(view, f)
        _log_fallback(route, reason)
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1
        return self._host_answer(view, view.master, as_json)

    def _wait_ms(self, route: str, args: Mapping[str, str], f: Filters) -> int:
        v = args.get("wait_ms")
        wait = parse_wait(v) if v is not None else self._config.min_lsn_wait_ms
        if f.min_lsn is None or route == "most_sync_by_bytes":
            return 0
        return wait

    def _group(self, view: View, route: str, f: Filters) -> tuple[HostStatus, ...]:
        """
        The replicas to choose from, memoised per view and filters.
        """
        groups = self.memo(view).groups
        key = (route, f)
        group = groups.get(key)
        if group is None:
            found = candidates(view.hosts, f, view.master)
            if f.floor:
                found = with_floor(view.hosts, found, f, view.master,
                                   by_bytes=route != "sync_by_time")
            if route == "most_sync_by_bytes":
                best = most_sync(found)
                group = (best,) if best is not None else ()
            else:
                group = local_group(found, self._locality)
            if len(groups) < MAX_GROUPS:
                groups[key] = group
            if not group:
                # once per view and filter set, not per request
                log.debug(
                    "no replica matches route={route} lag_ms={lag_ms} lag_bytes={lag_bytes} "
                    "min_lsn={min_lsn} timeline={timeline}; answering with the master "
                    "master={master}",
                    route=route, lag_ms=f.lag_ms, lag_bytes=f.lag_bytes,
                    min_lsn=None if f.min_lsn is None else format_lsn(f.min_lsn),
                    timeline=f.timeline,
                    master=view.master.name if view.master else "none",
                )
        return group

    def hosts(self) -> Response:
        """
        ``/hosts``.
        """
        view = self._current()
        if not view.ready:
            return NOT_READY
        memo = self.memo(view)
        r = memo.hosts
        if r is None:
            r = memo.hosts = json_response(
                200, [host_json(h, extras=self._config.sync_policy_extras) for h in view.hosts])
        return r

    def status(self, host: str | None) -> Response:
        """
        ``/status?host=``.
        """
        view = self._current()
        if not view.ready:
            return NOT_READY
        if host is None:
            return NO_STATUS_HOST
        memo = self.memo(view)
        h = memo.by_name().get(host)
        if h is None:
            return EMPTY_404
        r = memo.status_answers.get(h.index)
        if r is None:
            r = memo.status_answers[h.index] = json_response(
                200, host_json(h, with_name=False, extras=self._config.sync_policy_extras))
        return r

    def ready(self) -> Response:
        """
        ``/ready``: 503 before the first check of every host, and during
        a delayed stop.
        """
        if self.draining:
            return SHUTTING_DOWN
        return OK if self._current().ready else NOT_READY

    def live(self) -> Response:
        """
        ``/live``.
        """
        return OK
