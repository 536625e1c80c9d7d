"""
The bytes of the fast path's answers: every part of an HTTP response but the
``Date`` header, memoised per :class:`~pgstatus.http.responses.Response`, the
``Date`` line rebuilt once a second, and the memo of request heads, with
what a head asks for (its query arguments, the paths and headers the fast
path reads, and the kinds of answer memoised per head).

Written as ``twisted.web`` writes them, without importing
``twisted.web.server`` (a test checks they agree).
"""

from __future__ import annotations

import re
import time
from http import HTTPStatus
from typing import Any

from pgstatus.http.answer import Response
from pgstatus.http.params import REPLICA_ROUTES
from twisted import copyright

#: most bytes of memoised response bytes (and the responses they belong to)
MAX_WIRE_BYTES = 1 << 20

#: the ``close`` of an HTTP/1.0 request (see :meth:`Wire.parts`)
HTTP_1_0 = b"HTTP/1.0"

#: ``twisted.web.server.version``
SERVER_VERSION = b"TwistedWeb/" + copyright.version.encode("ascii")
_SERVER = b"Server: " + SERVER_VERSION + b"\r\n"


def reason(status: int) -> bytes:
    """
    The reason phrase of ``status`` (as ``twisted.web.http.responses`` has
    it for every status the API answers; a test checks they agree).
    """
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b"Unknown"


class Wire:
    """
    Response bytes without the ``Date`` header, memoised per response, and
    what each request head seen asks for, memoised per view.

    Responses of ``/hosts`` and ``/status`` change with nearly every check,
    so the memo is bounded by the bytes it holds (it keeps the responses it
    is keyed by alive), not only by its number of entries.
    """

    def __init__(self, max_bytes: int = MAX_WIRE_BYTES) -> None:
        self._memo: dict[tuple[Response, bool, bool | bytes], tuple[bytes, bytes]] = {}
        self._plain: dict[Response, tuple[bytes, bytes]] = {}
        #: complete request (head and the blank line) -> what to answer
        self.heads: dict[bytes, tuple[Any, ...]] = {}
        #: the view the memo of heads belongs to
        self.view: Any = None
        self._held = 0
        self._max_bytes = max_bytes

    def reset(self) -> None:
        """
        Forget everything: called when the monitor publishes a new view, so
        the memo only ever holds bytes of the current view's responses.
        """
        self._memo.clear()
        self._plain.clear()
        self.heads.clear()
        self.view = None
        self._held = 0

    def parts(self, r: Response, head_only: bool, close: bool | bytes) -> tuple[bytes, bytes]:
        """
        The status line and the rest of the response after ``Date``.

        :param close: ``True`` for an HTTP/1.1 request that closes the
            connection (``Connection: close``), :data:`HTTP_1_0` for an
            HTTP/1.0 request (answered as HTTP/1.0, always closed, no
            ``Connection`` header, as twisted.web does).
        """
        if not (head_only or close):
            # the common case, keyed by the response alone (identity hash)
            got = self._plain.get(r)
            if got is None:
                got = self._plain[r] = self._parts(r, False, False)
            return got
        return self._parts(r, head_only, close)

    def _parts(self, r: Response, head_only: bool, close: bool | bytes) -> tuple[bytes, bytes]:
        key = (r, head_only, close)
        got = self._memo.get(key)
        if got is None:
            size = 2 * len(r.body) + 256
            if len(self._memo) >= 4096 or self._held + size > self._max_bytes:
                self._memo.clear()
                self._plain.clear()
                self.heads.clear()
                self._held = 0
            self._held += size
            version = HTTP_1_0 if close == HTTP_1_0 else b"HTTP/1.1"
            head = [b"%s %d %s\r\n" % (version, r.status, reason(r.status))]
            if close is True:
                head.append(b"Connection: close\r\n")
            head.append(_SERVER)
            tail = []
            if r.content_type is not None:
                tail.append(b"Content-Type: " + r.content_type + b"\r\n")
            if r.status == 405:
                tail.append(b"Allow: GET, HEAD\r\n")
            tail.append(b"Content-Length: %d\r\n\r\n" % len(r.body))
            if not head_only:
                tail.append(r.body)
            got = self._memo[key] = (b"".join(head), b"".join(tail))
        return got


class DateLine:
    """
    The ``Date`` header line, rebuilt at most once a second.
    """

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self._next = float("-inf")
        self._line = b""

    def line(self, now: float | None = None) -> bytes:
        """
        :param now: the clock's time, when the caller has it already.
        """
        if now is None:
            now = self._clock.seconds()
        if now >= self._next:
            second = int(now)
            self._next = second + 1
            self._line = b"Date: " + http_date(second) + b"\r\n"
        return self._line


_DAYS = (b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun")
_MONTHS = (b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun",
           b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec")


def http_date(second: int) -> bytes:
    """
    An HTTP ``Date`` value (RFC 9110 IMF-fixdate), e.g. ``Sun, 06 Nov 1994
    08:49:37 GMT``, as ``email.utils.formatdate(second, usegmt=True)`` gives
    it, without importing the ``email`` package.
    """
    t = time.gmtime(second)
    return b"%s, %02d %s %04d %02d:%02d:%02d GMT" % (
        _DAYS[t.tm_wday], t.tm_mday, _MONTHS[t.tm_mon - 1], t.tm_year,
        t.tm_hour, t.tm_min, t.tm_sec)


def query_args(query: bytes) -> dict[str, str]:
    if b"%" not in query and b"+" not in query:
        out: dict[str, str] = {}
        for part in query.split(b"&"):
            if not part:
                continue
            k, sep, v = part.partition(b"=")
            if not sep:
                continue
            out.setdefault(k.decode("utf-8", "replace"), v.decode("utf-8", "replace"))
        return out
    # the same parser twisted.web uses for request.args
    from twisted.web.http import parse_qs

    return {
        k.decode("utf-8", "replace"): vs[0].decode("utf-8", "replace")
        for k, vs in parse_qs(query, 1).items()
        if vs
    }


REPLICA_PATHS = {b"/" + r.encode(): r for r in REPLICA_ROUTES}
#: headers that send a request to twisted.web (a body, or a protocol change)
NOT_FAST = (b"content-length", b"transfer-encoding", b"expect", b"upgrade")
#: lengths of the header names the fast path reads or refuses
HEADER_LENGTHS = frozenset(len(n) for n in (b"accept", b"connection", *NOT_FAST))
#: the metrics label of every path the fast path answers
LABELS = {p: p[1:].decode() for p in (
    b"/master", b"/hosts", b"/status", b"/live", b"/ready", b"/version", *REPLICA_PATHS)}
#: the paths only Klein serves (a test checks these and the above are all
#: of its routes): any other plain path is answered 404 by the fast path
KLEIN_PATHS = frozenset((b"/openapi.json", b"/metrics", b"/follow", b"/follow/check"))
#: a path the router cannot read otherwise than as it is: segments of
#: unreserved characters, none empty or starting with a dot (no percent
#: escapes, no ``//``, ``.`` or ``..``, no trailing slash but the root's)
PLAIN_PATH = re.compile(rb"/|(?:/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+")

# What a request head asks for (memoised in Wire.heads):
#: (FIXED, counter key, status line, rest after Date, close): the same
#: answer for every request while the view lasts
FIXED = "fixed"
#: (ROTATE, round-robin key, ((status line, rest, counter key), ...), close):
#: replicas in turn
ROTATE = "rotate"
#: (FALLBACK, counter key, status line, rest, close, reason): the master,
#: because no replica qualifies (the reason is counted for /metrics)
FALLBACK = "fallback"
#: (REPLICA, label, route, query, as JSON, HEAD, close): a selection route
#: rendered for every request (it may wait for a replica)
REPLICA = "replica"
