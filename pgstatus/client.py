"""
A small asynchronous client for the pg-status HTTP API, on treq, and the
read-your-writes helper for psycopg2.

Every request asks for JSON (``Accept: application/json``).  Results are
frozen dataclasses; errors are :class:`PgStatusError` (``.status``,
``.error_text``), :class:`NotReady` for ``503``.  Parameters are checked for
their Python type only: values are passed through, and the server's own
``400`` comes back as a :class:`PgStatusError`.

Read-your-writes::

    cur.execute("INSERT ...")
    conn.commit()
    lsn, timeline = write_position(cur)        # after COMMIT returned
    choice = await client.replica(min_lsn=lsn, timeline=timeline)
    # a replica that has the write, or the master; None without any host

Methods return Deferreds (awaitable in ``async def`` code and usable with
``inlineCallbacks``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from treq.client import HTTPClient
from twisted.internet.defer import Deferred, succeed
from twisted.web.client import Agent, HTTPConnectionPool

from pgstatus.writeposition import WritePosition, write_position

__all__ = [
    "HostChoice",
    "HostReport",
    "NotReady",
    "PgStatusClient",
    "PgStatusError",
    "WritePosition",
    "write_position",
]


@dataclass(frozen=True, slots=True)
class HostChoice:
    """
    A host chosen by a selection endpoint, with its configured locality.
    """

    host: str
    dc: str | None
    geo: str | None


@dataclass(frozen=True, slots=True)
class HostReport:
    """
    One host as ``/hosts`` and ``/status`` report it, as of its last
    successful check.  Lags and ``lsn`` are ``None`` when unknown and for a
    dead host (``alive`` false).
    """

    host: str
    dc: str | None
    geo: str | None
    master: bool
    alive: bool
    possible_dead: bool
    lag_ms: int | None
    sync_by_time: bool
    lag_bytes: int | None
    sync_by_bytes: bool
    lsn: str | None


class PgStatusError(Exception):
    """
    pg-status answered with an error status.

    :ivar status: the HTTP status code.
    :ivar error_text: the server's ``error_text`` (e.g. ``"Invalid lag_ms"``),
        or ``None`` when the body had none (e.g. ``404`` of ``/status`` for
        an unknown host).
    """

    def __init__(self, status: int, error_text: str | None, detail: str = "") -> None:
        self.status = status
        self.error_text = error_text
        text = f": {error_text}" if error_text is not None else ""
        super().__init__(f"pg-status answered {status}{text}" + (f" ({detail})" if detail else ""))


class NotReady(PgStatusError):
    """
    ``503``: pg-status has not completed a first check of every host yet
    (``error_text`` ``"pg_monitor is not ready"``), or is over its connection
    limit (``error_text`` ``None``).  Retry later.
    """


def _int(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return str(value)


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


_STR_PARAMS = frozenset({"min_lsn", "key"})


def _params(**kwargs: Any) -> list[tuple[str, str]]:
    """
    Query parameters in a fixed order, leaving out ``None``.
    """
    out = []
    for name, value in kwargs.items():
        if value is None:
            continue
        out.append((name, _str(name, value) if name in _STR_PARAMS else _int(name, value)))
    return out


def _error_text(body: bytes) -> str | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    text = obj.get("error_text") if isinstance(obj, dict) else None
    return text if isinstance(text, str) else None


_STATUS_FIELDS = tuple(f for f in HostReport.__dataclass_fields__ if f != "host")


def _host_status(item: Any, path: str, host: str | None = None) -> HostReport:
    """
    A ``/hosts`` item, or a ``/status`` object with ``host`` added.
    """
    try:
        return HostReport(item["host"] if host is None else host,
                          *(item[f] for f in _STATUS_FIELDS))
    except (TypeError, KeyError):
        raise PgStatusError(200, None, f"{path}: unexpected answer {item!r:.200}") from None


class PgStatusClient:
    """
    Asynchronous client of one pg-status instance.

    :param base_url: e.g. ``"http://127.0.0.1:8000"``.
    :param reactor: default: the global reactor.
    :param pool: an ``HTTPConnectionPool`` to use; by default the client
        makes a persistent one, closed by :meth:`close`.
    :param timeout: seconds after which a request is cancelled and fails
        with :class:`TimeoutError` (``None``: no limit; requests with
        ``wait_ms`` take up to that long).
    """

    def __init__(self, base_url: str, reactor: Any = None,
                 pool: HTTPConnectionPool | None = None,
                 timeout: float | None = None) -> None:
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.base_url = base_url.rstrip("/")
        self._reactor = reactor
        self._own_pool = pool is None
        self._pool = pool if pool is not None else HTTPConnectionPool(reactor, persistent=True)
        self._http = HTTPClient(Agent(reactor, pool=self._pool))
        self._timeout = timeout

    def close(self) -> Deferred[None]:
        """
        Close the connections of the pool the client made (a pool passed
        in is left alone).
        """
        if self._own_pool:
            return self._pool.closeCachedConnections()
        return succeed(None)

    # -- transport -------------------------------------------------------
    async def _get(self, path: str, params: list[tuple[str, str]]) -> tuple[int, str, bytes]:
        """
        ``(status, Content-Type, body)``; :class:`TimeoutError` when the
        whole exchange takes longer than the client's ``timeout``.
        """
        url = self.base_url + path
        if params:
            url += "?" + urlencode(params, safe="/")
        d = Deferred.fromCoroutine(self._exchange(url))
        if self._timeout is None:
            return await d
        expired = []

        def expire() -> None:
            expired.append(True)
            d.cancel()

        timer = self._reactor.callLater(self._timeout, expire)
        try:
            return await d
        except Exception:
            if expired:
                raise TimeoutError(
                    f"no answer from pg-status within {self._timeout} s ({path})") from None
            raise
        finally:
            if timer.active():
                timer.cancel()

    async def _exchange(self, url: str) -> tuple[int, str, bytes]:
        headers: dict[bytes | str, bytes | str] = {"Accept": "application/json"}
        response = await self._http.request(
            "GET", url, headers=headers, allow_redirects=False)
        body = await response.content()
        ctype = (response.headers.getRawHeaders("content-type") or [""])[0]
        return response.code, ctype, body

    @staticmethod
    def _fail(code: int, body: bytes, path: str) -> PgStatusError:
        error = NotReady if code == 503 else PgStatusError
        return error(code, _error_text(body), path)

    async def _json(self, path: str, params: list[tuple[str, str]],
                    no_host: bool = False) -> Any:
        """
        The JSON body of a ``200`` answer.  With ``no_host``, a ``404``
        whose body is the JSON "no host" object (``"host": null``) gives
        ``None``; any other ``404`` (e.g. a wrong base URL) is an error.
        """
        code, ctype, body = await self._get(path, params)
        is_json = ctype.split(";", 1)[0].strip().lower() == "application/json"
        if code == 404 and no_host and is_json:
            try:
                obj = json.loads(body)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and "host" in obj and obj["host"] is None:
                return None
        if code != 200:
            raise self._fail(code, body, path)
        if not is_json:
            raise PgStatusError(code, None, f"{path}: expected JSON, got {ctype!r}")
        try:
            return json.loads(body)
        except ValueError:
            raise PgStatusError(code, None, f"{path}: invalid JSON") from None

    async def _choose(self, route: str, params: list[tuple[str, str]]) -> HostChoice | None:
        obj = await self._json(route, params, no_host=True)
        if obj is None:
            return None
        try:
            return HostChoice(obj["host"], obj["dc"], obj["geo"])
        except (TypeError, KeyError):
            raise PgStatusError(200, None, f"{route}: unexpected answer {obj!r:.200}") from None

    def _select(self, route: str, **kwargs: Any) -> Deferred[HostChoice | None]:
        return Deferred.fromCoroutine(self._choose(route, _params(**kwargs)))

    # -- endpoints -------------------------------------------------------
    def master(self) -> Deferred[HostChoice | None]:
        """
        ``/master``: the master, or ``None`` when there is none.
        """
        return self._select("/master")

    def replica(self, *, min_lsn: str | None = None, timeline: int | None = None,
                lag_ms: int | None = None, lag_bytes: int | None = None,
                wait_ms: int | None = None, key: str | None = None
                ) -> Deferred[HostChoice | None]:
        """
        ``/replica``: a replica within the given limits (none by default),
        else the master; ``None`` when there is no host at all.

        :param min_lsn: with ``timeline``, from :func:`write_position`.
        :param wait_ms: how long to wait for a replica to reach ``min_lsn``.
        :param key: a session key: the same replica for the session while it
            stays eligible, instead of round-robin.
        """
        return self._select("/replica", lag_ms=lag_ms, lag_bytes=lag_bytes, min_lsn=min_lsn,
                            timeline=timeline, wait_ms=wait_ms, key=key)

    def sync_by_time(self, *, min_lsn: str | None = None, timeline: int | None = None,
                     lag_ms: int | None = None, wait_ms: int | None = None,
                     key: str | None = None) -> Deferred[HostChoice | None]:
        """
        ``/sync_by_time``: ``lag_ms`` defaults to the server's threshold.
        """
        return self._select("/sync_by_time", lag_ms=lag_ms, min_lsn=min_lsn,
                            timeline=timeline, wait_ms=wait_ms, key=key)

    def sync_by_bytes(self, *, min_lsn: str | None = None, timeline: int | None = None,
                      lag_bytes: int | None = None, wait_ms: int | None = None,
                      key: str | None = None) -> Deferred[HostChoice | None]:
        """
        ``/sync_by_bytes``: ``lag_bytes`` defaults to the server's threshold.
        """
        return self._select("/sync_by_bytes", lag_bytes=lag_bytes, min_lsn=min_lsn,
                            timeline=timeline, wait_ms=wait_ms, key=key)

    def sync_by_time_or_bytes(self, *, min_lsn: str | None = None, timeline: int | None = None,
                              lag_ms: int | None = None, lag_bytes: int | None = None,
                              wait_ms: int | None = None, key: str | None = None
                              ) -> Deferred[HostChoice | None]:
        """
        ``/sync_by_time_or_bytes``: within either limit (defaults: the
        server's thresholds).
        """
        return self._select("/sync_by_time_or_bytes", lag_ms=lag_ms, lag_bytes=lag_bytes,
                            min_lsn=min_lsn, timeline=timeline, wait_ms=wait_ms, key=key)

    def sync_by_time_and_bytes(self, *, min_lsn: str | None = None, timeline: int | None = None,
                               lag_ms: int | None = None, lag_bytes: int | None = None,
                               wait_ms: int | None = None, key: str | None = None
                               ) -> Deferred[HostChoice | None]:
        """
        ``/sync_by_time_and_bytes``: within both limits (defaults: the
        server's thresholds).
        """
        return self._select("/sync_by_time_and_bytes", lag_ms=lag_ms, lag_bytes=lag_bytes,
                            min_lsn=min_lsn, timeline=timeline, wait_ms=wait_ms, key=key)

    def most_sync_by_bytes(self, *, min_lsn: str | None = None, timeline: int | None = None,
                           lag_bytes: int | None = None) -> Deferred[HostChoice | None]:
        """
        ``/most_sync_by_bytes``: the replica with the smallest byte lag
        (no locality, no waiting, no session key).
        """
        return self._select("/most_sync_by_bytes", lag_bytes=lag_bytes, min_lsn=min_lsn,
                            timeline=timeline)

    def hosts(self) -> Deferred[list[HostReport]]:
        """
        ``/hosts``: every configured host, in configuration order.
        """
        async def run() -> list[HostReport]:
            items = await self._json("/hosts", [])
            return [_host_status(item, "/hosts") for item in items]

        return Deferred.fromCoroutine(run())

    def status(self, host: str) -> Deferred[HostReport]:
        """
        ``/status?host=``: one host.  An unknown host raises
        :class:`PgStatusError` with status ``404``.
        """
        params = [("host", _str("host", host))]

        async def run() -> HostReport:
            item = await self._json("/status", params)
            return _host_status(item, "/status", host)

        return Deferred.fromCoroutine(run())
