"""
Configuration of pg-status, read from ``pg_status__*`` environment variables.

This module is pure: :func:`load_config` takes a mapping (normally
``os.environ``), validates every variable and returns an immutable
:class:`Config`, or raises :class:`ConfigError` naming the offending
variable. It does no I/O and no logging; startup warnings (for example a
partially configured locality dimension) are returned in
:attr:`Config.warnings` for the caller to log.

General rules:

* Every value must be UTF-8 text: a value with bytes that are not (which
  ``os.environ`` hands on as lone surrogates) is an error naming its
  variable.
* An empty value of an optional variable means "not set": the default
  applies. For variables whose value is parsed (numbers, ports, addresses,
  levels, locality), surrounding whitespace is ignored, so a blank value is
  also "not set".  An integer is plain decimal digits, at most
  :data:`~pgstatus.config.settings.MAX_INT_DIGITS` of them.
* ``pg_status__pg_password`` is the exception: an empty value is an empty
  password (libpq then falls back to ``PGPASSFILE``). Its value never
  appears in errors, ``repr(Config)`` or :meth:`Config.public_items`.
* Unknown ``pg_status__*`` variables are ignored for forward compatibility,
  with a warning each (:func:`pgstatus.config.table.unknown_warnings`).
* TLS towards PostgreSQL is configured by libpq's own ``PGSSL*`` variables
  and is not handled here.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from pgstatus.config.files import read_password_file
from pgstatus.config.locality import resolve_locality
from pgstatus.config.patroni import parse_patroni
from pgstatus.config.settings import (
    C_INT_MAX,
    DEFAULT_PG_PORT,
    INT_MAX,
    INT_RE,
    LOG_FORMATS,
    SPLIT_BRAIN_RULES,
    LOG_LEVELS,
    MAX_INT_DIGITS,
    PREFIX,
    Config,
    ConfigError,
    HostConfig,
    check_no_nul,
    check_utf8,
    raw_value,
    shown_value,
    stripped,
)
from pgstatus.config.table import unknown_warnings


def _parse_int(variable: str, text: str, lo: int, hi: int, expected: str) -> int:
    """
    Parse plain decimal digits into an integer in ``[lo, hi]``.

    :param variable: full variable name, for the error.
    :param text: the value, already stripped.
    :param lo: smallest accepted value.
    :param hi: largest accepted value.
    :param expected: description such as ``"an integer greater than 0"``.
    :raises ConfigError: when the value is not plain digits or out of range.
    """
    if not INT_RE.fullmatch(text):
        raise ConfigError(variable, f"must be {expected}, got {shown_value(text)}")
    # Check the length before int(): huge digit strings are slow to convert
    # and exceed Python's int conversion limit (leading zeros count too).
    if len(text) > MAX_INT_DIGITS:
        raise ConfigError(variable,
                          f"must be {expected}, got {shown_value(text)}, which has "
                          f"{len(text)} digits (at most {MAX_INT_DIGITS}, leading zeros "
                          "included)")
    significant = text.lstrip("0")
    if len(significant) > len(str(INT_MAX)) or (significant and int(significant) > INT_MAX):
        raise ConfigError(variable,
                          f"must be {expected}, got {shown_value(text)}, which is too large")
    value = int(text)
    if value < lo or value > hi:
        raise ConfigError(variable, f"must be {expected}, got {shown_value(text)}")
    return value


# ---------------------------------------------------------------------------
# Variable groups

# name -> (minimum, maximum, expected-description); defaults live on Config.
_INT_SETTINGS: dict[str, tuple[int, int, str]] = {
    "max_fails": (1, INT_MAX, "an integer of at least 1"),
    "sleep_ms": (1, INT_MAX, "an integer greater than 0"),
    "query_timeout_ms": (1, INT_MAX, "an integer greater than 0"),
    "conn_max_age_ms": (1, INT_MAX, "an integer greater than 0"),
    "poll_error_log_interval_ms": (0, INT_MAX, "a non-negative integer"),
    "sync_max_lag_ms": (0, INT_MAX, "a non-negative integer"),
    "sync_max_lag_bytes": (0, INT_MAX, "a non-negative integer"),
    "http_port": (0, 65535, "an integer from 0 to 65535"),
    "min_lsn_wait_ms": (0, 60000, "an integer from 0 to 60000"),
    "extra_check_interval_ms": (1, 60000, "an integer from 1 to 60000"),
    "http_max_connections": (1, 1000000, "an integer from 1 to 1000000"),
    "http_idle_timeout_ms": (1, INT_MAX, "an integer greater than 0"),
    # its seconds are a TCP_DEFER_ACCEPT, a C int
    "http_header_timeout_ms": (1, C_INT_MAX, f"an integer from 1 to {C_INT_MAX}"),
    "sync_evict_after_checks": (0, 1000000, "an integer from 0 to 1000000"),
    "sync_reenter_lag_ms": (0, INT_MAX, "a non-negative integer"),
    "sync_reenter_lag_bytes": (0, INT_MAX, "a non-negative integer"),
    "min_serving_replicas": (0, 1000000, "an integer from 0 to 1000000"),
    "agent_port": (0, 65535, "an integer from 0 to 65535 (0: off)"),
    "follow_timeout_ms": (2000, 3600000, "an integer from 2000 to 3600000"),
    "shutdown_delay_ms": (0, 3600000, "an integer from 0 to 3600000"),
    "patroni_ttl": (1, 86400, "an integer from 1 to 86400 (seconds, as Patroni's ttl)"),
}

_FOLLOW_URL_RE = re.compile(r"http://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?(/[^\s?#]*)?")


def _parse_follow(environ: Mapping[str, str]) -> tuple[str, ...]:
    """
    ``pg_status__follow``: comma-separated ``http://host[:port][/prefix]``
    base URLs of hubs, without a trailing slash.
    """
    variable = PREFIX + "follow"
    text = stripped(environ, "follow")
    if text is None:
        return ()
    urls = []
    for position, part in enumerate(text.split(","), start=1):
        url = part.strip().rstrip("/")
        m = _FOLLOW_URL_RE.fullmatch(url)
        if not m or (m.group(2) and not 0 < int(m.group(2)[1:]) <= 65535):
            raise ConfigError(
                variable,
                f"entry {position} must be a base URL like http://pg-status-hub:8000 "
                f"(plain http), got {shown_value(part.strip())}")
        if url in urls:
            raise ConfigError(variable, f"names {shown_value(url)} twice")
        urls.append(url)
    return tuple(urls)


def _parse_hosts(environ: Mapping[str, str]) -> list[str]:
    variable = PREFIX + "hosts"
    text = stripped(environ, "hosts")
    if text is None:
        raise ConfigError(variable, "is required: a comma-separated list of PostgreSQL hosts")
    names = [part.strip() for part in text.split(",")]
    for position, name in enumerate(names, start=1):
        if not name:
            raise ConfigError(
                variable,
                f"entry {position} of {len(names)} is empty; "
                f"expected a comma-separated list of host names, got {shown_value(text)}",
            )
        check_no_nul(variable, name)
    return names


def _parse_ports(environ: Mapping[str, str], host_count: int) -> list[int]:
    variable = PREFIX + "pg_port"
    text = stripped(environ, "pg_port")
    if text is None:
        return [DEFAULT_PG_PORT] * host_count
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 1 and len(parts) != host_count:
        raise ConfigError(
            variable,
            f"expected one port for all hosts or {host_count} comma-separated ports "
            f"(one per entry of {PREFIX}hosts), got {len(parts)}: {shown_value(text)}",
        )
    ports = []
    for part in parts:
        if not part:
            raise ConfigError(variable, f"contains an empty port entry, got {shown_value(text)}")
        ports.append(_parse_int(variable, part, 1, 65535, "a port from 1 to 65535"))
    if len(ports) == 1:
        ports = ports * host_count
    return ports


def _parse_listen_address(environ: Mapping[str, str]) -> str:
    variable = PREFIX + "http_listen_address"
    text = stripped(environ, "http_listen_address")
    if text is None:
        return "0.0.0.0"
    if text == "*":
        return "*"
    candidate = text
    bracketed = text.startswith("[") and text.endswith("]")
    if bracketed:
        candidate = text[1:-1]
    expected = "must be an IPv4 address, an IPv6 address or *"
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        raise ConfigError(variable, f"{expected}, got {shown_value(text)}") from None
    if bracketed and address.version != 6:
        raise ConfigError(variable, f"{expected}, got {shown_value(text)}")
    # Keep the literal as written (without brackets) for listening and logs.
    return candidate


def _parse_log_level(environ: Mapping[str, str]) -> str:
    text = stripped(environ, "log_level")
    if text is None:
        return "info"
    level = LOG_LEVELS.get(text.lower())
    if level is None:
        raise ConfigError(
            PREFIX + "log_level",
            f"must be one of debug, info, warning (or warn), error, fatal, got {shown_value(text)}",
        )
    return level


def _parse_choice(environ: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """
    One of ``choices`` (case-insensitive); the first when unset.
    """
    text = stripped(environ, name)
    if text is None:
        return choices[0]
    value = text.lower()
    if value not in choices:
        raise ConfigError(PREFIX + name,
                          f"must be {' or '.join(choices)}, got {shown_value(text)}")
    return value


def _parse_log_format(environ: Mapping[str, str]) -> str:
    return _parse_choice(environ, "log_format", LOG_FORMATS)


def _parse_text(environ: Mapping[str, str], name: str, default: str) -> str:
    value = raw_value(environ, name)
    if value is None:
        return default
    check_no_nul(PREFIX + name, value)
    return value


# ---------------------------------------------------------------------------
# Entry point


def load_config(environ: Mapping[str, str]) -> Config:
    """
    Build the configuration from ``pg_status__*`` environment variables.

    :param environ: the environment, normally ``os.environ``. Variables
        named by ``pg_status__current_dc_env``/``pg_status__current_geo_env``
        are looked up in it too.
    :return: the validated configuration; partially configured locality and
        unknown ``pg_status__*`` variables are reported in
        :attr:`Config.warnings`, not as errors.
    :raises ConfigError: when a variable is missing or invalid; the error
        names the variable.
    """
    host_names = _parse_hosts(environ)
    ports = _parse_ports(environ, len(host_names))

    pg_user = _parse_text(environ, "pg_user", "postgres")
    pg_database = _parse_text(environ, "pg_database", "postgres")
    pg_password = environ.get(PREFIX + "pg_password")
    password_file = stripped(environ, "pg_password_file")
    if password_file is not None:
        check_no_nul(PREFIX + "pg_password_file", password_file)
        if pg_password is not None:
            raise ConfigError(PREFIX + "pg_password_file",
                              "set either it or pg_status__pg_password, not both")
        pg_password = read_password_file(password_file)
    if pg_password is None:
        pg_password = "postgres"
    check_utf8(PREFIX + "pg_password", pg_password, secret=True)
    check_no_nul(PREFIX + "pg_password", pg_password, secret=True)

    dcs, current_dc, use_dc, dc_warning = resolve_locality(environ, "dc", host_names)
    geos, current_geo, use_geo, geo_warning = resolve_locality(environ, "geo", host_names)
    warnings = tuple(w for w in (dc_warning, geo_warning) if w is not None)
    warnings += unknown_warnings(environ)

    numbers = {}
    for name, (lo, hi, expected) in _INT_SETTINGS.items():
        text = stripped(environ, name)
        if text is not None:
            numbers[name] = _parse_int(PREFIX + name, text, lo, hi, expected)

    patroni = parse_patroni(environ)
    hosts = tuple(
        HostConfig(name=name, port=port, dc=dc, geo=geo)
        for name, port, dc, geo in zip(host_names, ports, dcs, geos, strict=True)
    )
    return Config(
        hosts=hosts,
        pg_user=pg_user,
        pg_password=pg_password,
        pg_database=pg_database,
        current_dc=current_dc,
        current_geo=current_geo,
        use_dc=use_dc,
        use_geo=use_geo,
        http_listen_address=_parse_listen_address(environ),
        http_listen=stripped(environ, "http_listen") or "",
        log_level=_parse_log_level(environ),
        log_format=_parse_log_format(environ),
        split_brain=_parse_choice(environ, "split_brain", SPLIT_BRAIN_RULES),
        follow=_parse_follow(environ),
        patroni_etcd=patroni["patroni_etcd"],
        patroni_namespace=patroni["patroni_namespace"],
        patroni_scope=patroni["patroni_scope"],
        patroni_unreadable=patroni["patroni_unreadable"],
        patroni_cacert=patroni["patroni_cacert"],
        patroni_cert=patroni["patroni_cert"],
        patroni_key=patroni["patroni_key"],
        patroni_username=patroni["patroni_username"],
        patroni_password=patroni["patroni_password"],
        warnings=warnings,
        **numbers,
    )


def log_settings(environ: Mapping[str, str]) -> tuple[str, str]:
    """
    The log level and format only, for setting up logging before (or
    without) full validation.

    Never raises: an invalid value falls back to its default (``"info"`` or
    ``"text"``); :func:`load_config` reports it as a :class:`ConfigError`.

    :param environ: the environment, normally ``os.environ``.
    :return: ``(log_level, log_format)``, normalised as in :class:`Config`.
    """
    try:
        level = _parse_log_level(environ)
    except ConfigError:
        level = "info"
    try:
        fmt = _parse_log_format(environ)
    except ConfigError:
        fmt = "text"
    return level, fmt
