"""
The bytes twisted.web sends for an answer, so that the answer cache can send
them itself: the status line and every header but ``Date`` memoised per
:class:`~pgstatus.http.answer.Response`, and the ``Date`` line rebuilt
once a second.  Written without importing ``twisted.web.server``; the
differential tests hold these bytes to what twisted.web sends for the same
request.
"""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import Any

from pgstatus.http.answer import Response
from twisted import copyright

#: most memoised answers (the memo starts afresh past this)
MAX_ANSWERS = 4096
#: most bytes of memoised answers
MAX_BYTES = 1 << 20

#: the ``close`` of an HTTP/1.0 request (see :meth:`Replay.parts`)
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


class Replay:
    """
    Answer bytes without the ``Date`` line, memoised per response, kind of
    request (``HEAD`` or not) and connection handling.  Responses of
    ``/hosts`` and ``/status`` change with nearly every check, so the memo
    is bounded by the bytes it holds, not only by its number of entries.
    """

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._memo: dict[tuple[Response, bool, bool | bytes], tuple[bytes, bytes]] = {}
        self._held = 0
        self._max_bytes = max_bytes

    def reset(self) -> None:
        """
        Forget everything (when the monitor publishes a new view, so the
        memo holds only the current view's answers).
        """
        self._memo.clear()
        self._held = 0

    def parts(self, r: Response, head_only: bool, close: bool | bytes) -> tuple[bytes, bytes]:
        """
        The bytes before the ``Date`` line and after it.

        :param close: ``True`` for an HTTP/1.1 request that closes the
            connection (``Connection: close``), :data:`HTTP_1_0` for an
            HTTP/1.0 request (answered as HTTP/1.0, always closed, no
            ``Connection`` header, as twisted.web does).
        """
        key = (r, head_only, close)
        got = self._memo.get(key)
        if got is None:
            size = 2 * len(r.body) + 256
            if len(self._memo) >= MAX_ANSWERS or self._held + size > self._max_bytes:
                self.reset()
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
