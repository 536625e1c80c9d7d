"""
What the HAProxy agent check answers (see :mod:`pgstatus.agent` for the
protocol): a request line parsed into a :class:`Request`, and the
:class:`Answer` the current :class:`~pgstatus.model.status.View` gives it.
Pure functions of their arguments, so that the decision table is tested
without a connection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pgstatus.model.status import HostStatus, View

#: longest request line, in bytes without the line end
MAX_LINE = 512

UP = "up"
DRAIN = "drain"
DOWN = "down"
NO_CHANGE = "no change"

_INT_MAX = 2**63 - 1
_LIMIT_RE = re.compile(r"[0-9]{1,19}")
_USAGE = "expected '<host> master' or '<host> replica [<lag_ms> [<lag_bytes>]]'"


class BadRequest(ValueError):
    """
    A request line that is not ``<host> <role>[ <lag_ms>[ <lag_bytes>]]``.
    """


@dataclass(frozen=True, slots=True)
class Request:
    """
    One agent request.

    :ivar host: the host as named in ``pg_status__hosts``.
    :ivar role: ``"master"`` or ``"replica"``.
    :ivar lag_ms: the replica's ``lag_ms`` limit, ``None`` for none.
    :ivar lag_bytes: the replica's ``lag_bytes`` limit, ``None`` for none.
    """

    host: str
    role: str
    lag_ms: int | None = None
    lag_bytes: int | None = None

    @property
    def limited(self) -> bool:
        """
        A lag limit is given, so the answer may be ``drain``.
        """
        return self.lag_ms is not None or self.lag_bytes is not None


@dataclass(frozen=True, slots=True)
class Answer:
    """
    The decision for one request and why.

    :ivar state: :data:`UP`, :data:`DRAIN`, :data:`DOWN` or :data:`NO_CHANGE`.
    :ivar reason: a short description (no line breaks, no ``#``).
    :ivar ready: add HAProxy's ``ready`` to an ``up`` answer.
    """

    state: str
    reason: str
    ready: bool = False

    def line(self) -> bytes:
        """
        The answer in HAProxy's agent protocol, ``\\n``-terminated.
        """
        if self.state == UP:
            words = "up ready" if self.ready else "up"
        elif self.state == DRAIN:
            words = "up drain"
        elif self.state == DOWN:
            words = "down"
        else:
            words = ""
        text = f"{words} #{self.reason}" if words else f"#{self.reason}"
        return text.encode("ascii", "replace") + b"\n"


def _limit(field: str, name: str) -> int | None:
    if field == "-":
        return None
    if not _LIMIT_RE.fullmatch(field) or int(field) > _INT_MAX:
        raise BadRequest(f"invalid {name}")
    return int(field)


def parse_request(line: bytes) -> Request:
    """
    Parse one request line (without its line end; a trailing ``\\r`` and
    surrounding blanks are ignored).

    :raises BadRequest: naming what is wrong, without echoing the input.
    """
    if len(line) > MAX_LINE:
        raise BadRequest("request too long")
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest("request is not ASCII") from None
    fields = text.split()
    if not fields:
        raise BadRequest("empty request; " + _USAGE)
    if len(fields) < 2:
        raise BadRequest("no role; " + _USAGE)
    host, role = fields[0], fields[1].lower()
    if role == "master":
        if len(fields) != 2:
            raise BadRequest("a master request takes no limits")
        return Request(host, "master")
    if role == "replica":
        if len(fields) > 4:
            raise BadRequest("too many fields; " + _USAGE)
        lag_ms = _limit(fields[2], "lag_ms") if len(fields) > 2 else None
        lag_bytes = _limit(fields[3], "lag_bytes") if len(fields) > 3 else None
        return Request(host, "replica", lag_ms, lag_bytes)
    raise BadRequest("unknown role; " + _USAGE)


def _host_named(view: View, name: str) -> HostStatus | None:
    """
    The view's first host called ``name`` (agent checks come seconds
    apart, and host lists are short: a scan needs no memo).
    """
    for h in view.hosts:
        if h.name == name:
            return h
    return None


def _n(v: int | None) -> str:
    return "null" if v is None else str(v)


def decide(view: View, request: Request) -> Answer:
    """
    What to answer ``request`` from ``view``: pure, see the module
    docstring for the rules.
    """
    if not view.ready:
        return Answer(NO_CHANGE, "pg-status is not ready")
    h = _host_named(view, request.host)
    if h is None:
        return Answer(DOWN, "unknown host")
    if not h.checked:
        return Answer(NO_CHANGE, "host not checked yet")
    if not h.alive:
        return Answer(DOWN, "dead")
    weak = "possibly dead " if h.possible_dead else ""
    if request.role == "master":
        m = view.master
        if m is not None and m.index == h.index:
            return Answer(UP, weak + "master")
        if h.master:
            return Answer(DOWN, weak + "master but not the selected one")
        return Answer(DOWN, weak + "replica")
    if h.master:
        return Answer(DOWN, weak + "master")
    over = []
    if request.lag_ms is not None and (h.lag_ms is None or h.lag_ms > request.lag_ms):
        over.append(f"lag_ms={_n(h.lag_ms)} over {request.lag_ms}")
    if request.lag_bytes is not None and (h.lag_bytes is None or h.lag_bytes > request.lag_bytes):
        over.append(f"lag_bytes={_n(h.lag_bytes)} over {request.lag_bytes}")
    if over:
        return Answer(DRAIN, weak + "replica " + " and ".join(over))
    return Answer(UP, f"{weak}replica lag_ms={_n(h.lag_ms)} lag_bytes={_n(h.lag_bytes)}",
                  ready=request.limited)


def answer_line(view: View, line: bytes | None) -> tuple[Answer, Request | None]:
    """
    The answer to one request line (``None``: nothing was sent).

    :return: the answer and the parsed request, if it parsed.
    """
    if line is None:
        return Answer(DOWN, "no request; set agent-send"), None
    try:
        request = parse_request(line)
    except BadRequest as e:
        return Answer(DOWN, f"bad request: {e}"), None
    return decide(view, request), request
