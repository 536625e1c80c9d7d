"""
The settings table: every ``pg_status__*`` variable pg-status reads, its
default, the values it accepts, whether a reload applies it, and what it
does.

The table describes :mod:`pgstatus.config.environ` (which does the
parsing) for people: the configuration reference of the documentation is
generated from it, and the warning about an unknown variable names
the closest of its names.  Tests hold it to the code (every variable
:func:`~pgstatus.config.environ.load_config` looks up, each default, each
integer range, each reload flag), so it cannot drift.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, replace

from pgstatus.config.settings import C_INT_MAX, ENV_NAME_RE, INT_MAX, PREFIX, shown_value


@dataclass(frozen=True, slots=True)
class Group:
    """
    A topic of the configuration reference: settings that work together.

    :param key: the name settings give, e.g. ``"timing"``.
    :param title: the reference's heading for it.
    :param intro: one or two sentences: what the settings decide together.
    :param see: documentation pages about it, as paths from the docs root
        without the suffix, e.g. ``"guide/postgresql"``.
    """

    key: str
    title: str
    intro: str
    see: tuple[str, ...] = ()


#: the topics of the reference, in order; every setting is in one
GROUPS: tuple[Group, ...] = (
    Group("hosts", "Hosts and connection",
          "Which PostgreSQL servers to check, in which order, and how to log in to them.",
          ("guide/postgresql", "deploy/security")),
    Group("locality", "Data centre and geo",
          "Where each host and this instance are, so that replica routes prefer nearby "
          "replicas. A dimension is used only when every host and this instance have it.",
          ("guide/selection",)),
    Group("timing", "Checks and timing",
          "How often each host is checked, how long a check may take, and how many failed "
          "checks make a host dead: together they bound how fast a failure or a failover "
          "is seen.",
          ("guide/failover", "guide/postgresql")),
    Group("selection", "Replica selection, lag and split brain",
          "Which replicas the sync routes may name, how waiting for a write works, and "
          "which master wins when several hosts report master.",
          ("guide/selection", "guide/failover")),
    Group("http", "HTTP and listening",
          "Where the API (and the HAProxy agent) listens, and its limits against "
          "misbehaving clients. These need a restart.",
          ("deploy/listening", "deploy/haproxy", "deploy/security")),
    Group("follow", "Follower mode",
          "Mirror other pg-status instances (hubs) instead of polling PostgreSQL.",
          ("deploy/follower",)),
    Group("patroni", "Patroni's leader key in etcd",
          "Opt-in: name as master only the host whose Patroni member holds the cluster's "
          "leader key, read and watched in etcd. These need a restart.",
          ("deploy/patroni-etcd",)),
    Group("stopping", "Stopping",
          "What pg-status does between SIGTERM and its exit.",
          ("deploy/kubernetes", "deploy/systemd")),
    Group("logging", "Logging",
          "What the log says, and how often it repeats a host's continuing failures.",
          ("guide/logs", "guide/troubleshooting")),
    Group("files", "Environment file and reloads",
          "Settings read from a file as well as from the environment, again on SIGHUP.",
          ("guide/reload",)),
)


@dataclass(frozen=True, slots=True)
class Setting:
    """
    One ``pg_status__*`` variable.

    :param name: the variable's name without the prefix, e.g. ``"sleep_ms"``.
    :param default: the default as a user would write it, or ``""`` for none.
    :param accepts: what values it takes; an integer setting starts with
        ``integer LO..HI``.
    :param reload: whether a SIGHUP reload (``pg_status__env_file``) applies
        it without a restart.
    :param summary: one sentence: what it does.
    :param group: the :attr:`Group.key` of its topic (given by
        :func:`_group`, which the table is written with).
    """

    name: str
    default: str
    accepts: str
    reload: bool
    summary: str
    group: str = ""


def _ms(lo: int, hi: int = INT_MAX) -> str:
    return f"integer {lo}..{hi} (milliseconds)"


def _int(lo: int, hi: int = INT_MAX) -> str:
    return f"integer {lo}..{hi}"


def _group(key: str, *settings: Setting) -> tuple[Setting, ...]:
    """
    ``settings``, each put in the group ``key``.

    :raise KeyError: no such group.
    """
    if key not in {g.key for g in GROUPS}:
        raise KeyError(key)
    return tuple(replace(s, group=key) for s in settings)


_S = Setting
_TEXT = "UTF-8 text (no NUL character)"
_LOCALITY_LIST = "comma-separated list of text, one per host entry, in the same order"
_ENV_NAME = "an environment variable name matching [A-Za-z_][A-Za-z0-9_]*"

#: every variable the service reads, by topic (:data:`GROUPS`)
SETTINGS: tuple[Setting, ...] = (
    *_group(
        "hosts",
        _S("hosts", "", "comma-separated list of host names or addresses (required)", True,
           "The PostgreSQL hosts to check, in order of preference."),
        _S("pg_port", "5432", "integer 1..65535, or a comma-separated list of them, one per "
           "host", True, "PostgreSQL port of every host, or of each host in the order of hosts."),
        _S("pg_user", "postgres", _TEXT, True, "PostgreSQL user of the checks."),
        _S("pg_password", "postgres", _TEXT + "; empty: libpq's PGPASSFILE", True,
           "PostgreSQL password of the checks; never logged."),
        _S("pg_password_file", "", "path of a regular file that only its owner may access "
           "(chmod 0600); excludes pg_password", True,
           "Read the password from this file instead (again on each reload)."),
        _S("pg_database", "postgres", _TEXT, True, "PostgreSQL database the checks connect to."),
        _S("conn_max_age_ms", "3600000", _ms(1), True,
           "Age after which a reused PostgreSQL connection is replaced."),
    ),
    *_group(
        "locality",
        _S("hosts_dc", "", _LOCALITY_LIST, True,
           "Data centre of each host, for preferring replicas in this instance's DC."),
        _S("current_dc", "", _TEXT, True,
           "Data centre of this pg-status instance; wins over current_dc_env."),
        _S("current_dc_env", "", _ENV_NAME, True,
           "Name of another environment variable holding this instance's data centre."),
        _S("hosts_geo", "", _LOCALITY_LIST, True,
           "Geo of each host, for preferring replicas in this instance's geo."),
        _S("current_geo", "", _TEXT, True, "Geo of this pg-status instance; wins over "
           "current_geo_env."),
        _S("current_geo_env", "", _ENV_NAME, True,
           "Name of another environment variable holding this instance's geo."),
    ),
    *_group(
        "timing",
        _S("sleep_ms", "1000", _ms(1), True,
           "Period between the starts of consecutive checks of each host."),
        _S("query_timeout_ms", "1000", _ms(1), True,
           "Deadline of one check: connecting, sending the query and reading the result."),
        _S("max_fails", "3", _int(1), True,
           "Consecutive failed checks after which a host is dead."),
        _S("extra_check_interval_ms", "20", _ms(1, 60000), True,
           "Least time from the start of a host's check to an extra one that fresh reads or "
           "followers ask for: at most one such check per host per interval, whoever asks."),
    ),
    *_group(
        "selection",
        _S("sync_max_lag_ms", "1000", _ms(0), True,
           "Time lag up to which a replica is time-synchronous (sync_by_time)."),
        _S("sync_max_lag_bytes", "1000000", _int(0), True,
           "WAL lag in bytes up to which a replica is byte-synchronous (sync_by_bytes)."),
        _S("sync_evict_after_checks", "0", _int(0, 1000000), True,
           "Consecutive checks over a threshold before a replica leaves the sync set "
           "(0 or 1: at once)."),
        _S("sync_reenter_lag_ms", "", _ms(0), True,
           "Time lag at or under which a replica that left the sync set re-enters it "
           "(unset: sync_max_lag_ms)."),
        _S("sync_reenter_lag_bytes", "", _int(0), True,
           "WAL lag in bytes at or under which a replica that left the sync set re-enters it "
           "(unset: sync_max_lag_bytes)."),
        _S("min_serving_replicas", "0", _int(0, 1000000), True,
           "Keep this many of the least-lagging live replicas eligible for the sync routes "
           "(0: off)."),
        _S("min_lsn_wait_ms", "0", _ms(0, 60000), True,
           "Default wait of a min_lsn request for a replica to catch up (0: answer at once)."),
        _S("split_brain", "first", "first or timeline", True,
           "Which of several hosts reporting master is selected: the first in hosts order "
           "(the original's rule), or the one on the highest timeline (then hosts order)."),
    ),
    *_group(
        "http",
        _S("http_listen_address", "0.0.0.0", "an IPv4 address, an IPv6 address (brackets "
           "allowed) or * (the IPv4 and IPv6 wildcards, where possible)", False,
           "Address the HTTP server (and the agent port) listens on."),
        _S("http_port", "8000", _int(0, 65535), False, "TCP port of the HTTP server."),
        _S("http_listen", "", "a Twisted endpoint description, e.g. tcp6:8000:interface=\\:\\:, "
           "unix:/run/pg-status/http.sock:mode=660 or ssl:8443:privateKey=key.pem:"
           "certKey=cert.pem", False,
           "Where the HTTP server listens, instead of http_listen_address and http_port "
           "(an addition; ssl needs the tls extra)."),
        _S("http_max_connections", "10000", _int(1, 1000000), False,
           "Open HTTP connections at most (lowered at start to fit the open-files limit); "
           "one more is answered 503 and closed."),
        _S("http_idle_timeout_ms", "60000", _ms(1), False,
           "Idle keep-alive HTTP connections are closed after this long."),
        _S("http_header_timeout_ms", "10000", _ms(1, C_INT_MAX), False,
           "A request (head and any body) must arrive complete within this long."),
        _S("agent_port", "0", _int(0, 65535), False,
           "TCP port of the HAProxy agent-check listener (0: off)."),
    ),
    *_group(
        "follow",
        _S("follow", "", "comma-separated list of http://host[:port][/prefix] base URLs",
           False, "Follower mode: mirror these pg-status hubs, in order of preference, "
           "instead of polling PostgreSQL."),
        _S("follow_timeout_ms", "3000", _ms(2000, 3600000), False,
           "Follower mode: poll PostgreSQL itself after this long without news from any "
           "hub."),
    ),
    *_group(
        "patroni",
        _S("patroni_etcd", "", "comma-separated list of http://host[:port] or https://host[:port] "
           "etcd v3 URLs (port 2379 by default; one scheme)", False,
           "Opt-in: read Patroni's leader key from these etcd endpoints, and name as master "
           "only the host of the member that holds it."),
        _S("patroni_namespace", "/service/", "a key path, as Patroni's namespace", False,
           "Patroni's namespace: the keys read are under <namespace><scope>/."),
        _S("patroni_scope", "", "Patroni's scope (required with patroni_etcd)", False,
           "Patroni's scope, the name of the cluster whose leader key is read."),
        _S("patroni_ttl", "30", "integer 1..86400 (seconds)", False,
           "Patroni's ttl: how long the last leader read stays trusted while the store "
           "cannot be read."),
        _S("patroni_unreadable", "hosts", "hosts, last_leader or no_master", False,
           "What /master follows once the store has not been read for patroni_ttl: the "
           "hosts' own view, the last leader read, or no master."),
        _S("patroni_cacert", "", "path of a PEM file (https endpoints only)", False,
           "CA certificates to verify etcd by, as Patroni's etcd3 cacert (default: the "
           "system's)."),
        _S("patroni_cert", "", "path of a PEM file (https endpoints only; with patroni_key)",
           False, "Client certificate presented to etcd, as Patroni's etcd3 cert."),
        _S("patroni_key", "", "path of a PEM file, unencrypted (with patroni_cert)", False,
           "Private key of the client certificate, as Patroni's etcd3 key."),
        _S("patroni_username", "", _TEXT + " (with patroni_password)", False,
           "The etcd user to authenticate as, as Patroni's etcd3 username."),
        _S("patroni_password", "", _TEXT + " (with patroni_username)", False,
           "Password of the etcd user; never logged."),
    ),
    *_group(
        "stopping",
        _S("shutdown_delay_ms", "0", _ms(0, 3600000), True,
           "After SIGTERM, keep answering for this long (with /ready answering 503), then "
           "stop and exit 0; a second SIGTERM or a SIGINT stops at once (0: stop at once)."),
    ),
    *_group(
        "logging",
        _S("log_level", "info", "debug, info, warning (or warn), error or fatal", True,
           "Lowest level of the log lines written."),
        _S("log_format", "text", "text or json", True,
           "Log lines as text or as one JSON object each."),
        _S("poll_error_log_interval_ms", "60000", _ms(0), True,
           "Least time between error lines about continuing poll failures of a host "
           "(0: every failure)."),
    ),
    *_group(
        "files",
        _S("env_file", "", "path of a NAME=value environment file; read from the process "
           "environment only", False,
           "Environment file read at start and again on SIGHUP, applied over the "
           "environment."),
    ),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def known_names() -> frozenset[str]:
    """
    The full names (with the prefix) of every variable pg-status reads.
    """
    return frozenset(PREFIX + s.name for s in SETTINGS)


def setting(name: str) -> Setting:
    """
    The table entry of ``name`` (without the prefix).

    :raise KeyError: no such setting.
    """
    return _BY_NAME[name]


def unknown_warnings(environ: Mapping[str, str]) -> tuple[str, ...]:
    """
    One warning for each ``pg_status__*`` variable in ``environ`` that
    pg-status does not read (usually a misspelling), naming the closest
    known name when there is one.  Unknown variables stay ignored
    otherwise, for forward compatibility.  The prefix is matched without
    regard to case, since ``PG_STATUS__HOSTS`` is ignored as well.  The
    variables that ``current_dc_env``/``current_geo_env`` name are read
    and not warned about.  Values are never shown.

    :param environ: the environment (with the environment file applied).
    :return: the warnings, sorted by variable name.
    """
    known = known_names()
    referenced = {environ.get(PREFIX + n, "").strip() for n in ("current_dc_env",
                                                                "current_geo_env")}
    warnings = []
    for name in sorted(environ):
        if name[:len(PREFIX)].lower() != PREFIX or name in known or name in referenced:
            continue
        shown = name if ENV_NAME_RE.fullmatch(name) else shown_value(name)
        close = difflib.get_close_matches(name[len(PREFIX):].lower(), _BY_NAME, n=1)
        if close:
            warnings.append(f"unknown variable {shown} is ignored; "
                            f"did you mean {PREFIX}{close[0]}?")
        else:
            warnings.append(f"unknown variable {shown} is ignored: pg-status has no such "
                            "setting")
    return tuple(warnings)
