"""
The settings of pg-status: the immutable :class:`Config` and
:class:`HostConfig`, :class:`ConfigError`, and the low-level helpers that
read one ``pg_status__*`` variable (see :mod:`pgstatus.config.environ` for
the rules of the environment).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: Prefix of every pg-status environment variable.
PREFIX = "pg_status__"

INT_MAX = 2**63 - 1
#: the largest value of a C ``int``: the bound of a setting handed to the
#: system as one (``http_header_timeout_ms``, in seconds a TCP_DEFER_ACCEPT)
C_INT_MAX = 2**31 - 1
#: the most digits an integer value may have, leading zeros included: room
#: for any value in range, and no string Python's ``int()`` refuses
MAX_INT_DIGITS = 32
INT_RE = re.compile(r"[0-9]+")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_SHOWN = 64

LOG_LEVELS = {
    "debug": "debug",
    "info": "info",
    "warning": "warning",
    "warn": "warning",
    "error": "error",
    "fatal": "fatal",
}
LOG_FORMATS = ("text", "json")
#: how a split brain (several hosts report master) is resolved
SPLIT_BRAIN_RULES = ("first", "timeline")

DEFAULT_PG_PORT = 5432


class ConfigError(Exception):
    """
    An invalid configuration variable.

    ``str()`` gives one line, ``"<variable>: <reason>"``. The reason never
    contains the value of ``pg_status__pg_password``.

    :param variable: full name of the offending environment variable,
        such as ``pg_status__sleep_ms``.
    :param reason: short explanation of what is wrong and what is expected.
    """

    def __init__(self, variable: str, reason: str):
        super().__init__(variable, reason)
        self.variable = variable
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.variable}: {self.reason}"


@dataclass(frozen=True, slots=True)
class HostConfig:
    """
    One entry of ``pg_status__hosts``.

    :param name: the host entry as written, without surrounding whitespace.
    :param port: PostgreSQL port of this host.
    :param dc: the host's configured DC, or ``None`` when not configured
        or empty.
    :param geo: the host's configured geo, or ``None`` when not configured
        or empty.
    """

    name: str
    port: int
    dc: str | None
    geo: str | None


@dataclass(frozen=True, slots=True)
class Config:
    """
    Validated, immutable pg-status configuration.

    Build it with :func:`load_config`. Field names match the environment
    variables without the ``pg_status__`` prefix, except:

    * ``current_dc``/``current_geo`` are the effective values, after
      resolving ``pg_status__current_dc_env``/``pg_status__current_geo_env``;
    * ``use_dc``/``use_geo`` tell whether that locality dimension is
      complete and therefore used for replica selection;
    * ``warnings`` holds startup warnings for the caller to log.

    The password is excluded from ``repr()``.
    """

    hosts: tuple[HostConfig, ...]
    pg_user: str = "postgres"
    pg_password: str = field(default="postgres", repr=False)
    pg_database: str = "postgres"
    current_dc: str | None = None
    current_geo: str | None = None
    use_dc: bool = False
    use_geo: bool = False
    max_fails: int = 3
    sleep_ms: int = 1000
    query_timeout_ms: int = 1000
    conn_max_age_ms: int = 3600000
    poll_error_log_interval_ms: int = 60000
    sync_max_lag_ms: int = 1000
    sync_max_lag_bytes: int = 1000000
    http_listen_address: str = "0.0.0.0"
    http_port: int = 8000
    #: an addition of ours: a Twisted endpoint description to listen on
    #: instead of http_listen_address and http_port ("" for those)
    http_listen: str = ""
    log_level: str = "info"
    log_format: str = "text"
    #: an addition of ours: how long a read-your-writes request may wait for
    #: a replica to catch up (0: answer at once, as the original does)
    min_lsn_wait_ms: int = 0
    #: an addition of ours: the least time between the start of a host's
    #: check and an extra one (fresh reads, followers' requests): one cap on
    #: what clients can cause, whoever asks
    extra_check_interval_ms: int = 20
    #: additions of ours, HTTP limits against misbehaving clients
    http_max_connections: int = 10000
    http_idle_timeout_ms: int = 60000
    http_header_timeout_ms: int = 10000
    #: additions of ours, eviction hysteresis and a serving floor (off by default)
    sync_evict_after_checks: int = 0
    sync_reenter_lag_ms: int | None = None
    sync_reenter_lag_bytes: int | None = None
    min_serving_replicas: int = 0
    #: an addition of ours: which of several hosts reporting master wins,
    #: "first" (in host order, the original's rule) or "timeline" (the
    #: highest timeline, then host order)
    split_brain: str = "first"
    #: an addition of ours: the HAProxy agent-check port (0: no agent)
    agent_port: int = 0
    #: an addition of ours, follower mode: base URLs of the pg-status
    #: instances (hubs) to mirror, in order of preference; empty: poll
    follow: tuple[str, ...] = ()
    #: how long without news from a hub before polling PostgreSQL itself
    follow_timeout_ms: int = 3000
    #: an addition of ours: how long to keep answering after SIGTERM before
    #: stopping (0: stop at once, as the original does)
    shutdown_delay_ms: int = 0
    #: additions of ours, opt-in: Patroni's leader key in etcd
    #: (:mod:`pgstatus.config.patroni`); empty patroni_etcd: not read
    patroni_etcd: tuple[str, ...] = ()
    patroni_namespace: str = "/service/"
    patroni_scope: str = ""
    patroni_ttl: int = 30
    patroni_unreadable: str = "hosts"
    patroni_cacert: str = ""
    patroni_cert: str = ""
    patroni_key: str = ""
    patroni_username: str = ""
    patroni_password: str = field(default="", repr=False)
    warnings: tuple[str, ...] = ()

    @property
    def sync_hysteresis(self) -> bool:
        """
        Eviction hysteresis is configured (an addition of ours).
        """
        return (self.sync_evict_after_checks > 1 or self.sync_reenter_lag_ms is not None
                or self.sync_reenter_lag_bytes is not None)

    @property
    def sync_policy_extras(self) -> bool:
        """
        Hysteresis or a serving floor is configured: ``/hosts`` then also
        says why a replica is out of the sync set.
        """
        return self.sync_hysteresis or self.min_serving_replicas > 0

    def public_items(self) -> list[tuple[str, str]]:
        """
        Effective non-secret settings, for the startup log line.

        Per-host lists (ports, DCs, geos) are comma-joined in host order;
        ports are shown as one value when all hosts share it. An unset
        value is an empty string. The password is never included.

        :return: ``(name, value)`` pairs in a stable order.
        """
        ports = {h.port for h in self.hosts}
        if len(ports) == 1:
            port_text = str(next(iter(ports)))
        else:
            port_text = ",".join(str(h.port) for h in self.hosts)
        items = [
            ("hosts", ",".join(h.name for h in self.hosts)),
            ("pg_port", port_text),
            ("pg_user", self.pg_user),
            ("pg_database", self.pg_database),
            ("hosts_dc", _join_optional(h.dc for h in self.hosts)),
            ("current_dc", self.current_dc or ""),
            ("use_dc", _bool_text(self.use_dc)),
            ("hosts_geo", _join_optional(h.geo for h in self.hosts)),
            ("current_geo", self.current_geo or ""),
            ("use_geo", _bool_text(self.use_geo)),
            ("max_fails", str(self.max_fails)),
            ("sleep_ms", str(self.sleep_ms)),
            ("query_timeout_ms", str(self.query_timeout_ms)),
            ("conn_max_age_ms", str(self.conn_max_age_ms)),
            ("poll_error_log_interval_ms", str(self.poll_error_log_interval_ms)),
            ("sync_max_lag_ms", str(self.sync_max_lag_ms)),
            ("sync_max_lag_bytes", str(self.sync_max_lag_bytes)),
            ("http_listen_address", self.http_listen_address),
            ("http_port", str(self.http_port)),
            *((("http_listen", self.http_listen),) if self.http_listen else ()),
            ("log_level", self.log_level),
            ("log_format", self.log_format),
            ("min_lsn_wait_ms", str(self.min_lsn_wait_ms)),
            ("extra_check_interval_ms", str(self.extra_check_interval_ms)),
            ("http_max_connections", str(self.http_max_connections)),
            ("http_idle_timeout_ms", str(self.http_idle_timeout_ms)),
            ("http_header_timeout_ms", str(self.http_header_timeout_ms)),
            ("sync_evict_after_checks", str(self.sync_evict_after_checks)),
            ("sync_reenter_lag_ms", _opt(self.sync_reenter_lag_ms)),
            ("sync_reenter_lag_bytes", _opt(self.sync_reenter_lag_bytes)),
            ("min_serving_replicas", str(self.min_serving_replicas)),
            ("split_brain", self.split_brain),
            ("agent_port", str(self.agent_port)),
            ("follow", ",".join(self.follow)),
            ("follow_timeout_ms", str(self.follow_timeout_ms)),
            ("shutdown_delay_ms", str(self.shutdown_delay_ms)),
            ("patroni_etcd", ",".join(self.patroni_etcd)),
            ("patroni_namespace", self.patroni_namespace),
            ("patroni_scope", self.patroni_scope),
            ("patroni_ttl", str(self.patroni_ttl)),
            ("patroni_unreadable", self.patroni_unreadable),
            ("patroni_cacert", self.patroni_cacert),
            ("patroni_cert", self.patroni_cert),
            ("patroni_key", self.patroni_key),
            ("patroni_username", self.patroni_username),
        ]
        return items


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


def _join_optional(values: Iterable[str | None]) -> str:
    values = list(values)
    if all(v is None for v in values):
        return ""
    return ",".join(v or "" for v in values)


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


# ---------------------------------------------------------------------------
# Low-level helpers


def shown_value(value: str) -> str:
    """Quote a (non-secret) value for an error message, shortened if long."""
    if len(value) > _MAX_SHOWN:
        value = value[: _MAX_SHOWN - 3] + "..."
    return repr(value)


def shown_bytes(value: str) -> str:
    """
    Quote a (non-secret) value that is not UTF-8 text for an error
    message, as the bytes it was (``b'db\\xff1'``), shortened if long.
    """
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no undecodable byte stands for
        raw = value.encode("utf-8", "backslashreplace")
    if len(raw) > _MAX_SHOWN:
        return repr(raw[: _MAX_SHOWN - 3]) + "..."
    return repr(raw)


def check_utf8(variable: str, value: str, secret: bool = False) -> None:
    """
    Refuse a value that is not UTF-8 text.

    On Linux ``os.environ`` decodes the bytes of a value that are not UTF-8
    to lone surrogates (PEP 383) instead of failing; such a value would be
    accepted and then fail far from here, unnamed (a host never checked, a
    user libpq cannot send).  Every value is checked where it is read, so
    that the error names its variable.

    :param secret: the value is a password: the error does not show it.
    :raises ConfigError: ``value`` holds a surrogate.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        if secret:
            raise ConfigError(variable, "must be UTF-8 text") from None
        raise ConfigError(variable, f"must be UTF-8 text, got {shown_bytes(value)}") from None


def raw_value(environ: Mapping[str, str], name: str) -> str | None:
    """
    The raw value of ``pg_status__<name>``, ``None`` if absent or empty.

    :raises ConfigError: the value is not UTF-8 text (:func:`check_utf8`).
    """
    value = environ.get(PREFIX + name)
    if value is None or value == "":
        return None
    check_utf8(PREFIX + name, value)
    return value


def stripped(environ: Mapping[str, str], name: str) -> str | None:
    """
    The stripped value of ``pg_status__<name>``, ``None`` if absent or blank.

    :raises ConfigError: the value is not UTF-8 text (:func:`check_utf8`).
    """
    value = environ.get(PREFIX + name)
    if value is None:
        return None
    check_utf8(PREFIX + name, value)
    value = value.strip()
    return value or None


def check_no_nul(variable: str, value: str, secret: bool = False) -> None:
    """
    Refuse a value with a NUL character, which no C string (libpq's
    parameters, a path) can carry.

    :param secret: the value is a password: the error does not show it.
    :raises ConfigError: ``value`` holds a NUL character.
    """
    if "\x00" in value:
        if secret:
            raise ConfigError(variable, "must not contain a NUL character")
        raise ConfigError(variable, f"must not contain a NUL character, got {shown_value(value)}")
