"""
The log line of a failed poll, and the rate limit for error records about
continuing poll failures of one host
(``pg_status__poll_error_log_interval_ms``).

Pure logic: the caller passes the time, e.g. ``clock.seconds()``, and emits
the line.
"""

from __future__ import annotations

from typing import Any

from pgstatus.monitor.failures import CheckFailed

_FAILED = "PostgreSQL operation failed operation={operation} host={host} error={error}"


def poll_error_line(err: object, timed_out: bool, host: str, timeout_ms: int
                    ) -> tuple[str, dict[str, Any]]:
    """
    The original service's line for a failed poll of ``host`` (operators'
    alerts match on them): its format and fields.

    :param err: why the check failed.
    :param timed_out: the check's deadline expired (``timeout_ms``).
    """
    if timed_out:
        return ("PostgreSQL poll timed out host={host} timeout_ms={timeout_ms}",
                {"host": host, "timeout_ms": timeout_ms})
    if isinstance(err, CheckFailed) and err.rows is not None:
        return ("unexpected PostgreSQL result row count host={host} rows={rows}",
                {"host": host, "rows": err.rows})
    if isinstance(err, CheckFailed):
        extra = {} if err.errno is None else {"errno": err.errno}
        return _FAILED, {"operation": err.operation, "host": host, "error": err.message,
                         **extra}
    return _FAILED, {"operation": "check", "host": host,
                     "error": f"{type(err).__name__}: {err}"}


class PollErrorLimiter:
    """
    Decide whether a poll failure of one host is logged at error or at debug.

    The first failure after a success (or ever) is logged at error; continuing
    failures at most once per interval, whatever their reason; with an
    interval of 0, every failure. A fully successful poll resets the limit.

    Use one limiter per host::

        if limiter.on_failure(clock.seconds()):
            log.error("poll failed host={host} op={op} error={error}", ...)
        else:
            log.debug("poll failed host={host} op={op} error={error}", ...)
    """

    def __init__(self, interval_ms: int) -> None:
        """
        :param interval_ms: Minimum interval between error records, in
            milliseconds; 0 logs every failure at error.
        :raise ValueError: If ``interval_ms`` is negative.
        """
        if interval_ms < 0:
            raise ValueError(f"interval_ms must be >= 0, not {interval_ms!r}")
        self._interval = interval_ms / 1000.0
        self._last_error: float | None = None

    def on_failure(self, now: float) -> bool:
        """
        Record a failed poll.

        :param now: The current time, in seconds.
        :return: ``True`` to log this failure at error, ``False`` for debug.
        """
        last = self._last_error
        # A clock that stepped back must not silence errors until it catches up.
        if last is None or now - last >= self._interval or now < last:
            self._last_error = now
            return True
        return False

    def on_success(self) -> None:
        """
        Record a fully successful poll: the next failure is logged at error.
        """
        self._last_error = None
