"""
Request heads the answer cache may answer: a whitelist of RFC 9112 syntax,
nothing more.  A head is taken only if every byte of it is understood:

- the request line is ``GET`` or ``HEAD``, one space, an origin-form
  target whose path is one of the route table's answered paths exactly and
  whose query has only the characters a URI query may have (percent escapes
  well-formed), one space, ``HTTP/1.1`` or ``HTTP/1.0``, CRLF;
- every header line is ``token ":" OWS value OWS CRLF``, the value of
  visible ASCII, spaces and tabs;
- no ``Content-Length``, ``Transfer-Encoding``, ``Expect`` or ``Upgrade``
  (a body or a protocol change), at most one ``Accept``, ``Connection`` and
  ``Host`` (a plain host name or address); ``Connection`` only ``close``
  or ``keep-alive`` on HTTP/1.1 and absent on HTTP/1.0;
- within :data:`MAX_HEAD` bytes and :data:`MAX_FIELDS` header lines.

Anything else (a bare CR or LF, obs-fold, NUL, absolute-form, HTTP/0.9 or
2, a body, ...) is not parsed at all: the front hands such a connection
to twisted.web, which answers it as it answers any request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pgstatus.http.params import wants_json
from pgstatus.http.replay import HTTP_1_0
from pgstatus.http.routes import FROM_VIEW

#: the longest head the answer cache reads
MAX_HEAD = 8192
#: the most header lines it reads
MAX_FIELDS = 64
#: the most heads remembered (the memo starts afresh past this)
MAX_MEMO = 4096
#: the most bytes the memo of heads may hold (it starts afresh past this)
MAX_MEMO_BYTES = 1 << 16

_REQUEST_LINE = re.compile(
    rb"(GET|HEAD) (/[A-Za-z0-9._~/-]*)(?:\?((?:[A-Za-z0-9._~!$'()*+,;=:@/?&-]|%[0-9A-Fa-f]{2})*))?"
    rb" HTTP/1\.([01])\r\n")
_FIELD = re.compile(
    rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*((?:[\x21-\x7e](?:[\x21-\x7e \t]*[\x21-\x7e])?)?)"
    rb"[ \t]*\r\n")
#: a ``Host`` the Klein application reads as every other: a DNS name of
#: letter-digit-hyphen labels, an IPv4 address or a bracketed IPv6
#: literal (hex digits and colons, perhaps an IPv4 tail: Klein takes what is
#: inside the brackets as dot-separated labels, so none may be empty), with
#: an optional port
_HOST = re.compile(
    rb"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
    rb"[A-Za-z0-9])?)*|\[[0-9A-Fa-f:]{1,39}(?:\.[0-9]{1,3}){0,3}\])(?::[0-9]{1,5})?")
#: headers that send a request to twisted.web
_REFUSED = frozenset((b"content-length", b"transfer-encoding", b"expect", b"upgrade"))
#: headers read (or checked) here, at most once each
_READ = frozenset((b"accept", b"connection", b"host"))


@dataclass(frozen=True, slots=True)
class Head:
    """
    What a whitelisted head asks.

    :ivar route: the route name (see :data:`~pgstatus.http.routes.FROM_VIEW`).
    :ivar query: the raw query string.
    :ivar head_only: a ``HEAD`` request.
    :ivar as_json: ``Accept`` asks for JSON.
    :ivar close: ``False`` (HTTP/1.1, the connection stays), ``True``
        (HTTP/1.1 ``Connection: close``) or
        :data:`~pgstatus.http.replay.HTTP_1_0`.
    """

    route: str
    query: bytes
    head_only: bool
    as_json: bool
    close: bool | bytes


def parse_head(head: bytes) -> Head | None:
    """
    The request a complete head (its final blank line included) asks, or
    ``None`` if it is not entirely within the whitelist.
    """
    if len(head) > MAX_HEAD:
        return None
    m = _REQUEST_LINE.match(head)
    if m is None:
        return None
    route = FROM_VIEW.get(m.group(2))
    if route is None:
        return None
    pos = m.end()
    seen: dict[bytes, bytes] = {}
    fields = 0
    end = len(head) - 2
    while pos < end:
        f = _FIELD.match(head, pos)
        if f is None or fields >= MAX_FIELDS:
            return None
        fields += 1
        name = f.group(1).lower()
        if name in _REFUSED:
            return None
        if name in _READ:
            if name in seen:
                return None
            seen[name] = f.group(2)
        pos = f.end()
    if pos != end or head[end:] != b"\r\n":
        return None
    host = seen.get(b"host")
    if host is not None and _HOST.fullmatch(host) is None:
        return None
    connection = seen.get(b"connection")
    if m.group(4) == b"0":
        if connection is not None:
            return None
        close: bool | bytes = HTTP_1_0
    elif connection is None:
        close = False
    else:
        token = connection.lower()
        if token == b"close":
            close = True
        elif token == b"keep-alive":
            close = False
        else:
            return None
    accept = seen.get(b"accept")
    return Head(route, m.group(3) or b"", m.group(1) == b"HEAD",
                wants_json(accept.decode("latin-1")) if accept is not None else False, close)


def plausible(start: bytes) -> bool:
    """
    Whether the start of a head, not complete yet, may still become one the
    answer cache takes: every complete line is well-formed, there is no bare CR
    or LF, and it is not already too long.  Otherwise the connection goes to
    twisted.web at once, which answers (or waits for) it as it would.
    """
    if len(start) > MAX_HEAD:
        return False
    lines = start.split(b"\r\n")
    for line in lines[:-1]:
        if b"\r" in line or b"\n" in line:
            return False
    last = lines[-1]
    if b"\n" in last or b"\r" in last[:-1]:
        return False
    if len(lines) > 1 and _REQUEST_LINE.match(lines[0] + b"\r\n") is None:
        return False
    for line in lines[1:-1]:
        if _FIELD.match(line + b"\r\n") is None:
            return False
    return True


class HeadMemo:
    """
    Parsed heads by their exact bytes: a client repeating its request costs
    one lookup.  The parse is a pure function of the bytes, so the memo
    never needs to forget for correctness, only to stay bounded: by its
    number of heads and by the bytes they hold (a head and the query taken
    from it, about twice its length), so that distinct large heads cannot
    pile up.  A head longer than :data:`MAX_HEAD` is never parsed and not
    kept.
    """

    def __init__(self, limit: int = MAX_MEMO, max_bytes: int = MAX_MEMO_BYTES) -> None:
        self._memo: dict[bytes, Head | None] = {}
        self._limit = limit
        self._max_bytes = max_bytes
        self._held = 0

    def get(self, head: bytes) -> Head | None:
        """
        :func:`parse_head` of ``head``, memoised.
        """
        try:
            return self._memo[head]
        except KeyError:
            pass
        parsed = parse_head(head)
        if len(head) <= MAX_HEAD:
            size = 2 * len(head) + 256
            if len(self._memo) >= self._limit or self._held + size > self._max_bytes:
                self._memo.clear()
                self._held = 0
            self._held += size
            self._memo[head] = parsed
        return parsed
