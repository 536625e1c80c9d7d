"""
The answer cache: a request head that :func:`~pgstatus.http.head.parse_head`
fully validates, turned into the bytes twisted.web and Klein would send for
it.  It calls the same answer function the Klein application calls
(:meth:`~pgstatus.http.responses.Renderer.answer`) and replays twisted.web's
framing (:mod:`pgstatus.http.replay`); for anything it does not fully
understand it answers ``None`` and the front hands the request to
twisted.web.  It knows nothing of connections: the front
(:mod:`pgstatus.http.front`) decides when a head may be served from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred

from pgstatus.http.answer import Response
from pgstatus.http.head import Head, HeadMemo
from pgstatus.http.replay import DateLine, Replay

#: ``(route, query, as_json) -> Response | Deferred[Response]``
AnswerFunction = Callable[[str, bytes, bool], "Response | Deferred[Response]"]

#: what :meth:`AnswerCache.serve` gives for a head it answers: the bytes to
#: send, and whether the connection closes after them
Reply = tuple[bytes, bool]


class AnswerCache:
    """
    Heads to answer bytes.

    :param answer: the answer function.
    :param count: ``(route, status)``: counts an answered request (the
        Klein application counts the requests it answers the same way).
    :param clock: for the ``Date`` line.
    """

    def __init__(self, answer: AnswerFunction, count: Callable[[str, int], None],
                 clock: Any) -> None:
        self.answer = answer
        self._count = count
        self.heads = HeadMemo()
        self.replay = Replay()
        self.date = DateLine(clock)
        #: off: every request goes to twisted.web and Klein (for measuring
        #: that path through the same front, ``bench/launch.py``)
        self.enabled = True

    def view_changed(self) -> None:
        """
        Forget memoised answer bytes (the monitor published a new view).
        """
        self.replay.reset()

    def serve(self, head: bytes) -> Reply | Deferred[Reply] | None:
        """
        The reply to the complete request head ``head`` (its blank line
        included), a Deferred of it (a fresh read that waits), or ``None``
        when the head is not one this cache answers.
        """
        parsed = self.heads.get(head)
        if parsed is None or not self.enabled:
            return None
        # dated when asked, as twisted.web dates a request it starts to render
        date = self.date.line()
        try:
            r = self.answer(parsed.route, parsed.query, parsed.as_json)
        except Exception:
            # not ours to judge: twisted.web and Klein answer (and log) it
            return None
        # (a plain class check: Deferred's, an ABC's, costs more)
        if r.__class__ is not Response:
            d: Deferred[Response] = r  # type: ignore[assignment]
            return d.addCallback(self.reply, parsed, date)
        # as reply() does, inline: this is every cached request's path
        self._count(parsed.route, r.status)
        before, after = self.replay.parts(r, parsed.head_only, parsed.close)
        return before + date + after, bool(parsed.close)

    def reply(self, r: Response, parsed: Head, date: bytes) -> Reply:
        """
        Count ``r`` and frame it as twisted.web would for ``parsed``.
        """
        self._count(parsed.route, r.status)
        before, after = self.replay.parts(r, parsed.head_only, parsed.close)
        return before + date + after, bool(parsed.close)
