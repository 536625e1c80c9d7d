"""
Invariant checking for the fault tests (``tests/monitor/test_faults.py``).

While a fault is injected into the real topology, a :class:`Sampler` asks
the running service every ~50 ms for ``/ready``, ``/master``, ``/replica``
and ``/replica?min_lsn=…&timeline=…`` (for the latest write of a
:class:`Writer`) and checks every answer against

- the views the service published while the request was in flight
  (recorded by a :class:`ViewLog`; a handler answers from exactly one of
  them), through selection rules written here from the specification, not
  taken from ``pgstatus.model.selection``;
- :class:`Truth`: what the scenario knows about every host name over time
  (up or down, master or not, which server is behind it);
- the data itself: a replica answered for ``min_lsn`` must have the row of
  that write, read on the server behind the answered name.

Every violation is recorded with its time; tests assert there are none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pgtopology import PgNode, PgTopology, lsn_to_int
from twisted.internet.defer import Deferred, DeferredList, inlineCallbacks, succeed
from twisted.internet.task import deferLater

from pgstatus.monitor.turns import AUTH_PAUSE, TURN_LIMIT
from service import RunningService, blocking


def detection_allowance(sleep_ms: int, timeout_ms: int, max_fails: int,
                        own_hanging_setups: int = 0, other_hanging_setups: int = 0) -> float:
    """
    The spec's detection bound, ``sleep + timeout + (max_fails - 1) ×
    max(sleep, timeout)``, plus a margin of one period and 0.5 s, plus
    connection turns:

    - a check that opens a connection first waits for its turn, and that wait
      does not count toward the check's deadline.  After a setup that hung
      (it reached the server's TCP port, so it is treated as having reached
      authentication) the next setup waits ``AUTH_PAUSE``: each of this
      host's own hanging setups may thus add ``AUTH_PAUSE``;
    - a hanging setup of *another* host holds the one turn until its deadline
      or ``TURN_LIMIT`` (1 s), whichever comes first, then ``AUTH_PAUSE``.

    :return: seconds.
    """
    s, t = sleep_ms / 1000, timeout_ms / 1000
    bound = s + t + (max_fails - 1) * max(s, t)
    turns = own_hanging_setups * AUTH_PAUSE
    turns += other_hanging_setups * (min(t, TURN_LIMIT) + AUTH_PAUSE)
    return bound + s + 0.5 + turns


# --------------------------------------------------------------------------
# selection rules, from the specification


def status(view: Any, name: str) -> Any:
    """The published status of host ``name`` in ``view``."""
    return next(h for h in view.hosts if h.name == name)


def spec_master(view: Any) -> Any:
    """
    "Master selection prefers fully responsive masters, then possibly dead
    masters. If neither exists, no master is selected." — and "within the
    best available health group, the first master in pg_status__hosts wins".
    """
    masters = [h for h in view.hosts if h.alive and h.master]
    healthy = [h for h in masters if not h.possible_dead]
    best = healthy or masters
    return best[0] if best else None


def spec_master_name(view: Any) -> str | None:
    m = spec_master(view)
    return None if m is None else m.name


def spec_replica_answers(view: Any, min_lsn: int | None = None,
                         timeline: int | None = None) -> set[str | None]:
    """
    The names ``/replica`` may answer in ``view`` (``None``: 404).

    A live replica matches ``min_lsn`` if it has replayed that position and
    is not on a timeline other than the master's; ``timeline`` if it is
    known to be on that timeline and the master is not on a later one.
    Fully responsive replicas are preferred over possibly dead ones; with
    none, the master is answered.
    """
    master = spec_master(view)
    master_tl = master.timeline if master is not None else None

    def matches(h: Any) -> bool:
        if not h.alive or h.master:
            return False
        if min_lsn is not None:
            # a position inside a WAL page header (what the master reports
            # after a record that ends at a page boundary) is met at the
            # page's start: the view's replayed_through says how far that goes
            replayed = h.replayed_through if h.replayed_through is not None else h.lsn
            if replayed is None or replayed < min_lsn:
                return False
            if h.timeline is not None and master_tl is not None and h.timeline != master_tl:
                return False
        if timeline is not None:
            if h.timeline != timeline:
                return False
            if master_tl is not None and master_tl > timeline:
                return False
        return True

    found = [h for h in view.hosts if matches(h)]
    best = [h for h in found if not h.possible_dead] or found
    if best:
        return {h.name for h in best}
    return {None if master is None else master.name}


# --------------------------------------------------------------------------
# what the service published


class ViewLog:
    """
    Every view the service publishes, by generation, with the local time of
    publication.  Create it right after the service starts.
    """

    def __init__(self, svc: RunningService, clock: Any) -> None:
        self._clock = clock
        v = svc.view
        self.entries: dict[int, tuple[float, Any]] = {v.generation: (clock.seconds(), v)}
        svc.monitor.registry.observe(self._published)

    def _published(self, old: Any, new: Any) -> None:
        self.entries[new.generation] = (self._clock.seconds(), new)

    def between(self, g0: int, g1: int) -> list[Any]:
        """The views of generations ``g0`` to ``g1`` (inclusive)."""
        return [self.entries[g][1] for g in range(g0, g1 + 1) if g in self.entries]

    def first(self, predicate: Callable[[Any], Any], after: float) -> float | None:
        """The time of the first view published at or after ``after`` that
        satisfies ``predicate``, or None."""
        for g in sorted(self.entries):
            t, v = self.entries[g]
            if t >= after and predicate(v):
                return t
        return None


# --------------------------------------------------------------------------
# what the scenario knows


class Truth:
    """
    Ground truth per host name, as intervals of local time: when the name
    is up (a client reaching it gets an answer) and when it is a master.

    A scenario opens an interval just *before* the operation that starts
    it and closes it just *after* the operation that ends it, so the
    intervals cover every instant the state may have held.  The service may
    still name a host ``slack`` seconds after its interval closed (its last
    successful check is that old at most, by the detection bound).

    :ivar node: the server behind each name now (for reading rows).
    :ivar frozen_rows: for a name whose server is frozen, the highest row
        id it is known to hold (rows replicate in order).
    """

    def __init__(self, clock: Any, slack: float, nodes: dict[str, PgNode],
                 masters: Iterable[str]) -> None:
        self._clock = clock
        self.slack = slack
        self.node = dict(nodes)
        self.frozen_rows: dict[str, int] = {}
        now = clock.seconds()
        self._up: dict[str, list[list[Any]]] = {n: [[now, None]] for n in nodes}
        self._master: dict[str, list[list[Any]]] = {n: [[now, None]] for n in masters}

    def _set(self, table: dict[str, list[list[Any]]], name: str, on: bool) -> None:
        now = self._clock.seconds()
        spans = table.setdefault(name, [])
        is_open = bool(spans) and spans[-1][1] is None
        if on and not is_open:
            spans.append([now, None])
        elif not on and is_open:
            spans[-1][1] = now

    def up(self, name: str, on: bool = True) -> None:
        self._set(self._up, name, on)

    def down(self, name: str) -> None:
        self._set(self._up, name, False)

    def master(self, name: str, on: bool = True) -> None:
        self._set(self._master, name, on)

    def _allowed(self, table: dict[str, list[list[Any]]], name: str, t0: float,
                 t1: float) -> bool:
        return any(s <= t1 and (e is None or t0 <= e + self.slack)
                   for s, e in table.get(name, ()))

    def may_be_up(self, name: str, t0: float, t1: float) -> bool:
        return self._allowed(self._up, name, t0, t1)

    def may_be_master(self, name: str, t0: float, t1: float) -> bool:
        return self._allowed(self._master, name, t0, t1)


# --------------------------------------------------------------------------
# load


@dataclass(frozen=True)
class Write:
    lsn: str
    lsn_int: int
    timeline: int
    row: int


class _Loop:
    """A pausable loop on the reactor; ``pause()`` waits for the step in
    progress."""

    def __init__(self, clock: Any, interval: float) -> None:
        self._clock = clock
        self.interval = interval
        self._running = False
        self._paused = False
        self._busy = False
        self._idle: list[Deferred[None]] = []
        self._done: Deferred[None] | None = None

    def start(self) -> None:
        self._running = True
        self._done = self._loop()

    @inlineCallbacks
    def _loop(self) -> Any:
        while self._running:
            t = self._clock.seconds()
            if not self._paused:
                self._busy = True
                try:
                    yield self.step()
                finally:
                    self._busy = False
                    idle, self._idle = self._idle, []
                    for d in idle:
                        d.callback(None)
            if self._running:
                wait = max(0.0, self.interval - (self._clock.seconds() - t))
                yield deferLater(self._clock, wait, lambda: None)

    def step(self) -> Deferred[Any]:
        raise NotImplementedError

    def pause(self) -> Deferred[None]:
        """Stop stepping; fires once the step in progress has ended."""
        self._paused = True
        if not self._busy:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._idle.append(d)
        return d

    def resume(self) -> None:
        self._paused = False

    def stop(self) -> Deferred[None]:
        self._running = False
        return self._done if self._done is not None else succeed(None)


class Writer(_Loop):
    """
    Writes a row on the topology's current primary every ``interval``
    seconds, as the spec's read-your-writes recipe does; ``last`` is the
    latest completed write.  Failed writes (the primary is down) are
    counted and skipped.
    """

    def __init__(self, clock: Any, topo: PgTopology, interval: float = 0.25) -> None:
        super().__init__(clock, interval)
        self.topo = topo
        self.last: Write | None = None
        self.writes = 0
        self.failures = 0

    @inlineCallbacks
    def step(self) -> Any:
        try:
            lsn, tl, row = yield blocking(self.topo.write)
        except Exception:  # noqa: BLE001 - the primary may be down
            self.failures += 1
            return
        self.writes += 1
        self.last = Write(lsn, lsn_to_int(lsn), tl, row)


@dataclass
class Violation:
    at: float
    what: str

    def __str__(self) -> str:
        return f"t={self.at:.3f}: {self.what}"


class Sampler(_Loop):
    """
    Samples the service's answers every ``interval`` seconds and checks the
    invariants (see the module docstring).

    :ivar violations: what went wrong, in order.
    :ivar verified: replica answers to ``min_lsn`` whose row was read.
    :ivar samples: ticks done.
    """

    def __init__(self, clock: Any, svc: RunningService, log: ViewLog, truth: Truth,
                 topo: PgTopology, writer: Writer | None, interval: float = 0.05,
                 label: str = "") -> None:
        super().__init__(clock, interval)
        self.svc = svc
        self.log = log
        self.truth = truth
        self.topo = topo
        self.writer = writer
        self.label = label
        self.violations: list[Violation] = []
        self.verified = 0
        self.samples = 0
        self.t0 = clock.seconds()

    def _violate(self, what: str) -> None:
        at = self._clock.seconds() - self.t0
        self.violations.append(Violation(at, f"{self.label}{what}"))

    @inlineCallbacks
    def step(self) -> Any:
        svc = self.svc
        w = self.writer.last if self.writer is not None else None
        paths = ["/ready", "/master", "/replica"]
        if w is not None:
            paths.append(f"/replica?min_lsn={w.lsn}&timeline={w.timeline}")
        g0, t0 = svc.view.generation, self._clock.seconds()
        results = yield DeferredList([svc.get(p) for p in paths], consumeErrors=True)
        g1, t1 = svc.view.generation, self._clock.seconds()
        self.samples += 1
        views = self.log.between(g0, g1)
        masters = {spec_master_name(v) for v in views}
        answers: dict[str, Any] = {}
        for path, (ok, r) in zip(paths, results, strict=True):
            if not ok:
                self._violate(f"{path}: request failed: {r.getErrorMessage()}")
            elif path == "/ready":
                if (r.code, r.body) != (200, b"OK"):
                    self._violate(f"/ready answered {r.code} {r.body!r}: readiness dropped")
            elif r.code == 200:
                answers[path] = r.text
            elif r.code == 404 and r.body == b"":
                answers[path] = None
            else:
                self._violate(f"{path}: unexpected answer {r.code} {r.body!r}")
        if "/master" in answers:
            ans = answers["/master"]
            if ans not in masters:
                self._violate(
                    f"/master answered {ans!r}; the views in flight allow only {masters} "
                    f"({self._describe(views, ans)})")
            elif ans is not None and not self.truth.may_be_master(ans, t0, t1):
                self._violate(f"/master answered {ans!r}, which is not a master "
                              f"(for longer than {self.truth.slack:.2f}s)")
        if "/replica" in answers:
            self._check_replica("/replica", answers["/replica"], views, masters, t0, t1)
        if w is not None and paths[3] in answers:
            ans = answers[paths[3]]
            ok = self._check_replica(paths[3], ans, views, masters, t0, t1,
                                     w.lsn_int, w.timeline)
            if ok and ans is not None and ans not in masters:
                has = yield self._has_row(ans, w.row)
                self.verified += 1
                if has is not True:
                    self._violate(f"{paths[3]} answered replica {ans!r}, which lacks row "
                                  f"{w.row} of that write ({has})")

    def _check_replica(self, path: str, ans: str | None, views: list[Any], masters: set[Any],
                       t0: float, t1: float, min_lsn: int | None = None,
                       timeline: int | None = None) -> bool:
        allowed: set[Any] = set()
        for v in views:
            allowed |= spec_replica_answers(v, min_lsn, timeline)
        if ans not in allowed:
            self._violate(f"{path} answered {ans!r}; the views in flight allow only "
                          f"{allowed} ({self._describe(views, ans)})")
            return False
        if ans is None:
            return True
        if ans in masters:
            if not self.truth.may_be_master(ans, t0, t1):
                self._violate(f"{path} fell back to {ans!r}, which is not a master")
                return False
        elif not self.truth.may_be_up(ans, t0, t1):
            self._violate(f"{path} answered {ans!r}, which has been down for longer than "
                          f"{self.truth.slack:.2f}s")
            return False
        return True

    def _has_row(self, name: str, row: int) -> Deferred[Any]:
        node = self.truth.node[name]
        if node.frozen:
            known = self.truth.frozen_rows.get(name)
            return succeed(known is not None and row <= known)
        d = blocking(self.topo.has_row, node, row)
        return d.addErrback(lambda f: f"could not read it: {f.getErrorMessage()}")

    @staticmethod
    def _describe(views: list[Any], name: str | None) -> str:
        out = []
        for v in views:
            try:
                h = status(v, name) if name is not None else None
            except StopIteration:
                h = None
            if h is None:
                out.append(f"gen {v.generation}: master={spec_master_name(v)}")
            else:
                out.append(f"gen {v.generation}: {name} alive={h.alive} "
                           f"possible_dead={h.possible_dead} master={h.master} lsn={h.lsn} "
                           f"tl={h.timeline}")
        return "; ".join(out)
