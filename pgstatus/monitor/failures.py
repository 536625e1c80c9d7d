"""
How a failed check is told: the :class:`CheckFailed` the probe raises, and
the one-line, secret-free descriptions its log lines carry.
"""

from __future__ import annotations

import re

from pgstatus.config.settings import Config

_PASSWORD_ASSIGNMENT = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.I)


class CheckFailed(Exception):
    """
    A check did not produce an observation.

    :ivar operation: what was being done, named as the original service
        names its libpq steps (its log lines carry them): ``connect_start``
        (resolving the host name), ``connect`` (TCP, TLS, authentication),
        ``consume_input`` (the query's connection failed) or
        ``validate_result`` (the server answered with an error or an
        unexpected row).
    :ivar message: the reason, without secrets.
    :ivar late: the failure came after a TLS or authentication exchange
        began (such hosts are checked less often while dead).
    :ivar errno: the system error number, if any.
    :ivar rows: for an answer with other than one row, how many it had.
    """

    def __init__(self, operation: str, message: str, late: bool = False,
                 errno: int | None = None, rows: int | None = None) -> None:
        super().__init__(operation, message)
        self.operation = operation
        self.message = message
        self.late = late
        self.errno = errno
        self.rows = rows

    def __str__(self) -> str:
        return f"{self.operation}: {self.message}"


#: "ERROR:": a pooler's error at login, e.g. PgBouncer's "pgbouncer cannot
#: connect to server" (PostgreSQL itself sends FATAL)
_AUTH_SIGNS = ("FATAL:", "ERROR:", "SSL", "authentication", "password", "certificate", "GSS")


def shows_auth_exchange(message: str) -> bool:
    """
    Whether a failed setup's message shows that the server got to TLS or
    authentication (it sent an error, or TLS was negotiated).
    """
    return any(sign in message for sign in _AUTH_SIGNS)


def errno_of(e: BaseException) -> int | None:
    """
    The system error number behind a connection error, if any.
    """
    for value in (getattr(e, "osError", None), getattr(e, "errno", None)):
        if isinstance(value, int) and value > 0:
            return value
    return None


def describe_error(e: BaseException, config: Config) -> str:
    """
    One line about an error, with the password (if any) masked.
    """
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, OSError) and e.errno and f"errno={e.errno}" not in text:
        text = f"{text} errno={e.errno}"
    secret = config.pg_password
    if secret and secret not in (config.pg_user, config.pg_database):
        text = text.replace(secret, "***")
    return _PASSWORD_ASSIGNMENT.sub("password=***", text)
